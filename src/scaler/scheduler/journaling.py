"""The scheduler shell's journal (scaler_scheduler --journal; ADR 0022, 0023): recovery at start (the client sessions
the journal holds restored into the core, then the file compacted to them), each flush's sessions written before its
sends, and the thread that syncs the file in the background (--journal-sync interval).

Shell code: it writes what the core decided (SchedulerCore.journal) and decides nothing. Python 3.9 (PyPy).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence

from scaler.core.scheduler import SchedulerCore
from scaler.core.scheduler.events import JournalSession
from scaler.scheduler.journal import (
    CLOSED,
    SESSION,
    Journal,
    JournalError,
    SessionRecord,
    closed_body,
    open_sessions,
    session_body,
)

logger = logging.getLogger(__name__)

SYNC_CHOICES = ("interval", "always", "none")
DEFAULT_SYNC = "interval"  # --journal-sync's default (ADR 0022)
SYNC_INTERVAL_SECONDS = 0.05  # --journal-sync interval: at most one fdatasync this often, none while idle


class Journaling:
    """An open journal, written at every flush that has sessions to record; `sync` is --journal-sync."""

    def __init__(self, journal: Journal, sync: str) -> None:
        if sync not in SYNC_CHOICES:
            raise ValueError(f"--journal-sync must be one of {', '.join(SYNC_CHOICES)}, not {sync!r}")
        self.journal = journal
        self.sync = sync
        self._written = threading.Event()  # (interval) written since the sync thread last synced
        self._stopping = threading.Event()

    @classmethod
    def recover(cls, path: str, identity: str, sync: str, core: SchedulerCore, now: float) -> Journaling:
        """Open the journal at `path` of the scheduler at `identity`, restore the client sessions it holds into
        `core` (which serves nobody yet) as last seen at `now`, and compact the file to them. JournalError: it
        cannot be used (logged by the caller)."""
        journal, records = Journal.open(path, identity)
        try:
            size = journal.size
            if journal.cut:
                logger.warning(
                    "Scheduler: the journal %s ended in a torn write (a crash cut it): cut %d bytes at byte %d",
                    path,
                    journal.cut,
                    size,
                )
            sessions = open_sessions(records, path)
            for session in sessions:
                core.restore_client(now, session.identity, session.name, session.prefix, session.key or None)
            journal.compact(identity, iter([[_session_record(s) for s in sessions]] if sessions else []))
        except BaseException:
            journal.close()
            raise
        logger.info(
            "Scheduler: journal %s (%s bytes, %s free on its file system, --journal-sync %s): %d client session%s "
            "restored",
            path,
            f"{size:,}",
            _free_space(path),
            sync,
            len(sessions),
            "" if len(sessions) == 1 else "s",
        )
        return cls(journal, sync)

    def write(self, sessions: Sequence[JournalSession]) -> None:
        """Sessions opened and ended, as one group, before the flush's sends. JournalError: the journal cannot be
        written (a full disk): the scheduler must stop without sending them (not retried: ADR 0022)."""
        journal = self.journal
        for session in sessions:
            if session.prefix:
                journal.append(SESSION, session_body(session.peer, session.name, session.prefix, session.key))
            else:
                journal.append(CLOSED, closed_body(session.peer))
        journal.commit(sync=self.sync == "always")
        if self.sync == "interval" and not self._written.is_set():
            self._written.set()

    def run_sync(self) -> None:
        """(The sync thread, --journal-sync interval.) fdatasync whatever was written, at most every 50 ms, until
        stop_sync(). JournalError: a sync failed (the scheduler must stop)."""
        written, stopping = self._written, self._stopping
        while not stopping.is_set():
            written.wait()
            if stopping.is_set():
                break
            written.clear()  # (a write from here on sets it again: synced by the next round)
            self._sync()
            stopping.wait(SYNC_INTERVAL_SECONDS)

    def stop_sync(self) -> None:
        self._stopping.set()
        self._written.set()  # wakes the thread

    def close(self) -> None:
        """After the sync thread ended: sync what it had not, then close the file."""
        try:
            if self.sync != "none" and self._written.is_set():
                self._sync()
        except JournalError as exc:
            logger.error("Scheduler: %s", exc)
        finally:
            self.journal.close()

    def failure(self, exc: BaseException) -> str:
        """Why the scheduler stops after `exc` from the journal: the file, the reason, the space left."""
        return f"{exc} ({_free_space(self.journal.path)} free on its file system)"

    def _sync(self) -> None:
        try:
            self.journal.sync()
        except OSError as exc:
            raise JournalError(f"cannot sync the journal {self.journal.path}: {exc.strerror}") from exc


def _session_record(session: SessionRecord) -> tuple[int, list[bytes]]:
    return SESSION, [session_body(session.identity, session.name, session.prefix, session.key)]


def _free_space(path: str) -> str:
    try:
        stat = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return "unknown space"
    return f"{stat.f_bavail * stat.f_frsize:,} bytes"
