"""The command-line programs with keys, as a user runs them: scaler_scheduler and scaler_cluster with --keys, their
usage errors, --keys in every program's help, and the warning of a scheduler on the network without keys.

Every process is started here in its own session and killed (by its process group) if a test fails.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from scaler import Client
from scaler.errors import AuthenticationError
from scaler.security.keys import generate
from tests.e2e.cli_tasks import fibonacci, square
from tests.e2e.test_cli import Program, cli, run, wait_for_agents
from tests.helpers import free_address, free_port

TIMEOUT = 20


@pytest.fixture()
def started() -> Iterator[list[Program]]:
    """Programs a test starts; whatever is left is killed at the end."""
    programs: list[Program] = []
    yield programs
    for program in programs:
        program.kill()


def start(programs: list[Program], *args: str) -> Program:
    program = Program(*args)
    programs.append(program)
    return program


def test_a_scheduler_and_workers_with_keys_serve_a_client_with_keys(started: list[Program], tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    generate(keys)
    address = free_address()
    scheduler = start(started, cli("scaler_scheduler"), "--keys", str(keys), address)
    scheduler.wait_for_output(r"monitor address is")
    assert f"listening on {address} (CurveZMQ keys required)" in scheduler.output, scheduler.output
    cluster = start(started, cli("scaler_cluster"), "--keys", str(keys), "-n", "1", address)
    wait_for_agents(cluster, 1)
    with Client(address, keys=keys, timeout_seconds=TIMEOUT) as client:
        assert client.submit(square, 4).result(timeout=TIMEOUT) == 16
        assert client.submit(fibonacci, client, 6).result(timeout=TIMEOUT) == 8  # nested clients carry the keys
    with pytest.raises(AuthenticationError, match="requires keys"):
        Client(address, keys=False, timeout_seconds=10)
    assert f"worker key {keys / 'worker.key_secret'}" in cluster.output, cluster.output

    # SIGHUP re-reads the authorized keys; the worker's removed, its session ends and the worker exits 1
    (keys / "authorized_workers" / "worker.key").unlink()
    os.kill(scheduler.pid, signal.SIGHUP)
    scheduler.wait_for_output(r"reloading the authorized keys")
    assert cluster.wait(10) == 1, cluster.output
    assert "its key was removed from the authorized keys" in cluster.output, cluster.output
    assert "every worker failed" in cluster.output, cluster.output
    os.kill(scheduler.pid, signal.SIGTERM)
    assert scheduler.wait() == 0
    assert "Traceback" not in scheduler.output + cluster.output, scheduler.output + cluster.output


@pytest.mark.parametrize("program", ["scaler_scheduler", "scaler_cluster", "scaler_worker"])
def test_a_keys_directory_that_does_not_exist_is_a_usage_error(program: str, tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent"
    done = run(cli(program), "--keys", str(missing), "tcp://127.0.0.1:8516")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{program}: error:" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert f"the keys directory {missing} does not exist" in done.stderr, done.stderr
    assert f"scaler_keygen {missing}" in done.stderr, done.stderr


def test_a_scheduler_given_a_clients_copy_of_the_keys_is_a_usage_error(tmp_path: Path) -> None:
    """DIR/alice is what alice's machine gets: the scheduler's public key and alice's secret, no scheduler secret."""
    generate(tmp_path, clients=["alice"])
    done = run(cli("scaler_scheduler"), "--keys", str(tmp_path / "alice"), "tcp://127.0.0.1:8516")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{tmp_path / 'alice' / 'scheduler.key_secret'} is missing" in done.stderr, done.stderr


@pytest.mark.parametrize("program", ["scaler_scheduler", "scaler_cluster", "scaler_top", "scaler_ui"])
def test_help_mentions_keys(program: str) -> None:
    done = run(cli(program), "-h")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())  # argparse wraps lines at the terminal's width
    assert "--keys DIR" in text and "scaler_keygen" in text and "SCALER_KEYS" in text, done.stdout


def test_a_scheduler_on_the_network_without_keys_warns(started: list[Program]) -> None:
    address = f"tcp://0.0.0.0:{free_port()}"
    scheduler = start(started, cli("scaler_scheduler"), address)
    line = scheduler.wait_for_output(r"\[WARNING\][^\n]*without keys[^\n]*").group(0)
    assert f"listens on {address} without keys" in line, line
    assert "scaler_keygen" in line and "--keys DIR" in line, line
    assert not re.search(r"publishes its monitor on \S+ without keys", scheduler.output), scheduler.output  # ipc
    os.kill(scheduler.pid, signal.SIGTERM)
    assert scheduler.wait() == 0, scheduler.output


def test_a_scheduler_on_loopback_without_keys_does_not_warn(started: list[Program]) -> None:
    scheduler = start(started, cli("scaler_scheduler"), free_address())
    scheduler.wait_for_output(r"monitor address is")
    with Client(scheduler.args[-1], keys=False, timeout_seconds=TIMEOUT):
        pass  # serving, past its start-up warnings
    assert "without keys" not in scheduler.output, scheduler.output
    os.kill(scheduler.pid, signal.SIGTERM)
    assert scheduler.wait() == 0
