"""The protocol's Cap'n Proto codec: records (scaler.protocol.records) to ZeroMQ frames and back, in pure Python
(standard library only), the one codec every Scaler process runs, on CPython and PyPy alike (ADR 0019).
`encode(message)` gives the frames, header first, then the payload frames (not copied); `decode(frames, accept)`
gives the record or raises ProtocolError, never another exception. Structural checks (column lengths, payload
counts) live here; what a message means is for the receiving core to judge.

The batches the processes handle most (taskResults, submitTasks and dispatchTasks without keywords) take a direct
path (scaler.protocol.fastpath: a template per message shape to write, the field places per shape to read); every
other message goes through scaler.protocol.wire, which reads and writes Cap'n Proto words at the field positions of
scaler.protocol.layout (generated from scaler.capnp). Fields are set in the order pycapnp's builder sets them, so a
header is the bytes pycapnp gives wherever pycapnp writes one segment (it splits headers over 8 KiB; this always
writes one); any valid message is read (several segments, far pointers), with bounded traversal. The tests check it
against a pycapnp codec (tests/protocol/capnp_codec.py) and golden files. Pure; no I/O. Written for Python 3.9 syntax.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import Any, TypeVar

from scaler.protocol import columns, fieldnames
from scaler.protocol import requirements as requirement_list
from scaler.protocol.columns import check_u8, pack_i32, pack_u16, pack_u32, pack_u64, set_requirements
from scaler.protocol.errors import ProtocolError, UnexpectedMessage
from scaler.protocol.fastpath import FastPath, list_words
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
from scaler.protocol.wire import LAYOUT, MEMBER_STRUCT, NAMES, Builder, Reader, View

_Batch = TypeVar("_Batch", bound=TaskBatch)
_LITTLE_ENDIAN = sys.byteorder == "little"
_LAST_STATUS = max(TaskStatus)
_OUTPUT_STREAMS = frozenset({OUTPUT_STDOUT, OUTPUT_STDERR, OUTPUT_ERROR})
_PYPY = sys.implementation.name == "pypy"
_EMPTY3 = (b"", b"", b"")

_fast = FastPath()
_SUBMIT_KIND, _DISPATCH_KIND, _RESULTS_KIND = (_fast.kinds[n] for n in ("submitTasks", "dispatchTasks", "taskResults"))
_T_IDS, _T_FUNCTIONS, _T_FLAGS, _T_COUNTS, _T_REFS, _T_KEYWORDS, _T_SIZES = (
    _fast.task_slots[name]
    for name in ("taskIds", "functionIds", "flags", "argCounts", "argRefs", "keywords", "payloadSizes")
)
_T_TIMEOUTS, _T_RETRIES, _T_PRIORITIES, _T_REQUIREMENTS, _T_REQUIREMENT_INDEX = (
    _fast.task_slots[name] for name in ("timeoutsMs", "retries", "priorities", "requirements", "requirementIndex")
)
_R_IDS, _R_STATUSES, _R_SIZES, _R_DURATIONS, _R_PEAKS, _R_CPU = (
    _fast.result_slots[name]
    for name in ("taskIds", "statuses", "payloadSizes", "durationsUs", "peakMemory", "cpuTimesUs")
)
# The fields the direct writers set, in the order they pass them: it must be slot order (the template's).
_T_WRITTEN = (
    _T_IDS,
    _T_FUNCTIONS,
    _T_FLAGS,
    _T_COUNTS,
    _T_REFS,
    _T_SIZES,
    _T_TIMEOUTS,
    _T_RETRIES,
    _T_PRIORITIES,
    _T_REQUIREMENTS,
    _T_REQUIREMENT_INDEX,
)
_R_WRITTEN = (_R_IDS, _R_STATUSES, _R_DURATIONS, _R_PEAKS, _R_SIZES, _R_CPU)
if list(_T_WRITTEN) != sorted(_T_WRITTEN) or list(_R_WRITTEN) != sorted(_R_WRITTEN):
    raise ImportError("scaler.capnp's batch fields are not in the order the direct writers set them: fix codec.py")


def _unpacker(code: str, size: int) -> Callable[..., list[int]]:
    """columns.unpack_* (the same checks and messages); on PyPy, read through array (memoryview.cast().tolist(),
    which columns uses, is about 5 times slower there)."""
    checked = getattr(columns, {"Q": "unpack_u64", "I": "unpack_u32", "i": "unpack_i32", "H": "unpack_u16"}[code])
    if not (_PYPY and _LITTLE_ENDIAN):
        return checked  # type: ignore[no-any-return]

    def unpack(data: bytes, count: int | None = None, what: str = "column") -> list[int]:
        if len(data) % size or (count is not None and len(data) != count * size) or array(code).itemsize != size:
            return checked(data, count, what)  # type: ignore[no-any-return]  # columns says what is wrong
        return array(code, data).tolist()

    return unpack


unpack_u64 = _unpacker("Q", 8)
unpack_u32 = _unpacker("I", 4)
unpack_i32 = _unpacker("i", 4)
unpack_u16 = _unpacker("H", 2)


def encode(message: Message) -> list[Payload]:
    """The frames of `message`: its Cap'n Proto header, then its payload frames (not copied)."""
    if type(message) is TaskResults:
        return _fast_results(message)
    if (type(message) is SubmitTasks or type(message) is DispatchTasks) and not (
        message.keywords or message.idempotency_keys
    ):
        return _fast_tasks(message)
    name = MESSAGE_NAMES[type(message)]
    b = Builder()
    at = b.message(name)
    payloads = _ENCODERS[name](b, at, MEMBER_STRUCT[name], message)
    return [b.frame(), *payloads]


