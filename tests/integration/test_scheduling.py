"""Placement and balancing seen from outside: no task waits behind a long one while a worker is idle."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scaler import Client, SchedulerClusterCombo
from tests.e2e.cli_tasks import square, touch_and_sleep
from tests.helpers import free_address, wait_until
from tests.integration.test_faults import wait_for_workers_joined

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 20
LONG = 20  # seconds a long task sleeps: far more than any wait below
FAST: dict[str, Any] = {"heartbeat_interval_seconds": 0.5, "worker_timeout_seconds": 3, "logging_level": "WARNING"}


@pytest.fixture()
def one_worker() -> Iterator[SchedulerClusterCombo]:
    combo = SchedulerClusterCombo(address=free_address(), n_workers=1, **FAST)
    try:
        yield combo
    finally:
        combo.shutdown()


@pytest.fixture()
def two_workers() -> Iterator[SchedulerClusterCombo]:
    combo = SchedulerClusterCombo(address=free_address(), n_workers=2, **FAST)
    try:
        yield combo
    finally:
        combo.shutdown()


def start_extra_worker(address: str) -> subprocess.Popen[bytes]:
    """One more worker, from the command line, in its own session (killed by the caller)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "scaler_cluster"), "-n", "1", "-hi", "0.5", "-ll", "WARNING", address],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait(10)


def test_a_worker_that_joins_later_takes_the_task_queued_behind_a_long_one(
    one_worker: SchedulerClusterCombo, tmp_path: Path
) -> None:
    with Client(address=one_worker.address, timeout_seconds=TIMEOUT) as client:
        wait_for_workers_joined(client, 1)
        # after many tiny tasks, a worker hands its processor up to 64 tasks at once
        assert client.map(square, [(i,) for i in range(3000)])[-1] == 2999**2
        futures = [client.submit(touch_and_sleep, str(tmp_path / f"task{i}"), LONG) for i in range(2)]
        wait_until((tmp_path / "task0").exists, timeout=TIMEOUT, what="the first task to start")
        extra = start_extra_worker(one_worker.address)
        try:
            # the second task waits behind a 20 s task while the new worker idles, unless it is moved there
            wait_until((tmp_path / "task1").exists, timeout=6, what="the second task to start on the new worker")
        finally:
            for future in futures:
                future.cancel()
            stop(extra)


def test_short_tasks_do_not_wait_behind_a_long_one(two_workers: SchedulerClusterCombo, tmp_path: Path) -> None:
    with Client(address=two_workers.address, timeout_seconds=TIMEOUT) as client:
        wait_for_workers_joined(client, 2)
        long = client.submit(touch_and_sleep, str(tmp_path / "long"), LONG)
        wait_until((tmp_path / "long").exists, timeout=TIMEOUT, what="the long task to start")
        shorts = [client.submit(square, i) for i in range(50)]
        assert [f.result(timeout=10) for f in shorts] == [i * i for i in range(50)]  # long (20 s) still runs
        assert not long.done()
        long.cancel()


def test_tasks_submitted_with_a_long_one_do_not_wait_behind_it(
    two_workers: SchedulerClusterCombo, tmp_path: Path
) -> None:
    with Client(address=two_workers.address, timeout_seconds=TIMEOUT) as client:
        wait_for_workers_joined(client, 2)
        # after many tiny tasks, a worker hands its processor up to 64 tasks at once
        assert client.map(square, [(i,) for i in range(3000)])[-1] == 2999**2
        # one long task among short ones, all at once: the short ones must all finish while the long one runs
        futures = [client.submit(touch_and_sleep, str(tmp_path / "long"), LONG)]
        futures += [client.submit(touch_and_sleep, str(tmp_path / f"short{i}"), 0.05) for i in range(20)]
        try:
            wait_until(
                lambda: all((tmp_path / f"short{i}").exists() for i in range(20)),
                timeout=6,
                what="every short task to run while the long one sleeps",
            )
        finally:
            for future in futures:
                future.cancel()


def test_a_clients_task_does_not_wait_behind_another_clients_backlog(two_workers: SchedulerClusterCombo) -> None:
    """Clients take turns at the scheduler's ready queue and in each worker's queue: client B's one task, submitted
    after client A's 4,000, is done long before A's backlog is."""
    with (
        Client(address=two_workers.address, timeout_seconds=TIMEOUT) as a,
        Client(address=two_workers.address, timeout_seconds=TIMEOUT) as b,
    ):
        wait_for_workers_joined(a, 2)
        backlog = [a.submit(time.sleep, 0.002) for _ in range(4000)]  # about 4 s of work on 2 workers
        try:
            backlog[0].result(timeout=TIMEOUT)  # the backlog reached the scheduler and the workers
            assert b.submit(square, 7).result(timeout=TIMEOUT) == 49
            done = sum(f.done() for f in backlog)
            assert done < len(backlog) // 2, f"{done} of client A's tasks ran before client B's one"
        finally:
            for future in backlog:
                future.cancel()
