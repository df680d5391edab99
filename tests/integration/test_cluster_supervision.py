"""scaler_cluster watching over its workers: a worker that dies unexpectedly starts again after a back-off, one that
ended normally or gave up on an error does not; stopping says nothing failed when nothing did, and is quick whatever
the workers are doing. Real processes on loopback; every process here is killed by its pid if a test fails.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import psutil
import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.core.worker.agent import AgentConfig
from scaler.io.lifetime import die_with_parent
from scaler.io.logs import setup_logging
from scaler.worker.cluster import run_cluster
from tests.helpers import combo_cluster, free_address, wait_until

pytestmark = pytest.mark.timeout(90)

TIMEOUT = 20
QUICK = 1.5  # "well under a second", with room for a loaded 2-core machine
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


# ----------------------------------------------------------------------------------------------- helpers
def read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def logged(path: Path, text: str, times: int) -> bool:
    return read(path).count(text) >= times


def forked_workers(combo: SchedulerClusterCombo, n: int) -> bool:
    return len(agents(combo_cluster(combo).pid)) >= n


def catches_sigterm(pid: int) -> bool:
    """Whether the process has a SIGTERM handler: a worker agent has one once its event loop serves."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    except OSError:
        pass
    return False


def agents(pid: int) -> list[psutil.Process]:
    """The live worker agents of the cluster process `pid`."""
    try:
        children = psutil.Process(pid).children()
    except psutil.Error:
        return []
    return [child for child in children if _alive(child)]


def _alive(process: psutil.Process) -> bool:
    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def serving_agents(pid: int, n: int) -> list[psutil.Process]:
    """Wait until the cluster `pid` has n agents whose event loops serve; return them."""
    wait_until(
        lambda: len(found := agents(pid)) == n and all(catches_sigterm(a.pid) for a in found),
        timeout=TIMEOUT,
        what=f"{n} serving workers",
    )
    return agents(pid)


def kill_tree(pid: int) -> None:
    """Kill the process `pid` (one this test started) and everything under it."""
    try:
        top = psutil.Process(pid)
        processes = [top, *top.children(recursive=True)]
    except psutil.Error:
        return
    for process in processes:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(processes, timeout=5)


class CliCluster:
    """scaler_cluster, as a user runs it, logging to a file."""

    def __init__(self, tmp_path: Path, address: str, *args: str) -> None:
        self.log = tmp_path / f"cluster-{time.monotonic_ns()}.log"
        program = str(Path(sys.executable).parent / "scaler_cluster")
        command = [program, address, *args, "--heartbeat-interval-seconds", "0.5", "--logging-paths", str(self.log)]
        with open(tmp_path / "cluster.out", "ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=ENV)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def output(self) -> str:
        return read(self.log)

    def wait_for(self, pattern: str) -> re.Match[str]:
        wait_until(lambda: re.search(pattern, self.output), timeout=TIMEOUT, what=f"{pattern!r} in the cluster's log")
        match = re.search(pattern, self.output)
        assert match is not None
        return match

    def stop(self) -> tuple[int, float]:
        """SIGTERM; (exit code, seconds it took)."""
        start = time.monotonic()
        os.kill(self.pid, signal.SIGTERM)
        try:
            code = self.process.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"scaler_cluster did not stop within {TIMEOUT}s:\n{self.output[-3000:]}")
        return code, time.monotonic() - start


@pytest.fixture()
def clusters() -> Iterator[list[CliCluster]]:
    started: list[CliCluster] = []
    yield started
    for cluster in started:
        kill_tree(cluster.pid)
        cluster.process.wait(5)


@pytest.fixture()
def scheduler() -> Iterator[SchedulerClusterCombo]:
    """A scheduler alone (a combo without workers)."""
    combo = SchedulerClusterCombo(
        address=free_address(),
        n_workers=0,
        heartbeat_interval_seconds=0.5,
        worker_timeout_seconds=3,
        logging_level="WARNING",
    )
    try:
        yield combo
    finally:
        combo.shutdown()