_templates: dict[tuple[int, ...], bytes] = {}  # message templates by kind and field sizes (see FastPath.template)
_parts: dict[tuple[int, ...], tuple[bytes, tuple[bytes, ...]]] = {}  # the same as (head, pads), for PyPy
_TEMPLATE_CACHE = 4096
_NO_OPTIONS = (-1, -1, -1)
_NO_REQUIREMENTS = (-1, -1, 0)


def clear_caches() -> None:
    """Forget the message shapes learnt (templates and field places, rebuilt on use): after a burst of many batch
    sizes they pin tens of MiB of the interpreter's small-object arenas. For a shell giving memory back."""
    _templates.clear()
    _parts.clear()
    _fast.clear()


def _sizes(
    key: tuple[int, ...], pointer_count: int, slots: tuple[int, ...], list_slot: int
) -> tuple[list[int | None], dict[int, int] | None]:
    """The field sizes by slot and the struct lists of `key` = (kind, size of the field at each of `slots`, -1 for
    not set; then, with a `list_slot`, the element word count of the struct list there)."""
    sizes: list[int | None] = [None] * pointer_count
    if len(key) != len(slots) + 1 + (list_slot >= 0):
        raise ValueError(f"a template key has {len(key) - 1} values for {len(slots)} slots")
    for slot, size in zip(slots, key[1:]):  # no zip(strict=): the scheduler also runs on Python 3.9
        sizes[slot] = None if size < 0 else size
    return sizes, {list_slot: key[-1]} if list_slot >= 0 and sizes[list_slot] is not None else None


def _template(key: tuple[int, ...], pointer_count: int, slots: tuple[int, ...], list_slot: int = -1) -> bytes:
    """The template for `key` (see _sizes)."""
    if len(_templates) >= _TEMPLATE_CACHE:
        _templates.clear()
    template = _templates[key] = _fast.template(key[0], pointer_count, *_sizes(key, pointer_count, slots, list_slot))
    return template


def _joined(
    key: tuple[int, ...], fields: tuple[bytes, ...], pointer_count: int, slots: tuple[int, ...], list_slot: int = -1
) -> bytes:
    """The message of `fields` (in slot order) and `key` (see _sizes), joined: on PyPy, where a join is faster than a
    %-format for big messages (a batch of 1,000 tasks: about 7 µs against 13)."""
    parts = _parts.get(key)
    if parts is None:
        if len(_parts) >= _TEMPLATE_CACHE:
            _parts.clear()
        parts = _parts[key] = _fast.parts(key[0], pointer_count, *_sizes(key, pointer_count, slots, list_slot))
    pieces = [parts[0]]
    for field, pad in zip(fields, parts[1]):
        pieces.append(field)
        pieces.append(pad)
    return b"".join(pieces)


