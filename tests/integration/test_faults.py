"""No lost work: workers killed mid-task, tasks that kill their worker, clients killed with -9.

Every process killed here is a descendant of this test process (checked before each kill).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.errors import TaskFailedError
from tests.helpers import combo_cluster, free_address, wait_until

TIMEOUT = 30
FAST: dict[str, Any] = {"heartbeat_interval_seconds": 0.5, "worker_timeout_seconds": 2, "logging_level": "WARNING"}


def kill_descendant(pid: int, sig: int = signal.SIGKILL) -> None:
    """Kill one of our own descendants, never anything else."""
    assert pid in {p.pid for p in psutil.Process().children(recursive=True)}, f"{pid} is not ours"
    os.kill(pid, sig)


def report_and_sleep(marker_dir: str, seconds: float, value: int) -> tuple[int, int]:
    """Write '<agent pid>' to a marker file, then work for a while; returns (value, agent pid)."""
    path = os.path.join(marker_dir, f"{value}-{os.getpid()}")
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getppid()))
    os.rename(path + ".tmp", path)
    time.sleep(seconds)
    return value, os.getppid()


def kill_my_agent() -> None:
    os.kill(os.getppid(), signal.SIGKILL)  # the processor's parent is its worker agent
    time.sleep(30)


def exit_my_processor() -> None:
    os._exit(13)


def square(x: int) -> int:
    return x * x


def my_agent(seconds: float) -> int:
    time.sleep(seconds)
    return os.getppid()


def wait_for_workers_joined(client: Client, n: int) -> None:
    """Wait until n workers serve the scheduler: n simultaneous short tasks come back from n different agents."""
    seen: set[int] = set()

    def all_serve() -> bool:
        seen.clear()
        seen.update(f.result(timeout=TIMEOUT) for f in [client.submit(my_agent, 0.2) for _ in range(n)])
        return len(seen) >= n

    wait_until(all_serve, timeout=TIMEOUT, what=f"{n} workers to join the scheduler")


def agents_of(combo: SchedulerClusterCombo) -> list[psutil.Process]:
    try:
        agents: list[psutil.Process] = psutil.Process(combo_cluster(combo).pid).children()
        return agents
    except psutil.Error:
        return []


def wait_for_agents(combo: SchedulerClusterCombo, n: int) -> list[psutil.Process]:
    wait_until(lambda: len(agents_of(combo)) >= n, timeout=15, what=f"{n} worker agents")
    return agents_of(combo)


@pytest.fixture()
def combo() -> Iterator[SchedulerClusterCombo]:
    """Two workers that may be lost: a fresh cluster per test."""
    cluster = SchedulerClusterCombo(address=free_address(), n_workers=2, max_task_retries=1, **FAST)
    try:
        yield cluster
    finally:
        cluster.shutdown()


def test_kill_9_of_a_worker_agent_mid_task_reruns_its_task_elsewhere(
    combo: SchedulerClusterCombo, tmp_path: Path
) -> None:
    agents = {p.pid for p in wait_for_agents(combo, 2)}
    with Client(address=combo.address, timeout_seconds=TIMEOUT) as client:
        future = client.submit(report_and_sleep, str(tmp_path), 1.0, 7)
        wait_until(lambda: any(not p.name.endswith(".tmp") for p in tmp_path.iterdir()), timeout=TIMEOUT)
        (marker,) = [p for p in tmp_path.iterdir() if not p.name.endswith(".tmp")]
        first_agent = int(marker.read_text())
        assert first_agent in agents
        kill_descendant(first_agent)
        value, agent = future.result(timeout=TIMEOUT)
        assert value == 7
        assert agent != first_agent and agent in agents
        # the surviving worker keeps serving
        assert client.map(square, [(i,) for i in range(50)]) == [i * i for i in range(50)]


def test_kill_9_of_a_worker_agent_with_many_queued_tasks_loses_none(
    combo: SchedulerClusterCombo, tmp_path: Path
) -> None:
    agents = wait_for_agents(combo, 2)
    with Client(address=combo.address, timeout_seconds=TIMEOUT) as client:
        futures = [client.submit(report_and_sleep, str(tmp_path), 0.02, i) for i in range(100)]
        wait_until(lambda: len(list(tmp_path.iterdir())) >= 10, timeout=TIMEOUT, what="tasks to start")
        kill_descendant(agents[0].pid)
        results = [f.result(timeout=TIMEOUT) for f in futures]
        assert [value for value, _ in results] == list(range(100))
        # finished by a live worker: the survivor, or the one the cluster started in place of the killed one
        assert results[-1][1] != agents[0].pid


def test_a_task_that_kills_its_worker_every_time_fails_after_max_task_retries(combo: SchedulerClusterCombo) -> None:
    agents = wait_for_agents(combo, 2)
    with Client(address=combo.address, timeout_seconds=TIMEOUT) as client:
        future = client.submit(kill_my_agent)
        with pytest.raises(TaskFailedError) as caught:
            future.result(timeout=TIMEOUT)
        assert "2 times" in str(caught.value) or "tried" in str(caught.value), str(caught.value)
        # max_task_retries=1: tried twice, so both agents are gone, and no more than that
        wait_until(lambda: not any(a.is_running() and a.status() != psutil.STATUS_ZOMBIE for a in agents), timeout=10)


def test_a_task_that_kills_its_processor_every_time_fails_and_the_workers_survive(
    combo: SchedulerClusterCombo,
) -> None:
    agents = wait_for_agents(combo, 2)
    with Client(address=combo.address, timeout_seconds=TIMEOUT) as client:
        future = client.submit(exit_my_processor)
        with pytest.raises(TaskFailedError) as caught:
            future.result(timeout=TIMEOUT)
        assert "exit code 13" in str(caught.value) or "died" in str(caught.value), str(caught.value)
        # only processors died: both agents are alive and serve new tasks
        assert all(a.is_running() and a.status() != psutil.STATUS_ZOMBIE for a in agents)
        assert client.map(square, [(i,) for i in range(20)]) == [i * i for i in range(20)]
        others = [client.submit(square, i) for i in range(4)]
        assert [f.result(timeout=TIMEOUT) for f in others] == [0, 1, 4, 9]


def test_a_processor_crash_does_not_fail_the_other_tasks(combo: SchedulerClusterCombo) -> None:
    wait_for_agents(combo, 2)
    with Client(address=combo.address, timeout_seconds=TIMEOUT) as client:
        before = [client.submit(square, i) for i in range(20)]
        crash = client.submit(exit_my_processor)
        after = [client.submit(square, i) for i in range(20, 40)]
        assert [f.result(timeout=TIMEOUT) for f in before + after] == [i * i for i in range(40)]
        with pytest.raises(TaskFailedError):
            crash.result(timeout=TIMEOUT)


# ----------------------------------------------------------------------------------------------- dead clients
CLIENT_SCRIPT = """
import os, sys, time
from scaler import Client

