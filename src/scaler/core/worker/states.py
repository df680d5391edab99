"""What a worker agent holds: its tasks and its processors, each with its states and the one table of their legal
changes. Any other change is an InvariantError (a bug in the agent, never a peer's fault).

Pure; no I/O.
"""

from __future__ import annotations

import enum

from scaler.core.common import InvariantError
from scaler.protocol.records import Payload


class TaskState(enum.IntEnum):
    QUEUED = 0  # in the agent's queue, waiting for a processor
    IN_PROCESSOR = 1  # handed to a processor (in its window): waiting there, running, or waiting on nested tasks
    GONE = 2  # ended, given back or dropped: the agent forgot it (a queue may still hold it; it is skipped)


class TaskStep(enum.IntEnum):
    TO_PROCESSOR = 0  # put in a processor's window
    BACK = 1  # back to the queue: its processor blocked before starting it, or died
    LEAVE = 2  # ended (a result, a cancel, a crash), given back to the scheduler, or dropped with its session


TASK_TRANSITIONS: dict[tuple[TaskState, TaskStep], TaskState] = {
    (TaskState.QUEUED, TaskStep.TO_PROCESSOR): TaskState.IN_PROCESSOR,
    (TaskState.QUEUED, TaskStep.LEAVE): TaskState.GONE,
    (TaskState.IN_PROCESSOR, TaskStep.BACK): TaskState.QUEUED,
    (TaskState.IN_PROCESSOR, TaskStep.LEAVE): TaskState.GONE,
}


class AgentTask:
    __slots__ = (
        "arg_refs",
        "deadline",
        "flags",
        "function_id",
        "keywords",
        "payloads",
        "processor",
        "state",
        "task_id",
        "timeout_ms",
    )

    def __init__(
        self,
        task_id: int,
        function_id: int,
        flags: int,
        arg_refs: tuple[int, ...],
        keywords: tuple[str, ...] | None,
        payloads: tuple[Payload, ...],
        timeout_ms: int = 0,
    ) -> None:
        self.task_id = task_id
        self.function_id = function_id
        self.flags = flags
        self.arg_refs = arg_refs
        self.keywords = keywords
        self.payloads = payloads
        self.state = TaskState.QUEUED
        self.processor = -1  # the processor it was given to, while IN_PROCESSOR
        self.timeout_ms = timeout_ms  # 0: none. A timed task runs alone in its processor's window (see AgentCore)
        self.deadline = 0.0  # while IN_PROCESSOR with a timeout: when its processor is stopped

    def move(self, step: TaskStep) -> None:
        after = TASK_TRANSITIONS.get((self.state, step))
        if after is None:
            raise InvariantError(f"task {self.task_id:#x} cannot {step.name} while {self.state.name}")
        self.state = after

    def __repr__(self) -> str:
        return f"<AgentTask {self.task_id:#x} {self.state.name}>"


class ProcessorState(enum.Enum):
    STARTING = "starting"  # forked, not yet Ready: it is given nothing
    READY = "ready"  # runs the tasks of its window, one after another
    BLOCKED = "blocked"  # its running task waits on nested tasks (it may run tasks inside that wait: help)


class ProcessorStep(enum.Enum):
    READY = "ready"  # it said Ready
    BLOCKED = "blocked"  # it said Blocked (again, when a task run inside a wait blocks in turn)
    UNBLOCKED = "unblocked"  # it said Unblocked: the wait ended


PROCESSOR_TRANSITIONS: dict[tuple[ProcessorState, ProcessorStep], ProcessorState] = {
    (ProcessorState.STARTING, ProcessorStep.READY): ProcessorState.READY,
    (ProcessorState.READY, ProcessorStep.BLOCKED): ProcessorState.BLOCKED,
    (ProcessorState.BLOCKED, ProcessorStep.BLOCKED): ProcessorState.BLOCKED,
    (ProcessorState.BLOCKED, ProcessorStep.UNBLOCKED): ProcessorState.READY,
}


class ProcessorSlot:
    __slots__ = ("epoch", "objects", "processor", "state", "timed", "waiting", "window")

    def __init__(self, processor: int) -> None:
        self.processor = processor
        self.state = ProcessorState.STARTING
        self.window: dict[int, AgentTask] = {}  # tasks sent to it, in order; the first one is running
        self.objects: set[int] = set()
        self.epoch = 0  # the number of its latest Blocked
        self.waiting: set[int] = set()  # while BLOCKED: its started tasks, all waiting on nested tasks
        self.timed = 0  # the task with a timeout in its window (it is given nothing else meanwhile), or 0

    def move(self, step: ProcessorStep) -> None:
        after = PROCESSOR_TRANSITIONS.get((self.state, step))
        if after is None:
            raise InvariantError(f"processor {self.processor} cannot become {step.value} while {self.state.value}")
        self.state = after

    def idle_in_wait(self) -> bool:
        """Blocked, and holding nothing but its waiting tasks: it can run tasks inside its wait (help)."""
        return self.state == ProcessorState.BLOCKED and all(task_id in self.waiting for task_id in self.window)

    def __repr__(self) -> str:
        return f"<Processor {self.processor} {self.state.value} window={len(self.window)}>"
