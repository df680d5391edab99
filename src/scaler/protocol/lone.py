"""Reading one-task messages without the codec's decoder: what the scheduler forwards as it came (a lone submit,
relabelled a dispatch; a lone result) and what a client waiting for its only task reads in its own thread (ADR 0008).

A way of reading, not a second meaning: whatever these return equals what the codec's decode() gives, or they return
None and the frames are decoded as usual (tests/property/test_lone_reading.py). The fields are cut out by the active
codec's batch reader (scaler.protocol.active.read_batch) at the slots scaler.protocol.layout gives.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from scaler.protocol.active import read_batch
from scaler.protocol.columns import unpack_u64
from scaler.protocol.layout import MESSAGE_UNION, STRUCTS
from scaler.protocol.records import LoneResult, LoneTask, Payload, TaskResults, TaskStatus
from scaler.protocol.requirements import read as read_requirements


def read_lone(header: bytes) -> LoneTask | LoneResult | None:
    """The header of a message the scheduler may forward as it is (see LoneTask, LoneResult), or None: decode() it.

    Only the shape is checked here; whether the task or result can be forwarded is for the scheduler's core."""
    if read_batch is None:
        return None
    read = read_batch(header)
    if read is None:
        return None
    kind, fields = read
    if kind == _SUBMIT_KIND:
        return _lone_task(header, fields)
    if kind == _RESULTS_KIND:
        ids, statuses, sizes = fields[_R_IDS], fields[_R_STATUSES], fields[_R_SIZES]
        if (
            len(ids) != 8
            or len(statuses) != 1
            or len(sizes) != 8
            or fields[_R_DURATIONS]
            or fields[_R_PEAKS]
            or fields[_R_CPU]
        ):
            return None
        if statuses[0] > _LAST_STATUS:
            return None  # malformed: decode() says so
        task_id, size = _U64_TWO.unpack(ids + sizes)
        return LoneResult(header, task_id, statuses[0], size)
    return None


def read_lone_result(parts: Sequence[Payload]) -> TaskResults | None:
    """The TaskResults that the frames of a lone result (one result, no profiling: read_lone) decode to, read without
    decode(); None if they are anything else (then decode() them). Whenever it is not None it equals decode(parts)
    (tests/property/test_lone_reading.py): a way of reading, not a second path."""
    header = parts[0] if parts else None
    if type(header) is not bytes or len(parts) > 2:
        return None
    lone = read_lone(header)
    if not isinstance(lone, LoneResult):
        return None
    payload = parts[1] if len(parts) == 2 else b""
    if len(payload) != lone.size:
        return None
    return TaskResults([lone.task_id], bytes((lone.status,)), [payload])


def _lone_task(header: bytes, fields: tuple[bytes, ...]) -> LoneTask | None:
    ids, functions, flags, counts, refs = (
        fields[_T_IDS],
        fields[_T_FUNCTIONS],
        fields[_T_FLAGS],
        fields[_T_COUNTS],
        fields[_T_REFS],
    )
    if len(ids) != 8 or len(functions) != 8 or len(flags) != 1 or len(counts) != 2 or fields[_T_KEYWORDS]:
        return None
    if fields[_T_TIMEOUTS] or fields[_T_RETRIES] or fields[_T_PRIORITIES]:
        return None  # task options: the scheduler's slow path reads them
    count = _U16_ONE.unpack(counts)[0]
    sizes = fields[_T_SIZES]
    if len(refs) != 8 * count or refs.count(0) != len(refs) or len(sizes) != 8 * count:
        return None
    requirement = _requirement(header, fields[_T_REQUIREMENTS], fields[_T_REQUIREMENT_INDEX])
    if requirement is None:
        return None
    task_id, function_id = _U64_TWO.unpack(ids + functions)
    return LoneTask(header, task_id, function_id, flags[0], unpack_u64(sizes), requirement)


def _requirement(header: bytes, blob: bytes, index: bytes) -> frozenset[str] | None:
    """What the lone task requires, or None if it cannot be read here (decode() reads it, or says what is wrong)."""
    if not blob:
        return _NOTHING if not index else None
    words = int.from_bytes(header[_LIST_WORDS_AT : _LIST_WORDS_AT + 4], "little") >> 3
    key = (blob, index, words)
    known = _frozen.get(key)
    if known is not None:
        return known
    requirements = read_requirements(blob, words)
    if requirements is None or len(index) not in (0, 2):
        return None
    k = _U16_ONE.unpack(index)[0] if index else 0
    if k >= len(requirements):
        return None
    if len(_frozen) >= 256:
        _frozen.clear()
    known = _frozen[key] = frozenset(requirements[k])
    return known


def dispatch_header(submit: LoneTask) -> bytes:
    """The dispatchTasks header carrying the same task: submitTasks and dispatchTasks are both a TaskBatch, so only
    the Message union's discriminant (the root's data word, after the segment table and the root pointer) differs."""
    return submit.header[:_KIND_AT] + _DISPATCH_KIND_BYTES + submit.header[_KIND_AT + 2 :]


_NOTHING: frozenset[str] = frozenset()
_frozen: dict[tuple[bytes, bytes, int], frozenset[str]] = {}  # by the bytes read: what they require
_LAST_STATUS = max(TaskStatus)
_U16_ONE = struct.Struct("<H")
_U64_TWO = struct.Struct("<QQ")
_KIND_AT = 16
_SUBMIT_KIND, _DISPATCH_KIND, _RESULTS_KIND = (
    MESSAGE_UNION[name][0] for name in ("submitTasks", "dispatchTasks", "taskResults")
)
_DISPATCH_KIND_BYTES = _DISPATCH_KIND.to_bytes(2, "little")
_TASK_SLOTS = {name: slot for name, _, slot in STRUCTS["TaskBatch"][2]}
_RESULT_SLOTS = {name: slot for name, _, slot in STRUCTS["ResultBatch"][2]}
(
    _T_IDS,
    _T_FUNCTIONS,
    _T_FLAGS,
    _T_COUNTS,
    _T_REFS,
    _T_KEYWORDS,
    _T_SIZES,
    _T_TIMEOUTS,
    _T_RETRIES,
    _T_PRIORITIES,
    _T_REQUIREMENTS,
    _T_REQUIREMENT_INDEX,
) = (
    _TASK_SLOTS[name]
    for name in (
        "taskIds",
        "functionIds",
        "flags",
        "argCounts",
        "argRefs",
        "keywords",
        "payloadSizes",
        "timeoutsMs",
        "retries",
        "priorities",
        "requirements",
        "requirementIndex",
    )
)
_LIST_WORDS_AT = 32 + 8 * _T_REQUIREMENTS + 4  # the element word count of the requirements list pointer
_R_IDS, _R_STATUSES, _R_SIZES, _R_DURATIONS, _R_PEAKS, _R_CPU = (
    _RESULT_SLOTS[name] for name in ("taskIds", "statuses", "payloadSizes", "durationsUs", "peakMemory", "cpuTimesUs")
)
