"""The protocol's messages as Python records: one small class per member of scaler.capnp's `Message` union, the
enums and constants of the schema, and which messages each role accepts.

Pure data; no Cap'n Proto, no sockets: the cores import this, never the codec (scaler.protocol.codec turns records
into frames and back; scaler.protocol.messages gathers everything for the shells).
"""

from __future__ import annotations

import enum
from dataclasses import field
from typing import NamedTuple, Protocol, Union

from scaler.core.slotted import slotted

PROTOCOL_VERSION = 1
ID_PREFIX_SHIFT = 40
ID_COUNTER_MASK = (1 << ID_PREFIX_SHIFT) - 1
MAX_ID_PREFIX = (1 << 24) - 1

FLAG_PROFILING = 1
FLAG_SILENT = 2
FLAG_STREAM_OUTPUT = 4
FLAG_SHARED_ARGUMENTS = 8  # Python payloads: every payload is tagged, some refer to shared memory (scaler.shm)
FLAG_REPORT_END = 16  # with FLAG_SILENT: the client is told the task ended all the same (status, no payload): progress
FLAG_SHARED_RESULT = 32  # Python payloads: the result may come back by shared memory (scaler.shm; read by the client)

# TaskOutput.streams
OUTPUT_STDOUT = 1
OUTPUT_STDERR = 2
OUTPUT_ERROR = 3  # the text of the exception a task raised (worker -> scheduler only, before its result)
NO_NAME = 0xFFFFFFFF  # TaskEvents.workers: the task ended while no worker held it

# What each role accepts; anything else is refused before its fields are read.
ACCEPTED_BY_SCHEDULER = frozenset(
    {
        "hello",
        "heartbeat",
        "submitTasks",
        "taskResults",
        "cancelTasks",
        "putObjects",
        "freeObjects",
        "balanceResponse",
        "disconnect",
        "shutdownRequest",
        "tasksStarted",
        "taskOutput",
        "managerReport",
        "explainTasks",
    }
)
ACCEPTED_BY_WORKER = frozenset(
    {
        "welcome",
        "refused",
        "heartbeatEcho",
        "dispatchTasks",
        "cancelTasks",
        "putObjects",
        "freeObjects",
        "balanceRequest",
        "shutdown",
        "error",
    }
)
ACCEPTED_BY_CLIENT = frozenset(
    {"welcome", "refused", "heartbeatEcho", "taskResults", "shutdown", "error", "taskOutput", "taskExplanations"}
)
ACCEPTED_BY_MONITOR = frozenset({"welcome", "refused", "status"})
ACCEPTED_BY_MANAGER = frozenset({"welcome", "refused", "heartbeatEcho", "scaleUnits", "shutdown", "error"})


class Payload(Protocol):
    """Anything ZeroMQ can send as a frame: bytes, memoryview, zmq.Frame."""

    def __len__(self) -> int: ...


class PeerKind(enum.IntEnum):
    CLIENT = 0
    WORKER = 1
    MONITOR = 2  # on the monitor address only
    MANAGER = 3  # a worker manager (docs/protocol.md section 8, Worker managers)


class TaskStatus(enum.IntEnum):
    SUCCESS = 0
    ERROR = 1
    CANCELED = 2
    CRASHED = 3
    FAILED = 4
    TIMED_OUT = 5
    OVER_MEMORY = 6


# A task that ended with one of these may run again if its submitter asked for retries (Client.options).
RETRIABLE_STATUSES = frozenset({TaskStatus.ERROR, TaskStatus.TIMED_OUT, TaskStatus.OVER_MEMORY})


class ErrorCode(enum.IntEnum):
    MALFORMED = 0
    NOT_CONNECTED = 1
    BAD_REQUEST = 2
    PROTECTED = 3
    TOO_LARGE = 4


@slotted
class Hello:
    kind: PeerKind
    name: str
    hostname: str = ""
    pid: int = 0
    heartbeat_interval_ms: int = 2000
    queue_capacity: int = 0
    protocol_version: int = PROTOCOL_VERSION
    capabilities: list[str] = field(default_factory=list)  # workers: what it offers (scaler.protocol.capabilities)
    unit: str = ""  # workers a worker manager started: the unit they belong to