def _fast_tasks(m: TaskBatch) -> list[Payload]:
    sizes, frames = pack_payloads(m.payloads)
    fields: tuple[bytes, ...] = (
        pack_u64(m.task_ids),
        pack_u64(m.function_ids),
        bytes(m.flags),
        pack_u16(m.arg_counts),
        pack_u64(m.arg_refs),
        pack_u64(sizes),
    )
    ids, functions, flags, counts, refs, sizes_column = fields
    key: tuple[int, ...] = (
        _SUBMIT_KIND if type(m) is SubmitTasks else _DISPATCH_KIND,
        len(ids),
        len(functions),
        len(flags),
        len(counts),
        len(refs),
        len(sizes_column),
    )
    if m.timeouts_ms is None and m.retries is None and m.priorities is None:  # the common case
        key += _NO_OPTIONS
    else:
        options = _option_columns(m)
        key += tuple(-1 if column is None else len(column) for column in options)
        fields += tuple(column for column in options if column is not None)
    if m.requirements:
        blob, words = requirement_list.blob(m.requirements)
        fields += (blob,)
        if m.requirement_index is not None:
            index = pack_u16(m.requirement_index)
            key += (len(blob), len(index), words)
            fields += (index,)
        else:
            key += (len(blob), -1, words)
    else:
        key += _NO_REQUIREMENTS
    if _PYPY:
        frames.insert(0, _joined(key, fields, _fast.task_pointers, _T_WRITTEN, _T_REQUIREMENTS))
        return frames
    template = _templates.get(key) or _template(key, _fast.task_pointers, _T_WRITTEN, _T_REQUIREMENTS)
    frames.insert(0, template % fields)
    return frames


def _option_columns(m: TaskBatch) -> tuple[bytes | None, bytes | None, bytes | None]:
    return (
        None if m.timeouts_ms is None else pack_u32(m.timeouts_ms),
        None if m.retries is None else bytes(m.retries),
        None if m.priorities is None else pack_i32(m.priorities),
    )


def _fast_results(m: TaskResults) -> list[Payload]:
    sizes, frames = pack_payloads(m.payloads)
    ids, statuses, sizes_column = pack_u64(m.task_ids), bytes(m.statuses), pack_u64(sizes)
    if m.durations_us is None and m.peak_memory is None and m.cpu_times_us is None:  # the common case
        key: tuple[int, ...] = (_RESULTS_KIND, len(ids), len(statuses), -1, -1, len(sizes_column), -1)
        fields: tuple[bytes, ...] = (ids, statuses, sizes_column)
    else:
        durations = None if m.durations_us is None else pack_u64(m.durations_us)
        peaks = None if m.peak_memory is None else pack_u64(m.peak_memory)
        cpu = None if m.cpu_times_us is None else pack_u64(m.cpu_times_us)
        key = (
            _RESULTS_KIND,
            len(ids),
            len(statuses),
            -1 if durations is None else len(durations),
            -1 if peaks is None else len(peaks),
            len(sizes_column),
            -1 if cpu is None else len(cpu),
        )
        fields = tuple(field for field in (ids, statuses, durations, peaks, sizes_column, cpu) if field is not None)
    if _PYPY:
        frames.insert(0, _joined(key, fields, _fast.result_pointers, _R_WRITTEN))
        return frames
    template = _templates.get(key) or _template(key, _fast.result_pointers, _R_WRITTEN)
    frames.insert(0, template % fields)
    return frames


def _set_all(b: Builder, at: int, name: str, source: Any, fields: dict[str, str]) -> None:
    for py_name, capnp_name in fields.items():
        value = getattr(source, py_name)
        if type(value) is list and not value:
            continue  # an empty list stays null, as in codec.py
        b.set(at, name, capnp_name, int(value) if isinstance(value, IntEnum) else value)


_HELLO = {
    "protocol_version": "protocolVersion",
    "kind": "kind",
    "name": "name",
    "hostname": "hostname",
    "pid": "pid",
    "heartbeat_interval_ms": "heartbeatIntervalMs",
    "queue_capacity": "queueCapacity",
    "capabilities": "capabilities",
    "unit": "unit",
}
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
_WELCOME = {
    "protocol_version": "protocolVersion",
    "id_prefix": "idPrefix",
    "scheduler_name": "schedulerName",
    "protected": "protected",
    "peer_timeout_ms": "peerTimeoutMs",
    "max_payload_bytes": "maxPayloadBytes",
    "workers": "workers",
    "worker_capacity": "workerCapacity",
    "workers_stated": "workersStated",
    "journaled": "journaled",
}
_REFUSED = {"reason": "reason", "scheduler_protocol_version": "schedulerProtocolVersion", "key_problem": "keyProblem"}
_HEARTBEAT = {
    "cpu_percent": "cpuPercent",
    "rss_bytes": "rssBytes",
    "lag_us": "lagUs",
    "queued": "queued",
    "running": "running",
    "processor_cpu_percent": "processorCpuPercent",
    "processor_rss_bytes": "processorRssBytes",
    "processors": "processors",
    "blocked_processors": "blockedProcessors",
    "waiting_tasks": "waitingTasks",
    "resumed": "resumed",
    "sent": "sent",
}
_ECHO = {
    "sent_at_us": "sentAtUs",
    "resumed": "resumed",
    "sent": "sent",
    "workers": "workers",
    "worker_capacity": "workerCapacity",
    "workers_stated": "workersStated",
    "recovered": "recovered",
}
_STATUS_HEAD = {
    "scheduler_name": "schedulerName",
    "time_us": "timeUs",
    "cpu_percent": "cpuPercent",
    "rss_bytes": "rssBytes",
    "protected": "protected",
    "dropped_messages": "droppedMessages",
    "refused_peers": "refusedPeers",
    "handler_errors": "handlerErrors",
    "withheld": "withheld",
    "units_started": "unitsStarted",
    "units_stopped": "unitsStopped",
    "units_failed": "unitsFailed",
    "started_us": "startedUs",
    "recovered": "recovered",
}


