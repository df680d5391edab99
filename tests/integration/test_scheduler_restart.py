"""Workers outlive their scheduler (issue 28, first step): a scheduler that stops alone (a signal, or kill -9) gets
its workers back when it starts again at the same address, the same scaler_cluster processes, without their being
restarted; a client's shutdown() and --exit-with-scheduler still stop them. Real processes, real sockets."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import psutil
import pytest

from scaler import Client
from tests.helpers import free_address, scheduler_command, stop_process, wait_until

pytestmark = pytest.mark.timeout(120)


def pid_of_task(_: int) -> int:
    return os.getpid()


@contextmanager
def cluster(address: str, *options: str) -> Iterator[subprocess.Popen[bytes]]:
    command = [sys.executable, "-m", "scaler.entry_points.cluster", "-n", "2", "-ll", "ERROR", *options, address]
    process = subprocess.Popen(command)
    try:
        yield process
    finally:
        stop_process(process)


def workers_of(process: subprocess.Popen[bytes]) -> set[int]:
    return {child.pid for child in psutil.Process(process.pid).children()}


def serve_on_both(address: str) -> set[int]:
    """Run tasks until both workers took some; the agents' pids (a processor's parent) that ran them."""
    with Client(address, timeout_seconds=30) as client:
        seen: set[int] = set()

        def both() -> bool:
            seen.update(psutil.Process(pid).ppid() for pid in set(client.map(pid_of_task, range(40))))
            return len(seen) >= 2

        wait_until(both, timeout=30, what="tasks on both workers")
        return seen


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["stopped", "killed"])
def test_a_scheduler_that_comes_back_at_its_address_gets_the_same_workers_back(how: signal.Signals) -> None:
    address = free_address()
    scheduler = subprocess.Popen(scheduler_command(address))
    try:
        with cluster(address) as workers:
            wait_until(lambda: len(workers_of(workers)) == 2, timeout=30, what="two workers")
            agents = workers_of(workers)
            assert serve_on_both(address) == agents
            scheduler.send_signal(how)
            scheduler.wait(15)
            assert workers.poll() is None and workers_of(workers) == agents  # nobody exited or was restarted
            scheduler = subprocess.Popen(scheduler_command(address))  # the same command again
            assert serve_on_both(address) == agents  # the same processes took tasks again
            assert workers.poll() is None
    finally:
        stop_process(scheduler)


def test_a_client_s_shutdown_still_stops_the_workers_and_so_does_exit_with_scheduler() -> None:
    address = free_address()
    scheduler = subprocess.Popen([*scheduler_command(address), "--no-protected"])
    try:
        with cluster(address) as workers:
            serve_on_both(address)
            with Client(address, timeout_seconds=30) as client:
                client.shutdown()
            assert workers.wait(30) == 0  # the cluster ends with the scheduler: a client asked for it
        scheduler.wait(15)
        scheduler = subprocess.Popen(scheduler_command(address))
        with cluster(address, "--exit-with-scheduler") as workers:
            serve_on_both(address)
            scheduler.send_signal(signal.SIGTERM)
            assert workers.wait(30) == 0  # told to stop with it
    finally:
        stop_process(scheduler)
