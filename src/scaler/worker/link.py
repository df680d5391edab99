"""The agent <-> processor link: a Unix socket pair carrying length-prefixed multi-frame messages.

A plain socket costs one write and one wake-up per message; ZeroMQ would add a wake-up of its I/O thread at
each end. Wire format of one message: u32 frame count, then one u64 length per frame, then the frames' bytes
(all little-endian). The reader hands out the buffer to receive into, so a frame's bytes go from the kernel
straight into the frame's own buffer (one copy, however big the payload).
"""

from __future__ import annotations

import asyncio
import itertools
import select
import socket
import struct
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

_COUNT = struct.Struct("<I")
_ONE = struct.Struct("<IQ")  # the header of a one-frame message (the common case)
_MAX_FRAMES = 1 << 20
_SCRATCH = 256 * 1024
_IOV_MAX = 512


def pack(frames: Sequence[Any]) -> list[Any]:
    """The buffers to write, in order, for one message made of `frames`."""
    return _pack(frames)[0]


def _pack(frames: Sequence[Any]) -> tuple[list[Any], int]:
    """pack(frames), and how many bytes they hold in all."""
    if len(frames) == 1:
        frame = frames[0]
        size = len(frame)
        return [_ONE.pack(1, size), frame], _ONE.size + size
    lengths = [len(f) for f in frames]
    header = _COUNT.pack(len(frames)) + struct.pack(f"<{len(frames)}Q", *lengths)
    return [header, *frames], len(header) + sum(lengths)


class FrameReader:
    """Turns a byte stream back into messages (lists of frames): get_buffer() says where the next bytes go,
    buffer_updated(n) says n bytes arrived there and returns the messages completed."""

    def __init__(self) -> None:
        self._scratch = bytearray(_SCRATCH)
        self._filled = 0  # bytes of _scratch holding unparsed data
        self._frames: list[bytearray] = []  # frames of the message being read
        self._lengths: tuple[int, ...] = ()
        self._target: bytearray | None = None  # a big frame being received in place
        self._target_filled = 0

    def get_buffer(self) -> memoryview:
        if self._target is not None:
            return memoryview(self._target)[self._target_filled :]
        if self._filled == len(self._scratch):  # a header bigger than the scratch space: make room
            self._scratch.extend(bytes(len(self._scratch)))
        return memoryview(self._scratch)[self._filled :]

    def buffer_updated(self, count: int) -> list[list[bytearray]]:
        if self._target is not None:
            self._target_filled += count
            if self._target_filled < len(self._target):
                return []
            self._frames.append(self._target)
            self._target = None
        else:
            self._filled += count
        return self._parse()

    def feed(self, data: bytes) -> list[list[bytearray]]:
        """Convenience for tests: push `data` through get_buffer/buffer_updated."""
        messages: list[list[bytearray]] = []
        view = memoryview(data)
        while view:
            buffer = self.get_buffer()
            count = min(len(buffer), len(view))
            buffer[:count] = view[:count]
            view = view[count:]
            messages += self.buffer_updated(count)
        return messages

    def _parse(self) -> list[list[bytearray]]:
        messages: list[list[bytearray]] = []
        position = self._parse_one_frame_messages(messages)
        if position == self._filled and not self._lengths:  # all of it consumed, nothing partial
            self._filled = 0
            return messages
        return self._parse_the_rest(messages, position)

    def _parse_one_frame_messages(self, messages: list[list[bytearray]]) -> int:
        """Whole one-frame messages at the start of the scratch space (the common case: no partial state); returns
        where they end."""
        position = 0
        scratch, filled = self._scratch, self._filled
        while not self._lengths and filled - position >= _ONE.size:
            count, length = _ONE.unpack_from(scratch, position)
            end = position + _ONE.size + length
            if count != 1 or end > filled:
                break
            messages.append([scratch[position + _ONE.size : end]])
            position = end
        return position

    def _parse_the_rest(self, messages: list[list[bytearray]], position: int) -> list[list[bytearray]]:
        scratch, filled = self._scratch, self._filled
        while True:
            if not self._lengths:
                if filled - position < _COUNT.size:
                    break
                (count,) = _COUNT.unpack_from(scratch, position)
                if count > _MAX_FRAMES or count == 0:
                    raise ValueError(f"processor link: a message of {count} frames")
                if filled - position < _COUNT.size + 8 * count:
                    break
                self._lengths = struct.unpack_from(f"<{count}Q", scratch, position + _COUNT.size)
                position += _COUNT.size + 8 * count
            while len(self._frames) < len(self._lengths):
                length = self._lengths[len(self._frames)]
                available = filled - position
                if available >= length:
                    self._frames.append(scratch[position : position + length])
                    position += length
                    continue
                if length > _SCRATCH // 2:  # receive the rest of a big frame in place
                    self._target = bytearray(length)
                    self._target[:available] = scratch[position:filled]
                    self._target_filled = available
                    position = filled
                break
            if len(self._frames) < len(self._lengths):
                break
            messages.append(self._frames)
            self._frames, self._lengths = [], ()
        remaining = filled - position
        if position:
            scratch[:remaining] = scratch[position:filled]
        self._filled = remaining
        if self._target is not None and self._target_filled >= len(self._target):
            self._frames.append(self._target)
            self._target = None
            return messages + self._parse()
        return messages


