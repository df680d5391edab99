"""ZeroMQ sockets, configured in one place, and the frame conventions every shell uses.

Big payload frames stay zmq.Frame (zero-copy); small ones become bytes (cheaper to keep and compare). Frames are
sent and received through pyzmq's compiled socket methods directly: its pure-Python layer costs several
microseconds per frame (enum flag arithmetic), more than everything else a frame needs.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import zmq

from scaler.io.curve import MAIN_DOMAIN, make_client, make_server
from scaler.io.frameinfo import cffi_backend, frame_more
from scaler.io.ipc import check_private, claim, ipc_path, private_files
from scaler.protocol.frames import MAX_FRAME
from scaler.protocol.messages import Hello, Message, Payload, PeerKind, decode, encode
from scaler.security.keys import PeerKeys

COPY_BELOW = 64 * 1024  # frames smaller than this are copied (sending) or turned into bytes (receiving)
# The scheduler's ROUTER, towards each peer: messages waiting to be read before its connection is held back (it then
# waits in its own memory, TCP's flow control telling it to), and messages waiting to be sent before the peer counts
# as not reading (its session ends). Peers keep far fewer: what they send is batched, what they get is asked for.
ROUTER_RECEIVE_QUEUE = 1000
ROUTER_SEND_QUEUE = 100_000
# Connections waiting to be accepted: libzmq's default of 100 overflows when a fleet of workers starts at once (the
# kernel drops SYNs; 5,000 workers took 16-36 s to join instead of 2.8 s: benchmarks/fleet.py, docs/benchmarks.md).
# The kernel caps it at net.core.somaxconn.
ROUTER_BACKLOG = 4096
# What CurveZMQ adds to a frame on the wire: the MESSAGE command's name (8 bytes), nonce (8), flags (1) and box (16).
CURVE_OVERHEAD = 33
# A connection that has not completed its handshake this long after it was accepted is closed (libzmq's default: 30 s).
HANDSHAKE_MS = 10_000
_raw_send = zmq.backend.Socket.send
_raw_recv = zmq.backend.Socket.recv
_raw_get = zmq.backend.Socket.get
_SNDMORE = int(zmq.SNDMORE)
_RCVMORE = int(zmq.RCVMORE)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
_NOBLOCK = int(zmq.NOBLOCK)  # (an int: zmq's flags are enum.Flags, whose | is a Python call)

_context: zmq.Context[Any] | None = None
_context_pid = 0
_context_lock = threading.Lock()


def context() -> zmq.Context[Any]:
    """This process's ZeroMQ context (a fresh one after fork: a context never crosses a fork)."""
    global _context, _context_pid
    with _context_lock:
        if _context is None or _context_pid != os.getpid() or _context.closed:
            _context = zmq.Context(io_threads=1)
            _context_pid = os.getpid()
        return _context


def _common(sock: zmq.Socket[Any]) -> zmq.Socket[Any]:
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    return sock


def bind_router(
    address: str, ctx: zmq.Context[Any] | None = None, curve_secret: bytes | None = None
) -> zmq.Socket[Any]:
    """The scheduler's socket for clients and workers. With `curve_secret`, only CurveZMQ connections the context's
    ZAP handler admits get in. ZeroMQ drops a connection that sends a frame bigger than MAX_FRAME before reading it
    (peers cut bigger payloads: protocol.frames): a connection that has not authenticated (or said anything) can make
    the scheduler hold that much at most; the scheduler bounds how many such connections it keeps (connections.py)."""
    sock: zmq.Socket[Any] = _common((ctx or context()).socket(zmq.ROUTER))
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # sending to a gone peer raises instead of dropping silently
    sock.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a peer reconnecting with its routing id takes its session back
    sock.setsockopt(zmq.RCVHWM, ROUTER_RECEIVE_QUEUE)
    sock.setsockopt(zmq.SNDHWM, ROUTER_SEND_QUEUE)
    sock.setsockopt(zmq.BACKLOG, ROUTER_BACKLOG)
    sock.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_MS)
    # With CurveZMQ libzmq reads each frame as an encrypted MESSAGE command: CURVE_OVERHEAD bytes more than its content.
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME + (CURVE_OVERHEAD if curve_secret is not None else 0))
    if curve_secret is not None:
        make_server(sock, curve_secret, MAIN_DOMAIN)
    bind_socket(sock, address)
    return sock


