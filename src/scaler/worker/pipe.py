"""Encoding of agent <-> processor messages: one pickled frame, with big payloads riding along as extra frames
(pickle protocol 5 out-of-band buffers, so they are never copied into the pickle).

The two messages of a lone round trip have a shorter form, a fixed struct (a pickled frame starts with 0x80, these
with 0x01 to 0x04). Small payloads follow the struct in the same frame (one frame: the link's short path), big ones
(64 KiB or more in all) travel as frames of their own, never copied:
- RunTasks of one task, no objects, no help, every argument inline, no keywords: tag, task id (u64), function id
  (u64), flags (u8), argument count n (u16); then, with tag 0x01, n sizes (u32) and the arguments back to back;
  with tag 0x03, one frame per argument.
- Results of one task: tag, task id (u64), status (u8), duration in us (u64), peak memory (u64); then the payload,
  in the same frame (0x02) or the next one (0x04).
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Sequence
from typing import Any

from scaler.core.worker import messages as pm
from scaler.protocol.messages import Payload, inline_layout

_OUT_OF_BAND_FROM = 64 * 1024
_RUN_ONE = struct.Struct("<BQQBH")
_RESULT_ONE = struct.Struct("<BQBQQ")
_RUN_INLINE, _RESULT_INLINE, _RUN_FRAMES, _RESULT_FRAMES = 1, 2, 3, 4
_SIZES = [struct.Struct(f"<{n}I") for n in range(17)]  # argument sizes, for the usual argument counts


def _sizes(count: int) -> struct.Struct:
    return _SIZES[count] if count < len(_SIZES) else struct.Struct(f"<{count}I")


def _wrap(payloads: Sequence[Payload]) -> list[Any]:
    return [pickle.PickleBuffer(p) if len(p) >= _OUT_OF_BAND_FROM else p for p in payloads]  # type: ignore[arg-type]


def encode(message: pm.ToProcessor | pm.FromProcessor) -> list[Payload]:
    header: tuple[Any, ...]
    if isinstance(message, pm.RunTasks):
        if len(message.tasks) == 1 and not message.object_ids and not message.help_epoch:
            task_id, function_id, flags, refs, keywords = message.tasks[0]
            payloads = message.payloads
            count = len(refs)
            if keywords is None and count == len(payloads) and not any(refs):
                lengths = [len(p) for p in payloads]
                if sum(lengths) < _OUT_OF_BAND_FROM:
                    head = _RUN_ONE.pack(_RUN_INLINE, task_id, function_id, flags, count)
                    return [b"".join((head, _sizes(count).pack(*lengths), *payloads))]  # type: ignore[arg-type]
                return [_RUN_ONE.pack(_RUN_FRAMES, task_id, function_id, flags, count), *payloads]
        header = ("run", message.object_ids, message.tasks, _wrap(message.payloads), message.help_epoch)
    elif isinstance(message, pm.Results):
        if len(message.task_ids) == 1:
            payload = message.payloads[0]
            small = len(payload) < _OUT_OF_BAND_FROM
            one = _RESULT_ONE.pack(
                _RESULT_INLINE if small else _RESULT_FRAMES,
                message.task_ids[0],
                message.statuses[0],
                message.durations_us[0],
                message.peak_memory[0],
            )
            return [one + payload] if small else [one, payload]  # type: ignore[operator]
        header = (
            "results",
            message.task_ids,
            message.statuses,
            message.durations_us,
            message.peak_memory,
            _wrap(message.payloads),
        )
    elif isinstance(message, pm.DropObjects):
        header = ("drop", message.object_ids)
    elif isinstance(message, pm.Discard):
        header = ("discard", message.task_ids, message.confirm)
    elif isinstance(message, pm.Discarded):
        header = ("discarded", message.removed, message.requested)
    elif isinstance(message, pm.Resume):
        header = ("resume",)
    elif isinstance(message, pm.Exit):
        header = ("exit", message.reason)
    elif isinstance(message, pm.Ready):
        header = ("ready", message.pid)
    elif isinstance(message, pm.Blocked):
        header = ("blocked", message.epoch, message.waiting)
    else:
        header = ("unblocked",)
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(header, protocol=5, buffer_callback=buffers.append)
    return [data, *(b.raw() for b in buffers)]


def decode(frames: Sequence[Payload]) -> pm.ToProcessor | pm.FromProcessor:
    first: Any = frames[0]  # bytes-like (the link hands out bytearrays)
    tag = first[0] if len(first) else 0
    if tag == _RUN_INLINE or tag == _RUN_FRAMES:
        _, task_id, function_id, flags, count = _RUN_ONE.unpack_from(first)
        if tag == _RUN_FRAMES:
            payloads = list(frames[1:])
        else:
            position = _RUN_ONE.size + 4 * count
            payloads = []
            for size in _sizes(count).unpack_from(first, _RUN_ONE.size):
                payloads.append(first[position : position + size])
                position += size
            if position != len(first) or len(frames) != 1:
                raise ValueError("processor message: a task whose arguments do not add up to its frame")
        if len(payloads) != count:
            raise ValueError(f"processor message: a task of {count} arguments came with {len(payloads)}")
        return pm.RunTasks([], [(task_id, function_id, flags, inline_layout(count), None)], payloads)
    if tag == _RESULT_INLINE or tag == _RESULT_FRAMES:
        _, task_id, status, duration, peak = _RESULT_ONE.unpack_from(first)
        payload = first[_RESULT_ONE.size :] if tag == _RESULT_INLINE else frames[1]
        return pm.Results([task_id], bytes((status,)), [duration], [peak], [payload])
    header = pickle.loads(first, buffers=frames[1:])
    kind = header[0]
    if kind == "run":
        return pm.RunTasks(header[1], header[2], header[3], header[4])
    if kind == "results":
        return pm.Results(header[1], header[2], header[3], header[4], header[5])
    if kind == "drop":
        return pm.DropObjects(header[1])
    if kind == "discard":
        return pm.Discard(header[1], header[2])
    if kind == "discarded":
        return pm.Discarded(header[1], header[2])
    if kind == "resume":
        return pm.Resume()
    if kind == "exit":
        return pm.Exit(header[1])
    if kind == "ready":
        return pm.Ready(header[1])
    if kind == "blocked":
        return pm.Blocked(header[1], header[2])
    if kind == "unblocked":
        return pm.Unblocked()
    raise ValueError(f"unknown processor message {kind!r}")