def _cluster_main(address: str, n_workers: int, log: str, worker_logs: tuple[str, ...], **restart: float) -> None:
    """run_cluster in a child of the test, as the combo runs it, in a process group of its own (as a program started
    from a shell is, for Ctrl-C); `restart`: RestartPolicy's fields, if any."""
    os.setpgrp()
    die_with_parent(signal.SIGTERM)
    setup_logging("INFO", (log,))
    config = AgentConfig(name="test", heartbeat_interval_seconds=0.5)
    if restart:
        from scaler.worker.supervision import RestartPolicy

        sys.exit(
            run_cluster(address, n_workers, config, "builtin", "INFO", worker_logs, restart=RestartPolicy(**restart))
        )
    sys.exit(run_cluster(address, n_workers, config, "builtin", "INFO", worker_logs))


@pytest.fixture()
def forked() -> Iterator[list[multiprocessing.process.BaseProcess]]:
    started: list[multiprocessing.process.BaseProcess] = []
    yield started
    for process in started:
        if process.pid is not None:
            kill_tree(process.pid)
        process.join(5)


# ----------------------------------------------------------------------------------------------- restarts
def test_a_killed_worker_is_restarted_with_a_growing_back_off_and_serves(
    clusters: list[CliCluster], scheduler: SchedulerClusterCombo, tmp_path: Path
) -> None:
    cluster = CliCluster(tmp_path, scheduler.address, "-n", "2")
    clusters.append(cluster)
    first = serving_agents(cluster.pid, 2)
    victim = first[0]
    index = int(cluster.wait_for(rf"Worker\[(\d)\] started \(pid {victim.pid}\)").group(1))
    same_name = rf"Worker\[\S+-{index}\]: connected to scheduler"
    cluster.wait_for(same_name)
    # a loaded machine may have seen the victim's session expire and reconnect already: count from here
    sessions = len(re.findall(same_name, cluster.output))

    os.kill(victim.pid, signal.SIGKILL)  # kill -9, as the OOM killer does
    said = rf"Worker\[{index}\] \(pid {victim.pid}\) was killed by SIGKILL; restarting it in 1\.0s \(restart 1\)"
    cluster.wait_for(rf"\[WARNING\].*{said}")
    restarted = int(cluster.wait_for(rf"restart 1\)[\s\S]*Worker\[{index}\] started \(pid (\d+)\)").group(1))
    assert restarted not in [agent.pid for agent in first]
    wait_until(lambda: catches_sigterm(restarted), timeout=TIMEOUT, what="the new worker to serve")
    # under the same name: the scheduler holds back a name lost again and again
    try:
        wait_until(lambda: len(re.findall(same_name, cluster.output)) > sessions, timeout=TIMEOUT)
    except AssertionError:
        pytest.fail(f"the restarted worker did not connect under its name within {TIMEOUT}s:\n{cluster.output[-4000:]}")
    with Client(address=scheduler.address, timeout_seconds=TIMEOUT) as client:
        assert client.map(pow, [(i, 2) for i in range(50)]) == [i * i for i in range(50)]

    os.kill(restarted, signal.SIGKILL)  # died again soon after its start: the back-off doubles
    cluster.wait_for(
        rf"Worker\[{index}\] \(pid {restarted}\) was killed by SIGKILL; restarting it in 2\.0s \(restart 2\)"
    )
    cluster.wait_for(r"restart 2\)[\s\S]*Worker\[\d\] started")
    serving_agents(cluster.pid, 2)

    code, _ = cluster.stop()
    assert code == 0, cluster.output
    assert "[ERROR]" not in cluster.output, cluster.output


def test_a_worker_the_scheduler_stopped_is_not_restarted(
    clusters: list[CliCluster], scheduler: SchedulerClusterCombo, tmp_path: Path
) -> None:
    cluster = CliCluster(tmp_path, scheduler.address, "-n", "2", "--exit-with-scheduler")
    clusters.append(cluster)
    serving_agents(cluster.pid, 2)
    wait_until(lambda: cluster.output.count("connected to scheduler") == 2, timeout=TIMEOUT, what="2 sessions")
    scheduler.shutdown()  # tells its workers it stops; told to stop with it, they exit 0 (else they would wait)
    assert cluster.process.wait(TIMEOUT) == 0, cluster.output
    assert cluster.output.count("ended (exit code 0)") == 2, cluster.output
    assert "restart" not in cluster.output, cluster.output


