"""The scheduler's monitor address: a ROUTER that monitors (scaler_top, scaler_ui, the joblib backend, any program)
connect to with a DEALER. A monitor says hello (kind monitor); the scheduler answers welcome, or refused, and then
sends it a status about once a second until its connection closes or it stops reading.

Bounded whatever a monitor sends: MAX_MONITORS subscribers (more are refused), frames of MONITOR_FRAME_BYTES at most
(libzmq drops a connection that sends a bigger one, before reading it; a hello needs a few hundred bytes), a few
messages read per connection before it is held back, and STATUS_QUEUE statuses waiting for each subscriber (one that
does not read misses them, then is dropped). Task data (the exception texts of failures, printed output) reaches
monitors only where the operator allows it (task_data_allowed). Shell code: sockets, no decisions about tasks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import zmq

from scaler.core.limiter import LogLimiter
from scaler.io.curve import MONITOR_DOMAIN, make_server
from scaler.io.frameinfo import frame_get, user_id
from scaler.io.sockets import HANDSHAKE_MS, bind_socket, small_to_bytes
from scaler.protocol.errors import ProtocolError
from scaler.protocol.messages import (
    PROTOCOL_VERSION,
    Hello,
    PeerKind,
    Refused,
    Status,
    Welcome,
    decode,
    encode,
)

logger = logging.getLogger(__name__)

TASK_DATA_CHOICES = ("auto", "on", "off")
MAX_MONITORS = 64  # subscribers at once
MONITOR_FRAME_BYTES = 4096  # the largest frame a monitor may send
RECEIVE_QUEUE = 4  # messages from one monitor waiting to be read before its connection is held back
STATUS_QUEUE = 4  # statuses waiting for one monitor; past it, it misses them
MISSED_AT_MOST = 30  # statuses in a row a monitor may miss (not reading) before it is dropped
READ_AT_MOST = 64  # messages read per wake-up
_HELLO_ONLY = frozenset({"hello"})


def withheld_because(policy: str, address: str, keys: bool) -> str:
    """Why statuses to the monitors of `address` carry no task data, or "" if they do: "on" always does, "off" never,
    "auto" (the default) where only those the operator chose can connect: an ipc:// monitor (a socket file only the
    scheduler's user can open) or a tcp:// one with keys (only monitor keys are admitted there)."""
    if policy not in TASK_DATA_CHOICES:
        raise ValueError(f"--monitor-task-data must be one of {', '.join(TASK_DATA_CHOICES)}, not {policy!r}")
    if policy == "off":
        return "task data (exception texts, printed output) is not published: scaler_scheduler --monitor-task-data off"
    if policy == "on" or not address.startswith("tcp://") or keys:
        return ""
    return (
        "task data (exception texts, printed output) is not published on a tcp:// monitor address without keys, where "
        "anyone who can connect reads it: use an ipc:// monitor address, or keys (a monitor key), or start the "
        "scheduler with --monitor-task-data on"
    )


@dataclass
class Subscriber:
    name: str
    user: str  # the ZAP user id its connection authenticated with ("" without keys)
    fd: int  # the descriptor of the connection it said hello over
    missed: int = 0  # statuses in a row it did not take


def bind_monitor_router(address: str, ctx: zmq.Context[Any], curve_secret: bytes | None) -> zmq.Socket[Any]:
    """The monitor socket. Over ipc only this user can connect (file permissions); over tcp with `curve_secret`,
    only the monitor keys the context's ZAP handler admits."""
    sock: zmq.Socket[Any] = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # sending to a monitor that left raises: it is forgotten then
    sock.setsockopt(zmq.SNDHWM, STATUS_QUEUE)
    sock.setsockopt(zmq.RCVHWM, RECEIVE_QUEUE)
    sock.setsockopt(zmq.MAXMSGSIZE, MONITOR_FRAME_BYTES)
    sock.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_MS)
    if curve_secret is not None and address.startswith("tcp://"):
        make_server(sock, curve_secret, MONITOR_DOMAIN)
    bind_socket(sock, address)
    return sock