def _fields_of(fields: dict[str, str]) -> Callable[[Builder, int, str, Any], list[Payload]]:
    def encoder(b: Builder, at: int, name: str, m: Any) -> list[Payload]:
        _set_all(b, at, name, m, fields)
        return []

    return encoder


def _enc_tasks(b: Builder, at: int, name: str, m: TaskBatch) -> list[Payload]:
    """A batch with keywords or idempotency keys, its fields set in the order of the golden files
    (tests/protocol/golden): the options before payloadSizes, the requirements and keys after. (The direct writer
    sets every field in slot order.)"""
    b.set(at, name, "taskIds", pack_u64(m.task_ids))
    b.set(at, name, "functionIds", pack_u64(m.function_ids))
    b.set(at, name, "flags", bytes(m.flags))
    b.set(at, name, "argCounts", pack_u16(m.arg_counts))
    b.set(at, name, "argRefs", pack_u64(m.arg_refs))
    if m.keywords:
        b.set(at, name, "keywords", m.keywords)
    for field, column in zip(("timeoutsMs", "retries", "priorities"), _option_columns(m)):
        if column is not None:
            b.set(at, name, field, column)
    sizes, frames = pack_payloads(m.payloads)
    b.set(at, name, "payloadSizes", pack_u64(sizes))
    if m.requirements:  # after payloadSizes
        data, fields = LAYOUT[name][0], LAYOUT[name][2]
        elements = b.structs(at + data + fields["requirements"][1], "Requirement", len(m.requirements))
        for element, required in zip(elements, m.requirements):
            if required:
                b.set(element, "Requirement", "capabilities", required)
        if m.requirement_index is not None:
            b.set(at, name, "requirementIndex", pack_u16(m.requirement_index))
    if m.idempotency_keys:
        b.set(at, name, "idempotencyKeys", m.idempotency_keys)
    return frames


def _enc_ids(b: Builder, at: int, name: str, m: IdMessage) -> list[Payload]:
    b.set(at, name, "ids", pack_u64(m.ids))
    return []


def _enc_objects(b: Builder, at: int, name: str, m: PutObjects) -> list[Payload]:
    b.set(at, name, "objectIds", pack_u64(m.object_ids))
    if m.names:
        b.set(at, name, "names", m.names)
    sizes, frames = pack_payloads(m.payloads)
    b.set(at, name, "payloadSizes", pack_u64(sizes))
    return frames


def _enc_error(b: Builder, at: int, name: str, m: Error) -> list[Payload]:
    b.set(at, name, "code", int(m.code))
    b.set(at, name, "message", m.message)
    b.set(at, name, "ids", pack_u64(m.ids))
    return []


