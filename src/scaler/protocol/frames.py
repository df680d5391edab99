"""Payloads <-> frames, as scaler.capnp's "Payload frames" says: big payloads travel alone (zero-copy), runs of
small ones share a frame. Pure functions; a malformed layout raises ProtocolError.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scaler.protocol.errors import ProtocolError

ALONE_FROM = 64 * 1024  # payloads this big travel in a frame of their own
PACK_UP_TO = 1024 * 1024  # a frame of packed small payloads is cut at about this size


def pack(payloads: Sequence[Any]) -> tuple[list[int], list[Any]]:
    """(sizes, frames) for `payloads` (bytes-like objects, zmq.Frames)."""
    if len(payloads) == 1:  # the common single-task message: its payload is its frame
        size = len(payloads[0])
        return [size], [payloads[0]] if size else []
    sizes = [len(p) for p in payloads]
    frames: list[Any] = []
    run: list[Any] = []
    run_bytes = 0
    for payload, size in zip(payloads, sizes):
        if size >= ALONE_FROM:
            if run:
                frames.append(b"".join(run) if len(run) > 1 else run[0])
                run, run_bytes = [], 0
            frames.append(payload)
        elif size:
            run.append(payload)
            run_bytes += size
            if run_bytes >= PACK_UP_TO:
                frames.append(b"".join(run))
                run, run_bytes = [], 0
    if run:
        frames.append(b"".join(run) if len(run) > 1 else run[0])
    return sizes, frames


def unpack(sizes: Sequence[int], frames: Sequence[Any]) -> list[Any]:
    """The payloads whose sizes are `sizes`, cut out of `frames`. A payload filling a frame is the frame itself."""
    if len(sizes) == 1 and len(frames) == 1 and sizes[0] and sizes[0] == len(frames[0]):
        return [frames[0]]  # the common single-task message
    out: list[Any] = []
    index = position = 0
    count = len(frames)
    current: Any = frames[0] if count else b""
    length = len(current)
    for size in sizes:
        if not size:
            out.append(b"")
            continue
        while position == length and index + 1 < count:
            index += 1
            current = frames[index]
            length = len(current)
            position = 0
        if length - position < size:
            raise ProtocolError(f"payload of {size} bytes does not fit in frame {index} ({length - position} left)")
        if position == 0 and size == length:
            out.append(current)
        else:
            if not isinstance(current, bytes):
                current = bytes(current)
            out.append(current[position : position + size])
        position += size
    while position == length and index + 1 < count:  # trailing empty frames are harmless
        index += 1
        length = len(frames[index])
        position = 0
    if index + 1 < count or position != length:
        raise ProtocolError("payload frames carry bytes no payload accounts for")
    return out
