"""One-task messages read without the codec's decoder, and sent on as they came when what goes out says exactly
what came in (ADR 0008).

A way of reading and of writing, not a second path: the scheduler reads a lone submit or result here (read_lone,
lone_message), feeds the record to its core like any other, and when the core's answer is that very task relabelled
(a dispatchTasks equal to the submitTasks; a taskResults equal to the worker's) it sends the bytes that came
(reused_frames) instead of encoding them again. Whatever lone_message returns equals what the codec's decode() gives,
or it returns None and the frames are decoded as usual (tests/property/test_lone_reading.py). The fields are cut out by
the codec's batch reader (scaler.protocol.codec.read_batch) at the slots scaler.protocol.layout gives.
"""

from __future__ import annotations

import dataclasses
import operator
import struct
from collections.abc import Sequence

from scaler.protocol.codec import read_batch
from scaler.protocol.columns import unpack_u64
from scaler.protocol.errors import ProtocolError
from scaler.protocol.frames import unpack as unpack_payloads
from scaler.protocol.layout import MESSAGE_UNION, STRUCTS
from scaler.protocol.records import (
    DispatchTasks,
    LoneResult,
    LoneTask,
    Payload,
    SubmitTasks,
    TaskBatch,
    TaskResults,
    TaskStatus,
)
from scaler.protocol.requirements import read as read_requirements


def read_lone(header: bytes) -> LoneTask | LoneResult | None:
    """The header of a lone submit or result (see LoneTask, LoneResult), or None: decode() it.

    Only the shape is checked here; lone_message reads the record, and the core decides as for any message."""
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
        return None  # task options: decode() reads them
    count = _U16_ONE.unpack(counts)[0]
    sizes = fields[_T_SIZES]
    if len(refs) != 8 * count or refs.count(0) != len(refs) or len(sizes) != 8 * count:
        return None
    task_id, function_id = _U64_TWO.unpack(ids + functions)
    blob, index = fields[_T_REQUIREMENTS], fields[_T_REQUIREMENT_INDEX]
    if not blob and not index:
        return LoneTask(header, task_id, function_id, flags[0], unpack_u64(sizes))
    requirements = _requirements(header, blob, index)
    if requirements is None:
        return None
    indexes = [_U16_ONE.unpack(index)[0]] if index else None
    return LoneTask(header, task_id, function_id, flags[0], unpack_u64(sizes), requirements, indexes)


def _requirements(header: bytes, blob: bytes, index: bytes) -> list[list[str]] | None:
    """The lone task's requirements column (shared lists: do not change them), or None if it cannot be read here:
    decode() reads it, or says what is wrong."""
    if not blob or len(index) not in (0, 2):
        return None
    words = int.from_bytes(header[_LIST_WORDS_AT : _LIST_WORDS_AT + 4], "little") >> 3
    requirements = read_requirements(blob, words)
    if requirements is None or (_U16_ONE.unpack(index)[0] if index else 0) >= len(requirements):
        return None
    return requirements


def lone_message(lone: LoneTask | LoneResult, parts: Sequence[Payload]) -> SubmitTasks | TaskResults | None:
    """The message the frames of a lone submit or result (read_lone of parts[0]) decode to, read without decode();
    None if the payload frames do not fit the header (decode() says what is wrong). Equals decode(parts) whenever it
    is not None (tests/property/test_lone_reading.py)."""
    frames = parts[1:]
    if isinstance(lone, LoneTask):
        try:
            payloads = unpack_payloads(lone.sizes, frames)
        except ProtocolError:
            return None
        n = len(lone.sizes)
        submit = SubmitTasks([lone.task_id], [lone.function_id], bytes((lone.flags,)), [n], [0] * n, None, payloads)
        if lone.requirements is not None:
            submit.requirements, submit.requirement_index = lone.requirements, lone.requirement_index
        return submit
    if len(frames) > 1 or sum(map(len, frames)) != lone.size:
        return None
    return TaskResults([lone.task_id], bytes((lone.status,)), [frames[0] if frames else b""])


def reused_frames(
    out: DispatchTasks | TaskResults, came: SubmitTasks | TaskResults, lone: LoneTask | LoneResult, parts: list[Payload]
) -> list[Payload] | None:
    """The frames to send for `out` if it says exactly what the lone message `came` (read from `parts`) said: every
    field equal, the payloads the very objects that came; the submit's header relabelled a dispatch, its requirements
    dropped (a dispatch carries none: dispatch_header). None: encode `out` as usual. The comparison covers every field
    of the records (a field added to them is compared too)."""
    if isinstance(out, TaskBatch):
        if type(came) is not SubmitTasks or out.requirements is not None or out.requirement_index is not None:
            return None
        fields = _DISPATCH_FIELDS_OF
    else:
        if type(came) is not TaskResults:
            return None
        fields = _RESULT_FIELDS_OF
    if fields(out) != fields(came):
        return None
    mine, theirs = out.payloads, came.payloads
    if len(mine) != len(theirs):
        return None
    for a, b in zip(mine, theirs):
        if a is not b:
            return None
    header = dispatch_header(lone) if isinstance(lone, LoneTask) else lone.header
    return [header, *parts[1:]]


def dispatch_header(submit: LoneTask) -> bytes:
    """The dispatchTasks header carrying the same task: submitTasks and dispatchTasks are both a TaskBatch, so only
    the Message union's discriminant (the root's data word, after the segment table and the root pointer) differs;
    and its requirements, which a dispatch does not carry: their pointers are made null (what they pointed to stays,
    unreachable)."""
    header = submit.header
    relabelled = header[:_KIND_AT] + _DISPATCH_KIND_BYTES + header[_KIND_AT + 2 :]
    if submit.requirements is None:
        return relabelled
    cut = bytearray(relabelled)
    for at in (_REQUIREMENTS_AT, _REQUIREMENT_INDEX_AT):
        cut[at : at + 8] = bytes(8)
    return bytes(cut)


_BATCH_FIELDS = tuple(f.name for f in dataclasses.fields(TaskBatch) if f.name != "payloads")
_DISPATCH_FIELDS = tuple(name for name in _BATCH_FIELDS if name not in ("requirements", "requirement_index"))
_DISPATCH_FIELDS_OF = operator.attrgetter(*_DISPATCH_FIELDS)  # the fields compared, as one tuple (read in C)
_RESULT_FIELDS = tuple(f.name for f in dataclasses.fields(TaskResults) if f.name != "payloads")
_RESULT_FIELDS_OF = operator.attrgetter(*_RESULT_FIELDS)
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
# Where the task batch's pointers are in a header of the layout read_batch reads (the batch's struct right after the
# Message root: 32 bytes in), for the requirements list pointer's element word count and for dispatch_header.
_REQUIREMENTS_AT = 32 + 8 * _T_REQUIREMENTS
_REQUIREMENT_INDEX_AT = 32 + 8 * _T_REQUIREMENT_INDEX
_LIST_WORDS_AT = _REQUIREMENTS_AT + 4  # the element word count of the requirements list pointer
_R_IDS, _R_STATUSES, _R_SIZES, _R_DURATIONS, _R_PEAKS, _R_CPU = (
    _RESULT_SLOTS[name] for name in ("taskIds", "statuses", "payloadSizes", "durationsUs", "peakMemory", "cpuTimesUs")
)
