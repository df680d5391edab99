"""The scheduler's journal file (issue 28; ADR 0023): an append-only file of records, written in groups, read back
at start, compacted by writing a new file and renaming it over the old one.

File layout (little-endian):
    header   MAGIC (8 bytes) | format version (u32) | identity length (u32) | identity (UTF-8: the scheduler's
             address) | CRC32 of all of the above (u32)
    record   body length (u32) | CRC32 of kind and body (u32) | kind (u8) | body

Each group (one flush of the scheduler) ends with a COMMIT record, whose body is its own offset in the file (u64).
Reading applies only whole groups: records after the last COMMIT are the torn tail of a write a crash interrupted, and
are cut off (the file is truncated there before anything is appended). A record that does not check out and is
followed by a COMMIT that does (at the offset it names) is corruption, not a tail: an error, as are a file of another
format version or of another scheduler. A second scheduler given the same file is refused (an exclusive lock on it).

Shell code: files and bytes, no decisions about tasks. Python 3.9 (the scheduler runs on PyPy).
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import threading
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple, Union, cast

from scaler.protocol.records import Payload

MAGIC = b"SCALERJ\x00"
FORMAT_VERSION = 3  # 2: ENDED records carry each task's status; 3: KEYED records
_HEAD = struct.Struct("<8sII")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_RECORD = struct.Struct("<IIB")  # body length, CRC32 (of kind + body), kind
_SESSION = struct.Struct("<IH")  # a SESSION body's prefix and name length
_U16 = struct.Struct("<H")
MAX_RECORD = 1 << 31  # a length past this is not a record (a torn or corrupt length)

# Record kinds. COMMIT ends a group; the others are ADR 0023's.
COMMIT = 0
SESSION = 1
MESSAGE = 2
ENDED = 3
RESULT = 4
CLOSED = 5
KEYED = 6
KINDS = frozenset({COMMIT, SESSION, MESSAGE, ENDED, RESULT, CLOSED, KEYED})

Bytes = Union[bytes, bytearray, memoryview]  # (runs on Python 3.9)


class JournalError(Exception):
    """The journal cannot be used: says why and what to do."""


class Record(NamedTuple):
    kind: int
    body: bytes
    offset: int  # where the record starts in the file


class SessionRecord(NamedTuple):
    """A client session as the journal holds it (a SESSION record's body)."""

    identity: bytes  # its routing identity
    name: str
    prefix: int
    key: bytes  # the public key it authenticated with; b"" for none


def session_body(identity: bytes, name: str, prefix: int, key: bytes | None = None) -> bytes:
    """A SESSION record's body: prefix (u32), name (u16 length + UTF-8), key (u16 length + bytes; 0 for none), then
    the routing identity (the rest)."""
    raw, key = name.encode(), key or b""
    return b"".join((_SESSION.pack(prefix, len(raw)), raw, _U16.pack(len(key)), key, identity))


def closed_body(identity: bytes) -> bytes:
    """A CLOSED record's body: the routing identity of the session that ended for good."""
    return identity


def parse_session(body: bytes) -> SessionRecord:
    """The session a SESSION record's body holds; ValueError if it does not hold one."""
    prefix, length = _SESSION.unpack_from(body)
    at = _SESSION.size + length
    if at + _U16.size > len(body):
        raise ValueError(f"a SESSION record of {len(body)} bytes has a name of {length}")
    name = body[_SESSION.size : at].decode()
    (key_length,) = _U16.unpack_from(body, at)
    at += _U16.size
    if at + key_length > len(body) or not prefix:
        raise ValueError("a SESSION record's key runs past its end, or its prefix is 0")
    return SessionRecord(bytes(body[at + key_length :]), name, prefix, bytes(body[at : at + key_length]))


_MESSAGE = struct.Struct("<HI")  # a MESSAGE or RESULT body's identity length and frame count


def message_parts(identity: bytes, frames: Sequence[Payload]) -> list[Bytes]:
    """A MESSAGE (or RESULT) body, as pieces for writev: the session's routing identity (u16 length), the frames'
    count (u32) and lengths (u32 each), then the frames as they are (not copied: bytes, or zmq.Frames, which are
    buffers too)."""
    lengths = struct.pack(f"<{len(frames)}I", *[len(frame) for frame in frames])
    return [b"".join((_MESSAGE.pack(len(identity), len(frames)), identity, lengths)), *cast("list[Bytes]", frames)]


def parse_message(body: bytes) -> tuple[bytes, list[bytes]]:
    """The identity and frames a MESSAGE or RESULT body holds; ValueError if it does not hold them."""
    length, count = _MESSAGE.unpack_from(body)
    at = _MESSAGE.size + length
    identity = body[_MESSAGE.size : at]
    lengths = struct.unpack_from(f"<{count}I", body, at)
    at += 4 * count
    if at + sum(lengths) != len(body):
        raise ValueError(f"a record of {len(body)} bytes holds {count} frames of {sum(lengths)} bytes after {at}")
    frames = []
    for size in lengths:
        frames.append(body[at : at + size])
        at += size
    return identity, frames


def ended_body(identity: bytes, ids: Sequence[int], statuses: bytes) -> bytes:
    """An ENDED body: the session's routing identity (u16 length), then the task ids (u64 each), then each one's
    status (a byte each: TaskStatus)."""
    if len(statuses) != len(ids):
        raise ValueError(f"{len(ids)} ended tasks, {len(statuses)} statuses")
    return b"".join((_U16.pack(len(identity)), identity, struct.pack(f"<{len(ids)}Q", *ids), statuses))


def parse_ended(body: bytes) -> tuple[bytes, list[int], bytes]:
    (length,) = _U16.unpack_from(body)
    at = _U16.size + length
    if (len(body) - at) % 9:
        raise ValueError(f"an ENDED record of {len(body)} bytes does not end in whole ids and statuses")
    count = (len(body) - at) // 9
    ids = list(struct.unpack_from(f"<{count}Q", body, at))
    return body[_U16.size : at], ids, bytes(body[at + 8 * count :])


def keyed_parts(namespace: bytes, key: str, payload: Payload) -> list[Bytes]:
    """A KEYED body, as pieces for writev: the namespace (u16 length + bytes), the key (u16 length + UTF-8), then
    the result's payload as it is (the rest)."""
    raw = key.encode()
    head = b"".join((_U16.pack(len(namespace)), namespace, _U16.pack(len(raw)), raw))
    return [head, cast("Bytes", payload)]


def parse_keyed(body: bytes) -> tuple[bytes, str, bytes]:
    """The namespace, key and payload a KEYED body holds; ValueError if it does not hold them."""
    (length,) = _U16.unpack_from(body)
    at = _U16.size + length
    (key_length,) = _U16.unpack_from(body, at)
    start = at + _U16.size
    if start + key_length > len(body):
        raise ValueError(f"a KEYED record of {len(body)} bytes has a key of {key_length}")
    return bytes(body[_U16.size : at]), body[start : start + key_length].decode(), body[start + key_length :]


def header_bytes(identity: str) -> bytes:
    raw = identity.encode()
    head = _HEAD.pack(MAGIC, FORMAT_VERSION, len(raw)) + raw
    return head + _U32.pack(zlib.crc32(head))


_KIND_CRC = [zlib.crc32(bytes((kind,))) for kind in range(256)]  # the CRC32 of each kind byte, where a record's starts


def record_bytes(kind: int, *parts: Bytes) -> list[Bytes]:
    """The pieces of one record (for writev): its head, then the body's parts as they are (not copied)."""
    crc = _KIND_CRC[kind]
    length = 0
    for part in parts:
        crc = zlib.crc32(part, crc)
        length += len(part)
    return [_RECORD.pack(length, crc, kind), *parts]


def read_records(data: memoryview, identity: str, path: str) -> tuple[list[Record], int]:
    """The whole groups in `data` (a journal file's bytes) and where the last one ends (the file is cut there)."""
    end = _check_header(data, identity, path)
    records, committed, at = _groups(data, end)
    if at < len(data) and _a_commit_after(data, at + 1):
        raise JournalError(
            f"the journal {path} is damaged at byte {at:,} (a record that does not check out, with whole records "
            "after it): it was changed by something other than this scheduler, or its disk failed. Move it aside "
            "to start without it (the work it held is lost), or restore it from a copy"
        )
    return records, committed


def _groups(data: memoryview, at: int, base: int = 0) -> tuple[list[Record], int, int]:
    """The records of the whole groups in `data` from `at` on (`data` holds the file from byte `base`): the records,
    where the last whole group ends, and where reading stopped (both file offsets)."""
    records: list[Record] = []
    group: list[Record] = []
    at -= base
    committed = at
    size = len(data)
    while at + _RECORD.size <= size:
        length, crc, kind = _RECORD.unpack_from(data, at)
        stop = at + _RECORD.size + length
        if length >= MAX_RECORD or stop > size or kind not in KINDS:
            break
        body = data[at + _RECORD.size : stop]
        if zlib.crc32(body, zlib.crc32(bytes((kind,)))) != crc:
            break
        if kind == COMMIT:
            if length != _U64.size or _U64.unpack_from(body)[0] != base + at:
                break
            records.extend(group)
            group = []
            committed = stop
        else:
            group.append(Record(kind, bytes(body), base + at))
        at = stop
    return records, base + committed, base + at


def _check_header(data: memoryview, identity: str, path: str) -> int:
    if len(data) < _HEAD.size + _U32.size or bytes(data[:8]) != MAGIC:
        raise JournalError(f"{path} is not a Scaler journal (it does not start with one's header)")
    _, version, length = _HEAD.unpack_from(data, 0)
    end = _HEAD.size + length
    if end + _U32.size > len(data) or _U32.unpack_from(data, end)[0] != zlib.crc32(data[:end]):
        raise JournalError(f"the journal {path} has a damaged header")
    if version != FORMAT_VERSION:
        raise JournalError(
            f"the journal {path} is of format version {version}; this scheduler reads version {FORMAT_VERSION}. "
            "Start the version of Scaler that wrote it to finish its work, or move the journal aside"
        )
    written_by = bytes(data[_HEAD.size : end]).decode(errors="replace")
    if written_by != identity:
        raise JournalError(
            f"the journal {path} belongs to the scheduler at {written_by}, not {identity}: give each scheduler its own "
            "journal (or start this one at the address the journal names)"
        )
    return int(end + _U32.size)


def _a_commit_after(data: memoryview, start: int) -> bool:
    """Whether a whole, checked COMMIT record lies anywhere past `start` (then a bad record before it is no torn
    tail): a record head of length 8 and kind COMMIT whose body is its own offset, with the right CRC32. (Bytes of a
    payload that look like one would have to name the offset they are written at.)"""
    raw = bytes(data)
    length = _U32.pack(_U64.size)
    at = raw.find(length, start)
    while at >= 0:
        stop = at + _RECORD.size + _U64.size
        if stop <= len(raw) and raw[at + 8] == COMMIT and _U64.unpack_from(raw, at + _RECORD.size)[0] == at:
            body = raw[at + _RECORD.size : stop]
            if zlib.crc32(body, zlib.crc32(bytes((COMMIT,)))) == _U32.unpack_from(raw, at + 4)[0]:
                return True
        at = raw.find(length, at + 1)
    return False


class Journal:
    """One scheduler's journal, open for appending: append() records, commit() writes them as one group."""

    def __init__(self, path: str, fd: int, size: int) -> None:
        self.path = path
        self._fd = fd
        self.size = size  # bytes in the file
        self._pending: list[Bytes] = []
        self.live_bytes = 0  # set by whoever compacts: the size of the last compacted file
        self.cut = 0  # bytes of a torn tail cut off when it was opened (the shell says so)
        self._lock = threading.Lock()  # the file descriptor, between the sync thread and a compaction's install

    @classmethod
    def open(cls, path: str, identity: str) -> tuple[Journal, list[Record]]:
        """Open (or create) the journal at `path` for the scheduler `identity`; its records, whole groups only."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise JournalError(f"cannot open the journal {path}: {exc.strerror}") from exc
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EACCES):
                    raise JournalError(f"the journal {path} is in use by another scheduler") from exc
                raise
            size = os.fstat(fd).st_size
            if size == 0:
                _write_all(fd, [header_bytes(identity)], path)
                os.fsync(fd)
                return cls(path, fd, len(header_bytes(identity))), []
            with open(fd, "rb", closefd=False) as file:
                records, end = read_records(memoryview(file.read()), identity, path)
            if end < size:  # a torn tail: cut it off before appending after it
                os.ftruncate(fd, end)
            os.lseek(fd, end, os.SEEK_SET)
            journal = cls(path, fd, end)
            journal.cut = size - end
            return journal, records
        except BaseException:
            os.close(fd)
            raise

    def append(self, kind: int, *parts: Bytes) -> None:
        self._pending.extend(record_bytes(kind, *parts))

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def commit(self, sync: bool = False) -> int:
        """Write what was appended since the last commit as one group (one writev); fdatasync too if `sync`. The
        bytes written. Raises JournalError (the disk is full, say): the group is then not in the journal."""
        if not self._pending:
            return 0
        pieces, self._pending = self._pending, []
        total = sum(map(len, pieces))
        pieces.extend(record_bytes(COMMIT, _U64.pack(self.size + total)))
        written = _write_all(self._fd, pieces, self.path, total + _RECORD.size + _U64.size)
        self.size += written
        if sync:
            os.fdatasync(self._fd)
        return written

    def sync(self) -> None:
        with self._lock:
            os.fdatasync(self._fd)

    def compact(self, identity: str, groups: Iterator[Sequence[tuple[int, Sequence[Bytes]]]]) -> None:
        """Replace the file with one holding only `groups` (the live state): written beside it, synced, renamed over
        it, and its folder synced. A crash at any point leaves the old file or the new one, whole."""
        self.install(*self.write_new(identity, groups))

    def write_new(self, identity: str, groups: Iterable[Sequence[tuple[int, Sequence[Bytes]]]]) -> tuple[int, int]:
        """A new journal beside this one (PATH.new) holding `groups`, not synced yet: its descriptor and size. (May
        run in another thread than the appends: it touches only the new file.)"""
        temporary = f"{self.path}.new"
        fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            size = _write_all(fd, [header_bytes(identity)], temporary)
            for group in groups:
                size += _write_group(fd, group, size, temporary)
        except BaseException:
            os.close(fd)
            os.unlink(temporary)
            raise
        return fd, size

    def install(self, fd: int, size: int, tail: Sequence[Record] = ()) -> None:
        """Make the new journal `fd` (write_new's) this one: `tail` (records written here since the new one was
        made) appended to it as one group, synced, renamed over this file, its folder synced."""
        temporary = f"{self.path}.new"
        try:
            if tail:
                size += _write_group(fd, [(record.kind, [record.body]) for record in tail], size, temporary)
            os.fsync(fd)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(temporary, self.path)
        except BaseException:
            os.close(fd)
            os.unlink(temporary)
            raise
        _sync_folder(self.path)
        with self._lock:
            os.close(self._fd)
            self._fd = fd
        os.lseek(fd, size, os.SEEK_SET)
        self.size = self.live_bytes = size

    def read_since(self, start: int) -> tuple[list[Record], bytes]:
        """The records of the groups written from byte `start` (where a group starts) to the end, and the bytes
        they were read from. JournalError if they are not whole groups (they are this scheduler's own)."""
        with self._lock:
            data = _pread_all(self._fd, self.size - start, start)
        records, committed, _ = _groups(memoryview(data), start, start)
        if committed != self.size:
            raise JournalError(f"the journal {self.path} does not hold whole groups from byte {start:,} on")
        return records, data

    def read_upto(self, identity: str, end: int) -> list[Record]:
        """The records of the groups written before byte `end` (where a group ends). From another thread than the
        appends: pread only."""
        with self._lock:
            data = _pread_all(self._fd, end, 0)
        records, committed = read_records(memoryview(data), identity, self.path)
        if committed != end:
            raise JournalError(f"the journal {self.path} does not hold whole groups up to byte {end:,}")
        return records

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _writev_joined(fd: int, pieces: Sequence[Bytes]) -> int:
    """os.writev for where there is none (PyPy 3.9's os lacks it): the pieces joined, one write."""
    return os.write(fd, b"".join(pieces))


_writev = getattr(os, "writev", _writev_joined)


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    chunks = []
    while size > 0:
        chunk = os.pread(fd, min(size, 1 << 30), offset)
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _write_group(fd: int, group: Sequence[tuple[int, Sequence[Bytes]]], at: int, path: str) -> int:
    """Write one group of records at offset `at` (the file's end), its COMMIT after them; the bytes written."""
    pieces: list[Bytes] = []
    for kind, parts in group:
        pieces.extend(record_bytes(kind, *parts))
    pieces.extend(record_bytes(COMMIT, _U64.pack(at + sum(map(len, pieces)))))
    return _write_all(fd, pieces, path)


def _write_all(fd: int, pieces: Sequence[Bytes], path: str, total: int = -1) -> int:
    """writev every piece (again for what a short write left); JournalError on a full disk or another failure.
    `total`: their bytes, if the caller knows."""
    if total < 0:
        total = sum(map(len, pieces))
    done = 0
    try:
        if len(pieces) <= 1024:  # (one call, as almost always: IOV_MAX is 1024)
            done = _writev(fd, pieces)
            if done == total:
                return done
    except OSError as exc:
        raise _write_failed(fd, done, path, exc) from exc
    views = [memoryview(p).cast("B") for p in pieces if len(p)]
    skip = done
    while skip and views:  # what the short write took
        if skip >= len(views[0]):
            skip -= len(views.pop(0))
        else:
            views[0] = views[0][skip:]
            skip = 0
    try:
        while views:
            written = _writev(fd, views[:1024])
            done += written
            while views and written >= len(views[0]):
                written -= len(views[0])
                views.pop(0)
            if written:
                views[0] = views[0][written:]
    except OSError as exc:
        raise _write_failed(fd, done, path, exc) from exc
    assert done == total
    return done


def _write_failed(fd: int, done: int, path: str, exc: OSError) -> JournalError:
    if done:  # a partial group is a torn tail: cut it, so that the next group follows whole ones
        try:
            os.ftruncate(fd, os.lseek(fd, 0, os.SEEK_CUR) - done)
            os.lseek(fd, -done, os.SEEK_CUR)
        except OSError:
            pass
    what = "the disk is full" if exc.errno == errno.ENOSPC else exc.strerror
    return JournalError(f"cannot write the journal {path}: {what}")


def _sync_folder(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