def _enc_status(b: Builder, at: int, name: str, m: Status) -> list[Payload]:
    _set_all(b, at, name, m, _STATUS_HEAD)
    data = LAYOUT[name][0]
    fields = LAYOUT[name][2]
    for column, counters in (("tasksByState", m.tasks_by_state), ("sent", m.sent), ("received", m.received)):
        for item, (key, value) in zip(
            b.structs(at + data + fields[column][1], "Counter", len(counters)), counters.items()
        ):
            b.set(item, "Counter", "name", key)
            b.set(item, "Counter", "value", value)
    b.set(at, name, "clockUs", m.clock_us)
    for column, struct_name, items, names in (
        ("workers", "WorkerStatus", m.workers, fieldnames.WORKER_STATUS),
        ("clients", "ClientStatus", m.clients, fieldnames.CLIENT_STATUS),
        ("functions", "FunctionStatus", m.functions, fieldnames.FUNCTION_STATUS),
        ("failures", "TaskFailure", m.failures, fieldnames.TASK_FAILURE),
        ("outputs", "OutputRecord", m.outputs, fieldnames.OUTPUT_RECORD),
        ("departed", "DepartedWorker", m.departed, fieldnames.DEPARTED_WORKER),
        ("managers", "ManagerStatus", m.managers, fieldnames.MANAGER_STATUS),
        ("waiting", "WaitingTasks", m.waiting, fieldnames.WAITING_TASKS),
    ):
        for item, source in zip(b.structs(at + data + fields[column][1], struct_name, len(items)), items):
            _set_all(b, item, struct_name, source, names)
            if isinstance(source, FunctionStatus) and source.duration_buckets:
                b.set(item, struct_name, "durationBuckets", pack_u64(source.duration_buckets))
    e, events = b.struct(at + data + fields["events"][1], "TaskEvents"), m.events
    if events.task_ids:
        b.set(e, "TaskEvents", "taskIds", pack_u64(events.task_ids))
        b.set(e, "TaskEvents", "kinds", bytes(events.kinds))
        b.set(e, "TaskEvents", "statuses", bytes(events.statuses))
        b.set(e, "TaskEvents", "functions", pack_u32(events.functions))
        b.set(e, "TaskEvents", "workers", pack_u32(events.workers))
        b.set(e, "TaskEvents", "timesUs", pack_u64(events.times_us))
        b.set(e, "TaskEvents", "durationsUs", pack_u64(events.durations_us))
        b.set(e, "TaskEvents", "peakMemory", pack_u64(events.peak_memory))
        b.set(e, "TaskEvents", "names", events.names)
    b.set(e, "TaskEvents", "sampleEvery", events.sample_every)
    b.set(e, "TaskEvents", "dropped", events.dropped)
    return []


def _enc_explanations(b: Builder, at: int, name: str, m: TaskExplanations) -> list[Payload]:
    b.set(at, name, "taskIds", pack_u64(m.task_ids))
    b.set(at, name, "texts", m.texts)
    return []


def _enc_output(b: Builder, at: int, name: str, m: TaskOutput) -> list[Payload]:
    b.set(at, name, "taskIds", pack_u64(m.task_ids))
    b.set(at, name, "streams", bytes(m.streams))
    b.set(at, name, "texts", m.texts)
    return []


_ENCODERS: dict[str, Callable[[Builder, int, str, Any], list[Payload]]] = {
    "hello": _fields_of(_HELLO),
    "welcome": _fields_of(_WELCOME),
    "refused": _fields_of(_REFUSED),
    "heartbeat": _fields_of(_HEARTBEAT),
    "heartbeatEcho": _fields_of(_ECHO),
    "submitTasks": _enc_tasks,
    "dispatchTasks": _enc_tasks,
    "cancelTasks": _enc_ids,
    "putObjects": _enc_objects,
    "freeObjects": _enc_ids,
    "balanceRequest": _enc_ids,
    "balanceResponse": _enc_ids,
    "tasksStarted": _enc_ids,
    "disconnect": _fields_of({"reason": "reason"}),
    "shutdownRequest": _fields_of({"reason": "reason"}),
    "shutdown": _fields_of(_SHUTDOWN),
    "error": _enc_error,
    "status": _enc_status,
    "taskOutput": _enc_output,
    "managerReport": _fields_of(_MANAGER_REPORT),
    "scaleUnits": _fields_of(_SCALE_UNITS),
    "explainTasks": _enc_ids,
    "taskExplanations": _enc_explanations,
}


def _fast_decode(header: bytes, payloads: Sequence[Payload], accept: frozenset | None) -> Message | None:  # type: ignore[type-arg]
    """The batch message `header` holds, read by the direct reader; None if it cannot read it (the general reader
    decodes it or says why not)."""
    read = _fast.read(header)
    if read is None:
        return None
    kind, fields = read
    if accept is not None:
        name = _fast.names[kind]
        if name not in accept:
            raise UnexpectedMessage(f"a {name!r} message is not expected here")
    if kind == _RESULTS_KIND:
        return _results(
            fields[_R_IDS],
            fields[_R_STATUSES],
            fields[_R_SIZES],
            payloads,
            fields[_R_DURATIONS],
            fields[_R_PEAKS],
            fields[_R_CPU],
        )
    required: list[list[str]] | None = []
    if fields[_T_REQUIREMENTS]:  # None: not readable from its own bytes alone: the general reader says why
        required = requirement_list.read(fields[_T_REQUIREMENTS], list_words(header, _T_REQUIREMENTS))
    if fields[_T_KEYWORDS] or required is None:  # keywords are a list of texts: the general reader reads those
        return None
    batch_class: type[SubmitTasks | DispatchTasks] = SubmitTasks if kind == _SUBMIT_KIND else DispatchTasks
    batch = _task_batch(
        batch_class,
        fields[_T_IDS],
        fields[_T_FUNCTIONS],
        fields[_T_FLAGS],
        fields[_T_COUNTS],
        fields[_T_REFS],
        None,
        fields[_T_SIZES],
        payloads,
        (fields[_T_TIMEOUTS], fields[_T_RETRIES], fields[_T_PRIORITIES]),
    )
    if required or fields[_T_REQUIREMENT_INDEX]:
        set_requirements(batch, required, fields[_T_REQUIREMENT_INDEX])
    return batch


