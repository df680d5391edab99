"""The scheduler's key gate: its ZAP handler (libzmq asks it whether a connection's CurveZMQ key may in), the table
of authorized keys the shell consults for every message, and reloading that table when the key folders change.

Runs on the scheduler's event loop: a ZAP request is answered from a dictionary, nothing here waits. Keys that
cannot be read, or that another user could have changed, never change who is admitted: the last table read stays.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import zmq
import zmq.utils.z85

from scaler.core.limiter import LogLimiter
from scaler.core.scheduler import PeerKey
from scaler.errors import KeysError
from scaler.io.curve import MAIN_DOMAIN, MONITOR_DOMAIN
from scaler.protocol.messages import PeerKind
from scaler.security.keys import AuthorizedKey, ServerKeys, authorized_fingerprint, read_authorized
from scaler.security.ownership import KeysUnreadable

logger = logging.getLogger(__name__)

ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # where libzmq sends ZAP requests (RFC 27), one handler per context
# the roles the core knows (it refuses a hello whose kind is not its key's role); not "monitor"
_PEER_KINDS = {"client": PeerKind.CLIENT, "worker": PeerKind.WORKER, "manager": PeerKind.MANAGER}
_ADMITS = {MAIN_DOMAIN: ("client", "worker", "manager"), MONITOR_DOMAIN: ("monitor",)}
_TROUBLE_WINDOW_SECONDS = 60.0  # a folder that stays unreadable is logged once a minute, with a count of the rest


class KeyGate:
    """Admits CurveZMQ connections whose key is authorized for the socket's domain: clients, workers and worker
    managers on the scheduler's address, monitors on a TCP monitor address. The ZAP user id of an admitted connection
    is its public key (Z85); `key_of(user_id)` turns a client's, a worker's or a manager's back into the PeerKey the
    core checks, and `monitor_name(user_id)` a monitor's into its name; each gives None once the key is no longer
    authorized.

    `reload()` never lets a failed read change that table: keys that cannot be read now (KeysUnreadable) or that
    another user could change (KeysError) leave the last table in place, are logged (rate-limited) and tried again
    on the next call. At `start()` either is a KeysError: the scheduler does not start half-blind."""

    def __init__(self, ctx: zmq.Context[Any], keys: ServerKeys) -> None:
        self.ctx = ctx
        self.server = keys
        self.directory = keys.directory
        self.denied = 0  # handshakes refused for their key
        self.by_user: dict[str, PeerKey] = {}  # client, worker and manager keys only: what the core may see
        self.monitors: dict[str, str] = {}  # Z85 public key -> name, of the authorized monitor keys
        self._fingerprint: tuple[object, ...] = ()
        self._limiter = LogLimiter()
        self._trouble = LogLimiter(window_seconds=_TROUBLE_WINDOW_SECONDS, burst=1)
        self._failed_since: float | None = None  # since when reloading has failed, if it does
        self._failed_tries = 0
        self.sock: zmq.Socket[Any] | None = None

    def start(self) -> zmq.Socket[Any]:
        """Load the authorized keys and bind the ZAP endpoint (before any CURVE socket of the context binds). KeysError
        if they cannot be read (a folder that is not there admits nobody) or another user could change them."""
        try:
            fingerprint = authorized_fingerprint(self.directory)
            table, problems = read_authorized(self.directory)
        except KeysUnreadable as exc:
            raise KeysError(
                f"cannot read the authorized keys: {exc}: the scheduler does not start without them"
            ) from None
        self._fingerprint = fingerprint
        self._apply(table, problems, force=True)
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
        """The client, worker or manager key with this ZAP user id (Z85 public key); None for any other, monitors
        included."""
        return self.by_user.get(user_id)

    def monitor_name(self, user_id: str) -> str | None:
        """The name of the authorized monitor key with this ZAP user id; None for any other, or once removed."""
        return self.monitors.get(user_id)

    # ------------------------------------------------------------------------------------------- reloading
    def reload(self, force: bool = False) -> frozenset[bytes]:
        """Read the authorized folders again if they changed (or `force`); returns the client, worker and manager
        public keys that were authorized and no longer are, or are now authorized for another role (their sessions
        must end). Raises nothing for keys it cannot read or must refuse: it keeps the last table, logs, and tries
        again on the next call (the folders' fingerprint is recorded only once a read succeeds)."""
        try:
            fingerprint = authorized_fingerprint(self.directory)
            if fingerprint == self._fingerprint and not force and self._failed_since is None:
                return frozenset()
            table, problems = read_authorized(self.directory)
        except KeysUnreadable as exc:
            self._keep(logging.WARNING, "could not read the authorized keys", exc)
            return frozenset()
        except KeysError as exc:
            self._keep(logging.ERROR, "refused the authorized keys", exc)
            return frozenset()
        self._fingerprint = fingerprint
        if self._failed_since is not None:
            logger.warning(
                "Scheduler: could read the authorized keys again (after %d failed tries over %.0fs)",
                self._failed_tries,
                time.monotonic() - self._failed_since,
            )
            self._failed_since, self._failed_tries = None, 0
        return self._apply(table, problems, force)

    def _keep(self, level: int, what: str, exc: Exception) -> None:
        """A reload that failed: the table stays as it is; say so, at most once a minute for the same trouble."""
        now = time.monotonic()
        if self._failed_since is None:
            self._failed_since = now
        self._failed_tries += 1
        if self._trouble.allow(now, what, str(exc)):
            loaded = len(self.by_user) + len(self.monitors)
            logger.log(
                level,
                "Scheduler: %s: %s; keeping the %d keys loaded and trying again about every second",
                what,
                exc,
                loaded,
            )

    def _apply(self, table: dict[bytes, AuthorizedKey], problems: list[str], force: bool) -> frozenset[bytes]:
        for problem in problems:
            logger.warning("Scheduler: keys: %s", problem)
        before = {(key.public, key.role) for key in self.by_user.values()}
        self.by_user = {public.decode(): _peer_key(key) for public, key in table.items() if key.role in _PEER_KINDS}
        monitors = {public.decode(): key.name for public, key in table.items() if key.role == "monitor"}
        after = {(key.public, key.role) for key in self.by_user.values()}
        if before != after or monitors != self.monitors or force:
            counts = {role: sum(1 for key in table.values() if key.role == role) for role in _PEER_KINDS}
            logger.info(
                "Scheduler: %d client, %d worker, %d manager and %d monitor keys authorized (from %s)",
                counts["client"],
                counts["worker"],
                counts["manager"],
                len(monitors),
                self.directory,
            )
        self.monitors = monitors
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
        role_name = None  # (role, name) of an authorized key
        if mechanism == b"CURVE" and len(credentials) == 1 and len(credentials[0]) == 32:
            user = zmq.utils.z85.encode(credentials[0]).decode()
            role_name = self._role_of(user)
            if role_name is not None and role_name[0] in _ADMITS.get(domain, ()):
                return [*envelope, version, request_id, b"200", b"OK", user.encode(), b""]
        self._deny(domain, address.decode(errors="replace"), mechanism, credentials, role_name)
        return [*envelope, version, request_id, b"400", b"key not authorized", b"", b""]

    def _role_of(self, user: str) -> tuple[str, str] | None:
        key = self.by_user.get(user)
        if key is not None:
            return key.role.name.lower(), key.name
        name = self.monitors.get(user)
        return None if name is None else ("monitor", name)

    def _deny(
        self, domain: bytes, address: str, mechanism: bytes, credentials: list[bytes], key: tuple[str, str] | None
    ) -> None:
        self.denied += 1
        if not self._limiter.allow(time.monotonic(), "refused connection", address):
            return
        where = "the monitor address" if domain == MONITOR_DOMAIN else "the scheduler"
        if mechanism != b"CURVE" or len(credentials) != 1 or len(credentials[0]) != 32:
            why = f"it did not authenticate with a CurveZMQ key (mechanism {mechanism.decode(errors='replace')})"
        elif key is not None and domain == MONITOR_DOMAIN:
            why = (
                f"its key {key[1]!r} is a {key[0]} key; the monitor address admits monitor keys only (scaler_keygen "
                f"{self.directory} makes monitor.key_secret, for scaler_top and scaler_ui)"
            )
        elif key is not None and key[0] == "monitor":
            why = f"its key {key[1]!r} is a monitor key, which only the monitor address admits"
        elif key is not None:
            why = f"its key {key[1]!r} is a {key[0]} key, which {where} does not admit"
        else:
            public = zmq.utils.z85.encode(credentials[0]).decode()
            folders = (
                "authorized_monitors/"
                if domain == MONITOR_DOMAIN
                else "authorized_clients/, authorized_workers/ or authorized_managers/"
            )
            why = f"its key {public} is not authorized (its public key file belongs in {self.directory}/{folders})"
        logger.warning("Scheduler: refused a connection to %s from %s: %s", where, address, why)

    def summary(self) -> list[str]:
        now = time.monotonic()
        return self._limiter.summary(now) + self._trouble.summary(now)


def _peer_key(key: AuthorizedKey) -> PeerKey:
    return PeerKey(_PEER_KINDS[key.role], key.name, key.public)