@slotted
class Welcome:
    id_prefix: int
    scheduler_name: str = ""
    protected: bool = True
    peer_timeout_ms: int = 60_000
    protocol_version: int = PROTOCOL_VERSION
    max_payload_bytes: int = 0  # 0: no limit stated
    # To clients: the workers that may take tasks now (connected, not held back), their queue capacities added up.
    workers: int = 0
    worker_capacity: int = 0
    workers_stated: bool = False  # False: the two above say nothing (to workers and monitors; older schedulers)
    journaled: bool = False  # to clients: the scheduler keeps a journal and resumes this session after a restart


@slotted
class Refused:
    reason: str
    scheduler_protocol_version: int = PROTOCOL_VERSION
    key_problem: bool = False


@slotted
class Heartbeat:
    cpu_percent: float = 0.0
    rss_bytes: int = 0
    lag_us: int = 0
    queued: int = 0
    running: int = 0
    processor_cpu_percent: float = 0.0
    processor_rss_bytes: int = 0
    processors: int = 0
    blocked_processors: int = 0
    waiting_tasks: int = 0
    resumed: bool = False  # the first heartbeat on a connection made again (docs/protocol.md section 10)
    sent: int = 0  # with resumed: the peer's messages since its hello, heartbeats excluded


@slotted
class HeartbeatEcho:
    sent_at_us: int = 0
    resumed: bool = False  # the answer to a resumed heartbeat
    sent: int = 0  # with resumed: the scheduler's messages to that peer since its welcome, echoes excluded
    # The echo of a client's heartbeat: as in Welcome, counted now. Other echoes leave workers_stated False.
    workers: int = 0
    worker_capacity: int = 0
    workers_stated: bool = False
    recovered: bool = False  # with resumed: the scheduler restarted from its journal; send unfinished work again


@slotted
class TaskBatch:
    """n tasks as columns. `payloads` holds one frame per argument whose ref is 0, in order."""

    task_ids: list[int]
    function_ids: list[int]
    flags: bytes
    arg_counts: list[int]
    arg_refs: list[int]
    keywords: list[str] | None
    payloads: list[Payload]
    # Task options (Client.options), each a column over the tasks or None when every task has the default:
    timeouts_ms: list[int] | None = None  # stop the task after this long running; 0: no limit
    retries: bytes | None = None  # run a failed task again this many times
    priorities: list[int] | None = None  # among one client's ready tasks, higher first
    # Capability requirements: the batch's distinct requirements (each a list of capabilities), or None when no
    # task requires any; requirement_index: each task's index into them, or None: every task has requirements[0].
    requirements: list[list[str]] | None = None
    requirement_index: list[int] | None = None
    # submitTasks only: each task's idempotency key ("" = none), or None when no task has one (Client.options)
    idempotency_keys: list[str] | None = None

    def requirement_of(self, k: int) -> list[str] | None:
        """What task k of the batch requires (None: nothing)."""
        requirements = self.requirements
        if not requirements:
            return None
        index = self.requirement_index
        return requirements[index[k] if index is not None else 0]

    def options(self) -> list[TaskOptions] | None:
        """Each task's options, or None when every task has the defaults. Equal options are one shared tuple."""
        timeouts, retries, priorities = self.timeouts_ms, self.retries, self.priorities
        if timeouts is None and retries is None and priorities is None:
            return None
        n = len(self.task_ids)
        timeouts = timeouts if timeouts is not None else [0] * n
        retries = retries if retries is not None else bytes(n)
        priorities = priorities if priorities is not None else [0] * n
        if not len(timeouts) == len(retries) == len(priorities):  # the codecs check it; as zip(strict=True) did
            raise ValueError(
                f"task options: {len(timeouts)} timeouts, {len(retries)} retries, {len(priorities)} priorities"
            )
        rows = zip(timeouts, retries, priorities)
        shared: dict[tuple[int, int, int], TaskOptions] = {}
        return [shared.get(row) or shared.setdefault(row, TaskOptions._make(row)) for row in rows]

    def split(self) -> list[SplitTask]:
        """Each task as (id, function id, flags, argument refs, keywords or None, its inline payloads): a list, made
        in one call (a generator costs a resumption per task, and one more to end).

        Layouts of inline-only arguments are shared tuples (a million queued tasks share a handful)."""
        refs_all, payloads, keywords = self.arg_refs, self.payloads, self.keywords
        function_ids, flags, counts = self.function_ids, self.flags, self.arg_counts
        tasks: list[SplitTask] = []
        arg_pos = pay_pos = 0
        for k, task_id in enumerate(self.task_ids):
            count = counts[k]
            end = arg_pos + count
            refs = refs_all[arg_pos:end]
            kws = tuple(keywords[arg_pos:end]) if keywords is not None else None
            arg_pos = end
            if any(refs):
                inline = refs.count(0)
                layout = tuple(refs)
            else:  # inline_layout(count), without the call: once per task
                inline = count
                layout = _ZERO_LAYOUTS[count] if count < len(_ZERO_LAYOUTS) else tuple(refs)
            if kws is not None and not any(kws):
                kws = None
            tasks.append((task_id, function_ids[k], flags[k], layout, kws, tuple(payloads[pay_pos : pay_pos + inline])))
            pay_pos += inline
        return tasks


