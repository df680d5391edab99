"""The journal's session records (scheduler/journal.py: SESSION and CLOSED bodies, the sessions still open at the end
of a journal) and the shell's recovery of them into a scheduler core (scheduler/journaling.py), on real files."""

from __future__ import annotations

import struct
import threading
from pathlib import Path

import pytest

from scaler.core.scheduler import SchedulerConfig, SchedulerCore
from scaler.core.scheduler.events import JournalSession
from scaler.scheduler.journal import (
    SESSION,
    Journal,
    JournalError,
    SessionRecord,
    closed_body,
    parse_session,
    session_body,
)
from scaler.scheduler.journaling import Journaling

A, B = b"C|host|1|aa", b"C|host|2|bb"


def test_a_session_body_is_read_back_as_written() -> None:
    body = session_body(A, "analytics é", 7, b"k" * 32)
    assert body[:4] == struct.pack("<I", 7) and body.endswith(A)
    assert parse_session(body) == SessionRecord(A, "analytics é", 7, b"k" * 32)
    assert parse_session(session_body(B, "", 1)) == SessionRecord(B, "", 1, b"")  # no key: length 0
    assert closed_body(A) == A


@pytest.mark.parametrize(
    "body",
    [b"", struct.pack("<IH", 7, 50) + b"short", struct.pack("<IH", 7, 0) + struct.pack("<H", 9) + b"k", b"\0" * 8],
    ids=["empty", "name past the end", "key past the end", "prefix 0"],
)
def test_a_malformed_session_body_is_a_journal_error_naming_where(body: bytes, tmp_path: Path) -> None:
    path = tmp_path / "j"
    journal, _ = Journal.open(str(path), "tcp://127.0.0.1:1")
    at = journal.size
    journal.append(SESSION, body)
    journal.commit()
    journal.close()
    with pytest.raises(JournalError, match=rf"the journal {path} has a malformed record \(kind 1\) at byte {at}: "):
        recovered_core(path)


def test_the_open_sessions_are_those_not_closed_since(tmp_path: Path) -> None:
    path = tmp_path / "j"
    core, journaling = recovered_core(path)
    journaling.write([JournalSession(A, "a", 1), JournalSession(B, "b", 2), JournalSession(A)])
    journaling.write([JournalSession(A, "a again", 3), JournalSession(b"never opened")])
    journaling.close()
    core, journaling = recovered_core(path)
    journaling.close()
    assert sorted((c.identity, c.name, c.prefix) for c in core.clients.values()) == [(A, "a again", 3), (B, "b", 2)]


def recovered_core(path: Path) -> tuple[SchedulerCore, Journaling]:
    core = SchedulerCore(SchedulerConfig(journaled=True))
    return core, Journaling.recover(str(path), "tcp://127.0.0.1:1", "none", core, 100.0)


def test_sessions_written_are_restored_into_the_core_and_the_journal_compacted_to_them(tmp_path: Path) -> None:
    path = tmp_path / "j"
    core, journaling = recovered_core(path)
    assert core.clients == {}
    journaling.write([JournalSession(A, "a", 5, b"key"), JournalSession(B, "b", 6)])
    journaling.write([JournalSession(B)])  # B ended for good
    for n in range(50):  # sessions that came and went: compaction drops them
        journaling.write([JournalSession(b"x%d" % n, "x", 100 + n), JournalSession(b"x%d" % n)])
    journaling.close()
    grown = path.stat().st_size
    core, journaling = recovered_core(path)
    [client] = core.clients.values()
    assert (client.identity, client.name, client.prefix, client.key) == (A, "a", 5, b"key")
    assert client.awaiting and client.recovered and client.last_seen == 100.0
    core.validate()
    journaling.close()
    assert path.stat().st_size < grown / 10
    journal, records = Journal.open(str(path), "tcp://127.0.0.1:1")  # (the lock went with the file's close)
    journal.close()
    assert [r.kind for r in records] == [SESSION]


def test_the_sync_thread_syncs_what_was_written_and_stops(tmp_path: Path) -> None:
    journal, _ = Journal.open(str(tmp_path / "j"), "me")
    journaling = Journaling(journal, "interval")
    synced = threading.Event()
    journal.sync = synced.set  # type: ignore[method-assign]
    thread = threading.Thread(target=journaling.run_sync)
    thread.start()
    journaling.write([JournalSession(A, "a", 1)])
    assert synced.wait(5)
    journaling.stop_sync()
    thread.join(5)
    assert not thread.is_alive()
    journaling.close()


def test_a_journal_that_cannot_be_written_stops_the_scheduler_before_the_welcome(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from scaler.core.scheduler import Received, Send
    from scaler.protocol.messages import Hello, PeerKind
    from scaler.scheduler.server import SchedulerServer

    server = SchedulerServer("tcp://127.0.0.1:1", "ipc:///nowhere", SchedulerConfig(), journal=str(tmp_path / "j"))
    try:
        assert server.core.config.journaled  # a journal given: the core records sessions, clients are told
        journal, _ = Journal.open(str(tmp_path / "j"), server.address)
        server.journaling = Journaling(journal, "interval")

        def full_disk(sync: bool = False) -> int:
            raise JournalError(f"cannot write the journal {journal.path}: the disk is full")

        journal.commit = full_disk  # type: ignore[method-assign]
        server.core.feed(Received(1.0, A, Hello(PeerKind.CLIENT, "a"), None))
        assert not [c for c in server._flush() if isinstance(c, Send)]  # the welcome does not go out
        assert server.failure is not None and f"cannot write the journal {tmp_path / 'j'}: the disk is full" in (
            server.failure
        )
        assert "bytes free on its file system" in server.failure
        assert "Scheduler: stopping: cannot write the journal" in caplog.text
    finally:
        if server.journaling is not None:
            server.journaling.close()
        server.ctx.destroy(0)
