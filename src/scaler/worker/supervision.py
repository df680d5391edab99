"""What scaler_cluster does about its workers: which to start and when, which to restart after they end and after
what back-off, what to say about each end, and the cluster's exit code.

Pure: it forks nothing, sends no signal, reads no clock (time arrives as `now`) and logs nothing (it returns what
to log); worker/cluster.py does all that.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
from enum import Enum


@dataclasses.dataclass(frozen=True)
class RestartPolicy:
    """A worker that crashed starts again after `first_delay_seconds`; each crash soon after its start doubles the
    wait, up to `max_delay_seconds`; a worker that lived `healthy_after_seconds` starts the count afresh."""

    first_delay_seconds: float = 1.0
    max_delay_seconds: float = 60.0
    healthy_after_seconds: float = 60.0

    def next_delay(self, previous: float, lived: float) -> float:
        """The wait before a restart, given the previous wait (0: none yet) and how long the worker lived."""
        if previous <= 0 or lived >= self.healthy_after_seconds:
            return self.first_delay_seconds
        return min(previous * 2, self.max_delay_seconds)


class End(Enum):
    NORMAL = "normal"  # exit 0: stopped when the scheduler said so, or on a signal it handled
    ASKED = "asked"  # killed by a stop signal (the cluster's SIGTERM, Ctrl-C's SIGINT) before it could handle it
    GAVE_UP = "gave up"  # exit 1: stopped on an error it logged, which a new worker would meet again
    CRASHED = "crashed"  # killed by a signal nobody here sent (kill -9, the OOM killer, SIGSEGV), or another exit code


def classify(exitcode: int, asked: bool) -> End:
    """How a worker ended: `exitcode` as multiprocessing reports it (-N for signal N); `asked`: the cluster is stopping
    and had sent it SIGTERM. A worker handles SIGTERM and SIGINT once its event loop runs (it then exits 0); one still
    starting dies of them, and that is no failure when the cluster is stopping too.

    Exit code 1 is what run_worker returns when the agent stops itself on an error it logged at ERROR: the scheduler
    refused it (wrong keys, another protocol version), the scheduler was silent past --death-timeout-seconds, its
    processors kept dying while starting; and what Python exits with on an exception that escaped the agent (one
    raised while starting: a bad address, say). A new worker would meet the same error, so none is started."""
    if exitcode == 0:
        return End.NORMAL
    if asked and exitcode in (-signal.SIGTERM, -signal.SIGINT):
        return End.ASKED
    if exitcode == 1:
        return End.GAVE_UP
    return End.CRASHED


def describe(exitcode: int) -> str:
    """'was killed by SIGKILL', 'exited with code 3'."""
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by {name}"
    return f"exited with code {exitcode}"


@dataclasses.dataclass
class Slot:
    """One of the cluster's N workers, across its restarts."""

    index: int
    pid: int | None = None  # the running worker's, None between workers
    started_at: float = 0.0
    start_at: float | None = 0.0  # when to start a worker in this slot next; None: none to start
    delay: float = 0.0  # the last back-off waited
    restarts: int = 0
    asked: bool = False  # the cluster sent the running worker SIGTERM
    failed: bool = False  # how the last worker here ended


class Supervisor:
    """The cluster's N workers. The shell asks `due(now)` which to start, reports `started()` and `ended()`, calls
    `stop()` on SIGINT/SIGTERM, waits until `next_start()` or a worker's end, and stops once `done()`."""

    def __init__(self, n_workers: int, policy: RestartPolicy | None = None) -> None:
        self.policy = policy or RestartPolicy()
        self.slots = [Slot(index) for index in range(n_workers)]
        self.stopping = False

    def due(self, now: float) -> list[int]:
        """The slots where a worker must start now."""
        if self.stopping:
            return []
        return [s.index for s in self.slots if s.pid is None and s.start_at is not None and s.start_at <= now]

    def next_start(self) -> float | None:
        """When the next worker is due to start; None when none is waiting."""
        if self.stopping:
            return None
        return min((s.start_at for s in self.slots if s.pid is None and s.start_at is not None), default=None)

    def started(self, index: int, pid: int, now: float) -> None:
        slot = self.slots[index]
        slot.pid, slot.started_at, slot.start_at, slot.asked = pid, now, None, False

    def stop(self) -> list[int]:
        """Stop: no worker starts any more (a restart waiting for its back-off is dropped); returns the pids to send
        SIGTERM to."""
        self.stopping = True
        pids = []
        for slot in self.slots:
            slot.start_at = None
            if slot.pid is not None:
                slot.asked = True
                pids.append(slot.pid)
            else:
                slot.failed = False  # dropped, not failed: its crash was told when it happened
        return pids

    def ended(self, index: int, exitcode: int, now: float) -> tuple[int, str]:
        """A worker ended with `exitcode` (-N: signal N): returns what to log (level, text); a restart is then due
        at next_start()."""
        slot = self.slots[index]
        pid, lived, slot.pid = slot.pid, now - slot.started_at, None
        end = classify(exitcode, slot.asked)
        slot.failed = end in (End.GAVE_UP, End.CRASHED)
        if end == End.NORMAL:
            return logging.INFO, f"Worker[{index}] ended (exit code 0)"
        if end == End.ASKED:
            return (
                logging.INFO,
                f"Worker[{index}] ended (killed by {signal.Signals(-exitcode).name} as the cluster stops)",
            )
        if end == End.GAVE_UP:
            return logging.WARNING, f"Worker[{index}] ended (exit code 1); not restarted: it stopped on an error"
        said = f"Worker[{index}] (pid {pid}) {describe(exitcode)}"
        if self.stopping:
            return logging.WARNING, f"{said}; not restarted: the cluster is stopping"
        slot.delay = self.policy.next_delay(slot.delay, lived)
        slot.restarts += 1
        slot.start_at = now + slot.delay
        return logging.WARNING, f"{said}; restarting it in {slot.delay:.1f}s (restart {slot.restarts})"

    def running(self) -> list[int]:
        return [s.pid for s in self.slots if s.pid is not None]

    def done(self) -> bool:
        return not self.running() and self.next_start() is None

    def outcome(self) -> tuple[int, int, str]:
        """(exit code, log level, text) once done(): 1 when every worker failed (crashed, or gave up on an error)."""
        if self.slots and all(s.failed for s in self.slots):
            return 1, logging.ERROR, "ClusterProcess: every worker failed"
        return 0, logging.INFO, "ClusterProcess: all workers ended"

    def wait_seconds(self, now: float) -> float | None:
        """How long the shell may wait for a worker's end before a start is due; None: as long as it takes."""
        start = self.next_start()
        return None if start is None else max(0.0, start - now)