class TaskOptions(NamedTuple):
    """A task's options (Client.options), as the columns of submitTasks carry them. A tuple: equal options compare
    (and hash) equal, and one shared tuple serves every task that has them."""

    timeout_ms: int = 0  # stop the task after this long running; 0: no limit
    retries: int = 0  # run it again this many times after it failed
    priority: int = 0  # among one client's ready tasks, higher first


DEFAULT_OPTIONS = TaskOptions()
MAX_IDEMPOTENCY_KEY_BYTES = 1024  # in UTF-8: longer keys are refused (the scheduler keeps them with the results)
MAX_TIMEOUT_MS = 2**32 - 1
MAX_RETRIES = 255
PRIORITY_RANGE = (-(2**31), 2**31 - 1)

SplitTask = tuple[int, int, int, tuple[int, ...], "tuple[str, ...] | None", tuple[Payload, ...]]
_ZERO_LAYOUTS = [(0,) * n for n in range(64)]


def inline_layout(count: int) -> tuple[int, ...]:
    """The argument refs of a task whose `count` arguments all travel inline: (0,) * count, one shared tuple per
    small count (a million queued tasks share a handful)."""
    return _ZERO_LAYOUTS[count] if count < len(_ZERO_LAYOUTS) else (0,) * count


class SubmitTasks(TaskBatch):
    __slots__ = ()


class DispatchTasks(TaskBatch):
    __slots__ = ()


@slotted
class TaskResults:
    task_ids: list[int]
    statuses: bytes
    payloads: list[Payload]
    durations_us: list[int] | None = None
    peak_memory: list[int] | None = None
    cpu_times_us: list[int] | None = None


@slotted
class IdMessage:
    ids: list[int]


class CancelTasks(IdMessage):
    __slots__ = ()


class FreeObjects(IdMessage):
    __slots__ = ()


class BalanceRequest(IdMessage):
    __slots__ = ()


class BalanceResponse(IdMessage):
    __slots__ = ()


class ExplainTasks(IdMessage):
    """Client -> scheduler: why are these tasks of mine where they are? (at most MAX_EXPLAINED ids)"""

    __slots__ = ()


class TasksStarted(IdMessage):
    """Worker -> scheduler: these tasks were handed to a processor and may have started. Only such tasks are
    charged an attempt when their worker is lost."""

    __slots__ = ()


@slotted
class PutObjects:
    object_ids: list[int]
    payloads: list[Payload]
    names: list[str] | None = None


@slotted
class ReasonMessage:
    reason: str = ""


class Disconnect(ReasonMessage):
    __slots__ = ()


class ShutdownRequest(ReasonMessage):
    __slots__ = ()


@slotted
class Shutdown(ReasonMessage):
    """Scheduler -> client or worker: the scheduler is stopping. workers_stay: only the scheduler stops (a signal), and
    workers keep running, saying hello until a scheduler answers, and (sent to a client of a journaled scheduler) the
    client waits for it as after a lost connection: its session stays in the journal; False: the whole cluster ends
    (shutdownRequest), or the scheduler does not come back with the client's session."""

    workers_stay: bool = False