def decode(frames: Sequence[Payload], accept: frozenset | None = None) -> Message:  # type: ignore[type-arg]
    """The message in `frames` (header first). Raises ProtocolError if it is not a valid message, or if it is of
    a kind not in `accept` (when given)."""
    if not frames:
        raise ProtocolError("empty message")
    header = bytes(frames[0])  # type: ignore[call-overload]
    fast = _fast_decode(header, frames[1:], accept)
    if fast is not None:
        return fast
    try:
        reader = Reader(header)
        root = reader.root()
        kind = int.from_bytes(header[root.data : root.data + 2], "little") if root.data_bytes else 0
        member = NAMES.get(kind)
        if member is None:
            raise ProtocolError(f"unknown message kind {kind}")
        if accept is not None and member not in accept:
            raise UnexpectedMessage(f"a {member!r} message is not expected here")
        body = reader.struct(root.segment, root.pointers) if root.pointer_count else None
        if body is None:
            body = View(0, 0, 0, 0)  # a null member: every field at its default
        message: Message = _DECODERS[member](reader, body, MEMBER_STRUCT[member], frames[1:])
        return message
    except ProtocolError:
        raise
    except Exception as exc:  # a bug here must still read as a malformed message to the caller
        raise ProtocolError(f"undecodable header: {exc!r}") from exc


def _no_payloads(payloads: Sequence[Payload], what: str) -> None:
    if payloads:
        raise ProtocolError(f"{what} carries no payload frames, got {len(payloads)}")


def _dec_fields(cls: Any, fields: dict[str, str]) -> Callable[[Reader, View, str, Sequence[Payload]], Any]:
    def decoder(r: Reader, v: View, name: str, p: Sequence[Payload]) -> Any:
        _no_payloads(p, MESSAGE_NAMES[cls])
        return r.record(v, name, cls, fields)

    return decoder


def _dec_hello(r: Reader, v: View, name: str, p: Sequence[Payload]) -> Hello:
    _no_payloads(p, "hello")
    hello: Hello = r.record(v, name, Hello, _HELLO)
    if hello.kind not in (PeerKind.CLIENT, PeerKind.WORKER, PeerKind.MONITOR, PeerKind.MANAGER):
        raise ProtocolError(f"hello: unknown peer kind {hello.kind}")
    hello.kind = PeerKind(hello.kind)
    return hello


def _dec_tasks(cls: type[_Batch]) -> Callable[[Reader, View, str, Sequence[Payload]], _Batch]:
    def decoder(r: Reader, v: View, name: str, p: Sequence[Payload]) -> _Batch:
        c = {field: r.get(v, name, field) for field in _fast.task_slots}
        if c["requirements"]:
            c["requirements"] = [r.get(item, "Requirement", "capabilities") for item in c["requirements"]]
        return _tasks(cls, c, p)

    return decoder


def _tasks(cls: type[_Batch], c: dict[str, Any], p: Sequence[Payload]) -> _Batch:
    """A batch from its fields by name (Data fields as bytes, null ones b""; keywords a list or b"")."""
    batch = _task_batch(
        cls,
        c["taskIds"],
        c["functionIds"],
        c["flags"],
        c["argCounts"],
        c["argRefs"],
        c["keywords"] or None,
        c["payloadSizes"],
        p,
        (c["timeoutsMs"], c["retries"], c["priorities"]),
    )
    if c.get("requirements") or c.get("requirementIndex"):
        set_requirements(batch, list(c.get("requirements") or []), c.get("requirementIndex") or b"")
    keys = c.get("idempotencyKeys")
    if keys:
        if len(keys) != len(batch.task_ids):
            raise ProtocolError(f"idempotencyKeys: {len(keys)} keys for {len(batch.task_ids)} tasks")
        batch.idempotency_keys = list(keys)
    return batch


# The columns of a batch as lists, fast, or TypeError/ValueError if a column's size is not a whole number of values:
# memoryview.cast on CPython (inline below), array on PyPy (where memoryview.cast().tolist() is about 5 times slower).
def _pypy_task_columns(ids: bytes, functions: bytes, counts: bytes, refs: bytes, sizes: bytes) -> tuple[list[int], ...]:
    return (
        array("Q", ids).tolist(),
        array("Q", functions).tolist(),
        array("H", counts).tolist(),
        array("Q", refs).tolist(),
        array("Q", sizes).tolist(),
    )


