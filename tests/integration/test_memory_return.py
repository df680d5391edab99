"""The scheduler gives its memory back after a burst: a real scheduler process holds 400 MB of task arguments, a
worker runs the tasks, and the scheduler's RSS comes back near where it started (glibc kept it all before: see
scaler.io.memory)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from scaler import Client
from scaler.io.memory import malloc_trim
from tests.helpers import free_address, wait_until

SRC = Path(__file__).resolve().parents[2] / "src"
MIB = 1 << 20
TASKS = 4000
ARGUMENT_BYTES = 100_000  # under glibc's mmap threshold (128 KiB): kept in an arena once freed, unless trimmed
HELD = 300 * MIB  # the scheduler holds the burst: its RSS grew this much at least
BOUND = 100 * MIB  # after the burst: at most this far above the baseline

pytestmark = pytest.mark.skipif(malloc_trim() is None, reason="glibc only: elsewhere nothing is trimmed")


def start(*args: str) -> subprocess.Popen[bytes]:
    """A program of this tree, in a session of its own."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", *args], env=env, start_new_session=True)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # its own session: it and what it started, nothing else
        process.wait(10)


@pytest.fixture()
def scheduler() -> Iterator[tuple[str, psutil.Process]]:
    """A scheduler process without workers (tasks wait in it), from this tree; stopped at the end."""
    address = free_address()
    monitor = f"ipc:///tmp/scaler_test_memory_{os.getpid()}_{address.rpartition(':')[2]}"
    process = start("scaler.entry_points.scheduler", address, "-ma", monitor, "-ll", "WARNING")
    try:
        yield address, psutil.Process(process.pid)
    finally:
        stop(process)
        try:
            os.unlink(monitor.removeprefix("ipc://"))
        except OSError:
            pass


def rss(process: psutil.Process) -> int:
    return int(process.memory_info().rss)


@pytest.mark.timeout(60)
def test_the_scheduler_gives_back_a_burst_of_arguments(scheduler: tuple[str, psutil.Process]) -> None:
    address, process = scheduler
    with Client(address, timeout_seconds=15) as client:
        baseline = rss(process)
        argument = bytearray(ARGUMENT_BYTES)
        futures = []
        for i in range(TASKS):
            argument[:8] = i.to_bytes(8, "little")
            futures.append(client.submit(len, bytes(argument)))
        wait_until(lambda: rss(process) > baseline + HELD, timeout=20, what="the scheduler to hold the burst")
        peak = rss(process)
        worker = start("scaler.entry_points.cluster", address, "-n", "1", "--logging-level", "WARNING")
        try:
            assert all(f.result(timeout=30) == ARGUMENT_BYTES for f in futures)
        finally:
            stop(worker)
        del futures
    try:
        wait_until(lambda: rss(process) < baseline + BOUND, timeout=10, what="the scheduler's RSS to come back")
    except AssertionError:
        pytest.fail(
            f"the scheduler kept {(rss(process) - baseline) / MIB:.0f} MiB above its baseline of {baseline / MIB:.0f}"
            f" MiB after a peak of {peak / MIB:.0f} MiB"
        )