def new_dealer(identity: bytes, ctx: zmq.Context[Any] | None = None, keys: PeerKeys | None = None) -> zmq.Socket[Any]:
    """A client's or worker's socket towards the scheduler, not connected yet (watch its handshakes first: see
    io.curve.HandshakeWatch)."""
    sock: zmq.Socket[Any] = _common((ctx or context()).socket(zmq.DEALER))
    sock.setsockopt(zmq.IDENTITY, identity)
    sock.setsockopt(zmq.RECONNECT_IVL, 100)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
    if keys is not None:
        make_client(sock, keys)
    return sock


def new_subscriber(address: str, ctx: zmq.Context[Any] | None = None, keys: PeerKeys | None = None) -> zmq.Socket[Any]:
    """A monitor's socket towards a scheduler's monitor address (a DEALER), not connected yet; `keys` (a monitor key)
    are used over tcp only (an ipc monitor is guarded by file permissions). connect_subscriber connects it and says
    hello; the scheduler then sends it a status about once a second (scheduler/monitors.py)."""
    sock: zmq.Socket[Any] = (ctx or context()).socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, 16)
    sock.setsockopt(zmq.RECONNECT_IVL, 100)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
    if keys is not None and address.startswith("tcp://"):
        make_client(sock, keys)
    return sock


def subscribe(sock: zmq.Socket[Any], name: str = "") -> None:
    """Say hello as a monitor (again: a scheduler that restarted, or dropped us, knows us from then on)."""
    hello = Hello(PeerKind.MONITOR, name or f"monitor-{os.getpid()}", socket.gethostname(), os.getpid())
    try:
        send_frames(sock, list(encode(hello)), zmq.NOBLOCK)
    except zmq.Again:
        pass  # the queue towards the scheduler is full: an earlier hello waits there already


def connect_subscriber(
    address: str, ctx: zmq.Context[Any] | None = None, keys: PeerKeys | None = None, name: str = ""
) -> zmq.Socket[Any]:
    """A monitor's socket, connected to `address`, its hello sent (statuses follow)."""
    sock = new_subscriber(address, ctx, keys)
    sock.connect(address)
    subscribe(sock, name)
    return sock


def bind_socket(sock: zmq.Socket[Any], address: str) -> None:
    """Bind; an ipc path is claimed first (io.ipc.claim) and created so that only this user can connect."""
    path = ipc_path(address)
    if path is None:
        sock.bind(address)
        return
    claim(path)
    with private_files():
        sock.bind(address)
    check_private(path)


def _small_to_bytes(frames: Sequence[zmq.Frame]) -> list[Payload]:
    return [f.bytes if len(f) < COPY_BELOW else f for f in frames]


def _small_to_bytes_cffi(frames: Sequence[zmq.Frame | bytes]) -> list[Payload]:
    return [f if type(f) is bytes else (f.bytes if len(f) < COPY_BELOW else f) for f in frames]  # type: ignore[union-attr]


def _recv_frames(sock: zmq.Socket[Any], flags: int = 0) -> list[zmq.Frame]:
    """All frames of the next message, as zmq.Frames. Raises zmq.Again with NOBLOCK and nothing waiting."""
    frame = _raw_recv(sock, flags, False, False)
    frames = [frame]
    while frame.more:
        frame = _raw_recv(sock, 0, False, False)
        frames.append(frame)
    return frames


def _recv_frames_cffi(sock: zmq.Socket[Any], flags: int = 0) -> list[zmq.Frame]:
    """recv_frames on pyzmq's CFFI backend (PyPy), whose Frame.more stays False: libzmq says (frame_more)."""
    frame = _raw_recv(sock, flags, False, False)
    frames = [frame]
    while frame_more(frame):
        frame = _raw_recv(sock, 0, False, False)
        frames.append(frame)
    return frames


