"""The protocol's Cap'n Proto codec in pure Python (standard library only, no pycapnp): for interpreters that have no
pycapnp (PyPy). The same contract as scaler.protocol.codec: `encode(message)` gives the frames, header first;
`decode(frames, accept)` gives the record or raises ProtocolError, never another exception.

This module maps records to fields and checks what codec.py checks; scaler.protocol.wire reads and writes the
Cap'n Proto words (field positions from scaler.protocol.layout, data generated from scaler.capnp). It sets fields in
the order codec.py does, so its headers are the bytes codec.py gives wherever codec.py writes one segment (pycapnp
splits headers over 8 KiB; this always writes one); it reads any valid message (several segments, far pointers),
bounded like codec.py. The batches the scheduler handles most (taskResults, submitTasks and dispatchTasks without
keywords) take a direct path, as in codec.py's fastpath. Pure; no I/O. Written for Python 3.9 syntax.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import Any, TypeVar

from scaler.protocol import columns, fieldnames
from scaler.protocol import requirements as requirement_list
from scaler.protocol.columns import check_u8, pack_i32, pack_u16, pack_u32, pack_u64, set_requirements
from scaler.protocol.errors import ProtocolError, UnexpectedMessage
from scaler.protocol.frames import pack as pack_payloads
from scaler.protocol.frames import unpack as unpack_payloads
from scaler.protocol.layout import STRUCTS
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
    FreeObjects,
    FunctionStatus,
    Heartbeat,
    HeartbeatEcho,
    Hello,
    IdMessage,
    Message,
    OutputRecord,
    Payload,
    PeerKind,
    PutObjects,
    ReasonMessage,
    Refused,
    Shutdown,
    ShutdownRequest,
    Status,
    SubmitTasks,
    TaskBatch,
    TaskEvents,
    TaskFailure,
    TaskOutput,
    TaskResults,
    TasksStarted,
    TaskStatus,
    Welcome,
    WorkerStatus,
)
from scaler.protocol.wire import KINDS, LAYOUT, MEMBER_STRUCT, NAMES, Builder, Reader, View

_TASK_FIELDS = tuple(field for field, _, _ in sorted(STRUCTS["TaskBatch"][2], key=lambda f: f[2]))  # by pointer slot
_REQUIREMENTS_SLOT = _TASK_FIELDS.index("requirements")
_RESULTS_KIND = KINDS["taskResults"]
_RESULT_FIELDS = tuple(field for field, _, _ in sorted(STRUCTS["ResultBatch"][2], key=lambda f: f[2]))
_Batch = TypeVar("_Batch", SubmitTasks, DispatchTasks)
_LITTLE_ENDIAN = sys.byteorder == "little"
_LAST_STATUS = max(TaskStatus)
_OUTPUT_STREAMS = frozenset({OUTPUT_STDOUT, OUTPUT_STDERR, OUTPUT_ERROR})
_ZEROS = [bytes(n) for n in range(8)]
_PYPY = sys.implementation.name == "pypy"


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
    name = MESSAGE_NAMES[type(message)]
    if name in ("submitTasks", "dispatchTasks") and not message.keywords:  # type: ignore[union-attr]
        return _data_only_tasks(name, message)  # type: ignore[arg-type]
    if name == "taskResults":
        return _data_only_results(message)  # type: ignore[arg-type]
    b = Builder()
    at = b.message(name)
    payloads = _ENCODERS[name](b, at, MEMBER_STRUCT[name], message)
    return [b.frame(), *payloads]


def _data_only(
    kind: int, pointer_count: int, columns: Sequence[bytes | None], list_slot: int = -1, list_words: int = 0
) -> bytes:
    """A Message whose member is a struct of `pointer_count` Data fields, set in slot order (None: not set): what
    codec.py's fast writer gives. One join; no builder. `list_slot`: a slot that holds a struct list instead (its
    bytes from the tag word, scaler.protocol.requirements.blob) of `list_words` element words."""
    pieces: list[bytes] = []
    pointers: list[int] = []
    position = 3 + pointer_count  # the word where the next column goes
    for slot, column in enumerate(columns):
        if column is None:
            pointers.append(0)
            continue
        size = len(column)
        if slot == list_slot:
            pointers.append((((position - 4 - slot) << 2) | 1) | (((list_words << 3) | 7) << 32))
        else:
            pointers.append((((position - 4 - slot) << 2) | 1) | (((size << 3) | 2) << 32))
        pieces.append(column)
        pieces.append(_ZEROS[-size & 7])
        position += (size + 7) >> 3
    pointers += [0] * (pointer_count - len(columns))
    head = struct.pack(f"<IIQQQ{pointer_count}Q", 0, position, 1 << 32 | 1 << 48, kind, pointer_count << 48, *pointers)
    return head + b"".join(pieces)


def _option_columns(m: TaskBatch) -> list[bytes | None]:
    return [
        None if m.timeouts_ms is None else pack_u32(m.timeouts_ms),
        None if m.retries is None else bytes(m.retries),
        None if m.priorities is None else pack_i32(m.priorities),
    ]


def _data_only_tasks(name: str, m: TaskBatch) -> list[Payload]:
    sizes, frames = pack_payloads(m.payloads)
    columns: list[bytes | None] = [
        pack_u64(m.task_ids),
        pack_u64(m.function_ids),
        bytes(m.flags),
        pack_u16(m.arg_counts),
        pack_u64(m.arg_refs),
        None,  # keywords
        pack_u64(sizes),
    ]
    if m.timeouts_ms is not None or m.retries is not None or m.priorities is not None or m.requirements:
        columns += _option_columns(m)
    words = 0
    if m.requirements:
        blob, words = requirement_list.blob(m.requirements)
        columns.append(blob)
        columns.append(None if m.requirement_index is None else pack_u16(m.requirement_index))
    frames.insert(0, _data_only(KINDS[name], LAYOUT["TaskBatch"][1], columns, _REQUIREMENTS_SLOT, words))
    return frames


def _data_only_results(m: TaskResults) -> list[Payload]:
    sizes, frames = pack_payloads(m.payloads)
    columns: list[bytes | None] = [
        pack_u64(m.task_ids),
        bytes(m.statuses),
        None if m.durations_us is None else pack_u64(m.durations_us),
        None if m.peak_memory is None else pack_u64(m.peak_memory),
        pack_u64(sizes),
        None if m.cpu_times_us is None else pack_u64(m.cpu_times_us),
    ]
    frames.insert(0, _data_only(KINDS["taskResults"], LAYOUT["ResultBatch"][1], columns))
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
}
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
}


def _fields_of(fields: dict[str, str]) -> Callable[[Builder, int, str, Any], list[Payload]]:
    def encoder(b: Builder, at: int, name: str, m: Any) -> list[Payload]:
        _set_all(b, at, name, m, fields)
        return []

    return encoder


def _enc_tasks(b: Builder, at: int, name: str, m: TaskBatch) -> list[Payload]:
    """A batch with keywords or requirements, in codec.py's (pycapnp's) order: payloadSizes last."""
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
    if m.requirements:  # after payloadSizes, as codec.py sets them
        data, fields = LAYOUT[name][0], LAYOUT[name][2]
        elements = b.structs(at + data + fields["requirements"][1], "Requirement", len(m.requirements))
        for element, required in zip(elements, m.requirements):
            if required:
                b.set(element, "Requirement", "capabilities", required)
        if m.requirement_index is not None:
            b.set(at, name, "requirementIndex", pack_u16(m.requirement_index))
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
    "shutdown": _fields_of({"reason": "reason"}),
    "error": _enc_error,
    "status": _enc_status,
    "taskOutput": _enc_output,
}


_HEAD = struct.Struct("<IIQQQ")  # segment table (one segment), root pointer, Message's data word, member pointer
_ROOT = (1 << 32) | (1 << 48)  # the root pointer of a one-segment message: the Message struct right after it
_DATA_ONLY = {  # kind -> (name, the member struct's pointer word, the fields by slot, how to read the pointers)
    KINDS[name]: (name, LAYOUT[s][1] << 48, fields, struct.Struct(f"<{LAYOUT[s][1]}Q"))
    for name, s, fields in (
        ("submitTasks", "TaskBatch", _TASK_FIELDS),
        ("dispatchTasks", "TaskBatch", _TASK_FIELDS),
        ("taskResults", "ResultBatch", _RESULT_FIELDS),
    )
}


def read_batch(header: bytes) -> tuple[int, tuple[bytes, ...]] | None:
    """(kind, the member struct's Data fields by pointer slot, null ones b"") of a one-segment batch message whose
    fields are all plain Data, laid out as every writer here lays them out (member struct right after the root),
    else None (the general reader decides). What codec.py's fast reader gives, for scaler.protocol.lone."""
    size = len(header)
    if size < 32:
        return None
    segments, words, root, data, member = _HEAD.unpack_from(header)
    kind = data & 0xFFFF
    entry = _DATA_ONLY.get(kind)
    if segments or root != _ROOT or size != 8 + 8 * words or entry is None or member != entry[1]:
        return None
    fields = entry[2]
    first = 32 + 8 * len(fields)  # the columns lie after the pointers
    if size < first:
        return None
    columns = _cut(header, entry[3].unpack_from(header, 32), kind != _RESULTS_KIND)
    if columns is None:
        return None
    return kind, tuple(columns)


def _cut(header: bytes, pointers: tuple[int, ...], tasks: bool) -> list[bytes] | None:
    """The fields the member struct's `pointers` point to (null ones b""), or None if one is not plain Data (but
    TaskBatch.requirements, a struct list, cut from its tag word up to the next field's bytes or the end)."""
    size = len(header)
    columns: list[bytes] = []
    at = 40  # the byte just after pointer 0
    struct_list = -1  # the slot of TaskBatch.requirements when set: a struct list, cut from its tag word
    begins = []  # where the fields that take bytes begin
    for slot, value in enumerate(pointers):
        if not value:
            columns.append(b"")
        elif value & 0x8000_0000:  # a negative offset
            return None
        elif value & 0x7_0000_0003 == 0x7_0000_0001 and slot == _REQUIREMENTS_SLOT and tasks:
            struct_list = at + 8 * ((value & 0xFFFFFFFF) >> 2)
            if struct_list + 8 * (1 + (value >> 35)) > size:
                return None
            columns.append(b"")  # cut below
        elif value & 0x7_0000_0003 != 0x2_0000_0001:  # not a byte list
            return None
        else:
            begin = at + 8 * ((value & 0xFFFFFFFF) >> 2)
            end = begin + (value >> 35)
            if end > size:
                return None
            columns.append(header[begin:end])
            if end > begin:
                begins.append(begin)
        at += 8
    if struct_list >= 0:  # up to the next field's bytes, or the end
        ends = [begin for begin in begins if begin > struct_list]
        columns[_REQUIREMENTS_SLOT] = header[struct_list : min(ends) if ends else size]
    return columns


def clear_caches() -> None:
    """Nothing to forget: this codec learns no message shapes (the same surface as codec.py's)."""


def _data_only_columns(header: bytes) -> tuple[str, dict[str, Any]] | None:
    """(name, fields by name) of a batch message read_batch() reads, else None."""
    read = read_batch(header)
    if read is None:
        return None
    entry = _DATA_ONLY[read[0]]
    return entry[0], dict(zip(entry[2], read[1]))


def _fast_decode(header: bytes, frames: Sequence[Payload], accept: frozenset | None) -> Message | None:  # type: ignore[type-arg]
    """The batch message read_batch() reads, or None (the general reader decodes it)."""
    fast = _data_only_columns(header)
    if fast is None:
        return None
    name, columns = fast
    if accept is not None and name not in accept:
        raise UnexpectedMessage(f"a {name!r} message is not expected here")
    if name == "taskResults":
        return _results(columns, frames[1:])
    required = columns["requirements"]
    if required:  # None: not readable from its own bytes alone: the general reader says why
        words = int.from_bytes(header[36 + 8 * _REQUIREMENTS_SLOT : 40 + 8 * _REQUIREMENTS_SLOT], "little") >> 3
        columns["requirements"] = required = requirement_list.read(required, words)
    if required is None:
        return None
    if name == "submitTasks":
        return _tasks(SubmitTasks, columns, frames[1:])
    return _tasks(DispatchTasks, columns, frames[1:])


def decode(frames: Sequence[Payload], accept: frozenset | None = None) -> Message:  # type: ignore[type-arg]
    """The message in `frames` (header first). Raises ProtocolError if it is not a valid message, or if it is of
    a kind not in `accept` (when given)."""
    if not frames:
        raise ProtocolError("empty message")
    header = bytes(frames[0])  # type: ignore[call-overload]
    fast = _fast_decode(header, frames, accept)
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
    if hello.kind not in (PeerKind.CLIENT, PeerKind.WORKER, PeerKind.MONITOR):
        raise ProtocolError(f"hello: unknown peer kind {hello.kind}")
    hello.kind = PeerKind(hello.kind)
    return hello


def _dec_tasks(cls: type[_Batch]) -> Callable[[Reader, View, str, Sequence[Payload]], _Batch]:
    def decoder(r: Reader, v: View, name: str, p: Sequence[Payload]) -> _Batch:
        c = dict(zip(_TASK_FIELDS, [r.get(v, name, field) for field in _TASK_FIELDS]))
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
    )
    timeouts, retries, priorities = c["timeoutsMs"], c["retries"], c["priorities"]
    if timeouts or retries or priorities:
        n = len(batch.task_ids)
        batch.timeouts_ms = unpack_u32(timeouts, n, "timeoutsMs") if timeouts else None
        batch.retries = check_u8(retries, n, "retries") if retries else None
        batch.priorities = unpack_i32(priorities, n, "priorities") if priorities else None
    if c.get("requirements") or c.get("requirementIndex"):
        set_requirements(batch, list(c.get("requirements") or []), c.get("requirementIndex") or b"")
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
) -> _Batch:
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
    return _results(dict(zip(_RESULT_FIELDS, [r.get(v, name, field) for field in _RESULT_FIELDS])), p)


def _results(c: dict[str, bytes], p: Sequence[Payload]) -> TaskResults:
    task_ids = unpack_u64(c["taskIds"], None, "taskIds")
    n = len(task_ids)
    statuses = check_u8(c["statuses"], n, "statuses")
    payloads = unpack_payloads(unpack_u64(c["payloadSizes"], None, "results.payloadSizes"), p)
    if len(payloads) != n:
        raise ProtocolError(f"{n} results but {len(payloads)} payloads")
    if n and max(statuses) > _LAST_STATUS:
        raise ProtocolError("statuses: unknown status value")
    profile = [unpack_u64(c[f], n, f) if c[f] else None for f in ("durationsUs", "peakMemory", "cpuTimesUs")]
    return TaskResults(task_ids, statuses, payloads, *profile)


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
    "shutdown": _dec_reason(Shutdown),
    "error": _dec_error,
    "status": _dec_status,
    "taskOutput": _dec_output,
}