if _PYPY:

    def _result_columns(ids: bytes, sizes: bytes) -> tuple[list[int], list[int]]:
        return array("Q", ids).tolist(), array("Q", sizes).tolist()

else:

    def _result_columns(ids: bytes, sizes: bytes) -> tuple[list[int], list[int]]:
        return memoryview(ids).cast("Q").tolist(), memoryview(sizes).cast("Q").tolist()


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
            if _PYPY:
                task_ids, function_ids, arg_counts, arg_refs, sizes = _pypy_task_columns(
                    ids_column, functions_column, counts_column, refs_column, sizes_column
                )
            else:
                task_ids = memoryview(ids_column).cast("Q").tolist()
                function_ids = memoryview(functions_column).cast("Q").tolist()
                arg_counts = memoryview(counts_column).cast("H").tolist()
                arg_refs = memoryview(refs_column).cast("Q").tolist()
                sizes = memoryview(sizes_column).cast("Q").tolist()
        except (TypeError, ValueError):  # a column that is not a whole number of values: say which, below
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


def _dec_results(r: Reader, v: View, name: str, p: Sequence[Payload]) -> TaskResults:
    c = {field: r.get(v, name, field) for field in _fast.result_slots}
    return _results(
        c["taskIds"], c["statuses"], c["payloadSizes"], p, c["durationsUs"], c["peakMemory"], c["cpuTimesUs"]
    )


def _results(
    ids_column: bytes,
    statuses: bytes,
    sizes_column: bytes,
    frames: Sequence[Payload],
    durations_column: bytes,
    peaks_column: bytes,
    cpu_column: bytes,
) -> TaskResults:
    if _LITTLE_ENDIAN and not durations_column and not peaks_column and not cpu_column:  # the common, fast way
        try:
            task_ids, sizes = _result_columns(ids_column, sizes_column)
        except (TypeError, ValueError):
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
    durations = unpack_u64(durations_column, n, "durationsUs") if durations_column else None
    peaks = unpack_u64(peaks_column, n, "peakMemory") if peaks_column else None
    cpu = unpack_u64(cpu_column, n, "cpuTimesUs") if cpu_column else None
    return TaskResults(task_ids, bytes(statuses), payloads, durations, peaks, cpu)


def _dec_ids(cls: Any) -> Callable[[Reader, View, str, Sequence[Payload]], IdMessage]:
    def decoder(r: Reader, v: View, name: str, p: Sequence[Payload]) -> IdMessage:
        _no_payloads(p, MESSAGE_NAMES[cls])
        message: IdMessage = cls(unpack_u64(r.get(v, name, "ids"), None, "ids"))
        return message

    return decoder


def _dec_objects(r: Reader, v: View, name: str, p: Sequence[Payload]) -> PutObjects:
    ids = unpack_u64(r.get(v, name, "objectIds"), None, "objectIds")
    payloads = unpack_payloads(unpack_u64(r.get(v, name, "payloadSizes"), None, "objects.payloadSizes"), p)
    if len(payloads) != len(ids):
        raise ProtocolError(f"{len(ids)} objects but {len(payloads)} payloads")
    names = r.get(v, name, "names") or None
    if names is not None and len(names) != len(ids):
        raise ProtocolError(f"names: {len(names)} values for {len(ids)} objects")
    return PutObjects(ids, payloads, names)


def _dec_reason(cls: Any) -> Callable[[Reader, View, str, Sequence[Payload]], ReasonMessage]:
    def decoder(r: Reader, v: View, name: str, p: Sequence[Payload]) -> ReasonMessage:
        _no_payloads(p, MESSAGE_NAMES[cls])
        message: ReasonMessage = cls(r.get(v, name, "reason"))
        return message

    return decoder


def _dec_error(r: Reader, v: View, name: str, p: Sequence[Payload]) -> Error:
    _no_payloads(p, "error")
    code = r.get(v, name, "code")
    if code not in set(ErrorCode):
        raise ProtocolError(f"error: unknown error code {code}")
    return Error(ErrorCode(code), r.get(v, name, "message"), unpack_u64(r.get(v, name, "ids"), None, "ids"))


def _with_buckets(r: Reader, item: View, f: FunctionStatus) -> FunctionStatus:
    f.duration_buckets = unpack_u64(r.get(item, "FunctionStatus", "durationBuckets"), None, "durationBuckets")
    return f


