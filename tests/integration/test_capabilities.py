"""Capabilities with real processes: scaler_scheduler, scaler_cluster --capability, and a Client whose tasks require
capabilities (client.options(capabilities=...)). Each cluster's processes carry an environment marker that its
tasks return, so a test sees where each task ran. Every process is started in its own session and killed by its
process group at the end.
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

import pytest

from scaler import Client, MissingCapabilityError
from scaler.errors import TaskFailedError
from tests.helpers import Graph, free_address, wait_until

pytestmark = pytest.mark.timeout(120)

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 30
MARK = "SCALER_TEST_CAPABILITY_MARK"


def where() -> str:
    return os.environ.get(MARK, "?")


def where_after(seconds: float) -> str:
    time.sleep(seconds)
    return os.environ.get(MARK, "?")


def nested_where(client: Any, n: int) -> list[str]:
    """Where `n` tasks submitted from inside a task, through `client` (a client, or a view with options), ran."""
    return [future.result(timeout=TIMEOUT) for future in [client.submit(where) for _ in range(n)]]


class Processes:
    """The scheduler and clusters of one test, from the command line, each logging to a file of its own."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.address = free_address()
        self.started: list[subprocess.Popen[bytes]] = []
        self.clusters: dict[str, subprocess.Popen[bytes]] = {}  # by marker
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}

    def scheduler(self, *args: str) -> None:
        log = self.tmp_path / "scheduler.log"
        self._start([str(BIN / "scaler_scheduler"), self.address, "--logging-paths", str(log), *args], {})

    def cluster(self, mark: str, *capabilities: str, workers: int = 1) -> Path:
        """A scaler_cluster offering `capabilities`, its tasks' marker `mark`; returns its log (see connected)."""
        log = self.tmp_path / f"cluster-{mark}.log"
        command = [str(BIN / "scaler_cluster"), self.address, "-n", str(workers), "-hi", "0.5", "-qs", "2"]
        command += [arg for capability in capabilities for arg in ("--capability", capability)]
        command += ["--worker-name-prefix", mark, "--logging-paths", str(log)]
        self.clusters[mark] = self._start(command, {MARK: mark})
        return log

    def _start(self, command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            command,
            env={**self.env, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.started.append(process)
        return process

    def kill(self, process: subprocess.Popen[bytes]) -> None:
        """SIGKILL to the process and all it started (its session's process group)."""
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        process.wait(10)

    def stop(self) -> None:
        for process in reversed(self.started):
            self.kill(process)


@pytest.fixture()
def processes(tmp_path: Path) -> Iterator[Processes]:
    started = Processes(tmp_path)
    try:
        yield started
    finally:
        started.stop()


def connected(log: Path, offering: str) -> None:
    """Wait until the cluster whose log this is says its worker connected, offering `offering`."""
    text = "connected to scheduler "
    try:
        wait_until(
            lambda: any(text in line and line.endswith(f"offering {offering}") for line in _lines(log)),
            timeout=TIMEOUT,
            what=f"a worker offering {offering} in {log.name}",
        )
    except AssertionError as exc:
        scheduler = log.parent / "scheduler.log"
        logs = "\n".join(f"--- {path.name}:\n" + "\n".join(_lines(path)[-20:]) for path in (log, scheduler))
        raise AssertionError(f"{exc}\n{logs}") from None


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture()
def two_kinds(processes: Processes) -> Iterator[Processes]:
    """A scheduler, a cluster offering gpu (marker "gpu") and one offering nothing more (marker "plain")."""
    processes.scheduler()
    connected(processes.cluster("gpu", "gpu"), "payload=python, gpu")
    connected(processes.cluster("plain"), "payload=python")
    yield processes


def test_tasks_requiring_gpu_run_on_the_gpu_worker_only_and_the_others_on_both(two_kinds: Processes) -> None:
    with Client(two_kinds.address, timeout_seconds=TIMEOUT) as client:
        gpu = client.options(capabilities={"gpu": True})
        assert set(gpu.map(where_after, [0.02] * 30, timeout=TIMEOUT)) == {"gpu"}
        assert {gpu.submit(where).result(timeout=TIMEOUT) for _ in range(5)} == {"gpu"}
        graph: Graph = {"a": (where_after, 0.01), "b": (where_after, 0.01), "c": (max, "a", "b")}
        assert gpu.get(graph, ["c"], timeout=TIMEOUT) == {"c": "gpu"}
        assert set(gpu.get(graph, ["a", "b"], timeout=TIMEOUT, group=2).values()) == {"gpu"}
        with gpu.get_executor() as executor:
            assert set(executor.map(where_after, [0.01] * 6)) == {"gpu"}
        # Without a requirement, tasks go to both kinds (each worker takes 2 at a time: -qs 2).
        assert set(client.map(where_after, [0.05] * 40, timeout=TIMEOUT)) == {"gpu", "plain"}


def test_nested_tasks_submitted_through_a_view_require_its_capabilities(two_kinds: Processes) -> None:
    with Client(two_kinds.address, timeout_seconds=TIMEOUT) as client:
        gpu = client.options(capabilities=["gpu"])
        outer = [client.submit(nested_where, gpu, 3) for _ in range(4)]  # the outer tasks run anywhere
        assert [future.result(timeout=TIMEOUT) for future in outer] == [["gpu"] * 3] * 4


def test_a_task_no_worker_can_run_fails_at_once_with_missing_capability_error(two_kinds: Processes) -> None:
    with Client(two_kinds.address, timeout_seconds=TIMEOUT) as client:
        assert client.submit(where).result(timeout=TIMEOUT) in ("gpu", "plain")
        started = time.monotonic()
        future = client.options(capabilities=["licence"]).submit(where)
        with pytest.raises(MissingCapabilityError) as error:
            future.result(timeout=TIMEOUT)
        assert time.monotonic() - started < 5  # at once: the next placement pass, not a timeout
        text = str(error.value)
        assert isinstance(error.value, TaskFailedError)
        assert text.startswith("missing capabilities: the task requires licence, payload=python;")
        assert "[gpu, payload=python]" in text and "[payload=python]" in text
        assert error.value.required == ("licence", "payload=python")
        with pytest.raises(MissingCapabilityError):
            client.options(capabilities={"gpu": True, "licence": "matlab"}).map(where_after, [0.01] * 3, timeout=10)
        graph: Graph = {"a": (where_after, 0), "b": (max, "a", "a"), "c": (max, "b", "b")}
        licence = client.options(capabilities=["licence"])
        for group in (None, 3):  # a graph's dependents fail with the task they need; a grouped block too
            with pytest.raises(MissingCapabilityError):
                licence.get(graph, ["c"], timeout=10, group=group)
        # A capability holding the text's separator: required is still exact, on each path the client builds it
        region = client.options(capabilities={"region": "eu, us"})
        exact = ("payload=python", "region=eu, us")
        with pytest.raises(MissingCapabilityError) as error:
            region.submit(where).result(timeout=TIMEOUT)
        assert error.value.required == exact
        with pytest.raises(MissingCapabilityError) as error:
            region.map(where_after, [0.01] * 2, timeout=10)
        assert error.value.required == exact
        with pytest.raises(MissingCapabilityError) as error:
            region.get(graph, ["c"], timeout=10)
        assert error.value.required == exact
        # The other tasks of the client are unaffected.
        assert client.options(capabilities=["gpu"]).submit(where).result(timeout=TIMEOUT) == "gpu"


def test_with_a_grace_period_a_task_waits_for_a_capable_worker_that_joins(processes: Processes) -> None:
    processes.scheduler("--capability-grace-seconds", "60")
    connected(processes.cluster("plain"), "payload=python")
    with Client(processes.address, timeout_seconds=TIMEOUT) as client:
        future = client.options(capabilities=["gpu"]).submit(where)
        # a later task placed and run: the scheduler has had a placement pass since the gpu task came, in which it
        # would have failed without the grace period (its result would have come first)
        assert client.submit(where).result(timeout=TIMEOUT) == "plain"
        assert not future.done()
        processes.cluster("gpu", "gpu")
        assert future.result(timeout=TIMEOUT) == "gpu"


def test_past_the_grace_period_a_task_nobody_can_run_fails(processes: Processes) -> None:
    processes.scheduler("--capability-grace-seconds", "2")
    connected(processes.cluster("plain"), "payload=python")
    with Client(processes.address, timeout_seconds=TIMEOUT) as client:
        started = time.monotonic()
        future = client.options(capabilities=["gpu"]).submit(where)
        with pytest.raises(MissingCapabilityError):
            future.result(timeout=TIMEOUT)
        assert 2 <= time.monotonic() - started < 2 + 5


def test_with_no_worker_at_all_tasks_wait_as_always(processes: Processes) -> None:
    processes.scheduler()
    with Client(processes.address, timeout_seconds=TIMEOUT) as client:
        future = client.options(capabilities=["gpu"]).submit(where)
        plain = client.submit(where)
        time.sleep(1.5)
        assert not future.done() and not plain.done()
        processes.cluster("gpu", "gpu")
        assert future.result(timeout=TIMEOUT) == "gpu"
        assert plain.result(timeout=TIMEOUT) == "gpu"


def test_when_the_last_capable_worker_leaves_its_queued_tasks_fail(two_kinds: Processes) -> None:
    with Client(two_kinds.address, timeout_seconds=TIMEOUT) as client:
        gpu = client.options(capabilities=["gpu"])
        futures = [gpu.submit(where_after, 60) for _ in range(6)]  # 2 on the gpu worker (-qs 2), 4 queued
        time.sleep(1)
        assert not any(future.done() for future in futures)
        two_kinds.kill(two_kinds.clusters["gpu"])
        for future in futures:
            with pytest.raises(MissingCapabilityError, match=r"connected workers offer: \[payload=python\]\)"):
                future.result(timeout=TIMEOUT)
        assert client.submit(where).result(timeout=TIMEOUT) == "plain"
