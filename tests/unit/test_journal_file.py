"""The scheduler's journal file (scheduler/journal.py): groups written and read back whole, a torn tail cut off,
damage, another version or scheduler, a second scheduler and a full disk refused with words that say what to do,
compaction that leaves the old file or the new one. Real files (the full disk is /dev/full)."""

from __future__ import annotations

import os
import re
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from scaler.scheduler import journal as j
from scaler.scheduler.journal import COMMIT, ENDED, MESSAGE, SESSION, Journal, JournalError

pytestmark = pytest.mark.timeout(30)

ME = "tcp://127.0.0.1:8516"


def kinds_and_bodies(records: list[j.Record]) -> list[tuple[int, bytes]]:
    return [(r.kind, r.body) for r in records]


def written(path: Path, groups: list[list[tuple[int, bytes]]]) -> Journal:
    journal, records = Journal.open(str(path), ME)
    assert records == []
    for group in groups:
        for kind, body in group:
            journal.append(kind, body)
        journal.commit()
    return journal


def test_groups_come_back_whole_in_order_and_more_can_be_appended(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    journal = written(path, [[(SESSION, b"c1"), (MESSAGE, b"m" * 1000)], [(ENDED, b"\x01" * 8)]])
    assert journal.commit() == 0  # nothing appended: nothing written
    journal.close()
    again, records = Journal.open(str(path), ME)
    assert kinds_and_bodies(records) == [(SESSION, b"c1"), (MESSAGE, b"m" * 1000), (ENDED, b"\x01" * 8)]
    again.append(MESSAGE, b"a", memoryview(b"bc"))  # a record of several parts is one record
    again.commit(sync=True)
    again.close()
    assert kinds_and_bodies(Journal.open(str(path), ME)[1])[-1] == (MESSAGE, b"abc")
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_without_os_writev_the_pieces_are_joined_and_written_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PyPy 3.9's os has no writev (found by the PyPy scheduler's journal test): one write of the pieces joined."""
    monkeypatch.setattr(j, "_writev", j._writev_joined)
    path = tmp_path / "journal"
    journal = written(path, [[(SESSION, b"c1"), (MESSAGE, b"m" * 1000)]])
    journal.append(MESSAGE, b"a", memoryview(b"bc"), bytearray(b"d"))
    journal.commit()
    journal.close()
    records = Journal.open(str(path), ME)[1]
    assert kinds_and_bodies(records) == [(SESSION, b"c1"), (MESSAGE, b"m" * 1000), (MESSAGE, b"abcd")]


@pytest.mark.parametrize("cut", [1, 5, 9, 30, 1009])
def test_a_torn_last_group_is_cut_off_and_the_file_goes_on_after_the_whole_ones(tmp_path: Path, cut: int) -> None:
    path = tmp_path / "journal"
    written(path, [[(SESSION, b"c1")], [(MESSAGE, b"x" * 1000), (ENDED, b"e")]]).close()
    whole = os.path.getsize(path)
    os.truncate(path, whole - cut)  # the crash interrupted the last write
    journal, records = Journal.open(str(path), ME)
    assert kinds_and_bodies(records) == [(SESSION, b"c1")]
    assert journal.cut == whole - cut - journal.size  # what was cut, for the shell's warning
    journal.append(ENDED, b"after")
    journal.commit()
    journal.close()
    assert kinds_and_bodies(Journal.open(str(path), ME)[1]) == [(SESSION, b"c1"), (ENDED, b"after")]


def test_records_without_their_commit_are_not_applied(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    journal = written(path, [[(SESSION, b"c1")]])
    os.write(journal._fd, b"".join(bytes(p) for p in j.record_bytes(MESSAGE, b"half a group")))
    journal.close()
    assert kinds_and_bodies(Journal.open(str(path), ME)[1]) == [(SESSION, b"c1")]


def test_a_payload_that_looks_like_a_commit_in_the_torn_tail_is_still_a_tail(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    journal = written(path, [[(SESSION, b"c1")]])
    fake = b"".join(bytes(p) for p in j.record_bytes(COMMIT, struct.pack("<Q", 12345)))  # not at its own offset
    journal.append(MESSAGE, b"x" * 100 + fake + b"y" * 100)
    journal.commit()
    journal.close()
    os.truncate(path, os.path.getsize(path) - 150)
    assert kinds_and_bodies(Journal.open(str(path), ME)[1]) == [(SESSION, b"c1")]


def test_damage_before_whole_groups_is_an_error_not_a_tail(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    written(path, [[(MESSAGE, b"a" * 100)], [(MESSAGE, b"b" * 100)]]).close()
    data = bytearray(path.read_bytes())
    data[data.index(b"a" * 100) + 50] ^= 0xFF  # a bit flips in the first group
    path.write_bytes(bytes(data))
    with pytest.raises(JournalError, match=r"is damaged at byte .*Move it aside"):
        Journal.open(str(path), ME)


def test_another_scheduler_s_journal_another_version_and_not_a_journal_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    written(path, [[(SESSION, b"c1")]]).close()
    with pytest.raises(
        JournalError, match=re.escape("belongs to the scheduler at tcp://127.0.0.1:8516, not tcp://other:1")
    ):
        Journal.open(str(path), "tcp://other:1")
    data = bytearray(path.read_bytes())
    old = bytes(data)
    data[8:12] = struct.pack("<I", j.FORMAT_VERSION + 1)
    data[: len(j.header_bytes(ME))] = j.header_bytes(ME)[:-4] + b"\0\0\0\0"
    path.write_bytes(bytes(data))
    with pytest.raises(JournalError, match="damaged header"):
        Journal.open(str(path), ME)
    head = struct.pack("<8sII", j.MAGIC, j.FORMAT_VERSION + 1, len(ME)) + ME.encode()
    path.write_bytes(head + struct.pack("<I", zlib.crc32(head)) + old[len(j.header_bytes(ME)) :])
    with pytest.raises(JournalError, match=f"format version {j.FORMAT_VERSION + 1}; this scheduler reads"):
        Journal.open(str(path), ME)
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(JournalError, match="is not a Scaler journal"):
        Journal.open(str(tmp_path / "notes.txt"), ME)
    with pytest.raises(JournalError, match="cannot open the journal"):
        Journal.open(str(tmp_path / "no" / "such" / "folder"), ME)


def test_a_second_scheduler_cannot_open_a_journal_in_use(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    first = written(path, [])
    with pytest.raises(JournalError, match="in use by another scheduler"):
        Journal.open(str(path), ME)
    first.close()
    Journal.open(str(path), ME)[0].close()  # free again once the first closed


def test_a_full_disk_is_a_clear_error_at_start_and_when_appending() -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with pytest.raises(JournalError, match="cannot write the journal /dev/full: the disk is full"):
        Journal.open("/dev/full", ME)
    fd = os.open("/dev/full", os.O_WRONLY)
    journal = Journal("/dev/full", fd, 100)
    journal.append(MESSAGE, b"x" * 10)
    with pytest.raises(JournalError, match="the disk is full"):
        journal.commit()
    assert not journal.pending  # the group is not kept for a later commit: the caller knows it was not journaled
    journal.close()


def test_compaction_keeps_only_the_live_groups_and_replaces_the_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    journal = written(path, [[(MESSAGE, b"old" * 1000)] for _ in range(20)])
    big = os.path.getsize(path)
    journal.compact(ME, iter([[(SESSION, [b"c1"]), (MESSAGE, [b"live", b"!"])], [(ENDED, [b"e"])]]))
    assert os.path.getsize(path) < big // 10 and journal.size == journal.live_bytes == os.path.getsize(path)
    assert not (tmp_path / "journal.new").exists()
    journal.append(ENDED, b"after")
    journal.commit()
    with pytest.raises(JournalError, match="in use"):  # the new file is locked as the old one was
        Journal.open(str(path), ME)
    journal.close()
    records = Journal.open(str(path), ME)[1]
    assert kinds_and_bodies(records) == [(SESSION, b"c1"), (MESSAGE, b"live!"), (ENDED, b"e"), (ENDED, b"after")]


def test_a_compaction_that_fails_leaves_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    journal = written(path, [[(MESSAGE, b"keep")]])

    def groups() -> Iterator[list[tuple[int, list[bytes]]]]:
        yield [(MESSAGE, [b"new"])]
        raise OSError("the compaction's source failed")

    with pytest.raises(OSError, match="source failed"):
        journal.compact(ME, groups())
    assert not (tmp_path / "journal.new").exists()
    journal.append(ENDED, b"still")
    journal.commit()
    journal.close()
    assert kinds_and_bodies(Journal.open(str(path), ME)[1]) == [(MESSAGE, b"keep"), (ENDED, b"still")]