def test_a_worker_that_gave_up_on_an_error_is_not_restarted(clusters: list[CliCluster], tmp_path: Path) -> None:
    """No scheduler answers: the worker stops itself after --death-timeout-seconds with exit code 1; a new one would
    wait in vain too."""
    cluster = CliCluster(tmp_path, free_address(), "-n", "1", "--death-timeout-seconds", "1")
    clusters.append(cluster)
    assert cluster.process.wait(TIMEOUT) == 1, cluster.output
    assert "Worker[0] ended (exit code 1); not restarted: it stopped on an error" in cluster.output, cluster.output
    assert "restarting" not in cluster.output and cluster.output.count("started (pid") == 1, cluster.output
    assert "ClusterProcess: every worker failed" in cluster.output, cluster.output


def test_a_stop_during_a_back_off_is_quick_and_starts_nothing(
    forked: list[multiprocessing.process.BaseProcess], scheduler: SchedulerClusterCombo, tmp_path: Path
) -> None:
    log = tmp_path / "cluster.log"
    process = multiprocessing.get_context("fork").Process(
        target=_cluster_main,
        args=(scheduler.address, 2, str(log), (str(log),)),
        kwargs={"first_delay_seconds": 30.0},
    )
    process.start()
    forked.append(process)
    assert process.pid is not None
    victim = serving_agents(process.pid, 2)[0]
    os.kill(victim.pid, signal.SIGKILL)
    wait_until(lambda: "restarting it in 30.0s (restart 1)" in read(log), timeout=TIMEOUT, what="the back-off")

    start = time.monotonic()
    os.kill(process.pid, signal.SIGTERM)
    process.join(TIMEOUT)
    elapsed = time.monotonic() - start
    output = read(log)
    assert process.exitcode == 0, output
    assert elapsed < QUICK, f"the cluster took {elapsed:.2f}s to stop during a 30s back-off:\n{output}"
    assert output.count("started (pid") == 2, output  # nothing started after the stop
    assert "every worker failed" not in output, output


# ----------------------------------------------------------------------------------------------- quiet stops
@pytest.mark.parametrize("ctrl_c", [False, True], ids=["SIGTERM to the cluster", "Ctrl-C"])
def test_workers_stopped_while_they_start_did_not_fail(
    forked: list[multiprocessing.process.BaseProcess], tmp_path: Path, ctrl_c: bool
) -> None:
    """Workers stuck before their event loop serves (here: opening a log that is a FIFO nobody reads) die of the
    cluster's SIGTERM, or of Ctrl-C's SIGINT (sent to the whole process group): the cluster is stopping, so nothing
    failed, and it says so."""
    log = tmp_path / "cluster.log"
    fifo = tmp_path / "worker-log.fifo"
    os.mkfifo(fifo)
    process = multiprocessing.get_context("fork").Process(
        target=_cluster_main, args=(free_address(), 3, str(log), (str(fifo),))
    )
    process.start()
    forked.append(process)
    pid = process.pid
    assert pid is not None
    wait_until(lambda: "Worker[2] started" in read(log), timeout=TIMEOUT, what="3 workers forked")
    # Forked, they catch SIGTERM with the cluster's handler until _worker_main resets it; then they block on the FIFO
    wait_until(
        lambda: len(found := agents(pid)) == 3 and not any(catches_sigterm(a.pid) for a in found),
        timeout=TIMEOUT,
        what="3 workers stuck as they start",
    )

    if ctrl_c:
        os.killpg(pid, signal.SIGINT)  # the group of a process this test started
    else:
        os.kill(pid, signal.SIGTERM)
    process.join(TIMEOUT)
    output = read(log)
    assert process.exitcode == 0, output
    name = "SIGINT" if ctrl_c else "SIGTERM"
    assert output.count(f"ended (killed by {name} as the cluster stops)") == 3, output
    assert "[ERROR]" not in output and "[WARNING]" not in output, output


def test_a_combo_shut_down_while_its_workers_start_logs_no_failure(tmp_path: Path) -> None:
    """The README's shutdown example logged '[ERROR] ClusterProcess: every worker failed' in 4 runs out of 6."""
    for run in range(5):
        log = tmp_path / f"combo-{run}.log"
        combo = SchedulerClusterCombo(
            address=free_address(), n_workers=3, logging_level="INFO", logging_paths=(str(log),)
        )
        try:
            wait_until(partial(logged, log, "Worker[2] started", 1), timeout=TIMEOUT, what="3 workers forked")
        finally:
            combo.shutdown()
        output = read(log)
        assert "[ERROR]" not in output, output
        assert combo_cluster(combo).exitcode == 0, output


