"""CurveZMQ on our sockets: the options a server and a client socket need, and a watch on a connecting socket's
connections and handshakes that turns a failed handshake, or an address where nothing listens, into words a user can
act on (what the events mean is decided by the pure Attempts; HandshakeWatch only reads them).

Sockets only; which keys to use is scaler.security.keys's business, who is admitted is the scheduler's key gate's.
"""

from __future__ import annotations

import logging
from typing import Any

import zmq
from zmq.utils.monitor import parse_monitor_message

from scaler.security.keys import PeerKeys

logger = logging.getLogger(__name__)

MAIN_DOMAIN = b"scaler"  # ZAP domain of the scheduler's address: clients and workers
MONITOR_DOMAIN = b"scaler-monitor"  # ZAP domain of a TCP monitor address: clients only

# A handshake the other end closed without saying why (HANDSHAKE_FAILED_NO_DETAIL) is what a wrong scheduler key gives,
# but also a connection the scheduler closed while too many were connecting at once (scheduler/connections.py):
# failure() reports it only when it happens this many times in a row (ZeroMQ retries after 0.1 s, then 0.2 s...).
UNCLEAR_FAILURES = 3
# Nothing listens at an address when every attempt to connect there is refused (EVENT_CONNECT_RETRIED with no
# EVENT_CONNECTED since the one before) for this long. ZeroMQ tries again after 0.1 s, 0.2 s, 0.4 s... up to 2 s
# (io.sockets.new_dealer), so the verdict comes with the attempt at about 3.1 s: a scheduler that starts listening
# before then is reached, one that never does is reported within 5 s. The time is ZeroMQ's own: each
# EVENT_CONNECT_RETRIED carries the wait before the next attempt, so events read late (a loaded machine) change nothing.
REFUSED_SECONDS = 3.0
_HANDSHAKE_EVENTS = (
    zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
_WATCHED = _HANDSHAKE_EVENTS | zmq.EVENT_CONNECTED | zmq.EVENT_CONNECT_RETRIED
_KEEPS_TRYING = {
    "worker": "this worker keeps trying, and exits if no scheduler answers within its death timeout "
    "(--death-timeout-seconds)"
}


def make_server(sock: zmq.Socket[Any], secret: bytes, domain: bytes) -> None:
    """`sock` (before it binds) accepts only CurveZMQ connections whose key the ZAP handler of its context admits for
    `domain`; with no ZAP handler, nobody (ZAP_ENFORCE_DOMAIN)."""
    sock.setsockopt(zmq.CURVE_SERVER, 1)
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
    sock.setsockopt(zmq.ZAP_DOMAIN, domain)
    sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)


def make_client(sock: zmq.Socket[Any], keys: PeerKeys) -> None:
    """`sock` (before it connects) talks CurveZMQ with the scheduler whose public key `keys` pins, as `keys.pair`."""
    sock.setsockopt(zmq.CURVE_SERVERKEY, keys.server_public)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, keys.pair.public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, keys.pair.secret)


class Attempts:
    """What a connecting socket's events say, as they come (pure: events in, verdicts out; no clock).

    feed() returns the description of a failed handshake, or None. A handshake the other end closed without saying why
    (HANDSHAKE_FAILED_NO_DETAIL) counts only after UNCLEAR_FAILURES in a row. `refused` says, while it holds, that
    nothing listens at the address: attempts there were refused for REFUSED_SECONDS (the waits between them, as ZeroMQ
    reports them) with no connection made since the first of them; a connection made clears it (a scheduler started
    late is reached, and then nothing is reported)."""

    def __init__(
        self, address: str, keys: PeerKeys | None, role: str, refused_seconds: float = REFUSED_SECONDS
    ) -> None:
        self.address = address
        self.keys = keys
        self.role = role
        self.refused_seconds = refused_seconds
        self.succeeded = False
        self.refused: str | None = None
        self._unclear = 0  # handshakes closed without a word since the last one that succeeded
        self._refused_for: float | None = None  # seconds of refused attempts since a connection was last made

    def feed(self, kind: int, value: int) -> str | None:
        if kind == zmq.EVENT_CONNECTED or kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self._refused_for = None
            self.refused = None
            if kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.succeeded = True
                self._unclear = 0
            return None
        if kind == zmq.EVENT_CONNECT_RETRIED:
            self._on_retried(value / 1000)
            return None
        if kind == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            self._unclear += 1
            if self._unclear < UNCLEAR_FAILURES:
                return None  # perhaps a connection closed by a scheduler too busy with others: ZeroMQ tries again
        if kind & _HANDSHAKE_EVENTS:
            return describe_failure(kind, value, self.address, self.keys, self.role)
        return None  # (EVENT_DISCONNECTED: the watch notes it as a link closed)

    def _on_retried(self, wait: float) -> None:
        """ZeroMQ will try again after `wait` seconds: the attempt just made was refused, or a connection closed (then
        the count starts here; a connection made before the next attempt clears it)."""
        refused_for = self._refused_for or 0.0  # (None: this starts the count)
        if self._refused_for is not None and self.refused is None and refused_for >= self.refused_seconds:
            self.refused = describe_refused(self.address, self.role, refused_for)
        self._refused_for = refused_for + wait


