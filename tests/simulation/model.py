"""What both kinds of simulated worker share: what a task does when run, and the record of each run."""

from __future__ import annotations

from dataclasses import dataclass

from scaler.core.scheduler.sessions import WorkerSession

OK, RAISES, CRASHES, CRASHES_ONCE = 0, 1, 2, 3  # what a task does when run
TICK_MS = 100


class SimulationError(AssertionError):
    pass


@dataclass
class Run:
    peer: bytes
    session: WorkerSession | None  # the scheduler's session the task was dispatched to
    crashed: bool = False
    failed: bool = False  # it ended error or timed out: the scheduler may run it again (retries)


@dataclass
class WorkTask:
    task_id: int
    function_id: int
    refs: tuple[int, ...]
    payload: bytes
    session: WorkerSession | None
    run: Run | None = None
    timeout_ms: int = 0
    flags: int = 0


def needs(task: WorkTask, object_id: int) -> bool:
    return object_id == task.function_id or object_id in task.refs


def behaviour(payload: bytes) -> tuple[int, int]:
    duration, outcome = payload.split(b":")
    return int(duration), int(outcome)
