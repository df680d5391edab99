"""A second Cap'n Proto codec of the protocol, on pycapnp, for the tests only: the oracle that scaler.protocol.codec
(the one codec Scaler runs, pure Python) is checked against (ADR 0019). Every field goes through pycapnp's own
builder and reader, no shortcut, so that what it writes and reads is Cap'n Proto's reference implementation's.

The same contract as scaler.protocol.codec: `encode(message)` gives the frames (header first, then payloads);
`decode(frames, accept)` gives the record or raises ProtocolError. Needs pycapnp (the dev extra). No sockets here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import Any, TypeVar

import capnp

import scaler.protocol
from scaler.protocol import fieldnames
from scaler.protocol.columns import (
    check_u8,
    pack_i32,
    pack_u16,
    pack_u32,
    pack_u64,
    set_requirements,
    unpack_i32,
    unpack_u16,
    unpack_u32,
    unpack_u64,
)
from scaler.protocol.errors import ProtocolError, UnexpectedMessage
from scaler.protocol.frames import pack as pack_payloads
from scaler.protocol.frames import unpack as unpack_payloads
from scaler.protocol.records import (
    MESSAGE_NAMES,
    NO_NAME,
    OUTPUT_ERROR,
    OUTPUT_STDERR,
    OUTPUT_STDOUT,
    BalanceRequest,
    BalanceResponse,
    CancelTasks,
    ClientStatus,
    DepartedWorker,
    Disconnect,
    DispatchTasks,
    Error,
    ErrorCode,
    ExplainTasks,
    FreeObjects,
    FunctionStatus,
    Heartbeat,
    HeartbeatEcho,
    Hello,
    IdMessage,
    ManagerReport,
    ManagerStatus,
    Message,
    OutputRecord,
    Payload,
    PeerKind,
    PutObjects,
    ReasonMessage,
    Refused,
    ScaleUnits,
    Shutdown,
    ShutdownRequest,
    Status,
    SubmitTasks,
    TaskBatch,
    TaskEvents,
    TaskExplanations,
    TaskFailure,
    TaskOutput,
    TaskResults,
    TasksStarted,
    TaskStatus,
    WaitingTasks,
    Welcome,
    WorkerStatus,
)

_LITTLE_ENDIAN = sys.byteorder == "little"

# These bound what a hostile or broken peer can make us traverse: a few times the header's own size (a list of
# empty structs costs nothing on the wire but one word each to traverse), and a shallow nesting.
_TRAVERSAL_SLACK_WORDS = 1024
_NESTING_LIMIT = 16

capnp.remove_import_hook()
SCHEMA_PATH = os.path.join(os.path.dirname(os.path.abspath(scaler.protocol.__file__)), "scaler.capnp")
_schema: Any = capnp.load(SCHEMA_PATH)

_PEER_KIND_NAMES = {
    PeerKind.CLIENT: "client",
    PeerKind.WORKER: "worker",
    PeerKind.MONITOR: "monitor",
    PeerKind.MANAGER: "manager",
}
_PEER_KINDS = {name: kind for kind, name in _PEER_KIND_NAMES.items()}
_ERROR_CODE_NAMES = {
    ErrorCode.MALFORMED: "malformed",
    ErrorCode.NOT_CONNECTED: "notConnected",
    ErrorCode.BAD_REQUEST: "badRequest",
    ErrorCode.PROTECTED: "protected",
    ErrorCode.TOO_LARGE: "tooLarge",
}

_Batch = TypeVar("_Batch", bound=TaskBatch)
_LAST_STATUS = max(TaskStatus)
_EMPTY3 = (b"", b"", b"")


# ---------------------------------------------------------------------------------------------------- encoding
def encode(message: Message) -> list[Payload]:
    """The frames of `message`: its Cap'n Proto header, then its payload frames (not copied)."""
    root = _schema.Message.new_message()
    name = MESSAGE_NAMES[type(message)]
    body = root.init(name)
    payloads = _ENCODERS[name](body, message)
    return [root.to_bytes(), *payloads]


