"""A worker whose scheduler dies stops the work nobody can receive any more, and rejoins the next scheduler.

Before, it kept running tasks of the dead scheduler until its death timeout (300 s by default).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from scaler import Client, SchedulerClusterCombo
from tests.helpers import free_address, wait_until

pytestmark = pytest.mark.timeout(120)
QUIET: dict[str, Any] = {"heartbeat_interval_seconds": 0.5, "logging_level": "ERROR"}


def note_pid_and_sleep(path: str, seconds: float) -> int:
    Path(path).write_text(str(os.getpid()))
    time.sleep(seconds)
    return os.getpid()


def test_a_worker_whose_scheduler_is_killed_stops_its_tasks_and_rejoins_a_new_scheduler(tmp_path: Path) -> None:
    address = free_address()
    first = SchedulerClusterCombo(address=address, n_workers=1, **QUIET)
    second: SchedulerClusterCombo | None = None
    try:
        client = Client(address)
        marker = tmp_path / "pid"
        client.submit(note_pid_and_sleep, str(marker), 600)
        wait_until(marker.exists, 30, what="the long task started")
        processor = psutil.Process(int(marker.read_text()))
        agent = processor.parent()
        assert agent is not None
        first._scheduler.kill()  # kill -9 of the scheduler; the combo's workers stay
        first._scheduler.join(10)
        killed = time.monotonic()
        wait_until(
            lambda: not processor.is_running() or processor.status() == psutil.STATUS_ZOMBIE,
            15,
            what="the processor running the dead scheduler's task stopped",
        )
        stopped = time.monotonic() - killed
        assert stopped < 10, f"the task ran on for {stopped:.1f}s after its scheduler died"
        assert agent.is_running()  # the worker itself stays, trying to rejoin
        client.disconnect()

        second = SchedulerClusterCombo(address=address, n_workers=0, **QUIET)  # no workers of its own
        with Client(address, timeout_seconds=30) as fresh:
            pid = fresh.submit(os.getpid).result(timeout=30)  # the old worker rejoined and runs it
        assert psutil.Process(pid).parent() == agent
    finally:
        first.shutdown()
        if second is not None:
            second.shutdown()


def test_workers_whose_scheduler_died_stop_at_once() -> None:
    """They do not wait 2 s for their goodbye to reach a scheduler that is gone (their connection is down)."""
    combo = SchedulerClusterCombo(address=free_address(), n_workers=2, **QUIET)
    try:
        with Client(combo.address) as client:
            assert client.map(pow, [(2, 3), (3, 2)]) == [8, 9]  # both workers are in their sessions
        combo._scheduler.kill()
        combo._scheduler.join(10)
        time.sleep(0.5)  # the workers see their connection close
        started = time.monotonic()
        combo.shutdown()
        assert time.monotonic() - started < 1.0
    finally:
        combo.shutdown()
