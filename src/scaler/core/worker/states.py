"""What a worker agent holds: its session with the scheduler, its tasks and its processors, each with its states and
the one table of their legal changes. Any other change is an InvariantError (a bug in the agent, never a peer's fault).

Pure; no I/O.
"""

from __future__ import annotations

import enum

from scaler.core.common import InvariantError
from scaler.protocol.records import ID_PREFIX_SHIFT, Payload


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
_QUEUED = TaskState.QUEUED  # (a name: an enum member read through its class costs a lookup, once per task here)


class AgentTask:
    __slots__ = (
        "arg_refs",
        "deadline",
        "flags",
        "function_id",
        "keywords",
        "owner",
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
        self.owner = task_id >> ID_PREFIX_SHIFT  # the client it is queued for (fair.owner_of_task)
        self.function_id = function_id
        self.flags = flags
        self.arg_refs = arg_refs
        self.keywords = keywords
        self.payloads = payloads
        self.state = _QUEUED
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


class SessionState(enum.Enum):
    NEW = "new"  # not started: nothing said to the scheduler yet
    GREETING = "greeting"  # a hello went, no welcome came yet: no session, so nothing of one is held
    CONNECTED = "connected"  # welcomed: in a session
    RESUMING = "resuming"  # in a session whose connection closed and was made again: the next heartbeat says so
    LEAVING = "leaving"  # stopped in a session: its last messages (a goodbye, the last results) are worth a wait
    STOPPED = "stopped"  # stopped with no session to tell (never welcomed, or the scheduler is going)


class SessionStep(enum.Enum):
    HELLO = "hello"  # a hello went: at the start, or again (no welcome came for a while; the session was lost)
    WELCOME = "welcome"  # the scheduler welcomed a hello (a second welcome answers a later hello: a new session)
    LOST = "lost"  # the session is surely gone: the scheduler says so, messages were lost, silence, no connection
    RECONNECTED = "reconnected"  # the connection closed and was made again
    RESUMED = "resumed"  # the heartbeat that says so went
    BYE = "bye"  # the scheduler is going (Shutdown): there is nobody left to tell anything
    STOP = "stop"  # the agent stops: asked to, refused, or giving up


_NEW, _GREETING, _CONNECTED, _RESUMING = (
    SessionState.NEW,
    SessionState.GREETING,
    SessionState.CONNECTED,
    SessionState.RESUMING,
)
SESSION_TRANSITIONS: dict[tuple[SessionState, SessionStep], SessionState] = {
    (_NEW, SessionStep.HELLO): _GREETING,
    (_GREETING, SessionStep.HELLO): _GREETING,
    (_GREETING, SessionStep.WELCOME): _CONNECTED,
    (_CONNECTED, SessionStep.WELCOME): _CONNECTED,
    (_RESUMING, SessionStep.WELCOME): _RESUMING,  # the reset came after the hello of the new session too
    (_CONNECTED, SessionStep.LOST): _GREETING,  # (its hello follows at once)
    (_RESUMING, SessionStep.LOST): _GREETING,
    (_CONNECTED, SessionStep.RECONNECTED): _RESUMING,
    (_RESUMING, SessionStep.RECONNECTED): _RESUMING,
    (_RESUMING, SessionStep.RESUMED): _CONNECTED,
    **{(state, SessionStep.BYE): SessionState.STOPPED for state in (_NEW, _GREETING, _CONNECTED, _RESUMING)},
    (_NEW, SessionStep.STOP): SessionState.STOPPED,
    (_GREETING, SessionStep.STOP): SessionState.STOPPED,
    (_CONNECTED, SessionStep.STOP): SessionState.LEAVING,
    (_RESUMING, SessionStep.STOP): SessionState.LEAVING,
}
IN_SESSION = frozenset({_CONNECTED, _RESUMING, SessionState.LEAVING})  # welcomed, and not lost since
ENDED = frozenset({SessionState.LEAVING, SessionState.STOPPED})  # the agent stopped: no state changes any more