# ----------------------------------------------------------------------------------------------- quick stops
def _start_long_tasks(client: Client, tmp_path: Path) -> None:
    tmp_path.mkdir()
    for i in range(2):
        marker = tmp_path / f"running-{i}"
        client.submit(_touch_and_sleep, str(marker), 60)
    wait_until(lambda: all((tmp_path / f"running-{i}").exists() for i in range(2)), timeout=TIMEOUT, what="2 tasks")


def _touch_and_sleep(path: str, seconds: float) -> None:
    Path(path).touch()
    time.sleep(seconds)


def _serving(combo: SchedulerClusterCombo) -> None:
    serving_agents(combo_cluster(combo).pid, 2)
    wait_until(lambda: all(p.children() for p in agents(combo_cluster(combo).pid)), timeout=TIMEOUT, what="processors")


@pytest.mark.parametrize("state", ["starting", "idle", "running long tasks", "processors starting"])
def test_a_combo_shuts_down_quickly_whatever_its_workers_do(state: str, tmp_path: Path) -> None:
    for run in range(3):
        combo = SchedulerClusterCombo(
            address=free_address(), n_workers=2, heartbeat_interval_seconds=0.5, logging_level="WARNING"
        )
        client = None
        try:
            if state == "starting":
                wait_until(partial(forked_workers, combo, 2), timeout=TIMEOUT, what="2 workers forked")
            elif state == "idle":
                _serving(combo)
                client = Client(address=combo.address, timeout_seconds=TIMEOUT)
                assert client.map(pow, [(i, 2) for i in range(20)]) == [i * i for i in range(20)]
            elif state == "running long tasks":
                client = Client(address=combo.address, timeout_seconds=TIMEOUT)
                _start_long_tasks(client, tmp_path / str(run))
            else:  # a task cancelled while it runs: its processor is killed and a new one starts
                client = Client(address=combo.address, timeout_seconds=TIMEOUT)
                (tmp_path / str(run)).mkdir()
                marker = tmp_path / str(run) / "running"
                future = client.submit(_touch_and_sleep, str(marker), 60)
                wait_until(marker.exists, timeout=TIMEOUT, what="the task to run")
                future.cancel()
        finally:
            start = time.monotonic()
            combo.shutdown()
            elapsed = time.monotonic() - start
            if client is not None:
                client.disconnect()
        assert elapsed < QUICK, f"run {run}: shutdown() took {elapsed:.2f}s with workers {state}"


def test_the_scheduler_hears_every_worker_leave(tmp_path: Path) -> None:
    """shutdown() stops the workers before the scheduler: each says goodbye to a scheduler still there (when they
    stopped together, a goodbye could wait 2 s for a scheduler already gone)."""
    for run in range(3):
        log = tmp_path / f"combo-{run}.log"
        combo = SchedulerClusterCombo(
            address=free_address(),
            n_workers=2,
            heartbeat_interval_seconds=0.5,
            logging_level="INFO",
            logging_paths=(str(log),),
        )
        try:
            wait_until(partial(logged, log, "connected to scheduler", 2), timeout=TIMEOUT, what="2 sessions")
        finally:
            combo.shutdown()
        output = read(log)
        assert len(re.findall(r"worker \S+ left \(.*received SIGTERM\)", output)) == 2, output


def test_a_cluster_whose_scheduler_is_not_there_stops_quickly(clusters: list[CliCluster], tmp_path: Path) -> None:
    """A worker with no session has nothing to say to a scheduler: it does not wait to say it (it waited 2 s)."""
    cluster = CliCluster(tmp_path, free_address(), "-n", "2")
    clusters.append(cluster)
    serving_agents(cluster.pid, 2)
    code, elapsed = cluster.stop()
    assert code == 0, cluster.output
    assert elapsed < QUICK, f"scaler_cluster took {elapsed:.2f}s to stop:\n{cluster.output}"
    assert "[ERROR]" not in cluster.output, cluster.output