def nap(marker_dir, seconds, index):
    open(os.path.join(marker_dir, str(index)), "w").close()
    time.sleep(seconds)
    return index

address, marker_dir, seconds, count = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
client = Client(address=address, timeout_seconds=10, heartbeat_interval_seconds=0.5)
futures = [client.submit(nap, marker_dir, seconds, i) for i in range(count)]
time.sleep(120)
"""


def start_client_process(
    address: str, tmp_path: Path, seconds: float, count: int
) -> tuple[subprocess.Popen[str], Path]:
    """A client in another process whose tasks each create a file in the returned folder when they start."""
    script = tmp_path / "doomed_client.py"
    script.write_text(CLIENT_SCRIPT)
    markers = tmp_path / "started"
    markers.mkdir()
    process = subprocess.Popen(
        [sys.executable, str(script), address, str(markers), str(seconds), str(count)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, markers


def wait_for_tasks_started(process: subprocess.Popen[str], markers: Path, count: int) -> None:
    try:
        wait_until(lambda: len(list(markers.iterdir())) >= count or process.poll() is not None, timeout=TIMEOUT)
    finally:
        if process.poll() is not None:
            pytest.fail(f"the client process ended early: {process.communicate(timeout=10)[1][-2000:]}")


def kill_client_process(process: subprocess.Popen[str]) -> None:
    kill_descendant(process.pid)
    process.communicate(timeout=10)


@pytest.fixture()
def client_combo() -> Iterator[SchedulerClusterCombo]:
    cluster = SchedulerClusterCombo(address=free_address(), n_workers=2, client_timeout_seconds=2, **FAST)
    try:
        yield cluster
    finally:
        cluster.shutdown()


def test_a_client_killed_with_9_has_its_queued_tasks_cancelled(
    client_combo: SchedulerClusterCombo, tmp_path: Path
) -> None:
    wait_for_agents(client_combo, 2)
    # 400 tasks of 0.25 s on 2 workers: 50 s of work if nobody cancelled them
    doomed, markers = start_client_process(client_combo.address, tmp_path, 0.25, 400)
    try:
        wait_for_tasks_started(doomed, markers, 4)
        kill_client_process(doomed)
    finally:
        doomed.kill()
    with Client(address=client_combo.address, timeout_seconds=TIMEOUT, heartbeat_interval_seconds=0.5) as survivor:
        start = time.monotonic()
        assert survivor.map(square, [(i,) for i in range(10)]) == [i * i for i in range(10)]
        assert time.monotonic() - start < 10, "the dead client's tasks kept the workers busy"
    assert len(list(markers.iterdir())) < 100, "most of the dead client's tasks ran anyway"


def test_a_client_killed_with_9_frees_the_workers_running_its_tasks(
    client_combo: SchedulerClusterCombo, tmp_path: Path
) -> None:
    wait_for_agents(client_combo, 2)
    with Client(address=client_combo.address, timeout_seconds=TIMEOUT) as probe:
        wait_for_workers_joined(probe, 2)
    doomed, markers = start_client_process(client_combo.address, tmp_path, 30, 2)
    try:
        wait_for_tasks_started(doomed, markers, 2)  # both workers now run a 30 s task of the doomed client
        kill_client_process(doomed)
    finally:
        doomed.kill()
    with Client(address=client_combo.address, timeout_seconds=TIMEOUT, heartbeat_interval_seconds=0.5) as survivor:
        assert survivor.submit(square, 3).result(timeout=8) == 9


def test_cancel_of_a_running_task_frees_its_worker(client_combo: SchedulerClusterCombo, tmp_path: Path) -> None:
    wait_for_agents(client_combo, 2)
    with Client(address=client_combo.address, timeout_seconds=TIMEOUT, heartbeat_interval_seconds=0.5) as client:
        wait_for_workers_joined(client, 2)
        long = [client.submit(report_and_sleep, str(tmp_path), 30, i) for i in range(2)]
        wait_until(lambda: len([p for p in tmp_path.iterdir() if not p.name.endswith(".tmp")]) >= 2, timeout=TIMEOUT)
        cancelled = [f.cancel() for f in long]
        # concurrent.futures semantics: cancel() is False for a call that is running and cannot be stopped;
        # if it says True, the task must really stop and its worker become free
        if all(cancelled):
            assert client.submit(square, 3).result(timeout=8) == 9
        else:
            assert not any(cancelled)
            assert all(not f.cancelled() for f in long)
