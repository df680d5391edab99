"""opengris-scaler 2.x command lines and config files (issue 29), with real processes: `-ap`, `-osa`, `-pwc`, the
2.x README's sectioned TOML file (`[scheduler]`, `[cluster]`, `[object_storage_server]`, `[webui]`, `scheduler_address`,
`per_worker_capabilities`), `scaler_object_storage_server`; and what has no meaning here refused naming the
replacement."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scaler import Client
from tests.helpers import free_address, stop_process

pytestmark = pytest.mark.timeout(90)

SCHEDULER = [sys.executable, "-m", "scaler.entry_points.scheduler"]
CLUSTER = [sys.executable, "-m", "scaler.entry_points.cluster"]


def run_gpu_task(address: str) -> int:
    with Client(address, timeout_seconds=30) as client:
        return int(client.options(capabilities={"gpu": True, "linux": True}).submit(abs, -7).result(timeout=60))


def test_2x_flags_start_a_cluster_whose_workers_offer_the_capabilities(tmp_path: Path) -> None:
    address = free_address()
    monitor = f"ipc://{tmp_path}/monitor"
    scheduler = subprocess.Popen(
        [*SCHEDULER, address, "-ap", "capability", "-osa", "tcp://127.0.0.1:1", "--monitor-address", monitor],
        stderr=subprocess.PIPE,
        text=True,
    )
    cluster = subprocess.Popen([*CLUSTER, "-n", "1", "-pwc", "gpu,linux", "-ll", "ERROR", address])
    try:
        assert run_gpu_task(address) == 7  # the task requires gpu and linux: -pwc gave both
    finally:
        stop_process(cluster)
        stop_process(scheduler)  # type: ignore[arg-type]
    notes = scheduler.stderr.read() if scheduler.stderr else ""
    assert "-ap capability: Scaler has one placement policy" in notes and "-osa tcp://127.0.0.1:1" in notes


def test_the_2x_readmes_config_file_starts_the_stack(tmp_path: Path) -> None:
    address = free_address()
    config = tmp_path / "example_config.toml"
    config.write_text(
        f"""
[scheduler]
scheduler_address = "{address}"
object_storage_address = "tcp://127.0.0.1:6379"
monitor_address = "ipc://{tmp_path}/monitor"
allocate_policy = "even"
logging_level = "WARNING"

[cluster]
scheduler_address = "{address}"
num_of_workers = 1
per_worker_capabilities = "linux,gpu"
task_timeout_seconds = 600

[object_storage_server]
object_storage_address = "tcp://127.0.0.1:6379"

[webui]
monitor_address = "ipc://{tmp_path}/monitor"
web_port = 8081
"""
    )
    storage = subprocess.run(
        [sys.executable, "-m", "scaler.entry_points.object_storage", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert storage.returncode == 0 and "keeps objects in the scheduler" in storage.stderr
    scheduler = subprocess.Popen([*SCHEDULER, "--config", str(config)])
    cluster = subprocess.Popen([*CLUSTER, "--config", str(config)])
    try:
        assert run_gpu_task(address) == 7
    finally:
        stop_process(cluster)
        stop_process(scheduler)


@pytest.mark.parametrize(
    ("command", "words", "says"),
    [
        (SCHEDULER, ["--adapter-webhook-url", "http://127.0.0.1:8080"], "through scaler_worker_manager"),
        (SCHEDULER, ["-ap", "round_robin"], "one placement policy"),
    ],
)
def test_what_has_no_meaning_here_is_refused_naming_the_replacement(
    command: list[str], words: list[str], says: str
) -> None:
    done = subprocess.run([*command, free_address(), *words], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and says in done.stderr, done.stderr
