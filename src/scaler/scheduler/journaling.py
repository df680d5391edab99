"""The scheduler shell's journal (scaler_scheduler --journal; ADR 0022, 0023): recovery at start (the journal's records
read back as the core's journal entries and replayed into it: scaler.core.scheduler.recovery; then the file compacted
to the entries still needed), each flush's entries written before its sends (a client's work as its frames came), and
the thread that syncs the file in the background (--journal-sync interval).

Shell code: it writes what the core decided (SchedulerCore.journal) and decides nothing. Python 3.9 (PyPy).
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from collections.abc import Sequence

from scaler.core.scheduler import SchedulerCore
from scaler.core.scheduler.events import (
    JournalEnded,
    JournalEntry,
    JournalKeyed,
    JournalMessage,
    JournalResult,
    JournalSession,
)
from scaler.core.scheduler.keyed import Name
from scaler.core.scheduler.recovery import kept_entries, live_ids, replay
from scaler.protocol.codec import decode, encode
from scaler.protocol.errors import ProtocolError
from scaler.protocol.records import ACCEPTED_BY_SCHEDULER, TaskResults
from scaler.scheduler.journal import (
    CLOSED,
    ENDED,
    KEYED,
    MESSAGE,
    RESULT,
    SESSION,
    Journal,
    JournalError,
    Record,
    closed_body,
    ended_body,
    keyed_parts,
    message_parts,
    parse_ended,
    parse_keyed,
    parse_message,
    parse_session,
    session_body,
)

logger = logging.getLogger(__name__)

SYNC_CHOICES = ("interval", "always", "none")
DEFAULT_SYNC = "interval"  # --journal-sync's default (ADR 0022)
SYNC_INTERVAL_SECONDS = 0.05  # --journal-sync interval: at most one fdatasync this often, none while idle
COMPACTED_GROUP = 1024  # records per group in a compacted journal
# While serving, the journal is compacted (in a thread) once it holds this many bytes and this many times what the last
# compaction left; after a failed one, not before it has grown as much again.
COMPACT_MIN_BYTES = 64 << 20
COMPACT_GROWTH = 4


class Compaction:
    """One compaction while serving: what was written up to `end` read back, its entries still needed kept (against
    the ids `live` and `held` the core had when it started), written to PATH.new, in a thread; the scheduler's loop
    then appends what came since (the tail) and installs it (Journaling.tick)."""

    def __init__(self, end: int, live: set[int], held: set[tuple[int, ...]], keyed: set[Name]) -> None:
        self.end = end
        self.live = live
        self.held = held
        self.keyed = keyed
        self.started = time.monotonic()
        self.done = threading.Event()
        self.result: tuple[int, int] | None = None  # the new file's descriptor and size
        self.error: BaseException | None = None
        self.records = self.kept = 0


class Journaling:
    """An open journal, written at every flush that has sessions to record; `sync` is --journal-sync."""

    def __init__(
        self, journal: Journal, sync: str, identity: str = "", compact_min_bytes: int = COMPACT_MIN_BYTES
    ) -> None:
        if sync not in SYNC_CHOICES:
            raise ValueError(f"--journal-sync must be one of {', '.join(SYNC_CHOICES)}, not {sync!r}")
        self.journal = journal
        self.sync = sync
        self.identity = identity  # the scheduler's address, in the header of a compacted journal
        self._written = threading.Event()  # (interval) written since the sync thread last synced
        self._stopping = threading.Event()
        self.compact_min_bytes = compact_min_bytes
        self.compaction: Compaction | None = None  # one running while serving
        self._compact_after = 0  # (after a failed one) not before the journal holds this many bytes
        self.compactions = self.compaction_failures = 0
        self.restored = ""  # what the journal brought back at start, for monitors (Status.recovered)

    @classmethod
    def recover(cls, path: str, identity: str, sync: str, core: SchedulerCore, now: float) -> Journaling:
        """Open the journal at `path` of the scheduler at `identity`, replay what it holds into `core` (which serves
        nobody yet) as of `now`, and compact the file to what is still needed. JournalError: it cannot be used
        (logged by the caller)."""
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
            entries, sources = _entries(records, path)
            done = replay(core, now, entries)
            kept = [sources[index] for index in done.kept]
            journal.compact(identity, (kept[at : at + COMPACTED_GROUP] for at in range(0, len(kept), COMPACTED_GROUP)))
        except BaseException:
            journal.close()
            raise
        logger.info(
            "Scheduler: journal %s (%s bytes, %s free on its file system, --journal-sync %s): %d client session%s "
            "restored, with %d tasks and %d results held for their clients (%d ended tasks let go), and %d results "
            "kept by key; compacted to %s bytes",
            path,
            f"{size:,}",
            _free_space(path),
            sync,
            done.sessions,
            "" if done.sessions == 1 else "s",
            done.tasks,
            done.held,
            done.ended,
            done.keyed,
            f"{journal.size:,}",
        )
        journaling = cls(journal, sync, identity)
        journaling.restored = done.summary()
        return journaling

    def write(self, entries: Sequence[JournalEntry]) -> None:
        """The core's journal entries of one flush, as one group, before the flush's sends. JournalError: the journal
        cannot be written (a full disk): the scheduler must stop without sending them (not retried: ADR 0022)."""
        journal = self.journal
        for entry in entries:
            if isinstance(entry, JournalMessage):
                frames = entry.raw if entry.raw is not None else encode(entry.message)
                journal.append(MESSAGE, *message_parts(entry.peer, frames))
            elif isinstance(entry, JournalEnded):
                journal.append(ENDED, ended_body(entry.peer, entry.ids, entry.statuses))
            elif isinstance(entry, JournalSession):
                if entry.prefix:
                    journal.append(SESSION, session_body(entry.peer, entry.name, entry.prefix, entry.key))
                else:
                    journal.append(CLOSED, closed_body(entry.peer))
            elif isinstance(entry, JournalKeyed):
                journal.append(KEYED, *keyed_parts(entry.namespace, entry.key, entry.payload))
            else:
                journal.append(RESULT, *message_parts(entry.peer, encode(entry.results)))
        journal.commit(sync=self.sync == "always")
        if self.sync == "interval" and not self._written.is_set():
            self._written.set()

    def tick(self, core: SchedulerCore) -> None:
        """(The scheduler's tick, between flushes.) Start a compaction when the journal has grown enough, or install
        the one that finished. A compaction that fails is logged and counted; the journal goes on as it was."""
        running = self.compaction
        if running is not None:
            if running.done.is_set():
                self.compaction = None
                self._install(running)
            return
        if self.due():
            journal = self.journal
            compaction = self.compaction = Compaction(journal.size, *live_ids(core))
            thread = threading.Thread(target=self._compact, args=(compaction,), name="compacting the journal")
            thread.daemon = True  # (close() waits for it; a crash leaves PATH.new, which the next one overwrites)
            thread.start()

    def due(self) -> bool:
        """Whether the journal has grown enough to be compacted (and none is running)."""
        journal = self.journal
        least = max(self.compact_min_bytes, COMPACT_GROWTH * journal.live_bytes, self._compact_after)
        return self.compaction is None and journal.size >= least and not journal.pending

    def _compact(self, compaction: Compaction) -> None:
        """(Its own thread.) Read the journal up to compaction.end, keep what is still needed, write PATH.new."""
        try:
            journal = self.journal
            records = journal.read_upto(self.identity, compaction.end)
            entries, sources = _entries(records, journal.path)
            needed = kept_entries(entries, compaction.live, compaction.held, compaction.keyed)
            kept = [sources[index] for index in needed]
            groups = (kept[at : at + COMPACTED_GROUP] for at in range(0, len(kept), COMPACTED_GROUP))
            compaction.result = journal.write_new(self.identity, groups)
            compaction.records, compaction.kept = len(records), len(kept)
        except BaseException as exc:  # any failure: logged by tick(), and the journal goes on as it was
            compaction.error = exc
        finally:
            compaction.done.set()

    def _install(self, compaction: Compaction) -> None:
        journal = self.journal
        before = journal.size
        try:
            if compaction.error is not None:
                raise compaction.error
            assert compaction.result is not None
            try:
                tail, _ = journal.read_since(compaction.end)
            except BaseException:
                _discard(journal, compaction.result[0])
                raise
            journal.install(*compaction.result, tail)  # (which removes the new file if it fails)
        except Exception as exc:
            self.compaction_failures += 1
            self._compact_after = before + self.compact_min_bytes
            logger.warning(
                "Scheduler: could not compact the journal %s (%s bytes; %s free on its file system): %s; it goes on "
                "as it was, and is tried again once %s bytes more are written",
                journal.path,
                f"{before:,}",
                _free_space(journal.path),
                exc,
                f"{self.compact_min_bytes:,}",
            )
            return
        self.compactions += 1
        logger.info(
            "Scheduler: compacted the journal %s from %s to %s bytes in %.2fs (kept %d of %d records, and %d written "
            "meanwhile)",
            journal.path,
            f"{before:,}",
            f"{journal.size:,}",
            time.monotonic() - compaction.started,
            compaction.kept,
            compaction.records,
            len(tail),
        )

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
        """After the sync thread ended: sync what it had not, then close the file (a compaction running is let go)."""
        compaction, self.compaction = self.compaction, None
        if compaction is not None and compaction.done.wait(30) and compaction.result is not None:
            _discard(self.journal, compaction.result[0])
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


def _entries(records: list[Record], path: str) -> tuple[list[JournalEntry], list[tuple[int, list[bytes]]]]:
    """The journal entries `records` hold for the sessions open at their end (from each one's opening on: the rest is
    not replayed, so not decoded), and each one's record (kind, body) for compaction. JournalError: a record that
    does not hold what its kind says (the file was changed by something else)."""
    last: dict[bytes, int] = {}  # each open session's identity: the index of its SESSION record
    sessions: dict[int, JournalSession] = {}
    for index, record in enumerate(records):
        if record.kind == SESSION:
            try:
                session = parse_session(record.body)
            except (ValueError, struct.error) as exc:
                raise _malformed(path, record, exc) from exc
            last[session.identity] = index
            sessions[index] = JournalSession(session.identity, session.name, session.prefix, session.key or None)
        elif record.kind == CLOSED:
            last.pop(record.body, None)
    entries: list[JournalEntry] = []
    sources: list[tuple[int, list[bytes]]] = []
    for index, record in enumerate(records):
        try:
            entry = _entry(record, index, last, sessions)
        except (ValueError, struct.error, ProtocolError) as exc:
            raise _malformed(path, record, exc) from exc
        if entry is not None:
            entries.append(entry)
            sources.append((record.kind, [record.body]))
    return entries, sources


def _entry(
    record: Record, index: int, last: dict[bytes, int], sessions: dict[int, JournalSession]
) -> JournalEntry | None:
    """The entry of one record, or None if its session ended later (or it is not the last session of its peer)."""
    kind = record.kind
    if kind == SESSION:
        session = sessions[index]
        return session if last.get(session.peer) == index else None
    if kind == CLOSED:
        return None  # (a closed session's records are not replayed: neither is its end)
    if kind == KEYED:  # (of no session: always replayed)
        return JournalKeyed(*parse_keyed(record.body))
    if kind == ENDED:
        identity, ids, statuses = parse_ended(record.body)
        return JournalEnded(identity, ids, statuses) if last.get(identity, index) < index else None
    identity, frames = parse_message(record.body)
    if last.get(identity, index) >= index:
        return None
    message = decode(frames, ACCEPTED_BY_SCHEDULER if kind == MESSAGE else None)
    if kind == MESSAGE:
        return JournalMessage(identity, message, frames)
    if kind != RESULT or not isinstance(message, TaskResults):
        raise ValueError(f"a record of kind {kind} holds a {type(message).__name__}")
    return JournalResult(identity, message)


def _malformed(path: str, record: Record, exc: BaseException) -> JournalError:
    where = f"(kind {record.kind}) at byte {record.offset:,}"
    return JournalError(f"the journal {path} has a malformed record {where}: {exc}")


def _discard(journal: Journal, fd: int) -> None:
    """A compaction's new file, not installed: closed and removed."""
    os.close(fd)
    try:
        os.unlink(f"{journal.path}.new")
    except OSError:
        pass


def _free_space(path: str) -> str:
    try:
        stat = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return "unknown space"
    return f"{stat.f_bavail * stat.f_frsize:,} bytes"
