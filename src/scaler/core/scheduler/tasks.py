"""Tasks as the scheduler holds them, and the one table of their legal state changes.

A task lives in the scheduler from its submission until it ends; then it is forgotten (its result, if other
tasks need it, lives on as an object). Pure; no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scaler.core.common import InvariantError as InvariantError
from scaler.protocol.records import DEFAULT_OPTIONS, Payload, TaskOptions

if TYPE_CHECKING:
    from scaler.core.scheduler.needs import Need
    from scaler.core.scheduler.sessions import ClientSession, WorkerSession


class TaskState:
    """A task's state; plain ints (the hot path hashes them), names in STATE_NAMES."""

    WAITING = 0  # some argument is the result of a task that has not finished
    QUEUED = 1  # ready to run, in the scheduler's ready queue
    ASSIGNED = 2  # sent to a worker (queued there or running)
    CANCELING = 3  # assigned, and the worker was asked to cancel it
    ENDED = 4  # finished one way or another; the record is being dropped


class TaskEvent:
    READY = 0  # every awaited result arrived
    ASSIGN = 1  # placement gave it to a worker
    REQUEUE = 2  # its worker gave it back or was lost: run it elsewhere
    CANCEL_REMOTE = 3  # cancel requested while a worker holds it
    END = 4  # result, error, cancel, failure


STATE_NAMES = {v: k for k, v in vars(TaskState).items() if not k.startswith("_")}
EVENT_NAMES = {v: k for k, v in vars(TaskEvent).items() if not k.startswith("_")}
S, E = TaskState, TaskEvent

# (state, event) -> next state. Anything not listed is a bug in the caller, reported as InvariantError.
TRANSITIONS: dict[tuple[int, int], int] = {
    (S.WAITING, E.READY): S.QUEUED,
    (S.WAITING, E.END): S.ENDED,
    (S.QUEUED, E.ASSIGN): S.ASSIGNED,
    (S.QUEUED, E.END): S.ENDED,
    (S.ASSIGNED, E.REQUEUE): S.QUEUED,
    (S.ASSIGNED, E.CANCEL_REMOTE): S.CANCELING,
    (S.ASSIGNED, E.END): S.ENDED,
    (S.CANCELING, E.END): S.ENDED,
}

# The same table indexed [state][event] (None: no transition), for SchedulerCore._move: no tuple built per move.
TRANSITION_TABLE: list[list[int | None]] = [
    [TRANSITIONS.get((state, event)) for event in range(len(EVENT_NAMES))] for state in range(len(STATE_NAMES))
]


class Task:
    __slots__ = (
        "arg_refs",
        "attempts",
        "client",
        "dependents",
        "failures",
        "flags",
        "function_id",
        "keywords",
        "need",
        "options",
        "payloads",
        "priority",
        "started",
        "state",
        "task_id",
        "waiting_on",
        "worker",
    )

    def __init__(
        self,
        task_id: int,
        client: ClientSession,
        function_id: int,
        flags: int,
        arg_refs: tuple[int, ...],
        keywords: tuple[str, ...] | None,
        payloads: tuple[Payload, ...],
        need: Need,
        options: TaskOptions = DEFAULT_OPTIONS,
    ) -> None:
        self.task_id = task_id
        self.client = client
        self.function_id = function_id
        self.flags = flags
        self.arg_refs = arg_refs
        self.keywords = keywords
        self.payloads = payloads
        self.need = need  # the capabilities it requires, and the ready queue it waits in (scaler.core.scheduler.needs)
        self.state: int = TaskState.WAITING
        self.worker: WorkerSession | None = None
        self.attempts = 0  # runs charged because its worker was lost or crashed while it may have been running
        self.failures = 0  # runs that failed (error, timed out, over memory) and were retried: options[1] at most
        self.options = options  # (timeout in ms or 0, retries, priority), shared by the tasks that have the same
        self.priority = options[2]
        self.started = False  # its worker said it may have started it (tasksStarted); cleared when it leaves it
        self.waiting_on = 0
        self.dependents: list[Task] | None = None

    def move(self, event: int) -> None:
        new = TRANSITIONS.get((self.state, event))
        if new is None:
            raise self.no_transition(event)
        if new == TaskState.QUEUED:
            self.started = False
        self.state = new

    def no_transition(self, event: int) -> InvariantError:
        """The error for `event` in a state that has no transition on it."""
        state, name = STATE_NAMES.get(self.state), EVENT_NAMES.get(event)
        return InvariantError(f"task {self.task_id:#x}: no transition from {state} on {name}")

    def references(self) -> tuple[int, ...]:
        """Every object or task id this task needs, each once: its function, then its non-inline arguments in order.

        The hot path of every task (linked once, released once): the usual shapes (no, one or two references
        besides the function, all distinct) build one small tuple, without a set or a loop."""
        function_id, refs = self.function_id, self.arg_refs
        count = len(refs)
        if count == 2:
            a, b = refs
            if a and b and a != b and a != function_id and b != function_id:
                return (function_id, a, b)
        elif count == 1:
            a = refs[0]
            return (function_id, a) if a and a != function_id else (function_id,)
        elif count == 0:
            return (function_id,)
        return tuple(dict.fromkeys((function_id, *filter(None, refs))))

    def __repr__(self) -> str:
        where = f" on {self.worker.name}" if self.worker is not None else ""
        started = " started" if self.started else ""
        return f"<Task {self.task_id:#x} {STATE_NAMES.get(self.state)}{where}{started} attempts={self.attempts}>"
