"""Fault scenarios against real Scaler processes on this machine: what a client sees when parts of Scaler die.

    .venv/bin/python benchmarks/reliability.py                                  # every scenario, about a minute
    .venv/bin/python benchmarks/reliability.py --scenarios agent,hung,memory    # some of them
    .venv/bin/python benchmarks/reliability.py --tasks 50                       # tasks per scenario (all of them)

Each scenario starts its own `python -m scaler.entry_points.scheduler` and `scaler.entry_points.cluster`
subprocesses (heartbeat 0.5 s, worker timeout 2 or 3 s, logs at ERROR in a scratch directory), does one fault to
them, then waits on every future, at most LOST_AFTER seconds in all, and sorts it: correct (the task's own value),
clear (an error the scenario expects: a documented Scaler error or the task's own exception), lost (not resolved in
time; must be 0), wrong (a value that is not the task's own), unexpected (an error the scenario does not expect).
Tasks leave a marker file per run, so runs that happened twice are counted. It stops only processes it started, by
pid. Prints one Markdown table; docs/reliability.md explains each scenario and holds a run.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from scaler import Client
from scaler.errors import ConnectionFailedError, TaskFailedError, TaskMemoryError, TaskTimeoutError
from scaler.monitor.top import Subscription
from scaler.protocol.records import Status

LOST_AFTER = 60.0  # seconds a scenario waits for all its futures; one still pending then is lost
HEARTBEAT = "0.5"
WORKER_TIMEOUT = 2.0
MEMORY_LIMIT = "300M"


# ---- tasks (defined in __main__, so cloudpickle sends them to the workers by value) ----


def mark(markers: str, index: int) -> None:
    """Leave a file per run: <index>.<processor pid>.<ns>."""
    Path(markers, f"{index}.{os.getpid()}.{time.monotonic_ns()}").touch()


def work(markers: str, index: int, seconds: float) -> tuple[str, int]:
    mark(markers, index)
    time.sleep(seconds)
    return ("done", index)


def hang(markers: str, index: int) -> str:
    mark(markers, index)
    threading.Event().wait()
    return "returned"


def hog(markers: str, index: int, megabytes: int) -> int:
    """Grow to `megabytes` of resident memory, 50 MB every 20 ms."""
    mark(markers, index)
    chunks = []
    for _ in range(megabytes // 50):
        chunks.append(b"\x01" * (50 << 20))  # written, so resident
        time.sleep(0.02)
    return len(chunks)


def kill_own_worker(markers: str, index: int) -> str:
    mark(markers, index)
    os.kill(os.getppid(), signal.SIGKILL)  # the processor's parent is its worker's agent
    time.sleep(10)  # the processor dies with its agent meanwhile
    return "survived"


def runs(markers: Path) -> Counter[int]:
    """How many times each task index started."""
    return Counter(int(p.name.split(".")[0]) for p in markers.iterdir())


def run_pids(markers: Path) -> set[int]:
    return {int(p.name.split(".")[1]) for p in markers.iterdir()}


# ---- outcomes ----

LOST = object()  # the outcome of a future not resolved within the bound
NO_VALUE = object()  # an expectation: the future must raise


@dataclass
class Row:
    scenario: str
    submitted: int = 0
    correct: int = 0
    clear: int = 0
    lost: int = 0
    wrong: int = 0
    unexpected: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def cells(self) -> list[str]:
        counts = [self.submitted, self.correct, self.clear, self.lost, self.wrong, self.unexpected]
        return [self.scenario, *(f"{n:,}" for n in counts), f"{self.seconds:.1f}", "; ".join(self.notes)]


def settle(futures: list[Any], bound: float) -> list[object]:
    """Each future's value, its exception, or LOST if it did not resolve within `bound` seconds (then cancelled)."""
    concurrent.futures.wait(futures, timeout=bound)
    outcomes: list[object] = []
    for future in futures:
        if not future.done():
            future.cancel()
            outcomes.append(LOST)
        elif future.cancelled():
            outcomes.append(concurrent.futures.CancelledError())
        else:
            exc = future.exception(timeout=0)
            outcomes.append(exc if exc is not None else future.result(timeout=0))
    return outcomes