def _option_columns(m: TaskBatch) -> tuple[bytes | None, bytes | None, bytes | None]:
    return (
        None if m.timeouts_ms is None else pack_u32(m.timeouts_ms),
        None if m.retries is None else bytes(m.retries),
        None if m.priorities is None else pack_i32(m.priorities),
    )


def _enc_hello(b: Any, m: Hello) -> list[Payload]:
    b.protocolVersion = m.protocol_version
    b.kind = _PEER_KIND_NAMES[m.kind]
    b.name = m.name
    b.hostname = m.hostname
    b.pid = m.pid
    b.heartbeatIntervalMs = m.heartbeat_interval_ms
    b.queueCapacity = m.queue_capacity
    if m.capabilities:
        b.capabilities = m.capabilities
    b.unit = m.unit
    return []


def _enc_welcome(b: Any, m: Welcome) -> list[Payload]:
    b.protocolVersion = m.protocol_version
    b.idPrefix = m.id_prefix
    b.schedulerName = m.scheduler_name
    b.protected = m.protected
    b.peerTimeoutMs = m.peer_timeout_ms
    b.maxPayloadBytes = m.max_payload_bytes
    _set_workers(b, m)
    b.journaled = m.journaled
    return []


def _set_workers(b: Any, m: Welcome | HeartbeatEcho) -> None:
    b.workers = m.workers
    b.workerCapacity = m.worker_capacity
    b.workersStated = m.workers_stated


def _enc_refused(b: Any, m: Refused) -> list[Payload]:
    b.reason = m.reason
    b.schedulerProtocolVersion = m.scheduler_protocol_version
    b.keyProblem = m.key_problem
    return []


def _enc_heartbeat(b: Any, m: Heartbeat) -> list[Payload]:
    b.cpuPercent = m.cpu_percent
    b.rssBytes = m.rss_bytes
    b.lagUs = m.lag_us
    b.queued = m.queued
    b.running = m.running
    b.processorCpuPercent = m.processor_cpu_percent
    b.processorRssBytes = m.processor_rss_bytes
    b.processors = m.processors
    b.blockedProcessors = m.blocked_processors
    b.waitingTasks = m.waiting_tasks
    if m.resumed:
        b.resumed = True
        b.sent = m.sent
    return []


def _enc_echo(b: Any, m: HeartbeatEcho) -> list[Payload]:
    b.sentAtUs = m.sent_at_us
    if m.resumed:
        b.resumed = True
        b.sent = m.sent
    b.recovered = m.recovered
    _set_workers(b, m)
    return []


def _enc_tasks(b: Any, m: TaskBatch) -> list[Payload]:
    b.taskIds = pack_u64(m.task_ids)
    b.functionIds = pack_u64(m.function_ids)
    b.flags = bytes(m.flags)
    b.argCounts = pack_u16(m.arg_counts)
    b.argRefs = pack_u64(m.arg_refs)
    # The fields in the order scaler.protocol.codec sets them, so that one-segment headers are the same bytes: without
    # keywords (its direct writer) in slot order; with keywords the options before payloadSizes (the golden files')
    general = bool(m.keywords or m.idempotency_keys)  # (its general builder)
    frames = [] if general else _payload_frames(b, m.payloads)
    if m.keywords:
        b.keywords = m.keywords
    timeouts, retries, priorities = _option_columns(m)
    if timeouts is not None:
        b.timeoutsMs = timeouts
    if retries is not None:
        b.retries = retries
    if priorities is not None:
        b.priorities = priorities
    if general:
        frames = _payload_frames(b, m.payloads)
    if m.requirements:
        requirements = b.init("requirements", len(m.requirements))
        for i, required in enumerate(m.requirements):
            if required:
                requirements[i].capabilities = required
        if m.requirement_index is not None:
            b.requirementIndex = pack_u16(m.requirement_index)
    if m.idempotency_keys:
        b.idempotencyKeys = m.idempotency_keys
    return frames


def _payload_frames(b: Any, payloads: list[Payload]) -> list[Payload]:
    sizes, frames = pack_payloads(payloads)
    b.payloadSizes = pack_u64(sizes)
    return frames


