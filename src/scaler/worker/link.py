"""The agent <-> processor link: a Unix socket pair carrying length-prefixed multi-frame messages.

A plain socket costs one write and one wake-up per message; ZeroMQ would add a wake-up of its I/O thread at
each end. Wire format of one message: u32 frame count, then one u64 length per frame, then the frames' bytes
(all little-endian). Parsing is incremental (bytes arrive in arbitrary pieces).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Sequence
from typing import Any

_COUNT = struct.Struct("<I")
_MAX_FRAMES = 1 << 20


def pack(frames: Sequence[Any]) -> list[Any]:
    """The buffers to write, in order, for one message made of `frames`."""
    header = _COUNT.pack(len(frames)) + struct.pack(f"<{len(frames)}Q", *(len(f) for f in frames))
    return [header, *frames]


class FrameReader:
    """Turns a byte stream back into messages (lists of frames)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes | bytearray | memoryview) -> list[list[bytes]]:
        self._buffer += data
        messages: list[list[bytes]] = []
        while True:
            message = self._take()
            if message is None:
                return messages
            messages.append(message)

    def _take(self) -> list[bytes] | None:
        buffer = self._buffer
        if len(buffer) < _COUNT.size:
            return None
        (count,) = _COUNT.unpack_from(buffer)
        if count > _MAX_FRAMES:
            raise ValueError(f"processor link: {count} frames in one message")
        head = _COUNT.size + 8 * count
        if len(buffer) < head:
            return None
        lengths = struct.unpack_from(f"<{count}Q", buffer, _COUNT.size)
        total = head + sum(lengths)
        if len(buffer) < total:
            return None
        view = memoryview(buffer)
        frames = []
        position = head
        for length in lengths:
            frames.append(bytes(view[position : position + length]))
            position += length
        view.release()
        del buffer[:total]
        return frames


class BlockingLink:
    """The processor's end: blocking sends, receives with a timeout."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = FrameReader()
        self.pending: list[list[bytes]] = []

    def send(self, frames: Sequence[Any]) -> None:
        self.sock.settimeout(None)
        buffers = [memoryview(b).cast("B") for b in pack(frames)]
        while buffers:
            sent = self.sock.sendmsg(buffers)
            while sent and buffers:
                if sent >= len(buffers[0]):
                    sent -= len(buffers[0])
                    buffers.pop(0)
                else:
                    buffers[0] = buffers[0][sent:]
                    sent = 0

    def receive(self, timeout: float | None) -> list[bytes] | None:
        """The next message; None if nothing came within `timeout` (0: do not wait). Raises EOFError."""
        if self.pending:
            return self.pending.pop(0)
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 20)
        except (TimeoutError, BlockingIOError):
            return None
        if not data:
            raise EOFError("the agent closed the link")
        self.pending.extend(self.reader.feed(data))
        return self.pending.pop(0) if self.pending else self.receive(timeout)
