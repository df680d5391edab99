"""The scheduler's key gate: its ZAP handler (libzmq asks it whether a connection's CurveZMQ key may in), the table
of authorized keys the shell consults for every message, and reloading that table when the key folders change.

Runs on the scheduler's event loop: a ZAP request is answered from a dictionary, nothing here waits.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import zmq
import zmq.utils.z85

from scaler.core.limiter import LogLimiter
from scaler.core.scheduler import PeerKey
from scaler.io.curve import MAIN_DOMAIN, MONITOR_DOMAIN
from scaler.protocol.messages import PeerKind
from scaler.security.keys import AuthorizedKey, ServerKeys, authorized_fingerprint, read_authorized

logger = logging.getLogger(__name__)

ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # where libzmq sends ZAP requests (RFC 27), one handler per context
_ROLES = {"client": PeerKind.CLIENT, "worker": PeerKind.WORKER}
_ADMITS = {MAIN_DOMAIN: (PeerKind.CLIENT, PeerKind.WORKER), MONITOR_DOMAIN: (PeerKind.CLIENT,)}


class KeyGate:
    """Admits CurveZMQ connections whose key is authorized for the socket's domain: clients and workers on the
    scheduler's address, clients on a TCP monitor address. The ZAP user id of an admitted connection is its public
    key (Z85); `key_of(user_id)` turns it back into the PeerKey the core checks, or None once it is no longer
    authorized."""

    def __init__(self, ctx: zmq.Context[Any], keys: ServerKeys) -> None:
        self.ctx = ctx
        self.server = keys
        self.directory = keys.directory
        self.denied = 0  # handshakes refused for their key
        self.by_user: dict[str, PeerKey] = {}
        self._fingerprint: tuple[object, ...] = ()
        self._limiter = LogLimiter()
        self.sock: zmq.Socket[Any] | None = None

    def start(self) -> zmq.Socket[Any]:
        """Load the authorized keys and bind the ZAP endpoint (before any CURVE socket of the context binds)."""
        self.reload(force=True)
        sock: zmq.Socket[Any] = self.ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(ZAP_ENDPOINT)
        self.sock = sock
        return sock

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close(linger=0)
            self.sock = None

    def key_of(self, user_id: str) -> PeerKey | None:
        return self.by_user.get(user_id)

    # ------------------------------------------------------------------------------------------- reloading
    def reload(self, force: bool = False) -> frozenset[bytes]:
        """Read the authorized folders again if they changed (or `force`); returns the public keys that were
        authorized and no longer are, or are now authorized for the other role (their sessions must end)."""
        fingerprint = authorized_fingerprint(self.directory)
        if fingerprint == self._fingerprint and not force:
            return frozenset()
        self._fingerprint = fingerprint
        table, problems = read_authorized(self.directory)
        for problem in problems:
            logger.warning("Scheduler: keys: %s", problem)
        before = {(key.public, key.role) for key in self.by_user.values()}
        self.by_user = {public.decode(): _peer_key(key) for public, key in table.items()}
        after = {(key.public, key.role) for key in self.by_user.values()}
        counts = {role: sum(1 for key in table.values() if key.role == role) for role in _ROLES}
        if before != after or force:
            logger.info(
                "Scheduler: %d client and %d worker keys authorized (from %s)",
                counts["client"],
                counts["worker"],
                self.directory,
            )
        return frozenset(public for public, _ in before - after)

    # ------------------------------------------------------------------------------------------- ZAP
    def on_readable(self) -> None:
        """Answer every waiting ZAP request (the socket's FD is edge-triggered: read until nothing is left)."""
        sock = self.sock
        while sock is not None:
            try:
                request = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            reply = self.answer(request)
            if reply is not None:
                try:
                    sock.send_multipart(reply, zmq.NOBLOCK)
                except zmq.ZMQError as exc:  # libzmq waits for this answer; nothing else to do if it cannot go
                    logger.warning("Scheduler: could not answer a ZAP request: %s", exc)

    def answer(self, request: list[bytes]) -> list[bytes] | None:
        """The reply frames for one ZAP request as a ROUTER receives it ([envelope..., b"", version, request id,
        domain, address, identity, mechanism, credentials...]); None if it is not one."""
        try:
            split = request.index(b"")
        except ValueError:
            return None
        envelope, body = request[: split + 1], request[split + 1 :]
        if len(body) < 6:
            return None
        version, request_id, domain, address, _identity, mechanism, *credentials = body
        if version != b"1.0":
            return [*envelope, b"1.0", request_id, b"400", b"unsupported ZAP version", b"", b""]
        key = None
        if mechanism == b"CURVE" and len(credentials) == 1 and len(credentials[0]) == 32:
            user = zmq.utils.z85.encode(credentials[0]).decode()
            key = self.by_user.get(user)
            if key is not None and key.role in _ADMITS.get(domain, ()):
                return [*envelope, version, request_id, b"200", b"OK", user.encode(), b""]
        self._deny(domain, address.decode(errors="replace"), mechanism, credentials, key)
        return [*envelope, version, request_id, b"400", b"key not authorized", b"", b""]

    def _deny(
        self, domain: bytes, address: str, mechanism: bytes, credentials: list[bytes], key: PeerKey | None
    ) -> None:
        self.denied += 1
        if not self._limiter.allow(time.monotonic(), "refused connection", address):
            return
        where = "the monitor address" if domain == MONITOR_DOMAIN else "the scheduler"
        if mechanism != b"CURVE" or len(credentials) != 1 or len(credentials[0]) != 32:
            why = f"it did not authenticate with a CurveZMQ key (mechanism {mechanism.decode(errors='replace')})"
        elif key is not None:
            why = f"its key {key.name!r} is a {key.role.name.lower()} key, which {where} does not admit"
        else:
            public = zmq.utils.z85.encode(credentials[0]).decode()
            why = (
                f"its key {public} is not authorized (its public key file belongs in {self.directory}/"
                "authorized_clients/ or authorized_workers/)"
            )
        logger.warning("Scheduler: refused a connection to %s from %s: %s", where, address, why)

    def summary(self) -> list[str]:
        return self._limiter.summary(time.monotonic())


def _peer_key(key: AuthorizedKey) -> PeerKey:
    return PeerKey(_ROLES[key.role], key.name, key.public)