def _enc_results(b: Any, m: TaskResults) -> list[Payload]:
    b.taskIds = pack_u64(m.task_ids)
    b.statuses = bytes(m.statuses)
    if m.durations_us is not None:
        b.durationsUs = pack_u64(m.durations_us)
    if m.peak_memory is not None:
        b.peakMemory = pack_u64(m.peak_memory)
    frames = _payload_frames(b, m.payloads)
    if m.cpu_times_us is not None:  # in slot order, after payloadSizes: the layout scaler.protocol.codec writes
        b.cpuTimesUs = pack_u64(m.cpu_times_us)
    return frames


def _enc_ids(b: Any, m: IdMessage) -> list[Payload]:
    b.ids = pack_u64(m.ids)
    return []


def _enc_objects(b: Any, m: PutObjects) -> list[Payload]:
    b.objectIds = pack_u64(m.object_ids)
    if m.names:
        b.names = m.names
    return _payload_frames(b, m.payloads)


def _enc_reason(b: Any, m: ReasonMessage) -> list[Payload]:
    b.reason = m.reason
    return []


def _enc_error(b: Any, m: Error) -> list[Payload]:
    b.code = _ERROR_CODE_NAMES[m.code]
    b.message = m.message
    b.ids = pack_u64(m.ids)
    return []


def _enc_status(b: Any, m: Status) -> list[Payload]:
    b.schedulerName = m.scheduler_name
    b.timeUs = m.time_us
    b.cpuPercent = m.cpu_percent
    b.rssBytes = m.rss_bytes
    b.protected = m.protected
    b.droppedMessages = m.dropped_messages
    b.refusedPeers = m.refused_peers
    b.handlerErrors = m.handler_errors
    b.withheld = m.withheld
    b.unitsStarted = m.units_started
    b.unitsStopped = m.units_stopped
    b.unitsFailed = m.units_failed
    b.startedUs = m.started_us
    b.recovered = m.recovered
    for column, counters in (("tasksByState", m.tasks_by_state), ("sent", m.sent), ("received", m.received)):
        out = b.init(column, len(counters))
        for i, (key, value) in enumerate(counters.items()):
            out[i].name = key
            out[i].value = value
    workers = b.init("workers", len(m.workers))
    for i, w in enumerate(m.workers):
        _set_fields(workers[i], w, fieldnames.WORKER_STATUS)
    clients = b.init("clients", len(m.clients))
    for i, c in enumerate(m.clients):
        _set_fields(clients[i], c, fieldnames.CLIENT_STATUS)
    b.clockUs = m.clock_us
    for column, items, fields in (
        ("functions", m.functions, fieldnames.FUNCTION_STATUS),
        ("failures", m.failures, fieldnames.TASK_FAILURE),
        ("outputs", m.outputs, fieldnames.OUTPUT_RECORD),
        ("departed", m.departed, fieldnames.DEPARTED_WORKER),
        ("managers", m.managers, fieldnames.MANAGER_STATUS),
        ("waiting", m.waiting, fieldnames.WAITING_TASKS),
    ):
        out = b.init(column, len(items))
        for i, item in enumerate(items):
            _set_fields(out[i], item, fields)
    for i, f in enumerate(m.functions):
        if f.duration_buckets:
            b.functions[i].durationBuckets = pack_u64(f.duration_buckets)
    e, events = b.events, m.events
    if events.task_ids:
        e.taskIds = pack_u64(events.task_ids)
        e.kinds = bytes(events.kinds)
        e.statuses = bytes(events.statuses)
        e.functions = pack_u32(events.functions)
        e.workers = pack_u32(events.workers)
        e.timesUs = pack_u64(events.times_us)
        e.durationsUs = pack_u64(events.durations_us)
        e.peakMemory = pack_u64(events.peak_memory)
        e.names = events.names
    e.sampleEvery = events.sample_every
    e.dropped = events.dropped
    return []