def _recv_copying_cffi(sock: zmq.Socket[Any], flags: int = 0) -> list[zmq.Frame]:
    """What read_waiting gives on pyzmq's CFFI backend (PyPy), where a zmq.Frame costs more than a copy: the first
    frame a zmq.Frame (a ROUTER's peer identity, whose properties the scheduler reads: frame_get), the others bytes,
    whatever their size (a PyPy scheduler, 3 paired runs: CPU per map of 100,000 x0.79-0.92, lone round trip
    x0.78-0.88; docs/benchmarks.md). small_to_bytes takes either."""
    frame = _raw_recv(sock, flags, False, False)
    frames: list[Any] = [frame]
    if frame_more(frame):
        frames.append(_raw_recv(sock, 0, True, False))
        while _raw_get(sock, _RCVMORE):
            frames.append(_raw_recv(sock, 0, True, False))
    return frames


recv_frames = _recv_frames_cffi if cffi_backend() else _recv_frames
_recv_waiting = _recv_copying_cffi if cffi_backend() else _recv_frames
small_to_bytes = _small_to_bytes_cffi if cffi_backend() else _small_to_bytes


def recv_message(sock: zmq.Socket[Any], flags: int = 0, accept: frozenset[str] | None = None) -> Message:
    """Receive and decode one message from a DEALER/SUB socket. Raises zmq.Again, ProtocolError."""
    return decode(small_to_bytes(recv_frames(sock, flags)), accept)


def send_message(sock: zmq.Socket[Any], message: Message, peer: bytes | None = None) -> bool:
    """Send `message` (to `peer`, on a ROUTER). On a DEALER made by new_dealer (no send limit) a send can only find
    nowhere to go when ZeroMQ ended the connection for good: a handshake failed (HANDSHAKE_FAILED_PROTOCOL or _AUTH,
    which HandshakeWatch reports) and ZeroMQ does not try again. Such a send would wait for ever, so the message is
    dropped instead and False returned; the watch says why at its next look."""
    frames = encode(message)
    if peer is not None:
        frames.insert(0, peer)
        send_frames(sock, frames)
        return True
    try:
        send_frames(sock, frames, _NOBLOCK)
    except zmq.Again:
        return False
    return True


def send_frames(sock: zmq.Socket[Any], frames: list[Any], first_flags: int = 0) -> None:
    """Send frames (bytes, memoryviews, zmq.Frames) as one message, without copying the big ones. `first_flags`:
    zmq.NOBLOCK raises zmq.Again when the peer's queue is full (the rest of a message never waits once its first
    frame went)."""
    last = frames[-1]
    count = len(frames) - 1
    if count == 0:
        _raw_send(sock, last, first_flags, len(last) < COPY_BELOW, False)
        return
    first = frames[0]
    _raw_send(sock, first, first_flags | _SNDMORE, len(first) < COPY_BELOW, False)
    for index in range(1, count):
        frame = frames[index]
        _raw_send(sock, frame, _SNDMORE, len(frame) < COPY_BELOW, False)
    _raw_send(sock, last, 0, len(last) < COPY_BELOW, False)


def socket_fd(sock: zmq.Socket[Any]) -> int:
    """The file descriptor to wait on for this socket's events (edge-triggered: drain, then re-check)."""
    return int(sock.getsockopt(zmq.FD))


def has_input(sock: zmq.Socket[Any]) -> bool:
    """Whether a message can be received now (reading ZMQ_EVENTS also re-arms the socket's FD)."""
    return bool(int(_raw_get(sock, _EVENTS)) & _POLLIN)


def read_waiting(sock: zmq.Socket[Any], burst: bool, limit: int) -> Iterator[list[zmq.Frame]]:
    """The messages waiting on a socket whose FD fired, for an event loop's reader, one at a time: a caller that
    stops early leaves the rest in the socket.

    Asking ZeroMQ whether input waits (has_input) costs a system call, so the first message is read without asking
    (nothing, if the FD fired for something else); more are read, up to `limit`, only in a `burst` (when the caller's
    last look, after its own sends, found more waiting). Hand the frames to small_to_bytes: on PyPy those after the
    first come as bytes (_recv_copying_cffi)."""
    try:
        first = _recv_waiting(sock, _NOBLOCK)
    except zmq.Again:
        return
    yield first
    if burst:
        count = 1
        while count < limit and has_input(sock):
            yield _recv_waiting(sock)
            count += 1
