"""Reading one-task messages without pycapnp: what the scheduler forwards as it came (a lone submit, relabelled a
dispatch; a lone result) and what a client waiting for its only task reads in its own thread (ADR 0008).

A way of reading, not a second meaning: whatever these return equals what scaler.protocol.codec.decode() gives, or
they return None and the frames are decoded as usual (tests/property/test_lone_reading.py).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from scaler.protocol import codec
from scaler.protocol.columns import unpack_u64
from scaler.protocol.records import LoneResult, LoneTask, Payload, TaskResults, TaskStatus


def read_lone(header: bytes) -> LoneTask | LoneResult | None:
    """The header of a message the scheduler may forward as it is (see LoneTask, LoneResult), or None: decode() it.

    Only the shape is checked here; whether the task or result can be forwarded is for the scheduler's core."""
    if codec._fast is None:
        return None
    read = codec._fast.read(header)
    if read is None:
        return None
    kind, fields = read
    if kind == codec._SUBMIT_KIND:
        return _lone_task(header, fields)
    if kind == codec._RESULTS_KIND:
        ids, statuses, sizes = fields[codec._R_IDS], fields[codec._R_STATUSES], fields[codec._R_SIZES]
        if (
            len(ids) != 8
            or len(statuses) != 1
            or len(sizes) != 8
            or fields[codec._R_DURATIONS]
            or fields[codec._R_PEAKS]
            or fields[codec._R_CPU]
        ):
            return None
        if statuses[0] > _LAST_STATUS:
            return None  # malformed: decode() says so
        task_id, size = _U64_TWO.unpack(ids + sizes)
        return LoneResult(header, task_id, statuses[0], size)
    return None


def read_lone_result(parts: Sequence[Payload]) -> TaskResults | None:
    """The TaskResults that the frames of a lone result (one result, no profiling: read_lone) decode to, read without
    pycapnp; None if they are anything else (then decode() them). Whenever it is not None it equals decode(parts)
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
        fields[codec._T_IDS],
        fields[codec._T_FUNCTIONS],
        fields[codec._T_FLAGS],
        fields[codec._T_COUNTS],
        fields[codec._T_REFS],
    )
    if len(ids) != 8 or len(functions) != 8 or len(flags) != 1 or len(counts) != 2 or fields[codec._T_KEYWORDS]:
        return None
    if fields[codec._T_TIMEOUTS] or fields[codec._T_RETRIES] or fields[codec._T_PRIORITIES]:
        return None  # task options: the scheduler's slow path reads them
    count = _U16_ONE.unpack(counts)[0]
    sizes = fields[codec._T_SIZES]
    if len(refs) != 8 * count or refs.count(0) != len(refs) or len(sizes) != 8 * count:
        return None
    task_id, function_id = _U64_TWO.unpack(ids + functions)
    return LoneTask(header, task_id, function_id, flags[0], unpack_u64(sizes))


def dispatch_header(submit: LoneTask) -> bytes:
    """The dispatchTasks header carrying the same task: submitTasks and dispatchTasks are both a TaskBatch, so only
    the Message union's discriminant (the root's data word, after the segment table and the root pointer) differs."""
    assert codec._fast is not None
    return submit.header[:_KIND_AT] + _DISPATCH_KIND_BYTES + submit.header[_KIND_AT + 2 :]


_LAST_STATUS = max(TaskStatus)
_U16_ONE = struct.Struct("<H")
_U64_TWO = struct.Struct("<QQ")
_KIND_AT = 16
_DISPATCH_KIND_BYTES = codec._DISPATCH_KIND.to_bytes(2, "little") if codec._fast is not None else b""
