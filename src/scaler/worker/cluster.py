"""A cluster: N worker processes on this machine, started and stopped together (scaler_cluster)."""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys

from scaler.core.worker.agent import AgentConfig
from scaler.io.processes import die_with_parent, hostname, setup_logging
from scaler.security.keys import PeerKeys
from scaler.worker.agent import run_worker

logger = logging.getLogger(__name__)
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _worker_main(
    address: str,
    config: AgentConfig,
    event_loop: str,
    log_level: str,
    log_paths: tuple[str, ...],
    keys: PeerKeys | None,
) -> None:
    # Forked with SIGINT/SIGTERM blocked (see run_cluster): drop the cluster's handlers first, then let a signal
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
    event_loop: str = "builtin",
    log_level: str = "INFO",
    log_paths: tuple[str, ...] = ("/dev/stdout",),
    keys: PeerKeys | None = None,
) -> int:
    """Start n_workers workers and wait for all of them to end. SIGINT/SIGTERM stop them gracefully. `keys`: the
    worker keys for a scheduler that requires keys."""
    logger.info(
        "ClusterProcess: starting %d workers, heartbeat_interval_seconds=%g, queue_capacity=%d, event_loop=%s%s",
        n_workers,
        config.heartbeat_interval_seconds,
        config.queue_capacity,
        event_loop,
        f", worker key {keys.source}" if keys is not None else "",
    )
    workers: list[multiprocessing.process.BaseProcess] = []
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        logger.info("ClusterProcess: received %s, stopping %d workers", signal.Signals(signum).name, len(workers))
        _terminate(workers)

    # Before the first fork: a signal that arrives while workers start must stop the ones already started.
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    context = multiprocessing.get_context("fork")
    for index in range(n_workers):
        if stopping:
            break
        worker_config = dataclasses.replace(config, name=f"{config.name}-{os.getpid()}-{index}")
        process = context.Process(
            target=_worker_main,
            args=(address, worker_config, event_loop, log_level, log_paths, keys),
            name=f"scaler-worker-{index}",
        )
        # A signal that reaches a child between fork() and Python's after-fork reset is dropped by CPython, so
        # the child would never stop. Blocked around the fork, it stays pending in both processes instead: the
        # cluster handles it once the worker is in `workers`, the worker once it unblocks in _worker_main.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            process.start()
            workers.append(process)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        logger.info("Worker[%d] started (pid %d)", index, process.pid)
    if stopping:  # a worker started after the signal was handled never heard of it
        _terminate(workers)
    remaining: dict[int, int] = {process.sentinel: index for index, process in enumerate(workers)}
    while remaining:
        for sentinel in multiprocessing.connection.wait(list(remaining)):
            index = remaining.pop(int(sentinel))  # type: ignore[arg-type]
            workers[index].join()
            logger.info("Worker[%d] ended (exit code %s)", index, workers[index].exitcode)
    failed = sum(1 for process in workers if process.exitcode not in (0, None))
    if workers and failed == len(workers):
        logger.error("ClusterProcess: every worker failed")
        return 1
    logger.info("ClusterProcess: all workers ended")
    return 0


def _terminate(workers: list[multiprocessing.process.BaseProcess]) -> None:
    for process in workers:
        if process.is_alive() and process.pid is not None:
            os.kill(process.pid, signal.SIGTERM)