Expected = tuple[object, tuple[type[BaseException], ...]]  # a task's value (or NO_VALUE) and the errors that are clear


def grade(row: Row, outcomes: list[object], expected: list[Expected]) -> None:
    """Count `outcomes` against (value, errors that are clear) per future into `row`."""
    problems: list[str] = []
    for outcome, (value, errors) in zip(outcomes, expected, strict=True):
        row.submitted += 1
        if outcome is LOST:
            row.lost += 1
        elif isinstance(outcome, BaseException):
            if isinstance(outcome, errors):
                row.clear += 1
            else:
                row.unexpected += 1
                problems.append(f"{type(outcome).__name__}: {str(outcome)[:160]}")
        elif value is not NO_VALUE and outcome == value:
            row.correct += 1
        else:
            row.wrong += 1
            problems.append(f"wrong value {outcome!r:.80}")
    if problems:
        row.notes.append(f"first problem: {problems[0]}")


def own(indexes: range) -> list[Expected]:
    """Plain `work` tasks: each must return its own value."""
    return [(("done", i), ()) for i in indexes]


# ---- processes ----


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> float:
    """Poll `condition` until true; the seconds it took. RuntimeError after `timeout` seconds."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.02)
    return time.monotonic() - start


def gone(process: psutil.Process) -> bool:
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def pid_gone(pid: int) -> bool:
    try:
        return gone(psutil.Process(pid))
    except psutil.Error:
        return True


def watch_gone(pids: set[int], timeout: float = 20.0) -> Callable[[], float | None]:
    """Start watching `pids` (in a thread); the returned function gives the seconds until all of them were gone, or
    None if some were still running after `timeout`. It waits for the watch to end."""
    start = time.monotonic()
    took: list[float] = []

    def watch() -> None:
        while time.monotonic() - start < timeout:
            if all(pid_gone(pid) for pid in pids):
                took.append(time.monotonic() - start)
                return
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()

    def result() -> float | None:
        thread.join(timeout + 1)
        return took[0] if took else None

    return result


def seconds(value: float | None) -> str:
    return "never (within the bound)" if value is None else f"{value:.1f}s"


class Scene:
    """One scenario's scratch directory, processes and clients. stop() ends every process it started (and their
    descendants), by pid, whatever state they are in."""

    def __init__(self, root: Path, name: str, host: str = "127.0.0.1") -> None:
        self.dir = root / name
        self.dir.mkdir()
        self.log_path = self.dir / "processes.log"
        self._log = open(self.log_path, "ab")  # closed in stop()
        self.address = f"tcp://{host}:{free_port()}"
        self.monitor_address = f"ipc://{self.dir}/monitor"
        self.popens: list[subprocess.Popen[bytes]] = []
        self.clients: list[Client] = []
        self._feed: Subscription | None = None

    def markers(self, name: str = "runs") -> Path:
        path = self.dir / name
        path.mkdir(exist_ok=True)
        return path

    def spawn(self, args: list[str]) -> subprocess.Popen[bytes]:
        popen = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.popens.append(popen)
        return popen

    def scheduler(self, worker_timeout: float = WORKER_TIMEOUT) -> subprocess.Popen[bytes]:
        return self.spawn(
            [
                *(sys.executable, "-m", "scaler.entry_points.scheduler", self.address, "-ma", self.monitor_address),
                *("-wt", str(worker_timeout), "-ll", "ERROR", "-lp", str(self.log_path)),
            ]
        )

    def cluster(self, n: int, *extra: str, prefix: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
        return self.spawn(
            [
                *(*prefix, sys.executable, "-m", "scaler.entry_points.cluster", self.address, "-n", str(n)),
                *("-hi", HEARTBEAT, *extra, "-ll", "ERROR", "-lp", str(self.log_path)),
            ]
        )

    def client(self) -> Client:
        client = Client(self.address, timeout_seconds=15)
        self.clients.append(client)
        return client

    def status(self) -> Status | None:
        """The newest status the scheduler published (waiting up to 1.5 s for one if none is queued)."""
        if self._feed is None:
            self._feed = Subscription(self.monitor_address, None)
        newest = None
        while (status := self._feed.next(0)) is not None:
            newest = status
        return newest or self._feed.next(1500)

    def workers(self) -> list[str]:
        status = self.status()
        return [] if status is None else sorted(w.name for w in status.workers)

    def wait_workers(self, n: int, timeout: float = 20.0) -> float:
        def ready() -> bool:
            for popen in self.popens:
                if popen.poll() is not None:
                    raise RuntimeError(f"{popen.args!r} exited with code {popen.returncode}; see {self.log_path}")
            return len(self.workers()) == n

        return wait_for(ready, timeout, f"{n} workers connected")

    def stop(self) -> None:
        for client in self.clients:
            try:
                client.disconnect()
            except Exception:  # a client of a dead scheduler may raise; nothing more to do
                pass
        if self._feed is not None:
            self._feed.close()
        ours = self._processes()
        for process in ours:  # a SIGSTOPped process would not act on SIGTERM
            with _quiet():
                process.resume()
        for popen in reversed(self.popens):  # clusters first, so the scheduler hears its workers leave
            if popen.poll() is None:
                popen.terminate()
        for popen in reversed(self.popens):
            try:
                popen.wait(5)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait(5)
        _, alive = psutil.wait_procs(ours, timeout=5)
        for process in alive:
            with _quiet():
                process.kill()
        self._log.close()

    def _processes(self) -> list[psutil.Process]:
        """The processes this scene started that are still running (or not yet reaped), and their descendants."""
        ours: list[psutil.Process] = []
        for popen in self.popens:
            if popen.poll() is not None:  # reaped: its pid is no longer ours
                continue
            with _quiet():
                process = psutil.Process(popen.pid)
                ours += [process, *process.children(recursive=True)]
        return ours


@contextmanager
def _quiet() -> Iterator[None]:
    try:
        yield
    except psutil.Error:
        pass


def agents(cluster: subprocess.Popen[bytes]) -> list[psutil.Process]:
    """The live worker agents of a scaler_cluster process (its children)."""
    try:
        return [p for p in psutil.Process(cluster.pid).children() if not gone(p)]
    except psutil.Error:
        return []


def processors(agent: psutil.Process) -> list[psutil.Process]:
    try:
        return [p for p in agent.children() if not gone(p)]
    except psutil.Error:
        return []


def started_count(markers: Path) -> int:
    return sum(1 for _ in markers.iterdir())


def healthy_scene(scene: Scene, n_workers: int = 2, *extra: str) -> tuple[subprocess.Popen[bytes], Client]:
    """A scheduler and a cluster of `n_workers`, all connected, and a client."""
    scene.scheduler()
    cluster = scene.cluster(n_workers, *extra)
    scene.wait_workers(n_workers)
    return cluster, scene.client()


# ---- the scenarios ----


def agent_killed(scene: Scene, row: Row, tasks: int) -> None:
    cluster, client = healthy_scene(scene)
    markers = scene.markers()
    futures = [client.submit(work, str(markers), i, 0.02) for i in range(tasks)]
    wait_for(lambda: started_count(markers) >= tasks // 5, 30, "a fifth of the tasks started")
    victim = agents(cluster)[0]
    victim.kill()
    killed = time.monotonic()
    wait_for(lambda: gone(victim), 5, "the agent died")
    wait_for(lambda: len(agents(cluster)) == 2, 15, "the cluster restarted the agent")
    restarted = time.monotonic() - killed
    grade(row, settle(futures, LOST_AFTER), own(range(tasks)))
    twice = sum(1 for n in runs(markers).values() if n > 1)
    row.notes.append(
        f"killed an agent after {tasks // 5} tasks started; the cluster restarted it {restarted:.1f}s later; tasks "
        f"run twice: {twice}"
    )


def processor_killed(scene: Scene, row: Row, tasks: int) -> None:
    cluster, client = healthy_scene(scene)
    markers = scene.markers()
    futures = [client.submit(work, str(markers), i, 0.05) for i in range(tasks)]
    kills = 0
    for count, index in ((tasks // 5, 0), (tasks // 2, 1)):
        wait_for(lambda: started_count(markers) >= count, 30, f"{count} tasks started")  # noqa: B023 - used at once
        for processor in processors(agents(cluster)[index])[:1]:
            processor.kill()
            kills += 1
    grade(row, settle(futures, LOST_AFTER), own(range(tasks)))
    twice = sum(1 for n in runs(markers).values() if n > 1)
    row.notes.append(f"killed {kills} processors mid-task (one per agent); tasks run twice: {twice}")


def client_killed(scene: Scene, row: Row, tasks: int) -> None:
    healthy_scene(scene)
    first = scene.markers("first")
    doomed = 20
    child = scene.spawn([sys.executable, __file__, "--client-child", scene.address, str(first), str(doomed)])
    wait_for(lambda: started_count(first) >= 2, 30, "the first client's tasks running on both workers")
    running = run_pids(first)
    child.kill()
    killed = time.monotonic()
    stopped = watch_gone(running)
    child.wait(5)
    client = scene.client()
    markers = scene.markers()
    futures = [client.submit(work, str(markers), i, 0.01) for i in range(tasks)]
    grade(row, settle(futures, LOST_AFTER), own(range(tasks)))
    done = time.monotonic() - killed
    row.notes.append(
        f"a client in another process, with {doomed} tasks of 60 s (2 running), killed: the processors running its "
        f"tasks were stopped {seconds(stopped())} later, {started_count(first) - 2} of its other tasks ever started; "
        f"a second client's {tasks} tasks were all done {done:.1f}s after the kill"
    )


def scheduler_killed(scene: Scene, row: Row, tasks: int) -> None:
    scheduler = scene.scheduler()
    scene.cluster(2)
    scene.wait_workers(2)
    client = scene.client()
    half = tasks // 2
    quick = [client.submit(work, str(scene.markers("quick")), i, 0.01) for i in range(half)]
    outcomes = settle(quick, LOST_AFTER)
    markers = scene.markers()
    slow = [client.submit(work, str(markers), i, 60.0) for i in range(half, tasks)]
    wait_for(lambda: started_count(markers) >= 2, 30, "two long tasks running")
    running = run_pids(markers)
    resolved: list[float] = []  # when each pending future ended (list.append is atomic)
    for future in slow:
        future.add_done_callback(lambda _: resolved.append(time.monotonic()))
    scheduler.kill()
    killed = time.monotonic()
    stopped = watch_gone(running)
    outcomes += settle(slow, LOST_AFTER)
    grade(row, outcomes, own(range(half)) + [(NO_VALUE, (ConnectionFailedError,)) for _ in slow])
    if resolved:
        first, last = min(resolved) - killed, max(resolved) - killed
        row.notes.append(
            f"{half} tasks done, then kill -9 of the scheduler with {len(slow)} pending ({len(running)} running): "
            f"they failed "
            f"{first:.1f}-{last:.1f}s after the kill"
        )
    row.notes.append(
        f"the workers stopped the {len(running)} running tasks (killed their processors) {seconds(stopped())} after "
        "the kill"
    )


def agent_stopped(scene: Scene, row: Row, tasks: int) -> None:
    cluster, client = healthy_scene(scene)
    markers = scene.markers()
    futures = [client.submit(work, str(markers), i, 0.05) for i in range(tasks)]
    wait_for(lambda: started_count(markers) >= tasks // 5, 30, "a fifth of the tasks started")
    victim = agents(cluster)[0]
    victim.suspend()  # SIGSTOP
    try:
        lost = wait_for(lambda: len(scene.workers()) == 1, 15, "the scheduler declared the stopped worker lost")
        time.sleep(1.0)
    finally:
        victim.resume()  # SIGCONT
    rejoined = wait_for(lambda: len(scene.workers()) == 2, 20, "the stopped worker rejoined")
    outcomes = settle(futures, LOST_AFTER)
    again = scene.markers("after")
    more = [client.submit(work, str(again), i, 0.05) for i in range(tasks // 4)]
    outcomes += settle(more, LOST_AFTER)
    grade(row, outcomes, own(range(tasks)) + own(range(tasks // 4)))
    twice = sum(1 for n in runs(markers).values() if n > 1)
    ran_there = sum(1 for pid in run_pids(again) if _parent(pid) == victim.pid)
    row.notes.append(
        f"SIGSTOP of an agent; the monitor showed it lost {lost:.1f}s later; SIGCONT 1 s after that; it was back "
        f"{rejoined:.1f}s after the SIGCONT; tasks run twice: {twice}; a second batch of {tasks // 4} tasks ran "
        f"{'partly' if ran_there else 'not'} on it"
    )


def _parent(pid: int) -> int | None:
    try:
        return int(psutil.Process(pid).ppid())
    except psutil.Error:
        return None


def crash_loop(scene: Scene, row: Row, tasks: int) -> None:
    scene.scheduler(worker_timeout=3.0)
    scene.cluster(2)
    scene.wait_workers(2)
    stop, lives = threading.Event(), [0]
    looper = threading.Thread(target=_crash_loop, args=(scene, stop, lives), daemon=True)
    looper.start()
    try:
        wait_for(lambda: len(scene.workers()) == 3, 15, "the crash-looping worker joined")
        client = scene.client()
        markers = scene.markers()
        futures = [client.submit(work, str(markers), i, 0.002) for i in range(tasks)]
        outcomes = settle(futures, LOST_AFTER)
    finally:
        stop.set()
        looper.join(30)
    started = runs(markers)
    clear: tuple[type[BaseException], ...] = (TaskFailedError,)
    expected: list[Expected] = [(("done", i), clear if started[i] else ()) for i in range(tasks)]
    grade(row, outcomes, expected)
    failed = sum(1 for o in outcomes if isinstance(o, TaskFailedError))
    never = sum(1 for i, o in enumerate(outcomes) if isinstance(o, TaskFailedError) and not started[i])
    twice = sum(1 for n in started.values() if n > 1)
    row.notes.append(
        f"a third worker killed 0.5 s after each start ({lives[0]} lives); {failed} tasks failed "
        f"(TaskFailedError after 4 tries), {never} of them never started; tasks run more than once: {twice}"
    )


def _crash_loop(scene: Scene, stop: threading.Event, lives: list[int]) -> None:
    """A one-worker scaler_cluster whose agent is killed 0.5 s after each start, again and again."""
    while not stop.is_set():
        cluster = scene.cluster(1)
        stop.wait(0.5)
        family: list[psutil.Process] = []
        with _quiet():
            family = psutil.Process(cluster.pid).children(recursive=True)
        for agent in agents(cluster):
            with _quiet():
                agent.kill()
        lives[0] += 1
        cluster.kill()
        cluster.wait(10)
        for process in family:  # processors die with their agent; make sure
            with _quiet():
                process.kill()


def hung_task(scene: Scene, row: Row, tasks: int) -> None:
    _, client = healthy_scene(scene)
    markers = scene.markers()
    hung = client.options(timeout=2).submit(hang, str(markers), -1)
    ended: list[float] = []
    hung.add_done_callback(lambda _: ended.append(time.monotonic()))
    futures = [hung] + [client.submit(work, str(markers), i, 0.01) for i in range(tasks - 1)]
    outcomes = settle(futures, LOST_AFTER)
    grade(row, outcomes, [(NO_VALUE, (TaskTimeoutError,)), *own(range(tasks - 1))])
    if isinstance(outcomes[0], TaskTimeoutError) and ended:
        began = min(int(p.name.split(".")[2]) for p in markers.iterdir() if p.name.startswith("-1.")) / 1e9
        row.notes.append(f"the hung task (timeout=2) failed {ended[0] - began:.1f}s after it started: {outcomes[0]}")


def memory_hog(scene: Scene, row: Row, tasks: int) -> None:
    _, client = healthy_scene(scene, 2, "--memory-limit", MEMORY_LIMIT)
    markers = scene.markers()
    futures = [client.submit(hog, str(markers), -1, 1500)]
    futures += [client.submit(work, str(markers), i, 0.01) for i in range(tasks - 1)]
    outcomes = settle(futures, LOST_AFTER)
    grade(row, outcomes, [(NO_VALUE, (TaskMemoryError,)), *own(range(tasks - 1))])
    if isinstance(outcomes[0], TaskMemoryError):
        row.notes.append(f"the hog (grows to 1.5 GB; --memory-limit {MEMORY_LIMIT}): {outcomes[0]}")


def self_killer(scene: Scene, row: Row, tasks: int) -> None:
    _, client = healthy_scene(scene)
    markers = scene.markers()
    futures = [client.submit(kill_own_worker, str(markers), -1)]
    futures += [client.submit(work, str(markers), i, 0.02) for i in range(tasks - 1)]
    outcomes = settle(futures, LOST_AFTER)
    grade(row, outcomes, [(NO_VALUE, (TaskFailedError,)), *own(range(tasks - 1))])
    row.notes.append(f"the task killing its agent ran {runs(markers)[-1]} times")
    if isinstance(outcomes[0], TaskFailedError):
        row.notes.append(f"then: {outcomes[0]}")


# ---- the partition: network namespaces ----


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)


def netns_unavailable() -> str | None:
    if shutil.which("ip") is None:
        return "no `ip` command"
    probe = f"scaler-probe-{os.getpid()}"
    made = _ip("netns", "add", probe)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip() or made.returncode}"
    _ip("netns", "del", probe)
    return None


def partition(root: Path, row: Row, tasks: int) -> None:
    """Scheduler, client and one worker in this network namespace; another worker in a namespace of its own, joined
    by a veth pair; the pair is cut past the worker timeout, then restored. The namespace goes whatever happens."""
    reason = netns_unavailable()
    if reason is not None:
        row.notes.append(f"skipped: {reason}")
        return
    ns = f"scaler-rel-{os.getpid()}"
    near, far = f"srel{os.getpid() % 100000}a", f"srel{os.getpid() % 100000}b"
    subnet = f"10.213.{os.getpid() % 250}"
    made: list[str] = []  # what to delete afterwards: only what this run created
    try:
        for args in (
            ("netns", "add", ns),
            ("link", "add", near, "type", "veth", "peer", "name", far, "netns", ns),
            ("addr", "add", f"{subnet}.1/30", "dev", near),
            ("link", "set", near, "up"),
            ("-n", ns, "addr", "add", f"{subnet}.2/30", "dev", far),
            ("-n", ns, "link", "set", far, "up"),
            ("-n", ns, "link", "set", "lo", "up"),
        ):
            done = _ip(*args)
            if done.returncode != 0:
                raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
            made += ["ns"] if args[:2] == ("netns", "add") else ["link"] if args[:2] == ("link", "add") else []
        scene = Scene(root, "partition", host=f"{subnet}.1")
        try:
            _partitioned(scene, row, tasks, ns, far)
        finally:
            scene.stop()
    finally:
        if "link" in made:
            _ip("link", "del", near)  # deletes both ends
        if "ns" in made:
            _ip("netns", "del", ns)


def _partitioned(scene: Scene, row: Row, tasks: int, ns: str, far: str) -> None:
    scene.scheduler()
    scene.cluster(1, "--worker-name-prefix", "near")
    remote = scene.cluster(1, "--worker-name-prefix", "far", prefix=("ip", "netns", "exec", ns))
    scene.wait_workers(2)
    client = scene.client()
    markers = scene.markers()
    futures = [client.submit(work, str(markers), i, 0.05) for i in range(tasks)]
    far_agents = {agent.pid for agent in agents(remote)}
    wait_for(
        lambda: started_count(markers) >= tasks // 5 and any(_parent(pid) in far_agents for pid in run_pids(markers)),
        30,
        "a fifth of the tasks started, some on the far worker",
    )
    cut = _ip("-n", ns, "link", "set", far, "down")
    if cut.returncode != 0:
        raise RuntimeError(f"could not cut the link: {cut.stderr.strip()}")
    try:
        lost = wait_for(lambda: len(scene.workers()) == 1, 15, "the scheduler declared the far worker lost")
        time.sleep(1.0)
    finally:
        _ip("-n", ns, "link", "set", far, "up")
    rejoined = wait_for(lambda: len(scene.workers()) == 2, 30, "the far worker rejoined")
    grade(row, settle(futures, LOST_AFTER), own(range(tasks)))
    twice = sum(1 for n in runs(markers).values() if n > 1)
    row.notes.append(
        f"link cut; the monitor showed the far worker lost {lost:.1f}s later; link restored 1 s after that; the "
        f"worker was back {rejoined:.1f}s after the restore; tasks run twice: {twice}"
    )


# ---- the runner ----


def in_scene(body: Callable[[Scene, Row, int], None]) -> Callable[[Path, Row, int], None]:
    """A scenario run in a Scene of its own, stopped whatever happens."""

    def run(root: Path, row: Row, tasks: int) -> None:
        scene = Scene(root, body.__name__)
        try:
            body(scene, row, tasks)
        finally:
            scene.stop()

    return run


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    run: Callable[[Path, Row, int], None]
    tasks: int = 200


SCENARIOS = [
    Scenario("agent", "1. kill -9 of a worker agent", in_scene(agent_killed)),
    Scenario("processor", "2. kill -9 of a processor", in_scene(processor_killed)),
    Scenario("client", "3. kill -9 of a client process", in_scene(client_killed)),
    Scenario("scheduler", "4. kill -9 of the scheduler", in_scene(scheduler_killed)),
    Scenario("sigstop", "5. SIGSTOP of an agent, then SIGCONT", in_scene(agent_stopped)),
    Scenario("crash-loop", "6. crash-looping worker beside 2 healthy", in_scene(crash_loop), 3000),
    Scenario("hung", "7. hung task with timeout=2", in_scene(hung_task)),
    Scenario("memory", f"8. memory hog, --memory-limit {MEMORY_LIMIT}", in_scene(memory_hog)),
    Scenario("partition", "9. network partition (netns)", partition),
    Scenario("self-kill", "10. task that kills its own worker", in_scene(self_killer)),
]


def run_one(scenario: Scenario, root: Path, tasks: int | None) -> Row:
    row = Row(scenario.title)
    start = time.monotonic()
    try:
        scenario.run(root, row, tasks if tasks is not None else scenario.tasks)
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        row.notes.append(f"scenario error: {type(exc).__name__}: {exc}")
    row.seconds = time.monotonic() - start
    return row


def table(rows: list[Row]) -> str:
    head = ["scenario", "submitted", "correct", "clear errors", "lost", "wrong", "unexpected", "wall s", "notes"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(row.cells()) + " |" for row in rows]
    return "\n".join(lines)


def client_child(address: str, markers: str, count: int) -> None:
    """The client of scenario 3, in a process of its own: submits `count` 60-second tasks and waits."""
    client = Client(address, timeout_seconds=15)
    futures = [client.submit(work, markers, i, 60.0) for i in range(count)]
    concurrent.futures.wait(futures, timeout=120)


def main() -> None:
    names = [s.name for s in SCENARIOS]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", default=",".join(names), help=f"comma-separated, from: {','.join(names)}")
    parser.add_argument("--tasks", type=int, default=None, help="tasks per scenario (default 200; crash-loop 3000)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (logs, markers)")
    parser.add_argument("--client-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client_child:
        address, markers, count = args.client_child
        client_child(address, markers, int(count))
        return
    chosen = [name.strip() for name in args.scenarios.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in names]
    if unknown:
        parser.error(f"unknown scenarios {unknown}; choose from {names}")
    if args.tasks is not None and args.tasks < 4:
        parser.error("--tasks must be at least 4")
    root = Path(tempfile.mkdtemp(prefix="scaler-reliability-"))
    started = time.monotonic()
    rows = []
    try:
        for scenario in SCENARIOS:
            if scenario.name in chosen:
                print(f"== {scenario.title}", file=sys.stderr, flush=True)
                rows.append(run_one(scenario, root, args.tasks))
                print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    finally:
        if args.keep:
            print(f"scratch directory kept: {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    python = platform.python_version()
    print(f"{time.strftime('%Y-%m-%d')}, {platform.system()} {platform.release()}, {cpus} CPUs, Python {python}")
    print(table(rows))
    print(f"total {time.monotonic() - started:.0f}s")


if __name__ == "__main__":
    main()
