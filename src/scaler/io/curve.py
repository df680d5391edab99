"""CurveZMQ on our sockets: the options a server and a client socket need, and a watch on a connecting socket's
handshakes that turns a failed one into words a user can act on.

Sockets only; which keys to use is scaler.security.keys's business, who is admitted is the scheduler's key gate's.
"""

from __future__ import annotations

from typing import Any

import zmq
from zmq.utils.monitor import parse_monitor_message

from scaler.security.keys import PeerKeys

MAIN_DOMAIN = b"scaler"  # ZAP domain of the scheduler's address: clients and workers
MONITOR_DOMAIN = b"scaler-monitor"  # ZAP domain of a TCP monitor address: clients only

# A handshake the other end closed without saying why (HANDSHAKE_FAILED_NO_DETAIL) is what a wrong scheduler key gives,
# but also a connection the scheduler closed while too many were connecting at once (scheduler/connections.py):
# failure() reports it only when it happens this many times in a row (ZeroMQ retries after 0.1 s, then 0.2 s...).
UNCLEAR_FAILURES = 3
_HANDSHAKE_EVENTS = (
    zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)


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


class HandshakeWatch:
    """Watches a connecting socket's handshakes (set it up before connect). `failure()` reads what happened since
    the last look and returns a description of the first failed handshake, or None. Its `fd` only signals changes
    (like any ZeroMQ socket's), and may have signalled before anyone waited on it: call failure() when it fires and
    also now and then (on every tick).

    With `links=True` (a socket has one monitor, so the watch does it) failure() also notes, in the order they came,
    each connection whose handshake succeeded (True: with or without keys, ZeroMQ reports one) and each connection
    that closed (False); take_links() hands them over."""

    def __init__(
        self, sock: zmq.Socket[Any], address: str, keys: PeerKeys | None, role: str, links: bool = False
    ) -> None:
        self.address = address
        self.keys = keys
        self.role = role
        self.succeeded = False
        self._unclear = 0  # handshakes closed without a word since the last one that succeeded
        self._links: list[bool] | None = [] if links else None
        mask = _HANDSHAKE_EVENTS | (zmq.EVENT_DISCONNECTED if links else 0)
        self._events: zmq.Socket[Any] | None = sock.get_monitor_socket(mask)
        self.fd = int(self._events.getsockopt(zmq.FD))

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
            if kind in (zmq.EVENT_HANDSHAKE_SUCCEEDED, zmq.EVENT_DISCONNECTED):
                made = kind == zmq.EVENT_HANDSHAKE_SUCCEEDED
                self.succeeded = self.succeeded or made
                if made:
                    self._unclear = 0
                if self._links is not None:
                    self._links.append(made)
                continue
            if kind == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
                self._unclear += 1
                if self._unclear < UNCLEAR_FAILURES:
                    continue  # perhaps a connection closed by a scheduler too busy with others: ZeroMQ tries again
            return describe_failure(kind, int(event["value"]), self.address, self.keys, self.role)
        return None

    def close(self, sock: zmq.Socket[Any]) -> None:
        if self._events is not None:
            try:
                sock.disable_monitor()
            except zmq.ZMQError:
                pass
            self._events.close(linger=0)
            self._events = None


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