_MANAGER_REPORT = {
    "min_units": "minUnits",
    "max_units": "maxUnits",
    "workers_per_unit": "workersPerUnit",
    "slots_per_worker": "slotsPerWorker",
    "tier": "tier",
    "idle_ms": "idleMs",
    "start_timeout_ms": "startTimeoutMs",
    "units": "units",
    "ended": "ended",
    "reason": "reason",
}
_SCALE_UNITS = {"start": "start", "stop": "stop", "reason": "reason"}
_SHUTDOWN = {"reason": "reason", "workers_stay": "workersStay"}


def _enc_fields(fields: dict[str, str]) -> Callable[[Any, Any], list[Payload]]:
    def encoder(b: Any, m: Any) -> list[Payload]:
        _set_fields(b, m, fields)
        return []

    return encoder


def _dec_fields(cls: Any, fields: dict[str, str]) -> Callable[[Any, Sequence[Payload]], Any]:
    def decoder(b: Any, p: Sequence[Payload]) -> Any:
        _no_payloads(p, MESSAGE_NAMES[cls])
        values = {}
        for py_name, capnp_name in fields.items():
            value = getattr(b, capnp_name)
            values[py_name] = list(value) if not isinstance(value, (int, float, str, bytes)) else value
        return cls(**values)

    return decoder


def _enc_explanations(b: Any, m: TaskExplanations) -> list[Payload]:
    b.taskIds = pack_u64(m.task_ids)
    b.texts = m.texts
    return []


def _enc_output(b: Any, m: TaskOutput) -> list[Payload]:
    b.taskIds = pack_u64(m.task_ids)
    b.streams = bytes(m.streams)
    b.texts = m.texts
    return []


def _set_fields(target: Any, source: Any, fields: dict[str, str]) -> None:
    for py_name, capnp_name in fields.items():
        value = getattr(source, py_name)
        if type(value) is list and not value:
            continue  # an empty list stays null, as in scaler.protocol.codec
        setattr(target, capnp_name, int(value) if isinstance(value, IntEnum) else value)


_ENCODERS: dict[str, Callable[[Any, Any], list[Payload]]] = {
    "hello": _enc_hello,
    "welcome": _enc_welcome,
    "refused": _enc_refused,
    "heartbeat": _enc_heartbeat,
    "heartbeatEcho": _enc_echo,
    "submitTasks": _enc_tasks,
    "dispatchTasks": _enc_tasks,
    "taskResults": _enc_results,
    "cancelTasks": _enc_ids,
    "putObjects": _enc_objects,
    "freeObjects": _enc_ids,
    "balanceRequest": _enc_ids,
    "balanceResponse": _enc_ids,
    "tasksStarted": _enc_ids,
    "disconnect": _enc_reason,
    "shutdownRequest": _enc_reason,
    "shutdown": _enc_fields(_SHUTDOWN),
    "error": _enc_error,
    "status": _enc_status,
    "taskOutput": _enc_output,
    "managerReport": _enc_fields(_MANAGER_REPORT),
    "scaleUnits": _enc_fields(_SCALE_UNITS),
    "explainTasks": _enc_ids,
    "taskExplanations": _enc_explanations,
}


