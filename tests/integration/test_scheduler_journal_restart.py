"""Issue 28's bar: `kill -9` of a `--journal` scheduler at 30 % of 3,000 tasks of 20 ms and the same command 1 s
later: a client with default settings gets all 3,000 right, none raises, at most 50 ran twice, and `scaler_cluster -n 2`
reconnected by itself (a SIGTERM instead, a clean stop: tests/integration/test_scheduler_chaos.py). Real processes and
sockets; each run of a task leaves a mark, so runs are counted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from scaler import Client
from tests.helpers import free_address, scheduler_command, stop_process, wait_until

pytestmark = pytest.mark.timeout(180)

TASKS = 3000


def marked(folder: str, i: int) -> int:
    """Leaves one file per run (a second run of the same task leaves a second file), sleeps 20 ms, returns i * 3."""
    import os
    import tempfile
    import time

    fd, _ = tempfile.mkstemp(prefix=f"{i}-", dir=folder)
    os.close(fd)
    time.sleep(0.02)
    return i * 3


def journaled_cluster(
    tmp_path: Path,
) -> tuple[str, Path, list[str], subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    """A --journal scaler_scheduler (its command, to start it again) and scaler_cluster -n 2, and a folder for marks."""
    address = free_address()
    marks = tmp_path / "runs"
    marks.mkdir()
    command = [*scheduler_command(address), "--journal", str(tmp_path / "journal")]
    scheduler = subprocess.Popen(command)
    cluster = subprocess.Popen(
        [sys.executable, "-m", "scaler.entry_points.cluster", "-n", "2", "-ll", "ERROR", address]
    )
    return address, marks, command, scheduler, cluster


def test_a_killed_journaled_scheduler_started_again_finishes_every_task(tmp_path: Path) -> None:
    address, marks, command, scheduler, cluster = journaled_cluster(tmp_path)
    try:
        with Client(address) as client:  # default settings
            futures = [client.submit(marked, str(marks), i) for i in range(TASKS)]
            wait_until(lambda: sum(f.done() for f in futures) >= TASKS * 0.3, timeout=120, what="30 % done")
            wait_until(lambda: len(psutil.Process(cluster.pid).children()) == 2, timeout=30, what="the two agents")
            agents = {p.pid for p in psutil.Process(cluster.pid).children()}
            scheduler.send_signal(signal.SIGKILL)
            scheduler.wait(10)
            time.sleep(1.0)
            scheduler = subprocess.Popen(command)  # the same command again
            results = [f.result(timeout=120) for f in futures]  # none raises
        assert results == [i * 3 for i in range(TASKS)]
        runs = len(os.listdir(marks))
        print(f"{runs - TASKS} of {TASKS} tasks ran twice")
        assert TASKS <= runs <= TASKS + 50, runs
        assert cluster.poll() is None and {p.pid for p in psutil.Process(cluster.pid).children()} == agents
    finally:
        stop_process(cluster)
        stop_process(scheduler)


def square(x: int) -> int:
    return x * x


def test_a_client_of_a_journaled_scheduler_keeps_nothing_of_a_finished_graph(tmp_path: Path) -> None:
    """A graph's inner nodes are silent (their results are not sent): a journaled scheduler says they ended all the
    same, so the client lets them go instead of keeping them for ever to send again after a restart."""
    import operator

    from scaler import SchedulerClusterCombo

    combo = SchedulerClusterCombo(address=free_address(), n_workers=2, journal=tmp_path / "journal")
    try:
        with Client(combo.address) as client:
            graph = {"a": 3, "b": (square, "a"), "c": (operator.add, "a", "b"), "d": (operator.mul, "c", 2)}
            assert client.get(graph, keys=["d"]) == {"d": 24}
            assert client.submit(square, 5).result(timeout=30) == 25  # (after the graph's ends came)
            core = client._connection.core
            assert core.journaled and core.kept_tasks == {}
    finally:
        combo.shutdown()