@slotted
class Error:
    code: ErrorCode
    message: str
    ids: list[int] = field(default_factory=list)


@slotted
class WorkerStatus:
    name: str
    agent_cpu_percent: float = 0.0
    agent_rss_bytes: int = 0
    cpu_percent: float = 0.0
    rss_bytes: int = 0
    free: int = 0
    sent: int = 0
    queued: int = 0
    lag_us: int = 0
    processors: int = 0
    blocked_processors: int = 0
    running: int = 0
    completed: int = 0
    waiting: int = 0
    held_back_ms: int = 0
    heartbeat_age_ms: int = 0
    capabilities: list[str] = field(default_factory=list)


@slotted
class ClientStatus:
    name: str
    tasks: int = 0  # unfinished tasks
    objects: int = 0
    completed: int = 0
    assigned: int = 0  # of tasks, those at workers (prefetched or running); tasks - assigned are queued

    @property
    def queued(self) -> int:
        """Its unfinished tasks not at a worker: waiting on their arguments or queued at the scheduler."""
        return max(0, self.tasks - self.assigned)


@slotted
class TaskOutput:
    """Worker -> scheduler -> client: pieces of text tasks wrote (see scaler.capnp's TaskOutput)."""

    task_ids: list[int]
    streams: bytes  # one OUTPUT_* per piece
    texts: list[str]


@slotted
class ManagerReport:
    """Worker manager -> scheduler: what it is and which units it runs (see scaler.capnp's ManagerReport)."""

    min_units: int = 0
    max_units: int = 1
    workers_per_unit: int = 1
    slots_per_worker: int = 1
    tier: int = 0
    idle_ms: int = 60_000
    start_timeout_ms: int = 600_000
    units: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    reason: str = ""


@slotted
class ScaleUnits:
    """Scheduler -> worker manager: units to start (named by the scheduler) and units to stop."""

    start: list[str] = field(default_factory=list)
    stop: list[str] = field(default_factory=list)
    reason: str = ""


MAX_EXPLAINED = 1024  # ids in one explainTasks


@slotted
class TaskExplanations:
    """Scheduler -> client: the answer to ExplainTasks, one text per id, in order."""

    task_ids: list[int]
    texts: list[str]


# The upper bounds of FunctionStatus.duration_buckets, in µs (a last bucket counts the longer ones).
DURATION_BOUNDS_US = (
    1_000,
    5_000,
    10_000,
    50_000,
    100_000,
    500_000,
    1_000_000,
    5_000_000,
    10_000_000,
    60_000_000,
    300_000_000,
)


@slotted
class FunctionStatus:
    name: str
    submitted: int = 0
    running: int = 0
    success: int = 0
    error: int = 0
    canceled: int = 0
    failed: int = 0  # failed, timed out or over memory
    duration_us: int = 0  # total run time of its tasks that ended with a result and a run time (profiled ones)
    timed_tasks: int = 0  # how many tasks duration_us sums
    duration_buckets: list[int] = field(default_factory=list)  # those tasks by run time: one count per
    # DURATION_BOUNDS_US and one past them; [] when none

    def buckets(self) -> list[int]:
        """duration_buckets, len(DURATION_BOUNDS_US) + 1 counts (zeros if none or not as many came)."""
        n = len(DURATION_BOUNDS_US) + 1
        return list(self.duration_buckets) if len(self.duration_buckets) == n else [0] * n


@slotted
class TaskEvents:
    """Task starts and ends since the previous status, as columns (see scaler.capnp's TaskEvents)."""

    task_ids: list[int] = field(default_factory=list)
    kinds: bytes = b""  # 0 started, 1 ended
    statuses: bytes = b""
    functions: list[int] = field(default_factory=list)  # index into names
    workers: list[int] = field(default_factory=list)  # index into names, NO_NAME for none
    times_us: list[int] = field(default_factory=list)
    durations_us: list[int] = field(default_factory=list)
    peak_memory: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    sample_every: int = 1
    dropped: int = 0


@slotted
class TaskFailure:
    task_id: int
    function: str
    worker: str
    status: int  # TaskStatus
    text: str
    time_us: int = 0