# ---------------------------------------------------------------------------------------------------- decoding
def decode(frames: Sequence[Payload], accept: frozenset[str] | None = None) -> Message:
    """The message in `frames` (header first). Raises ProtocolError if it is not a valid message, or if it is of
    a kind not in `accept` (when given)."""
    if not frames:
        raise ProtocolError("empty message")
    header = bytes(frames[0])  # type: ignore[call-overload]
    payloads = frames[1:]
    try:
        with _schema.Message.from_bytes(
            header,
            traversal_limit_in_words=4 * (len(header) // 8) + _TRAVERSAL_SLACK_WORDS,
            nesting_limit=_NESTING_LIMIT,
        ) as root:
            name = str(root.which())
            if accept is not None and name not in accept:
                raise UnexpectedMessage(f"a {name!r} message is not expected here")
            decoder = _DECODERS.get(name)
            if decoder is None:
                raise ProtocolError(f"unknown message kind {name!r}")
            message: Message = decoder(getattr(root, name), payloads)
            return message
    except ProtocolError:  # including UnexpectedMessage
        raise
    except Exception as exc:  # pycapnp raises KjException and friends for garbage
        raise ProtocolError(f"undecodable header: {exc}") from exc


def _payloads(b: Any, frames: Sequence[Payload], what: str) -> list[Payload]:
    return unpack_payloads(unpack_u64(b.payloadSizes, None, f"{what}.payloadSizes"), frames)


def _no_payloads(payloads: Sequence[Payload], what: str) -> None:
    if payloads:
        raise ProtocolError(f"{what} carries no payload frames, got {len(payloads)}")


def _dec_hello(b: Any, p: Sequence[Payload]) -> Hello:
    _no_payloads(p, "hello")
    kind = _PEER_KINDS.get(str(b.kind))
    if kind is None:
        raise ProtocolError(f"hello: unknown peer kind {b.kind}")
    return Hello(
        kind=kind,
        name=b.name,
        hostname=b.hostname,
        pid=b.pid,
        heartbeat_interval_ms=b.heartbeatIntervalMs,
        queue_capacity=b.queueCapacity,
        protocol_version=b.protocolVersion,
        capabilities=list(b.capabilities),
        unit=b.unit,
    )


def _dec_welcome(b: Any, p: Sequence[Payload]) -> Welcome:
    _no_payloads(p, "welcome")
    return Welcome(
        id_prefix=b.idPrefix,
        scheduler_name=b.schedulerName,
        protected=b.protected,
        peer_timeout_ms=b.peerTimeoutMs,
        protocol_version=b.protocolVersion,
        max_payload_bytes=b.maxPayloadBytes,
        workers=b.workers,
        worker_capacity=b.workerCapacity,
        workers_stated=b.workersStated,
        journaled=b.journaled,
    )


def _dec_refused(b: Any, p: Sequence[Payload]) -> Refused:
    _no_payloads(p, "refused")
    return Refused(reason=b.reason, scheduler_protocol_version=b.schedulerProtocolVersion, key_problem=b.keyProblem)


def _dec_heartbeat(b: Any, p: Sequence[Payload]) -> Heartbeat:
    _no_payloads(p, "heartbeat")
    return Heartbeat(
        cpu_percent=b.cpuPercent,
        rss_bytes=b.rssBytes,
        lag_us=b.lagUs,
        queued=b.queued,
        running=b.running,
        processor_cpu_percent=b.processorCpuPercent,
        processor_rss_bytes=b.processorRssBytes,
        processors=b.processors,
        blocked_processors=b.blockedProcessors,
        waiting_tasks=b.waitingTasks,
        resumed=b.resumed,
        sent=b.sent,
    )


def _dec_echo(b: Any, p: Sequence[Payload]) -> HeartbeatEcho:
    _no_payloads(p, "heartbeatEcho")
    return HeartbeatEcho(
        sent_at_us=b.sentAtUs,
        resumed=b.resumed,
        sent=b.sent,
        workers=b.workers,
        worker_capacity=b.workerCapacity,
        workers_stated=b.workersStated,
        recovered=b.recovered,
    )


def _dec_task_batch(b: Any, p: Sequence[Payload], cls: type[_Batch]) -> _Batch:
    keywords = list(b.keywords) if len(b.keywords) else None
    options = (b.timeoutsMs, b.retries, b.priorities)
    batch = _task_batch(
        cls, b.taskIds, b.functionIds, b.flags, b.argCounts, b.argRefs, keywords, b.payloadSizes, p, options
    )
    if len(b.requirements) or len(b.requirementIndex):
        requirements = [list(r.capabilities) for r in b.requirements]
        set_requirements(batch, requirements, b.requirementIndex)
    if len(b.idempotencyKeys):
        if len(b.idempotencyKeys) != len(batch.task_ids):
            raise ProtocolError(f"idempotencyKeys: {len(b.idempotencyKeys)} keys for {len(batch.task_ids)} tasks")
        batch.idempotency_keys = list(b.idempotencyKeys)
    return batch


def _task_batch(
    cls: type[_Batch],
    ids_column: bytes,
    functions_column: bytes,
    flags: bytes,
    counts_column: bytes,
    refs_column: bytes,
    keywords: list[str] | None,
    sizes_column: bytes,
    frames: Sequence[Payload],
    options: tuple[bytes, bytes, bytes],
) -> _Batch:
    if any(options):
        batch = _task_batch(
            cls,
            ids_column,
            functions_column,
            flags,
            counts_column,
            refs_column,
            keywords,
            sizes_column,
            frames,
            _EMPTY3,
        )
        n = len(batch.task_ids)
        timeouts, retries, priorities = options
        batch.timeouts_ms = unpack_u32(timeouts, n, "timeoutsMs") if timeouts else None
        batch.retries = check_u8(bytes(retries), n, "retries") if retries else None
        batch.priorities = unpack_i32(priorities, n, "priorities") if priorities else None
        return batch
    if _LITTLE_ENDIAN:  # the columns as they are, checked after (the common, fast way)
        try:
            task_ids = memoryview(ids_column).cast("Q").tolist()
            function_ids = memoryview(functions_column).cast("Q").tolist()
            arg_counts = memoryview(counts_column).cast("H").tolist()
            arg_refs = memoryview(refs_column).cast("Q").tolist()
            sizes = memoryview(sizes_column).cast("Q").tolist()
        except TypeError:  # a column that is not a whole number of values: say which
            pass
        else:
            n = len(task_ids)
            if (
                len(function_ids) == n
                and len(flags) == n
                and len(arg_counts) == n
                and sum(arg_counts) == len(arg_refs)
                and (keywords is None or len(keywords) == len(arg_refs))
            ):
                payloads = unpack_payloads(sizes, frames)
                if arg_refs.count(0) == len(payloads):
                    return cls(task_ids, function_ids, bytes(flags), arg_counts, arg_refs, keywords, payloads)
    # Slowly, each check in turn, to say what is wrong (or on a big-endian machine).
    task_ids = unpack_u64(ids_column, None, "taskIds")
    n = len(task_ids)
    function_ids = unpack_u64(functions_column, n, "functionIds")
    check_u8(flags, n, "flags")
    arg_counts = unpack_u16(counts_column, n, "argCounts")
    arg_refs = unpack_u64(refs_column, None, "argRefs")
    if sum(arg_counts) != len(arg_refs):
        raise ProtocolError(f"argRefs: {len(arg_refs)} values but argCounts add up to {sum(arg_counts)}")
    if keywords is not None and len(keywords) != len(arg_refs):
        raise ProtocolError(f"keywords: {len(keywords)} values for {len(arg_refs)} arguments")
    payloads = unpack_payloads(unpack_u64(sizes_column, None, "tasks.payloadSizes"), frames)
    if arg_refs.count(0) != len(payloads):
        raise ProtocolError(f"{arg_refs.count(0)} inline arguments but {len(payloads)} payloads")
    return cls(task_ids, function_ids, bytes(flags), arg_counts, arg_refs, keywords, payloads)


def _dec_results(b: Any, p: Sequence[Payload]) -> TaskResults:
    return _results(b.taskIds, b.statuses, b.payloadSizes, p, b.durationsUs, b.peakMemory, b.cpuTimesUs)


def _results(
    ids_column: bytes,
    statuses: bytes,
    sizes_column: bytes,
    frames: Sequence[Payload],
    durations_column: bytes,
    peaks_column: bytes,
    cpu_column: bytes = b"",
) -> TaskResults:
    if _LITTLE_ENDIAN and not durations_column and not peaks_column and not cpu_column:  # the common, fast way
        try:
            task_ids = memoryview(ids_column).cast("Q").tolist()
            sizes = memoryview(sizes_column).cast("Q").tolist()
        except TypeError:
            pass
        else:
            n = len(task_ids)
            if len(statuses) == n and (not n or max(statuses) <= _LAST_STATUS):
                payloads = unpack_payloads(sizes, frames)
                if len(payloads) == n:
                    return TaskResults(task_ids, bytes(statuses), payloads)
    task_ids = unpack_u64(ids_column, None, "taskIds")
    n = len(task_ids)
    check_u8(statuses, n, "statuses")
    payloads = unpack_payloads(unpack_u64(sizes_column, None, "results.payloadSizes"), frames)
    if len(payloads) != n:
        raise ProtocolError(f"{n} results but {len(payloads)} payloads")
    if n and max(statuses) > _LAST_STATUS:
        raise ProtocolError("statuses: unknown status value")
    durations = unpack_u64(durations_column, n, "durationsUs") if len(durations_column) else None
    peaks = unpack_u64(peaks_column, n, "peakMemory") if len(peaks_column) else None
    cpu = unpack_u64(cpu_column, n, "cpuTimesUs") if len(cpu_column) else None
    return TaskResults(task_ids, bytes(statuses), payloads, durations, peaks, cpu)


def _dec_ids(cls: type[IdMessage]) -> Callable[[Any, Sequence[Payload]], IdMessage]:
    def decoder(b: Any, p: Sequence[Payload]) -> IdMessage:
        _no_payloads(p, MESSAGE_NAMES[cls])
        return cls(unpack_u64(b.ids, None, "ids"))

    return decoder


def _dec_objects(b: Any, p: Sequence[Payload]) -> PutObjects:
    ids = unpack_u64(b.objectIds, None, "objectIds")
    payloads = _payloads(b, p, "objects")
    if len(payloads) != len(ids):
        raise ProtocolError(f"{len(ids)} objects but {len(payloads)} payloads")
    names = list(b.names) if len(b.names) else None
    if names is not None and len(names) != len(ids):
        raise ProtocolError(f"names: {len(names)} values for {len(ids)} objects")
    return PutObjects(ids, payloads, names)


def _dec_reason(cls: type[ReasonMessage]) -> Callable[[Any, Sequence[Payload]], ReasonMessage]:
    def decoder(b: Any, p: Sequence[Payload]) -> ReasonMessage:
        _no_payloads(p, MESSAGE_NAMES[cls])
        return cls(b.reason)

    return decoder


def _dec_error(b: Any, p: Sequence[Payload]) -> Error:
    _no_payloads(p, "error")
    code = {v: k for k, v in _ERROR_CODE_NAMES.items()}[str(b.code)]
    return Error(code, b.message, unpack_u64(b.ids, None, "ids"))


def _functions(functions: list[FunctionStatus], items: Any) -> list[FunctionStatus]:
    for f, item in zip(functions, items):
        f.duration_buckets = unpack_u64(item.durationBuckets, None, "durationBuckets")
    return functions


def _dec_status(b: Any, p: Sequence[Payload]) -> Status:
    _no_payloads(p, "status")

    def counters(items: Any) -> dict[str, int]:
        return {c.name: c.value for c in items}

    def records(cls: Any, items: Any, fields: dict[str, str]) -> list[Any]:
        return [cls(**{k: _plain(getattr(item, v)) for k, v in fields.items()}) for item in items]

    workers = records(WorkerStatus, b.workers, fieldnames.WORKER_STATUS)
    clients = records(ClientStatus, b.clients, fieldnames.CLIENT_STATUS)
    return Status(
        scheduler_name=b.schedulerName,
        time_us=b.timeUs,
        cpu_percent=b.cpuPercent,
        rss_bytes=b.rssBytes,
        tasks_by_state=counters(b.tasksByState),
        sent=counters(b.sent),
        received=counters(b.received),
        workers=workers,
        clients=clients,
        protected=b.protected,
        dropped_messages=b.droppedMessages,
        refused_peers=b.refusedPeers,
        handler_errors=b.handlerErrors,
        clock_us=b.clockUs,
        functions=_functions(records(FunctionStatus, b.functions, fieldnames.FUNCTION_STATUS), b.functions),
        events=_dec_events(b.events),
        failures=records(TaskFailure, b.failures, fieldnames.TASK_FAILURE),
        outputs=records(OutputRecord, b.outputs, fieldnames.OUTPUT_RECORD),
        departed=records(DepartedWorker, b.departed, fieldnames.DEPARTED_WORKER),
        withheld=b.withheld,
        managers=records(ManagerStatus, b.managers, fieldnames.MANAGER_STATUS),
        waiting=records(WaitingTasks, b.waiting, fieldnames.WAITING_TASKS),
        units_started=b.unitsStarted,
        units_stopped=b.unitsStopped,
        units_failed=b.unitsFailed,
        started_us=b.startedUs,
        recovered=b.recovered,
    )


def _plain(value: Any) -> Any:
    """A field's value as a Python value: a list of texts as a list (pycapnp's list reader dies with the message)."""
    return value if isinstance(value, (int, float, str, bytes)) else list(value)


def _dec_events(e: Any) -> TaskEvents:
    ids = unpack_u64(e.taskIds, None, "events.taskIds")
    n = len(ids)
    names = list(e.names)
    functions = unpack_u32(e.functions, n, "events.functions")
    workers = unpack_u32(e.workers, n, "events.workers")
    if any(f >= len(names) for f in functions) or any(w >= len(names) and w != NO_NAME for w in workers):
        raise ProtocolError("events: a name index past the names")
    return TaskEvents(
        task_ids=ids,
        kinds=check_u8(e.kinds, n, "events.kinds"),
        statuses=check_u8(e.statuses, n, "events.statuses"),
        functions=functions,
        workers=workers,
        times_us=unpack_u64(e.timesUs, n, "events.timesUs"),
        durations_us=unpack_u64(e.durationsUs, n, "events.durationsUs"),
        peak_memory=unpack_u64(e.peakMemory, n, "events.peakMemory"),
        names=names,
        sample_every=e.sampleEvery,
        dropped=e.dropped,
    )


def _dec_explanations(b: Any, p: Sequence[Payload]) -> TaskExplanations:
    _no_payloads(p, "taskExplanations")
    ids = unpack_u64(b.taskIds, None, "taskIds")
    texts = list(b.texts)
    if len(texts) != len(ids):
        raise ProtocolError(f"texts: {len(texts)} values for {len(ids)} tasks")
    return TaskExplanations(ids, texts)


def _dec_output(b: Any, p: Sequence[Payload]) -> TaskOutput:
    _no_payloads(p, "taskOutput")
    ids = unpack_u64(b.taskIds, None, "taskIds")
    streams = check_u8(b.streams, len(ids), "streams")
    texts = list(b.texts)
    if len(texts) != len(ids):
        raise ProtocolError(f"texts: {len(texts)} values for {len(ids)} pieces")
    if any(s not in _OUTPUT_STREAMS for s in streams):
        raise ProtocolError("streams: a stream other than 1 (stdout), 2 (stderr) or 3 (error text)")
    return TaskOutput(ids, streams, texts)


_OUTPUT_STREAMS = frozenset({OUTPUT_STDOUT, OUTPUT_STDERR, OUTPUT_ERROR})


_DECODERS: dict[str, Callable[[Any, Sequence[Payload]], Any]] = {
    "hello": _dec_hello,
    "welcome": _dec_welcome,
    "refused": _dec_refused,
    "heartbeat": _dec_heartbeat,
    "heartbeatEcho": _dec_echo,
    "submitTasks": lambda b, p: _dec_task_batch(b, p, SubmitTasks),
    "dispatchTasks": lambda b, p: _dec_task_batch(b, p, DispatchTasks),
    "taskResults": _dec_results,
    "cancelTasks": _dec_ids(CancelTasks),
    "putObjects": _dec_objects,
    "freeObjects": _dec_ids(FreeObjects),
    "balanceRequest": _dec_ids(BalanceRequest),
    "balanceResponse": _dec_ids(BalanceResponse),
    "tasksStarted": _dec_ids(TasksStarted),
    "disconnect": _dec_reason(Disconnect),
    "shutdownRequest": _dec_reason(ShutdownRequest),
    "shutdown": _dec_fields(Shutdown, _SHUTDOWN),
    "error": _dec_error,
    "status": _dec_status,
    "taskOutput": _dec_output,
    "managerReport": _dec_fields(ManagerReport, _MANAGER_REPORT),
    "scaleUnits": _dec_fields(ScaleUnits, _SCALE_UNITS),
    "explainTasks": _dec_ids(ExplainTasks),
    "taskExplanations": _dec_explanations,
}
