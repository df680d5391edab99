"""scaler_worker_manager slurm against a real Slurm: Debian's slurm-wlm and munge, a private one-node cluster
(tests/slurm_cluster.py; scripts/slurm-setup installs the packages), a real scheduler and real clients. Units are
Slurm jobs (sbatch) that run scaler_cluster; the manager watches them with squeue and stops them with scancel.

Skipped where Slurm is not installed, unless SCALER_SLURM_TEST=required (scripts/test sets it): then it fails."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from scaler import Client
from tests.helpers import mark_once, running_scheduler, stop_process, wait_until
from tests.slurm_cluster import PARTITION, Slurm, missing, one_node_slurm

pytestmark = pytest.mark.timeout(240)

_missing = missing()
if _missing:
    if os.environ.get("SCALER_SLURM_TEST") == "required":
        raise RuntimeError(f"SCALER_SLURM_TEST=required, but {', '.join(_missing)} not found: run scripts/slurm-setup")
    pytest.skip(f"no Slurm here ({', '.join(_missing)} not found; scripts/slurm-setup)", allow_module_level=True)


@pytest.fixture(scope="module")
def slurm() -> Iterator[Slurm]:
    with one_node_slurm() as cluster:
        yield cluster


@pytest.fixture
def scheduler(slurm: Slurm) -> Iterator[str]:
    with running_scheduler() as address:
        yield address
    wait_until(lambda: ours(slurm) == [], timeout=30, what="the jobs of the test's manager to end")


def ours(slurm: Slurm) -> list[tuple[str, str, str]]:
    """The jobs a worker manager submitted (named scaler-<unit>) that Slurm still lists."""
    return [job for job in slurm.jobs() if job[1].startswith("scaler-")]


def start_manager(slurm: Slurm, address: str, folder: Path, *options: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "scaler.entry_points.worker_manager", "slurm", "--partition", PARTITION]
    command += ["--log-directory", str(folder), "--logging-paths", str(folder / "manager.log"), *options, address]
    return subprocess.Popen(command, env=slurm.env)


def stop_manager(manager: subprocess.Popen[bytes], slurm: Slurm) -> None:
    stop_process(manager)
    if ours(slurm):  # (only if the test failed before the manager cancelled them)
        slurm.run("scancel", "--name", ",".join(name for _id, name, _state in ours(slurm)))


def workers_in_jobs() -> list[psutil.Process]:
    """Scaler workers running inside Slurm jobs: worker processes under a scaler_cluster under slurmstepd."""
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        try:
            if "scaler.entry_points.cluster" not in " ".join(process.info["cmdline"] or []):
                continue
            parent = process.parent()
            if parent is not None and parent.name().startswith("slurmstepd"):
                found += process.children()
        except psutil.Error:
            continue
    return found


def test_work_brings_slurm_jobs_that_are_cancelled_when_idle(slurm: Slurm, scheduler: str, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    manager = start_manager(slurm, scheduler, tmp_path, "--max-workers", "4", "--idle-seconds", "5")
    try:
        time.sleep(3)
        assert ours(slurm) == [], "a job was submitted while there was no work"
        with Client(scheduler, timeout_seconds=20) as client:
            start = time.monotonic()
            futures = [client.submit(mark_once, str(marks), i, 0.25) for i in range(400)]
            wait_until(
                lambda: (
                    sum(state == "RUNNING" for _id, _name, state in ours(slurm)) >= 2 and len(workers_in_jobs()) >= 2
                ),
                timeout=20,
                interval=0.2,
                what="two running Slurm jobs with Scaler workers in them",
            )
            results = [f.result(timeout=max(1, 90 - (time.monotonic() - start))) for f in futures]
            took = time.monotonic() - start
        assert results == [i * 2 for i in range(400)]
        assert sorted(int(name) for name in os.listdir(marks)) == list(range(400))  # each ran, none twice
        assert took < 60
        ended = time.monotonic()
        wait_until(lambda: ours(slurm) == [], timeout=40, interval=0.5, what="no job 40 s after the work")
        print(f"400 tasks in {took:.1f}s; the last job left {time.monotonic() - ended:.1f}s after the end")
        text = (tmp_path / "manager.log").read_text()
        assert "is Slurm job" in text and "cancelling unit" in text, text
        outputs = [p for p in os.listdir(tmp_path) if p.startswith("slurm-") and p.endswith(".out")]
        assert outputs, "the jobs wrote no output into --log-directory"
    finally:
        stop_manager(manager, slurm)


def test_sigint_cancels_every_job_of_the_manager(slurm: Slurm, scheduler: str, tmp_path: Path) -> None:
    manager = start_manager(slurm, scheduler, tmp_path, "--min-workers", "2", "--max-workers", "2")
    try:
        wait_until(lambda: len(workers_in_jobs()) == 2, timeout=30, interval=0.2, what="the two workers kept")
        assert len(ours(slurm)) == 2
        start = time.monotonic()
        manager.send_signal(signal.SIGINT)
        assert manager.wait(15) == 0
        wait_until(lambda: ours(slurm) == [], timeout=max(1, 15 - (time.monotonic() - start)), what="jobs cancelled")
        wait_until(lambda: workers_in_jobs() == [], timeout=10, what="their workers gone")
    finally:
        stop_manager(manager, slurm)


def test_a_refused_sbatch_is_reported_and_retried_only_after_a_back_off(
    slurm: Slurm, scheduler: str, tmp_path: Path
) -> None:
    """sbatch fails (a partition that does not exist): the manager says why, keeps serving, and the scheduler does not
    ask again at every tick (4 a second) but after a back-off of 5 s, then 10 s."""
    command = [sys.executable, "-m", "scaler.entry_points.worker_manager", "slurm", "--partition", "nosuch"]
    command += ["--logging-paths", str(tmp_path / "manager.log"), "--max-workers", "2", scheduler]
    manager = subprocess.Popen(command, env=slurm.env)
    try:
        with Client(scheduler, timeout_seconds=20) as client:
            future = client.submit(pow, 2, 10)
            time.sleep(8)
            text = (tmp_path / "manager.log").read_text()
            attempts = text.count("could not submit unit")
            assert 1 <= attempts <= 3, text  # at 0 s and 5 s (at most one more on a slow machine), not ~30
            assert "invalid partition" in text.lower(), text
            assert manager.poll() is None
            assert not future.done()
            future.cancel()
    finally:
        stop_manager(manager, slurm)


def test_with_keys_the_jobs_workers_use_a_private_copy_of_the_worker_key(slurm: Slurm, tmp_path: Path) -> None:
    """A keyed scheduler: the manager connects with manager.key_secret; its jobs' workers with the copy of
    scheduler.key and worker.key_secret it puts under --log-directory (a folder the compute nodes share), and removes
    when it ends."""
    from scaler.security.keys import generate

    keys = tmp_path / "keys"
    generate(keys)
    with running_scheduler("--keys", str(keys), client_keys=str(keys)) as address:
        manager = start_manager(slurm, address, tmp_path, "--keys", str(keys), "--max-workers", "1")
        try:
            with Client(address, timeout_seconds=20, keys=str(keys)) as client:
                assert client.submit(pow, 2, 5).result(timeout=60) == 32
            [copy] = [p for p in tmp_path.iterdir() if p.name.startswith("scaler-unit-keys-")]
            assert sorted(os.listdir(copy)) == ["scheduler.key", "worker.key_secret"]
            manager.send_signal(signal.SIGINT)
            assert manager.wait(15) == 0
            assert not copy.exists()
        finally:
            stop_manager(manager, slurm)
        wait_until(lambda: ours(slurm) == [], timeout=30, what="the job cancelled")
