"""Messages between a worker's agent and its processors (internal to the Python worker, not the wire protocol).

Records only; scaler.worker.pipe_codec encodes them (a pickled header plus raw payload frames).
"""

from __future__ import annotations

from dataclasses import dataclass

from scaler.protocol.records import Payload, TaskOutput

# One task for a processor: (task id, function object id, flags, argument refs, keywords or None).
ProcessorTask = tuple[int, int, int, tuple[int, ...], "tuple[str, ...] | None"]


# ---------------------------------------------------------------------------------------------- agent -> processor
@dataclass(slots=True)
class RunTasks:
    """Objects first (stored before anything runs), then tasks, run in order. Payloads: object payloads, then
    every inline argument in task order."""

    object_ids: list[int]
    tasks: list[ProcessorTask]
    payloads: list[Payload]
    # Non-zero: help for the processor's blocked wait number `help_epoch` (see Blocked). The processor runs these
    # tasks inside that wait, while it lasts; what is left when the wait ends runs after the waiting task, in order.
    help_epoch: int = 0


@dataclass(slots=True)
class DropObjects:
    object_ids: list[int]


@dataclass(slots=True)
class Discard:
    """Forget these tasks if they have not started (the agent gives them to another processor, back to the
    scheduler, or cancels them). With confirm, the processor answers Discarded."""

    task_ids: list[int]
    confirm: bool = False


@dataclass(slots=True)
class Resume:
    """Answer to Unblocked: every Discard for the blocked time was sent before this."""


@dataclass(slots=True)
class Exit:
    reason: str = ""


# ---------------------------------------------------------------------------------------------- processor -> agent
@dataclass(slots=True)
class Ready:
    pid: int


@dataclass(slots=True)
class Results:
    task_ids: list[int]
    statuses: bytes
    durations_us: list[int]
    peak_memory: list[int]
    payloads: list[Payload]
    cpu_times_us: list[int] | None = None  # when some task of the batch was profiled


# Pieces of text tasks wrote, in order (streams: OUTPUT_STDOUT, OUTPUT_STDERR, OUTPUT_ERROR, one per piece): the
# record the agent sends on to the scheduler (with the pieces of the tasks it still holds). A task's pieces come
# before its result; those of a flagged task (FLAG_STREAM_OUTPUT) also while it runs.
Output = TaskOutput


@dataclass(slots=True)
class Blocked:
    """The running task waits on nested tasks; results of the tasks before it were sent before this, and the
    processor forgot every task it had not started. `epoch` numbers the processor's Blocked messages (1, 2, ...);
    `waiting` lists the tasks it started and has not finished: the waiting one, and the ones below it when the
    waiting task runs inside another task's wait (help)."""

    epoch: int
    waiting: list[int]


@dataclass(slots=True)
class Unblocked:
    pass


@dataclass(slots=True)
class Discarded:
    """Answer to Discard(confirm=True): `removed` never started and never will; the rest of `requested` had
    started (or were unknown)."""

    removed: list[int]
    requested: list[int]


ToProcessor = RunTasks | DropObjects | Discard | Resume | Exit
FromProcessor = Ready | Results | Blocked | Unblocked | Discarded | Output