def _dec_status(r: Reader, v: View, name: str, p: Sequence[Payload]) -> Status:
    _no_payloads(p, "status")

    def counters(field: str) -> dict[str, int]:
        return {r.get(c, "Counter", "name"): r.get(c, "Counter", "value") for c in r.get(v, name, field)}

    def records(field: str, struct_name: str, cls: Any, fields: dict[str, str]) -> list[Any]:
        return [r.record(item, struct_name, cls, fields) for item in r.get(v, name, field)]

    head = {py_name: r.get(v, name, capnp_name) for py_name, capnp_name in _STATUS_HEAD.items()}
    events = r.get(v, name, "events")
    return Status(
        tasks_by_state=counters("tasksByState"),
        sent=counters("sent"),
        received=counters("received"),
        workers=records("workers", "WorkerStatus", WorkerStatus, fieldnames.WORKER_STATUS),
        clients=records("clients", "ClientStatus", ClientStatus, fieldnames.CLIENT_STATUS),
        clock_us=r.get(v, name, "clockUs"),
        functions=[
            _with_buckets(r, item, r.record(item, "FunctionStatus", FunctionStatus, fieldnames.FUNCTION_STATUS))
            for item in r.get(v, name, "functions")
        ],
        events=_dec_events(r, events if events is not None else View(0, 0, 0, 0)),
        failures=records("failures", "TaskFailure", TaskFailure, fieldnames.TASK_FAILURE),
        outputs=records("outputs", "OutputRecord", OutputRecord, fieldnames.OUTPUT_RECORD),
        departed=records("departed", "DepartedWorker", DepartedWorker, fieldnames.DEPARTED_WORKER),
        managers=records("managers", "ManagerStatus", ManagerStatus, fieldnames.MANAGER_STATUS),
        waiting=records("waiting", "WaitingTasks", WaitingTasks, fieldnames.WAITING_TASKS),
        **head,
    )


def _dec_events(r: Reader, e: View) -> TaskEvents:
    def get(field: str) -> Any:
        return r.get(e, "TaskEvents", field)

    ids = unpack_u64(get("taskIds"), None, "events.taskIds")
    n = len(ids)
    names = get("names")
    functions = unpack_u32(get("functions"), n, "events.functions")
    workers = unpack_u32(get("workers"), n, "events.workers")
    if any(f >= len(names) for f in functions) or any(w >= len(names) and w != NO_NAME for w in workers):
        raise ProtocolError("events: a name index past the names")
    return TaskEvents(
        task_ids=ids,
        kinds=check_u8(get("kinds"), n, "events.kinds"),
        statuses=check_u8(get("statuses"), n, "events.statuses"),
        functions=functions,
        workers=workers,
        times_us=unpack_u64(get("timesUs"), n, "events.timesUs"),
        durations_us=unpack_u64(get("durationsUs"), n, "events.durationsUs"),
        peak_memory=unpack_u64(get("peakMemory"), n, "events.peakMemory"),
        names=names,
        sample_every=get("sampleEvery"),
        dropped=get("dropped"),
    )


def _dec_explanations(r: Reader, v: View, name: str, p: Sequence[Payload]) -> TaskExplanations:
    _no_payloads(p, "taskExplanations")
    ids = unpack_u64(r.get(v, name, "taskIds"), None, "taskIds")
    texts = r.get(v, name, "texts")
    if len(texts) != len(ids):
        raise ProtocolError(f"texts: {len(texts)} values for {len(ids)} tasks")
    return TaskExplanations(ids, texts)


def _dec_output(r: Reader, v: View, name: str, p: Sequence[Payload]) -> TaskOutput:
    _no_payloads(p, "taskOutput")
    ids = unpack_u64(r.get(v, name, "taskIds"), None, "taskIds")
    streams = check_u8(r.get(v, name, "streams"), len(ids), "streams")
    texts = r.get(v, name, "texts")
    if len(texts) != len(ids):
        raise ProtocolError(f"texts: {len(texts)} values for {len(ids)} pieces")
    if any(s not in _OUTPUT_STREAMS for s in streams):
        raise ProtocolError("streams: a stream other than 1 (stdout), 2 (stderr) or 3 (error text)")
    return TaskOutput(ids, streams, texts)


_DECODERS: dict[str, Callable[[Reader, View, str, Sequence[Payload]], Any]] = {
    "hello": _dec_hello,
    "welcome": _dec_fields(Welcome, _WELCOME),
    "refused": _dec_fields(Refused, _REFUSED),
    "heartbeat": _dec_fields(Heartbeat, _HEARTBEAT),
    "heartbeatEcho": _dec_fields(HeartbeatEcho, _ECHO),
    "submitTasks": _dec_tasks(SubmitTasks),
    "dispatchTasks": _dec_tasks(DispatchTasks),
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