class MonitorChannel:
    """The monitors subscribed on one ROUTER (bind_monitor_router). `on_readable` answers hellos; `publish` sends a
    status to each subscriber. `key_name(user_id)` is the name of the monitor key a connection authenticated with,
    None if it is not (or no longer) authorized; None for the function itself means no keys."""

    def __init__(
        self,
        sock: zmq.Socket[Any],
        scheduler_name: str,
        withheld: str,
        spoke: Callable[[int], None],
        key_name: Callable[[str], str | None] | None = None,
    ) -> None:
        self.sock = sock
        self.scheduler_name = scheduler_name
        self.withheld = withheld  # why statuses carry no task data here; "" if they do
        self.spoke = spoke
        self.key_name = key_name
        self.subscribers: dict[bytes, Subscriber] = {}
        self._peer_of_fd: dict[int, bytes] = {}  # the connection each subscriber said hello over
        self.refused = 0  # hellos refused (and messages that were not a monitor's hello)
        self._limiter = LogLimiter()

    def __len__(self) -> int:
        return len(self.subscribers)

    # ------------------------------------------------------------------------------------------- hellos
    def on_readable(self, now: float) -> None:
        for _ in range(READ_AT_MOST):
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            peer = frames[0].bytes
            fd = int(frame_get(frames[0], zmq.SRCFD))
            self.spoke(fd)
            user = user_id(frames[0]) if self.key_name is not None else ""
            try:
                message = decode(small_to_bytes(frames[1:]), _HELLO_ONLY)
            except ProtocolError as exc:
                self._refuse(now, peer, f"a monitor says hello (kind monitor) first: {exc}")
                continue
            assert isinstance(message, Hello)
            self._on_hello(now, peer, message, user, fd)

    def _on_hello(self, now: float, peer: bytes, hello: Hello, user: str, fd: int) -> None:
        """Subscribe the monitor that said `hello` over descriptor `fd`, or refuse it."""
        if hello.kind != PeerKind.MONITOR:
            self._refuse(
                now, peer, "this is the scheduler's monitor address: clients and workers connect to its address"
            )
            return
        if hello.protocol_version != PROTOCOL_VERSION:
            self._refuse(now, peer, f"protocol version {hello.protocol_version} is not {PROTOCOL_VERSION}")
            return
        key = self.key_name(user) if self.key_name is not None else ""
        if key is None:
            self._refuse(now, peer, "its key is no longer authorized", key_problem=True)
            return
        if peer not in self.subscribers and len(self.subscribers) >= MAX_MONITORS:
            self._refuse(now, peer, f"{MAX_MONITORS} monitors are subscribed already, the most this scheduler serves")
            return
        name = hello.name or "unnamed"
        if peer not in self.subscribers:
            logger.info(
                "Scheduler: monitor %s subscribed%s (%d now)",
                name,
                f" (key {key})" if key else "",
                len(self.subscribers) + 1,
            )
        before = self.subscribers.get(peer)
        if before is not None and self._peer_of_fd.get(before.fd) == peer:
            del self._peer_of_fd[before.fd]  # it came back over another connection: the old one's end is not its
        self.subscribers[peer] = Subscriber(name, user, fd)
        self._peer_of_fd[fd] = peer
        self._send(peer, encode(Welcome(0, self.scheduler_name, peer_timeout_ms=0)))

    def descriptors(self) -> set[int]:
        """The descriptors of the connections subscribed monitors said hello over."""
        return set(self._peer_of_fd)

    def closed(self, fd: int) -> None:
        """The connection on descriptor `fd` closed (the socket's DISCONNECTED event): its monitor, if it had one, is
        forgotten at once (else at the next status sent to it)."""
        peer = self._peer_of_fd.pop(fd, None)
        subscriber = self.subscribers.get(peer) if peer is not None else None
        if subscriber is not None and peer is not None:
            self._drop(peer, subscriber, "its connection closed")

    def _refuse(self, now: float, peer: bytes, reason: str, key_problem: bool = False) -> None:
        self.refused += 1
        self.subscribers.pop(peer, None)
        if self._limiter.allow(now, "refused monitor", 0):
            logger.warning("Scheduler: refused a monitor: %s", reason)
        self._send(peer, encode(Refused(reason, key_problem=key_problem)))

    # ------------------------------------------------------------------------------------------- statuses
    def publish(self, status: Status) -> None:
        """Send `status` to every subscriber (without its task data unless allowed; the status is changed)."""
        if not self.subscribers:
            return
        if self.withheld:
            status.failures, status.outputs = [], []
            status.withheld = self.withheld
        frames = encode(status)
        for peer, subscriber in list(self.subscribers.items()):
            if self.key_name is not None and self.key_name(subscriber.user) is None:
                self._drop(peer, subscriber, "its key is no longer authorized")
                self._send(peer, encode(Refused("its key was removed from the authorized keys", key_problem=True)))
                continue
            sent = self._send(peer, frames)
            if sent is None:
                self._drop(peer, subscriber, "its connection closed")
            elif not sent:
                subscriber.missed += 1
                if subscriber.missed >= MISSED_AT_MOST:
                    self._drop(peer, subscriber, f"it read none of the last {MISSED_AT_MOST} statuses")
            else:
                subscriber.missed = 0

    def _drop(self, peer: bytes, subscriber: Subscriber, why: str) -> None:
        del self.subscribers[peer]
        if self._peer_of_fd.get(subscriber.fd) == peer:
            del self._peer_of_fd[subscriber.fd]
        logger.info("Scheduler: monitor %s left (%s; %d now)", subscriber.name, why, len(self.subscribers))

    def _send(self, peer: bytes, frames: list[Any]) -> bool | None:
        """True: sent; False: its queue is full; None: it is gone."""
        try:
            self.sock.send_multipart([peer, *frames], zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return False
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                raise
            return None
        return True