class BlockingLink:
    """The processor's end: sends wait until written, receives wait up to a timeout. The socket itself stays
    non-blocking, so one thread may send while another receives."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.reader = FrameReader()
        self.pending: list[list[bytearray]] = []

    def send(self, frames: Sequence[Any]) -> None:
        buffers = _write_now(self.sock, *_pack(frames))
        while buffers:
            try:
                _send_some(self.sock, buffers)
                return
            except BlockingIOError:
                select.select([], [self.sock.fileno()], [])

    def receive(self, timeout: float | None) -> list[bytearray] | None:
        """The next message; None if nothing came within `timeout` (0: do not wait). Raises EOFError."""
        while not self.pending:
            if timeout != 0:  # a caller that may wait expects nothing yet: wait first (no failed read)
                readable, _, _ = select.select([self.sock.fileno()], [], [], timeout)
                if not readable:
                    return None
            try:
                count = self.sock.recv_into(self.reader.get_buffer())
            except BlockingIOError:
                if timeout == 0:
                    return None
                continue
            if not count:
                raise EOFError("the agent closed the link")
            self.pending.extend(self.reader.buffer_updated(count))
        return self.pending.pop(0)


def _write_now(sock: socket.socket, buffers: list[Any], total: int) -> deque[memoryview] | None:
    """Write what the socket takes of `buffers` (`total` bytes) at once; returns the rest (None: all written)."""
    try:
        sent = sock.sendmsg(buffers) if len(buffers) <= _IOV_MAX else 0
    except BlockingIOError:
        sent = 0
    if sent == total:
        return None
    rest: deque[memoryview] = deque()
    for buffer in buffers:
        size = len(buffer)
        if sent >= size:
            sent -= size
            continue
        view = memoryview(buffer).cast("B")
        rest.append(view[sent:] if sent else view)
        sent = 0
    return rest


def _send_some(sock: socket.socket, buffers: deque[memoryview]) -> None:
    """Write from the front of `buffers` until done or the socket is full (raises BlockingIOError)."""
    while buffers:
        sent = sock.sendmsg(list(itertools.islice(buffers, _IOV_MAX)))
        while buffers and sent >= len(buffers[0]):  # empty buffers go too, even when nothing was sent
            sent -= len(buffers.popleft())
        if sent:
            buffers[0] = buffers[0][sent:]


class AsyncLink:
    """The agent's end, on its asyncio loop: writes never block (what the kernel does not take waits for the
    socket to drain), reads go straight into the frame reader's buffers."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        on_messages: Callable[[list[list[bytearray]]], None],
    ) -> None:
        sock.setblocking(False)
        self.loop = loop
        self.sock = sock
        self.on_messages = on_messages
        self.reader = FrameReader()
        self.out: deque[memoryview] = deque()
        self.closed = False
        loop.add_reader(sock.fileno(), self._readable)

    def send(self, frames: Sequence[Any]) -> None:
        if self.closed:
            return
        if self.out:  # waiting for the socket to drain: queue behind
            self.out.extend(memoryview(b).cast("B") for b in pack(frames))
            return
        try:
            rest = _write_now(self.sock, *_pack(frames))
        except OSError:
            self.close()
            return
        if rest:
            self.out = rest
            self.loop.add_writer(self.sock.fileno(), self._writable)

    def _writable(self) -> None:
        try:
            _send_some(self.sock, self.out)
        except BlockingIOError:
            return
        except OSError:
            self.close()
            return
        self.loop.remove_writer(self.sock.fileno())

    def _readable(self) -> None:
        messages: list[list[bytearray]] = []
        while not self.closed:
            buffer = self.reader.get_buffer()
            try:
                count = self.sock.recv_into(buffer)
            except BlockingIOError:
                break
            except OSError:
                count = 0
            if not count:
                self.close()
                break
            messages += self.reader.buffer_updated(count)
            if count < len(buffer):  # the socket had no more: do not ask again (that would raise)
                break
        if messages:
            self.on_messages(messages)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.loop.remove_reader(self.sock.fileno())
        self.loop.remove_writer(self.sock.fileno())
        self.out.clear()
        self.sock.close()