@slotted
class OutputRecord:
    task_id: int
    function: str
    worker: str
    stream: int  # OUTPUT_STDOUT or OUTPUT_STDERR
    text: str
    time_us: int = 0


@slotted
class DepartedWorker:
    name: str
    reason: str
    lost: bool
    time_us: int = 0


@slotted
class ManagerStatus:
    """A worker manager as the scheduler's scaling policy sees it (see scaler.capnp's ManagerStatus)."""

    name: str
    tier: int = 0
    capabilities: list[str] = field(default_factory=list)
    min_units: int = 0
    max_units: int = 0
    connected: int = 0
    draining: int = 0
    pending: int = 0
    oldest_pending_ms: int = 0
    failures: int = 0
    last_failure: str = ""
    retry_in_ms: int = 0


@slotted
class WaitingTasks:
    """Queued tasks of one requirement that no worker holds, and why."""

    capabilities: list[str]
    tasks: int
    reason: str


@slotted
class Status:
    scheduler_name: str = ""
    time_us: int = 0
    cpu_percent: float = 0.0
    rss_bytes: int = 0
    tasks_by_state: dict[str, int] = field(default_factory=dict)
    sent: dict[str, int] = field(default_factory=dict)
    received: dict[str, int] = field(default_factory=dict)
    workers: list[WorkerStatus] = field(default_factory=list)
    clients: list[ClientStatus] = field(default_factory=list)
    protected: bool = True
    dropped_messages: int = 0
    refused_peers: int = 0
    handler_errors: int = 0
    clock_us: int = 0  # the scheduler's own clock: the clock of the times in events, failures, outputs, departed
    functions: list[FunctionStatus] = field(default_factory=list)
    events: TaskEvents = field(default_factory=TaskEvents)
    failures: list[TaskFailure] = field(default_factory=list)
    outputs: list[OutputRecord] = field(default_factory=list)
    departed: list[DepartedWorker] = field(default_factory=list)
    withheld: str = ""  # why failures and outputs are empty for this monitor ("" if they are not withheld)
    managers: list[ManagerStatus] = field(default_factory=list)
    waiting: list[WaitingTasks] = field(default_factory=list)
    units_started: int = 0
    units_stopped: int = 0
    units_failed: int = 0
    started_us: int = 0  # when this scheduler process started (wall clock)
    recovered: str = ""  # what it restored from its journal at start ("" : nothing, or no journal)


# Union[...], not X | Y: this runs, and must run on Python 3.9 too (PyPy)
Message = Union[
    Hello,
    Welcome,
    Refused,
    Heartbeat,
    HeartbeatEcho,
    SubmitTasks,
    DispatchTasks,
    TaskResults,
    CancelTasks,
    PutObjects,
    FreeObjects,
    BalanceRequest,
    BalanceResponse,
    Disconnect,
    ShutdownRequest,
    Shutdown,
    Error,
    Status,
    TasksStarted,
    TaskOutput,
    ManagerReport,
    ScaleUnits,
    ExplainTasks,
    TaskExplanations,
]

# The union member name of each message class, as in scaler.capnp; also the name counters use.
MESSAGE_NAMES: dict[type, str] = {
    Hello: "hello",
    Welcome: "welcome",
    Refused: "refused",
    Heartbeat: "heartbeat",
    HeartbeatEcho: "heartbeatEcho",
    SubmitTasks: "submitTasks",
    DispatchTasks: "dispatchTasks",
    TaskResults: "taskResults",
    CancelTasks: "cancelTasks",
    PutObjects: "putObjects",
    FreeObjects: "freeObjects",
    BalanceRequest: "balanceRequest",
    BalanceResponse: "balanceResponse",
    Disconnect: "disconnect",
    ShutdownRequest: "shutdownRequest",
    Shutdown: "shutdown",
    Error: "error",
    Status: "status",
    TasksStarted: "tasksStarted",
    TaskOutput: "taskOutput",
    ManagerReport: "managerReport",
    ScaleUnits: "scaleUnits",
    ExplainTasks: "explainTasks",
    TaskExplanations: "taskExplanations",
}
