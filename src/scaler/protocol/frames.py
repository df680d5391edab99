"""Payloads <-> frames, as scaler.capnp's "Payload frames" says: big payloads travel alone (zero-copy), runs of
small ones share a frame, and no frame is bigger than MAX_FRAME: a payload bigger than that is cut into pieces of
MAX_FRAME bytes (the last one shorter), each a frame of its own. The scheduler takes no bigger frame (ZeroMQ drops
the connection before reading it): that bounds what a connection can make it hold before it authenticates.

A payload that came in several frames is a Pieces: the scheduler keeps and forwards it as it came; bytes() joins
it (one copy) where a whole payload is needed. Pure functions; a malformed layout raises ProtocolError.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scaler.protocol.errors import ProtocolError

MAX_FRAME = 1 << 20  # the largest frame sent to the scheduler: payload pieces, packs of small payloads, headers
ALONE_FROM = 64 * 1024  # payloads this big travel in frames of their own
PACK_UP_TO = MAX_FRAME  # a frame of packed small payloads never goes past this


class Pieces:
    """A payload that travels in several frames (bigger than MAX_FRAME), in order: len() is its size, bytes() its
    bytes joined."""

    __slots__ = ("frames", "size")

    def __init__(self, frames: Sequence[Any]) -> None:
        self.frames = list(frames)
        self.size = sum(map(len, self.frames))

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join(self.frames)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Pieces):
            return bytes(self) == bytes(other)
        if isinstance(other, (bytes, bytearray, memoryview)):
            return bytes(self) == bytes(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<Pieces {self.size:,} bytes in {len(self.frames)} frames>"


def whole(payload: Any) -> Any:
    """`payload` as one buffer: a Pieces joined (one copy), anything else as it is."""
    return bytes(payload) if type(payload) is Pieces else payload


def cut(payload: Any) -> list[Any]:
    """The frames a payload travels in: itself, or pieces of MAX_FRAME bytes (views: nothing is copied)."""
    if type(payload) is Pieces:
        return payload.frames  # as it came: each within MAX_FRAME already
    size = len(payload)
    if size <= MAX_FRAME:
        return [payload]
    view = memoryview(payload).cast("B")
    return [view[start : start + MAX_FRAME] for start in range(0, size, MAX_FRAME)]


def pack(payloads: Sequence[Any]) -> tuple[list[int], list[Any]]:
    """(sizes, frames) for `payloads` (bytes-like objects, zmq.Frames, Pieces)."""
    if len(payloads) == 1:  # the common single-task message: its payload is its frame
        only = payloads[0]
        size = len(only)
        if size <= MAX_FRAME and type(only) is not Pieces:
            return [size], [only] if size else []
    sizes = [len(p) for p in payloads]
    frames: list[Any] = []
    run: list[Any] = []
    run_bytes = 0
    for payload, size in zip(payloads, sizes):
        if size >= ALONE_FROM:
            if run:
                frames.append(b"".join(run) if len(run) > 1 else run[0])
                run, run_bytes = [], 0
            frames.extend(cut(payload))
        elif size:
            if run_bytes + size > PACK_UP_TO:
                frames.append(b"".join(run) if len(run) > 1 else run[0])
                run, run_bytes = [], 0
            run.append(payload)
            run_bytes += size
    if run:
        frames.append(b"".join(run) if len(run) > 1 else run[0])
    return sizes, frames


def unpack(sizes: Sequence[int], frames: Sequence[Any]) -> list[Any]:
    """The payloads whose sizes are `sizes`, cut out of `frames`. A payload filling a frame is the frame itself; one
    that does not fit in the rest of its frame must start a frame and fill whole frames: it is a Pieces."""
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
            if position or index + 1 >= count:
                raise ProtocolError(f"payload of {size} bytes does not fit in frame {index} ({length - position} left)")
            end = _span_end(frames, index, size)
            out.append(Pieces(frames[index:end]))
            index = end - 1
            current = frames[index]
            position = length = len(current)
            continue
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


def _span_end(frames: Sequence[Any], start: int, size: int) -> int:
    """The index after the last frame of a payload of `size` bytes filling frames from `start` on."""
    total = 0
    end = start
    while total < size and end < len(frames):
        total += len(frames[end])
        end += 1
    if total != size:
        raise ProtocolError(
            f"payload of {size} bytes spans frames {start} to {end - 1} but they hold {total} bytes: a payload that "
            "spans frames must fill them whole"
        )
    return end
