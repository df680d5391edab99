"""A cluster: N worker processes on this machine, started and stopped together (scaler_cluster). A worker that dies
unexpectedly (killed by a signal, or a crash) is started again after a back-off; worker/supervision.py decides."""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence

from scaler.core.worker.agent import AgentConfig
from scaler.io.addresses import hostname
from scaler.io.lifetime import die_with_parent
from scaler.io.logs import setup_logging
from scaler.security.keys import PeerKeys
from scaler.worker.agent import run_worker
from scaler.worker.supervision import RestartPolicy, Supervisor

logger = logging.getLogger(__name__)
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
_NewWorker = Callable[[int, int], multiprocessing.process.BaseProcess]  # (index, restarts so far) -> a worker to start


def _worker_main(
    address: str,
    config: AgentConfig,
    event_loop: str,
    log_level: str | int,
    log_paths: tuple[str, ...],
    keys: PeerKeys | None,
) -> None:
    # Forked with SIGINT/SIGTERM blocked (see _Shell.start_due): drop the cluster's handlers first, then let a signal
    # that is already pending act with its default action.
    for signum in _STOP_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
    die_with_parent(signal.SIGTERM)
    setup_logging(log_level, log_paths)
    config = dataclasses.replace(config, pid=os.getpid(), hostname=config.hostname or hostname())
    sys.exit(run_worker(address, config, event_loop, keys))


def run_cluster(
    address: str,
    n_workers: int,
    config: AgentConfig,
    event_loop: str,
    log_level: str | int,
    log_paths: tuple[str, ...],
    keys: PeerKeys | None = None,
    restart: RestartPolicy | None = None,
    names: Sequence[str] | None = None,
) -> int:
    """Start n_workers workers, restart those that die unexpectedly (RestartPolicy), and return once all of them
    ended for good. SIGINT/SIGTERM stop them gracefully. `keys`: the worker keys for a scheduler that requires keys.
    `names`: one name per worker (then n_workers is len(names)); by default `<config.name>-<pid>-<index>`."""
    if names is not None:
        n_workers = len(names)
    logger.info(
        "ClusterProcess: starting %d workers, heartbeat_interval_seconds=%g, queue_capacity=%d, event_loop=%s, "
        "capabilities %s%s",
        n_workers,
        config.heartbeat_interval_seconds,
        config.queue_capacity,
        event_loop,
        ", ".join(config.offered),
        f", worker key {keys.source}" if keys is not None else "",
    )

    def worker(index: int, restarts: int) -> multiprocessing.process.BaseProcess:
        # A restarted worker keeps its name: the scheduler holds back a name lost again and again (crash loops).
        name = names[index] if names is not None else f"{config.name}-{os.getpid()}-{index}"
        worker_config = dataclasses.replace(config, name=name)
        return multiprocessing.get_context("fork").Process(
            target=_worker_main,
            args=(address, worker_config, event_loop, log_level, log_paths, keys),
            name=f"scaler-worker-{index}",
        )

    shell = _Shell(Supervisor(n_workers, restart), worker)
    try:
        return shell.run()
    finally:
        shell.close()


class _Shell:
    """Forks, signals and waits for the Supervisor. SIGINT/SIGTERM handlers only note the signal and wake the wait
    (a self-pipe); the loop then stops the workers, so a stop during a back-off neither waits for it nor starts one."""

    def __init__(self, supervisor: Supervisor, worker: _NewWorker) -> None:
        self.supervisor = supervisor
        self.worker = worker
        self.processes: dict[int, multiprocessing.process.BaseProcess] = {}
        self.signals: list[int] = []
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(self.wake_write, False)
        # Before the first fork: a signal that arrives while workers start must stop the ones already started.
        self.previous = {signum: signal.signal(signum, self.on_signal) for signum in _STOP_SIGNALS}

    def on_signal(self, signum: int, frame: object) -> None:
        self.signals.append(signum)
        try:
            os.write(self.wake_write, b"\0")
        except BlockingIOError:
            pass  # the pipe is full of wake-ups already

    def drain(self) -> None:
        try:
            while os.read(self.wake_read, 512):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        for signum, handler in self.previous.items():  # None: one not set from Python, which cannot be put back
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        os.close(self.wake_read)
        os.close(self.wake_write)

    def run(self) -> int:
        supervisor = self.supervisor
        while True:
            self.start_due()
            self.stop_if_asked()
            if supervisor.done():
                break
            self.wait(supervisor.wait_seconds(time.monotonic()))
        code, level, text = supervisor.outcome()
        logger.log(level, text)
        return code

    def stop_if_asked(self) -> None:
        if not self.signals or self.supervisor.stopping:
            return
        pids = self.supervisor.stop()
        logger.info("ClusterProcess: received %s, stopping %d workers", signal.Signals(self.signals[0]).name, len(pids))
        for pid in pids:
            os.kill(pid, signal.SIGTERM)

    def start_due(self) -> None:
        for index in self.supervisor.due(time.monotonic()):
            if self.signals:  # stop forking: the loop stops the workers already started
                return
            process = self.worker(index, self.supervisor.slots[index].restarts)
            # A signal that reaches a child between fork() and Python's after-fork reset is dropped by CPython, so
            # the child would never stop. Blocked around the fork, it stays pending in both processes instead: the
            # cluster handles it once the worker is known to the supervisor, the worker once it unblocks in
            # _worker_main.
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
            try:
                process.start()
                assert process.pid is not None
                self.processes[index] = process
                self.supervisor.started(index, process.pid, time.monotonic())
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            logger.info("Worker[%d] started (pid %d)", index, process.pid)

    def wait(self, timeout: float | None) -> None:
        """Until a worker ends, a signal arrives or `timeout` passes."""
        sentinels = [process.sentinel for process in self.processes.values()]
        ready = set(multiprocessing.connection.wait([*sentinels, self.wake_read], timeout))
        if self.wake_read in ready:
            self.drain()
        self.stop_if_asked()  # first: a worker that Ctrl-C's SIGINT killed as it started was asked to stop
        for index, process in list(self.processes.items()):
            if process.sentinel in ready:
                del self.processes[index]
                process.join()
                assert process.exitcode is not None
                level, text = self.supervisor.ended(index, process.exitcode, time.monotonic())
                logger.log(level, text)
