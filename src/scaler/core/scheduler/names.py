"""Worker names: which key each name is bound to, its live sessions, its recent losses and its hold-back.

A name is bound to the key of the first session that joined with it for as long as it is remembered: while a session
has it, or a loss or a hold of it is. A worker lost often (not a goodbye) is held back, longer each time, so that a
crash-looping worker does not keep taking tasks it will lose. Pure: the core passes the time and applies the answers.
Python 3.9 (the scheduler runs on PyPy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scaler.core.scheduler.config import SchedulerConfig
from scaler.core.scheduler.sessions import WorkerName

if TYPE_CHECKING:
    from scaler.core.scheduler.sessions import WorkerSession


class WorkerNames:
    """The remembered names (`records`) and, among them, those remembered for a loss or a hold (`lost`, which every
    tick prunes: only them)."""

    __slots__ = ("config", "lost", "records")

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.records: dict[str, WorkerName] = {}
        self.lost: dict[str, WorkerName] = {}

    def taken(self, name: str, key: bytes | None) -> bool:
        """Whether `name` is bound to another key than `key` (without keys every key is None: never)."""
        record = self.records.get(name) if name else None
        return record is not None and record.key != key

    def join(self, worker: WorkerSession) -> float:
        """Count a new worker session in its name's record (made now, bound to its key, if the name is not
        remembered); returns until when the name is held back. A generated name (its hello had none) that another
        key holds gets no record: the session shares nothing with that key's name (no losses, no hold)."""
        record = self.records.get(worker.name)
        if record is None:
            record = self.records[worker.name] = WorkerName(worker.key)
        elif record.key != worker.key:
            return 0.0
        record.sessions += 1
        worker.record = record
        return record.held_until

    def leave(self, worker: WorkerSession, lost_at: float | None) -> float:
        """A worker session ended: it no longer counts in its name's record; a loss (not a goodbye: lost_at is the
        time) is counted there. Returns how long the name is now held back for (0.0: it is not newly held back). The
        name is forgotten once nothing keeps it."""
        record = worker.record
        if record is None:
            return 0.0
        worker.record = None
        record.sessions -= 1
        hold = self._count_loss(worker.name, record, lost_at) if lost_at is not None else 0.0
        self._forget_if_unused(worker.name, record)
        return hold

    def _count_loss(self, name: str, record: WorkerName, now: float) -> float:
        config = self.config
        recent = [t for t in record.losses if now - t <= config.loss_window_seconds]
        recent.append(now)
        record.losses = recent
        self.lost[name] = record
        if len(recent) < config.losses_before_hold_back:
            return 0.0
        extra = len(recent) - config.losses_before_hold_back
        hold = min(config.hold_back_seconds * 2.0 ** min(extra, 30), config.max_hold_back_seconds)
        record.held_until = now + hold
        return hold

    def _forget_if_unused(self, name: str, record: WorkerName) -> None:
        """Forget a name, and so the key it is bound to, once no session has it and no loss or hold is remembered."""
        if not record.sessions and name not in self.lost and self.records.get(name) is record:
            del self.records[name]

    def prune(self, now: float) -> None:
        """Forget the losses out of the window and the holds that are over; then the names nothing else keeps."""
        window = self.config.loss_window_seconds
        for name, record in list(self.lost.items()):
            if now - record.losses[-1] > window and record.held_until <= now:
                record.losses = []
                record.held_until = 0.0
                del self.lost[name]
                self._forget_if_unused(name, record)

    def forget_keys(self, keys: frozenset[bytes]) -> None:
        """These keys were revoked: their names no session has are free (those keys cannot come back)."""
        for name, record in list(self.records.items()):
            if record.key is not None and record.key in keys and not record.sessions:
                del self.records[name]
                self.lost.pop(name, None)