class HandshakeWatch:
    """Watches a connecting socket's connections and handshakes (set it up before connect). `failure()` reads what
    happened since the last look and returns a description of the first failed handshake, or None; meanwhile it keeps
    `refused` (see Attempts), and with `log_refusals` logs a warning each time nothing is found listening (a worker
    keeps trying, and its log must say why nothing happens). Its `fd` only signals changes (like any ZeroMQ socket's),
    and may have signalled before anyone waited on it: call failure() when it fires and also now and then (on every
    tick).

    With `links=True` (a socket has one monitor, so the watch does it) failure() also notes, in the order they came,
    each connection whose handshake succeeded (True: with or without keys, ZeroMQ reports one) and each connection
    that closed (False); take_links() hands them over."""

    def __init__(
        self,
        sock: zmq.Socket[Any],
        address: str,
        keys: PeerKeys | None,
        role: str,
        links: bool = False,
        log_refusals: bool = True,
    ) -> None:
        self.address = address
        self.keys = keys
        self.role = role
        self.attempts = Attempts(address, keys, role)
        self.log_refusals = log_refusals
        self._links: list[bool] | None = [] if links else None
        mask = _WATCHED | (zmq.EVENT_DISCONNECTED if links else 0)
        self._events: zmq.Socket[Any] | None = sock.get_monitor_socket(mask)
        self.fd = int(self._events.getsockopt(zmq.FD))

    @property
    def succeeded(self) -> bool:
        return self.attempts.succeeded

    @property
    def refused(self) -> str | None:
        """Why nothing listens at the address, while that holds (Attempts.refused)."""
        return self.attempts.refused

    def take_links(self) -> list[bool]:
        """What failure() read of connections made (True) and closed (False) since the last call, in order."""
        links = self._links
        if not links:
            return []
        self._links = []
        return links

    def failure(self) -> str | None:
        events = self._events
        while events is not None:
            try:
                event = parse_monitor_message(events.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                return None
            kind = int(event["event"])
            if self._links is not None and kind in (zmq.EVENT_HANDSHAKE_SUCCEEDED, zmq.EVENT_DISCONNECTED):
                self._links.append(kind == zmq.EVENT_HANDSHAKE_SUCCEEDED)
            refused = self.attempts.refused
            failure = self.attempts.feed(kind, int(event["value"]))
            if refused is None and self.attempts.refused is not None and self.log_refusals:
                keeps_trying = _KEEPS_TRYING.get(self.role, f"this {self.role} keeps trying")
                logger.warning("%s: %s; %s", self.role.capitalize(), self.attempts.refused, keeps_trying)
            if failure is not None:
                return failure
        return None

    def close(self, sock: zmq.Socket[Any]) -> None:
        if self._events is not None:
            try:
                sock.disable_monitor()
            except zmq.ZMQError:
                pass
            self._events.close(linger=0)
            self._events = None


def describe_refused(address: str, role: str, seconds: float) -> str:
    """Nothing listens at `address`, and what to check."""
    if role == "monitor":
        where = 'the scheduler\'s monitor address (it logs "monitor address is ..." at start)'
    else:
        where = "the address the scheduler listens on (it logs it at start)"
    return (
        f"nothing listens at {address}: every attempt to connect there for {seconds:.0f}s was refused; check the "
        f"host and port against {where}, and that the scheduler is running"
    )


def describe_failure(kind: int, value: int, address: str, keys: PeerKeys | None, role: str) -> str:
    """Authentication failed, why (as far as the failed handshake tells), and what to check."""
    mismatch = kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL and value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
    if keys is None:  # which side noticed first decides what ZeroMQ reports: it is the missing keys either way
        return (
            f"authentication failed: the scheduler at {address} requires keys and this {role} has none; pass the "
            f"keys directory (keys=DIR, --keys DIR, or SCALER_KEYS=DIR) holding scheduler.key and {role}.key_secret"
        )
    if mismatch:
        return (
            f"authentication failed: this {role} has keys ({keys.source}) but the scheduler at {address} runs "
            "without keys; it will not fall back to an unencrypted connection: start the scheduler with --keys, "
            "or drop the keys here"
        )
    if kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return (
            f"authentication failed: the scheduler at {address} does not accept this {role}'s key ({keys.source}); "
            f"its public key must be in the scheduler's authorized_{role}s/ folder (scaler_keygen DIR --{role} NAME "
            "makes one there)"
        )
    return (
        f"authentication failed: the handshake with {address} failed: either scheduler.key next to {keys.source} is "
        "not the public key of the scheduler at that address, or that scheduler runs without keys (this "
        f"{role} never falls back to an unencrypted connection)"
    )
