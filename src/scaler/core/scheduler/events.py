"""What the scheduler core consumes (events) and produces (commands). Small frozen records; no behaviour."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

from scaler.core.common import Log as Log
from scaler.core.common import Stop as Stop  # the scheduler must stop (its exit code: 0)
from scaler.core.slotted import slotted
from scaler.protocol.records import Message, Payload, PeerKind, TaskResults


@slotted(frozen=True)
class PeerKey:
    """The CurveZMQ key a peer's connection authenticated with, as the shell's key check (ZAP) admitted it: the role
    it is authorized for, its name (the key file's) and its public key (Z85). Without keys there is none."""

    role: PeerKind
    name: str
    public: bytes

    def __repr__(self) -> str:
        return f"<PeerKey {self.role.name.lower()} {self.name} {self.public[:8].decode(errors='replace')}...>"


@slotted(frozen=True)
class Received:
    """A decoded message arrived from `peer` (its ZeroMQ routing id), over a connection that authenticated with
    `key` (None when the scheduler runs without keys). `raw`: its frames as they came (the shell's; a journaled
    scheduler writes those of a client's work to its journal as they are, JournalMessage), or None."""

    now: float
    peer: bytes
    message: Message
    key: PeerKey | None = None
    raw: Sequence[Payload] | None = None


@slotted(frozen=True)
class Malformed:
    """A message from `peer` could not be decoded (or is of a kind the scheduler never accepts: `unexpected`)."""

    now: float
    peer: bytes
    reason: str
    unexpected: bool = False


@slotted(frozen=True)
class Undeliverable:
    """A message to `peer` could not be delivered: it is no longer connected, or it does not read what it is sent."""

    now: float
    peer: bytes
    reason: str = "its connection closed"


@slotted(frozen=True)
class Forbidden:
    """A message from `peer` came over a connection whose key (`public`, Z85) is no longer authorized: it is
    refused, and the session opened with that key ends."""

    now: float
    peer: bytes
    public: bytes
    reason: str


@slotted(frozen=True)
class Revoked:
    """These keys (public, Z85) were removed from the authorized keys: every session opened with one of them ends
    now (clients: their tasks are cancelled; workers: their tasks run elsewhere)."""

    now: float
    keys: frozenset[bytes]


@slotted(frozen=True)
class Tick:
    """Time passes: timeouts and balancing are checked."""

    now: float


# Union[...], not X | Y: this runs, and must run on Python 3.9 too (PyPy)
Event = Union[Received, Malformed, Undeliverable, Forbidden, Revoked, Tick]


@slotted(frozen=True)
class Send:
    """Send `message` to `peer` (a ZeroMQ routing id). The worker agent's and the client's cores have one peer each:
    they use scaler.core.common.Send, without one."""

    peer: bytes
    message: Message


@slotted(frozen=True)
class JournalSession:
    """(A scheduler with a journal.) A client session opened (`prefix` > 0: its name, prefix and key) or ended for
    good (`prefix` 0). The shell writes it to the journal before it sends anything of the same flush (ADR 0023)."""

    peer: bytes
    name: str = ""
    prefix: int = 0
    key: bytes | None = None


@slotted(frozen=True)
class JournalMessage:
    """(A scheduler with a journal.) Client `peer`'s work the core took (submitTasks, putObjects, cancelTasks,
    freeObjects): `raw` its frames as they came (None: the shell encodes `message`)."""

    peer: bytes
    message: Message
    raw: Sequence[Payload] | None = None


@slotted(frozen=True)
class JournalEnded:
    """(A scheduler with a journal.) These results went to client `peer`: its tasks `ids` ended for it, each with its
    status (`statuses`, a byte each: a task cancelled that completed all the same ended a success)."""

    peer: bytes
    ids: Sequence[int]
    statuses: bytes = b""


@slotted(frozen=True)
class JournalResult:
    """(A scheduler with a journal.) Results held for client `peer`, which is not back after a restart yet: kept in
    the journal until they go to it (then a JournalEnded names them)."""

    peer: bytes
    results: TaskResults


@slotted(frozen=True)
class JournalKeyed:
    """(A scheduler with a journal.) The result of an idempotent-keyed task, kept under `key` in `namespace` (the
    public key of its client's credentials, or b""): not computed again after a restart (core.scheduler.keyed). Not
    of a session: replayed whatever became of the session that computed it."""

    namespace: bytes
    key: str
    payload: Payload
    peer: bytes = b""  # (of no session)


# What a journaled core asks the shell to write (SchedulerCore.journal), in order; recovery.replay reads them back.
JournalEntry = Union[JournalSession, JournalMessage, JournalEnded, JournalResult, JournalKeyed]

Command = Union[Send, Log, Stop]
