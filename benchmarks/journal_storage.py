"""Which store for the scheduler's journal (issue 28, ADR 0022): an append-only file of length-prefixed records, SQLite
in WAL mode or LMDB, each in its durability modes, written by one thread with group commit (one group: what the
scheduler's shell handles in one flush).

Standalone: scaler.protocol's codec makes the single-task submit, the wire batches and the put-objects header; nothing
else of Scaler runs. The 100-byte records of `map` and `recovery` are plain bytes (none of these stores compresses or
looks inside a record, so only their sizes matter). Workloads (--workloads, comma-separated):

  lone      groups of 1 record of ~200 bytes (a single-task submit), one every --gap-us: latency added per group
  map       100,000 task records of 100 bytes in groups of 4,096, then 100,000 result records in groups of 256
  wire      the same map journaled as its wire messages: a record per submitTasks of 4,096 and per taskResults of 256,
            one message per group
  payload   1,000 records of 1 MiB (a put-objects message), one per group
  recovery  1,000,000 records of 100 bytes (written first, not timed): read back and check every one; then compaction:
            the live 10 % written to a new store, synced, renamed over the old one, the directory synced
  torn      not timed: what each store says after a cut tail, a damaged record in the middle, a foreign header

Durability modes: none / off / nosync write to the page cache only (a kill -9 of the process loses nothing, an OS
crash or power cut may lose what was not yet written back); interval: fdatasync at most every --interval-ms, by a
background thread (file-interval) or by the next group after the deadline (file-lazy); normal: SQLite's WAL default
(synced at checkpoints only); always / full / sync: synced before append() returns.

The candidates run interleaved in rounds (A B C, then C B A, ...), each on a fresh store in a scratch directory made by
tempfile.mkdtemp() under /tmp and removed at the end. The process keeps to one CPU (--cpu), as the scheduler does.
Prints per workload the medians over rounds and, against the first candidate (file-none), the median (min-max) of the
ratios paired by round. LMDB runs if `lmdb` imports or installs from PyPI into a throwaway venv (--lmdb).

    .venv/bin/python benchmarks/journal_storage.py [--rounds 3] [--workloads lone,map,wire,payload,recovery,torn]
"""

from __future__ import annotations

import argparse
import glob
import importlib
import json
import os
import pickle
import shutil
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from scaler.protocol.codec import encode
from scaler.protocol.records import PutObjects, SubmitTasks, TaskResults

Record = tuple[int, bytes]  # (type, body)
TASK, RESULT, OBJECT, MESSAGE = 1, 2, 3, 4
PREFIX = 5 << 40

# The file's framing as measured for ADR 0022. ADR 0023's differs in what costs nothing: a group ends there with a
# commit record (here: bit 7 of the last record's type), its CRC32 leaves the length out, its header names the address.
MAGIC = b"SCLRJRNL"
FORMAT_VERSION = 1
FILE_HEAD = struct.Struct("<8sHH16s")  # magic, format version, flags, the journal's identity; then its CRC32
FILE_HEAD_SIZE = FILE_HEAD.size + 4
RECORD_CRC = struct.Struct("<I")  # CRC32 of what follows it in the record: length, type, body
RECORD_TAIL = struct.Struct("<IB")  # length of the body, type (bit 7: the last record of its group)
RECORD_HEAD = struct.Struct("<IIB")
GROUP_END = 0x80
IOV_MAX = 1024

LMDB_MAP_SIZE = 8 << 30
LIVE_EVERY = 10  # compaction keeps one record in ten


class JournalError(Exception):
    """A journal that cannot be used as it is: another format, another scheduler, damage."""


class Journal(Protocol):
    def append(self, group: Sequence[Record]) -> None: ...

    def close(self) -> None: ...


# -- the append-only file --------------------------------------------------------------------------------------------


def file_header(identity: bytes) -> bytes:
    head = FILE_HEAD.pack(MAGIC, FORMAT_VERSION, 0, identity)
    return head + RECORD_CRC.pack(zlib.crc32(head))


def frame(group: Sequence[Record]) -> list[bytes]:
    """The group's records as buffers to write in order: per record a CRC32, its length and type, its body."""
    parts: list[bytes] = []
    crc32, tail_of, crc_of = zlib.crc32, RECORD_TAIL.pack, RECORD_CRC.pack
    last = len(group) - 1
    for k, (kind, body) in enumerate(group):
        tail = tail_of(len(body), kind | GROUP_END if k == last else kind)
        parts += (crc_of(crc32(body, crc32(tail))), tail, body)
    return parts


def write_all(fd: int, parts: list[bytes]) -> None:
    """One system call per group: writev for a few buffers (no copy of a big body), else one joined write."""
    data: bytes | memoryview = b""
    if len(parts) <= IOV_MAX:
        written, total = os.writev(fd, parts), sum(map(len, parts))
        if written == total:
            return
        data = memoryview(b"".join(parts))[written:]
    else:
        data = b"".join(parts)
    while data:  # a short write (a signal, a nearly full disk): the rest, or OSError (ENOSPC, EIO...)
        data = memoryview(data)[os.write(fd, data) :]


class FileJournal:
    """modes: none (page cache), interval (a background thread syncs), lazy (the next group after the deadline
    syncs), always (every group)."""

    def __init__(self, path: str, mode: str, interval: float) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self._mode, self._interval = mode, interval
        self._last_sync = time.monotonic()
        self._dirty, self._closing = threading.Event(), threading.Event()
        self._syncer: threading.Thread | None = None
        write_all(self._fd, [file_header(uuid.uuid4().bytes)])
        if mode == "interval":
            self._syncer = threading.Thread(target=self._sync_loop, name="journal-sync", daemon=True)
            self._syncer.start()

    def append(self, group: Sequence[Record]) -> None:
        write_all(self._fd, frame(group))
        mode = self._mode
        if mode == "always":
            os.fdatasync(self._fd)
        elif mode == "interval":
            if not self._dirty.is_set():
                self._dirty.set()
        elif mode == "lazy":
            now = time.monotonic()
            if now - self._last_sync >= self._interval:
                os.fdatasync(self._fd)
                self._last_sync = now

    def _sync_loop(self) -> None:
        while self._dirty.wait() and not self._closing.is_set():
            wait = self._last_sync + self._interval - time.monotonic()
            if wait > 0 and self._closing.wait(wait):
                return
            self._dirty.clear()  # a write after this is synced now or sets it again
            os.fdatasync(self._fd)
            self._last_sync = time.monotonic()

    def close(self) -> None:
        if self._syncer is not None:
            self._closing.set()
            self._dirty.set()
            self._syncer.join()
        os.fdatasync(self._fd)
        os.close(self._fd)


@dataclass
class Scan:
    """What a read of the file found: the records of complete groups, where they end, and the first problem."""

    records: int
    good_end: int
    size: int
    problem: str = ""
    zero_tail: bool = False  # from the problem to the end every byte is zero (an OS crash before write-back)


def check_header(data: bytes, identity: bytes | None) -> None:
    if len(data) < FILE_HEAD_SIZE or data[:8] != MAGIC:
        raise JournalError(f"not a Scaler journal (starts with {data[:8]!r})")
    if zlib.crc32(data[: FILE_HEAD.size]) != RECORD_CRC.unpack_from(data, FILE_HEAD.size)[0]:
        raise JournalError("the journal's header is damaged (CRC32 mismatch)")
    _, version, _, owner = FILE_HEAD.unpack_from(data)
    if version != FORMAT_VERSION:
        raise JournalError(f"journal format version {version}; this scheduler reads version {FORMAT_VERSION}")
    if identity is not None and owner != identity:
        raise JournalError(
            f"the journal belongs to scheduler {uuid.UUID(bytes=owner)}, not {uuid.UUID(bytes=identity)}"
        )


def scan_file(path: str, identity: bytes | None = None) -> Scan:
    """Reads every record and checks its CRC32; stops at the first that is cut short or damaged."""
    with open(path, "rb") as f:
        data = f.read()
    check_header(data, identity)
    view, size, crc32, unpack = memoryview(data), len(data), zlib.crc32, RECORD_HEAD.unpack_from
    pos = good_end = FILE_HEAD_SIZE
    records = complete = 0
    problem = ""
    while pos < size:
        if pos + RECORD_HEAD.size > size:
            problem = f"record head cut short at offset {pos}"
            break
        crc, length, kind = unpack(data, pos)
        end = pos + RECORD_HEAD.size + length
        if end > size:
            problem = f"record at offset {pos} cut short: {end - pos} bytes, {size - pos} left"
            break
        if crc32(view[pos + 4 : end]) != crc:
            problem = f"CRC32 mismatch in the record at offset {pos}"
            break
        records, pos = records + 1, end
        if kind & GROUP_END:
            complete, good_end = records, pos
    if not problem and good_end != size:
        problem = f"the last group has no end: {size - good_end} bytes after offset {good_end}"
    return Scan(complete, good_end, size, problem, bool(problem) and not data[pos:].strip(b"\0"))


def verdict(scan: Scan) -> str:
    """What ADR 0022 says to do with what a scan found (for the cases `torn` makes: a failure with a complete group
    after it is damage, one without is a torn tail)."""
    if not scan.problem:
        return f"clean: {scan.records:,} records"
    if "cut short" in scan.problem or "has no end" in scan.problem:
        action = "a torn tail, a group never acknowledged: cut, with a warning"
    elif scan.zero_tail:
        action = "zeros to the end, as an OS crash leaves unsynced pages: cut, with a warning naming the loss"
    else:
        action = "damage: start refused"
    return f"{scan.problem}; {scan.records:,} records in complete groups before it -> {action}"


# -- SQLite and LMDB -------------------------------------------------------------------------------------------------


class SqliteJournal:
    """WAL mode, one transaction per group, a row per record."""

    def __init__(self, path: str, synchronous: str) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        self._db.execute("CREATE TABLE IF NOT EXISTS journal (seq INTEGER PRIMARY KEY, type INTEGER, body BLOB)")

    def append(self, group: Sequence[Record]) -> None:
        db = self._db
        db.execute("BEGIN")
        db.executemany("INSERT INTO journal (type, body) VALUES (?, ?)", group)
        db.execute("COMMIT")

    def close(self) -> None:
        self._db.close()


class LmdbJournal:
    """One write transaction per group; the key is (sequence number, type), big-endian, appended in order."""

    def __init__(self, lmdb: Any, path: str, sync: bool) -> None:
        self._env = lmdb.open(path, subdir=False, map_size=LMDB_MAP_SIZE, sync=sync, metasync=sync, readahead=False)
        self._seq = 0

    def append(self, group: Sequence[Record]) -> None:
        seq, key = self._seq, struct.Struct(">QB").pack
        with self._env.begin(write=True) as txn:
            txn.cursor().putmulti([(key(seq + k, kind), body) for k, (kind, body) in enumerate(group)], append=True)
        self._seq = seq + len(group)

    def close(self) -> None:
        self._env.sync(True)
        self._env.close()


class NoJournal:
    """The floor of the measurement: a call that writes nothing."""

    def append(self, group: Sequence[Record]) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class Candidate:
    name: str
    store: str  # file, sqlite, lmdb; none: no journal (lone only)
    mode: str


CANDIDATES = [
    Candidate("file-none", "file", "none"),
    Candidate("file-interval", "file", "interval"),
    Candidate("file-lazy", "file", "lazy"),
    Candidate("file-always", "file", "always"),
    Candidate("sqlite-off", "sqlite", "OFF"),
    Candidate("sqlite-normal", "sqlite", "NORMAL"),
    Candidate("sqlite-full", "sqlite", "FULL"),
    Candidate("lmdb-nosync", "lmdb", "nosync"),
    Candidate("lmdb-sync", "lmdb", "sync"),
    Candidate("no-journal", "none", ""),
]


@dataclass
class Bench:
    """What every run needs: the scratch directory, the options, LMDB if it loaded."""

    scratch: str
    interval: float
    gap: float
    tasks: int
    lone_groups: int
    payloads: int
    small: int
    lmdb: Any = None
    serial: list[int] = field(default_factory=lambda: [0])

    def fresh(self) -> str:
        self.serial[0] += 1
        path = os.path.join(self.scratch, f"run{self.serial[0]}")
        os.mkdir(path)
        return path

    def open(self, c: Candidate, directory: str, name: str = "journal") -> Journal:
        path = os.path.join(directory, name)
        if c.store == "file":
            return FileJournal(path, c.mode, self.interval)
        if c.store == "sqlite":
            return SqliteJournal(path, c.mode)
        if c.store == "none":
            return NoJournal()
        return LmdbJournal(self.lmdb, path, c.mode == "sync")


# -- records ---------------------------------------------------------------------------------------------------------


def joined(frames: Sequence[Any]) -> bytes:
    return b"".join(bytes(f) for f in frames)


def submit_message(n: int, first: int = 2) -> bytes:
    ids = [PREFIX | k for k in range(first, first + n)]
    args = [pickle.dumps(("arg", k), pickle.HIGHEST_PROTOCOL) for k in range(n)]
    return joined(encode(SubmitTasks(ids, [PREFIX | 1] * n, bytes(n), [1] * n, [0] * n, None, args)))  # type: ignore[arg-type]


def results_message(n: int, first: int = 2) -> bytes:
    ids = [PREFIX | k for k in range(first, first + n)]
    done = pickle.dumps(None, pickle.HIGHEST_PROTOCOL)
    return joined(encode(TaskResults(ids, bytes([1]) * n, [done] * n, [120] * n)))


def small_records(kind: int, start: int, stop: int, size: int = 100) -> list[Record]:
    filler = b"." * (size - 10)
    return [(kind, b"%010d" % k + filler) for k in range(start, stop)]


def groups_of(records: Sequence[Record], size: int) -> list[Sequence[Record]]:
    return [records[k : k + size] for k in range(0, len(records), size)]


@dataclass
class Data:
    lone: Record
    map_groups: list[Sequence[Record]]
    wire_groups: list[Sequence[Record]]
    payload: Record

    @staticmethod
    def make(tasks: int) -> Data:
        lone = (MESSAGE, submit_message(1))
        groups = groups_of(small_records(TASK, 0, tasks), 4096) + groups_of(small_records(RESULT, 0, tasks), 256)
        wire: list[Sequence[Record]] = [
            [(MESSAGE, submit_message(min(4096, tasks - k), k))] for k in range(0, tasks, 4096)
        ]
        wire += [[(MESSAGE, results_message(min(256, tasks - k), k))] for k in range(0, tasks, 256)]
        head = joined(encode(PutObjects([PREFIX | 7], [b"x"], ["object"]))[:1])
        return Data(lone, groups, wire, (OBJECT, head + bytes(1 << 20)))


# -- workloads: each runs one candidate once and returns its figures ---------------------------------------------------


@dataclass
class Run:
    figures: dict[str, float]
    samples: list[float] = field(default_factory=list)


def run_lone(b: Bench, c: Candidate, d: Data, directory: str) -> Run:
    journal = b.open(c, directory)
    group, clock, sleep = [d.lone], time.perf_counter_ns, time.sleep
    for _ in range(50):  # warm-up
        journal.append(group)
    idle = time.process_time()
    for _ in range(200):  # what the sleeps alone cost in CPU, taken off below
        sleep(b.gap)
    idle = (time.process_time() - idle) / 200
    samples: list[float] = []
    cpu = time.process_time()
    for _ in range(b.lone_groups):
        sleep(b.gap)
        start = clock()
        journal.append(group)
        samples.append((clock() - start) / 1e3)
    cpu = time.process_time() - cpu
    journal.close()
    ordered = sorted(samples)
    figures = {"median_us": statistics.median(samples), "p99_us": ordered[int(len(ordered) * 0.99)]}
    return Run(figures | {"cpu_us": (cpu / len(samples) - idle) * 1e6}, samples)


def timed_groups(journal: Journal, groups: Sequence[Sequence[Record]]) -> tuple[float, float]:
    """Wall and CPU seconds (the whole process: a sync thread's too) to append the groups, close not included."""
    wall, cpu = time.perf_counter(), time.process_time()
    for group in groups:
        journal.append(group)
    return time.perf_counter() - wall, time.process_time() - cpu


def run_batches(b: Bench, c: Candidate, groups: list[Sequence[Record]], directory: str, tasks: int) -> Run:
    journal = b.open(c, directory)
    wall, cpu = timed_groups(journal, groups)
    journal.close()
    records = sum(map(len, groups))
    size = sum(len(body) for g in groups for _, body in g)
    figures = {"records_per_s": records / wall, "MB_per_s": size / wall / 1e6, "bytes_per_task": size / tasks}
    return Run(figures | {"us_per_task": wall / tasks * 1e6, "cpu_us_per_task": cpu / tasks * 1e6, "s": wall})


def run_payload(b: Bench, c: Candidate, d: Data, directory: str) -> Run:
    journal = b.open(c, directory)
    groups = [[d.payload]] * b.payloads
    wall, _ = timed_groups(journal, groups)
    journal.close()
    size = len(d.payload[1]) * b.payloads
    return Run({"MiB_per_s": size / wall / (1 << 20), "ms_per_record": wall / b.payloads * 1e3, "s": wall})


# -- recovery and compaction -----------------------------------------------------------------------------------------


def read_back(b: Bench, c: Candidate, path: str) -> int:
    """Opens the store and goes through every record in order, touching its body; returns the count."""
    if c.store == "file":
        return scan_file(path).records
    if c.store == "sqlite":
        db = sqlite3.connect(path)
        count = sum(1 for _, body in db.execute("SELECT type, body FROM journal ORDER BY seq") if body)
        db.close()
        return count
    env = b.lmdb.open(path, subdir=False, map_size=LMDB_MAP_SIZE, readonly=True, lock=False)
    with env.begin(buffers=True) as txn:
        count = sum(1 for _, body in txn.cursor() if len(body))
    env.close()
    return count


def store_files(path: str) -> list[str]:
    return [p for p in (path, path + "-wal", path + "-shm", path + "-lock") if os.path.exists(p)]


def compact(b: Bench, c: Candidate, directory: str, live: list[Sequence[Record]]) -> None:
    """Writes the live records to a new store, syncs it, renames it over the old one and syncs the directory."""
    durable = Candidate(c.name, c.store, {"file": "none", "sqlite": "OFF", "lmdb": "nosync"}[c.store])
    journal = b.open(durable, directory, "journal.new")
    for group in live:
        journal.append(group)
    journal.close()  # the file and LMDB sync on close; SQLite checkpoints its WAL into the database and removes it
    new, old = os.path.join(directory, "journal.new"), os.path.join(directory, "journal")
    if c.store == "sqlite":
        fd = os.open(new, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    for stale in store_files(old)[1:]:
        os.unlink(stale)
    os.rename(new, old)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(fd)
    os.close(fd)


def run_recovery(b: Bench, c: Candidate, d: Data, directory: str) -> Run:
    setup = Candidate(c.name, c.store, {"file": "none", "sqlite": "OFF", "lmdb": "nosync"}[c.store])
    journal = b.open(setup, directory)
    for first in range(0, b.small, 4096):
        journal.append(small_records(TASK, first, min(first + 4096, b.small)))
    journal.close()
    path = os.path.join(directory, "journal")
    size = sum(os.path.getsize(p) for p in store_files(path))
    start = time.perf_counter()
    count = read_back(b, c, path)
    read = time.perf_counter() - start
    if count != b.small:
        raise JournalError(f"{c.name}: read {count} records back, wrote {b.small}")
    live = groups_of(small_records(TASK, 0, b.small // LIVE_EVERY), 4096)
    start = time.perf_counter()
    compact(b, c, directory, live)
    compaction = time.perf_counter() - start
    figures = {"read_s": read, "records_per_s": count / read, "size_MB": size / 1e6, "compact_s": compaction}
    return Run(figures | {"compacted_MB": sum(os.path.getsize(p) for p in store_files(path)) / 1e6})


# -- torn and damaged stores (not timed) -----------------------------------------------------------------------------


def damage(path: str, how: str, marker: bytes) -> None:
    """cut: the last 50 bytes go; flip: a byte of the record holding `marker` changes; zeros: 4 KiB of zeros follow."""
    with open(path, "r+b") as f:
        data = f.read()
        if how == "cut":
            f.truncate(len(data) - 50)
        elif how == "zeros":
            f.write(bytes(4096))
        else:
            at = data.index(marker) + 5
            f.seek(at)
            f.write(bytes([data[at] ^ 0xFF]))


def torn_file(directory: str) -> list[str]:
    lines, identity = [], uuid.uuid4().bytes
    for how in ("cut", "flip", "zeros"):
        path = os.path.join(directory, f"file-{how}")
        with open(path, "wb") as f:
            f.write(file_header(identity))
            for start in range(0, 1000, 100):
                f.write(b"".join(frame(small_records(TASK, start, start + 100))))
        damage(path, how, b"%010d" % 500)
        lines.append(f"file, {how}: {verdict(scan_file(path, identity))}")
    for wrong, label in ((uuid.uuid4().bytes, "another scheduler"),):
        try:
            scan_file(os.path.join(directory, "file-cut"), wrong)
        except JournalError as e:
            lines.append(f"file, {label}: JournalError: {e}")
    return lines


def sqlite_crash_copy(directory: str, name: str) -> str:
    """A store as a kill -9 leaves it: 10 transactions of 100 rows in the WAL (no checkpoint), copied while open."""
    path = os.path.join(directory, name)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("CREATE TABLE journal (seq INTEGER PRIMARY KEY, type INTEGER, body BLOB)")
    for start in range(0, 1000, 100):
        db.execute("BEGIN")
        db.executemany("INSERT INTO journal (type, body) VALUES (?, ?)", small_records(TASK, start, start + 100))
        db.execute("COMMIT")
    copy = path + ".crashed"
    shutil.copyfile(path, copy)
    shutil.copyfile(path + "-wal", copy + "-wal")
    db.close()
    return copy


def torn_sqlite(directory: str) -> list[str]:
    lines = []
    for how in ("cut", "flip"):
        copy = sqlite_crash_copy(directory, f"sqlite-{how}")
        damage(copy + "-wal", how, b"%010d" % 500)
        try:
            db = sqlite3.connect(copy)
            rows = db.execute("SELECT count(*) FROM journal").fetchone()[0]
            check = db.execute("PRAGMA integrity_check").fetchone()[0]
            db.close()
            lines.append(f"sqlite (WAL), {how}: opens without error, {rows} of 1000 rows, integrity_check: {check}")
        except sqlite3.Error as e:
            lines.append(f"sqlite (WAL), {how}: {type(e).__name__}: {e}")
    return lines


def torn_lmdb(lmdb: Any, directory: str) -> list[str]:
    lines = []
    for how in ("cut", "flip"):
        path = os.path.join(directory, f"lmdb-{how}")
        journal = LmdbJournal(lmdb, path, True)
        for start in range(0, 1000, 100):
            journal.append(small_records(TASK, start, start + 100))
        journal.close()
        damage(path, how, b"%010d" % 500)
        try:
            env = lmdb.open(path, subdir=False, map_size=LMDB_MAP_SIZE, readonly=True, lock=False)
            with env.begin() as txn:
                bodies = [bytes(body) for _, body in txn.cursor()]
            env.close()
            wrong = sum(1 for k, body in enumerate(bodies) if body != small_records(TASK, k, k + 1)[0][1])
            lines.append(f"lmdb, {how}: opens without error, {len(bodies)} of 1000 records, {wrong} of them altered")
        except lmdb.Error as e:
            lines.append(f"lmdb, {how}: {type(e).__name__}: {e}")
    return lines


# -- the sitting -----------------------------------------------------------------------------------------------------


Workload = Callable[[Bench, Candidate, Data, str], Run]

WORKLOADS: dict[str, tuple[Workload, list[tuple[str, str]], str]] = {
    # name: (run, columns (figure, format), the figure whose paired ratio is shown)
    "lone": (run_lone, [("median_us", ".2f"), ("p99_us", ".1f"), ("cpu_us", ".1f")], "median_us"),
    "map": (
        lambda b, c, d, p: run_batches(b, c, d.map_groups, p, b.tasks),
        [("records_per_s", ",.0f"), ("MB_per_s", ".1f"), ("us_per_task", ".2f"), ("cpu_us_per_task", ".2f")],
        "s",
    ),
    "wire": (
        lambda b, c, d, p: run_batches(b, c, d.wire_groups, p, b.tasks),
        [("MB_per_s", ".1f"), ("bytes_per_task", ".1f"), ("us_per_task", ".3f"), ("cpu_us_per_task", ".3f")],
        "s",
    ),
    "payload": (run_payload, [("MiB_per_s", ",.0f"), ("ms_per_record", ".2f")], "s"),
    "recovery": (
        run_recovery,
        [
            ("read_s", ".2f"),
            ("records_per_s", ",.0f"),
            ("size_MB", ".1f"),
            ("compact_s", ".3f"),
            ("compacted_MB", ".1f"),
        ],
        "read_s",
    ),
}


def sitting(b: Bench, d: Data, name: str, candidates: list[Candidate], rounds: int, out: Any) -> dict[str, list[Run]]:
    run = WORKLOADS[name][0]
    if name == "recovery":  # the durability mode does not change a read or a compaction: one candidate per store
        candidates = [c for c in candidates if c.mode in ("none", "OFF", "nosync")]
    if name != "lone":  # no journal: the floor of a latency, nothing to compare a throughput with
        candidates = [c for c in candidates if c.store != "none"]
    runs: dict[str, list[Run]] = {c.name: [] for c in candidates}
    for r in range(rounds):
        for c in candidates if r % 2 == 0 else candidates[::-1]:
            directory = b.fresh()
            result = run(b, c, d, directory)
            shutil.rmtree(directory)
            runs[c.name].append(result)
            if out is not None:
                out.write(json.dumps({"workload": name, "candidate": c.name, "round": r, **result.figures}) + "\n")
    return runs


def ratio_text(runs: dict[str, list[Run]], name: str, key: str) -> str:
    reference = next(iter(runs.values()))
    ratios = [run.figures[key] / ref.figures[key] for run, ref in zip(runs[name], reference)]
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


def table(name: str, runs: dict[str, list[Run]]) -> str:
    _, columns, key = WORKLOADS[name]
    first = next(iter(runs))
    head = ["candidate"] + [figure for figure, _ in columns] + [f"{key} / {first}, paired"]
    rows = [head, ["---"] * len(head)]
    for candidate, results in runs.items():
        cells = [candidate]
        for figure, form in columns:
            if figure == "p99_us":  # over every sample of every round
                samples = sorted(s for run in results for s in run.samples)
                cells.append(format(samples[int(len(samples) * 0.99)], form))
            else:
                cells.append(format(statistics.median(run.figures[figure] for run in results), form))
        rows.append([*cells, ratio_text(runs, candidate, key)])
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def load_lmdb(choice: str, scratch: str) -> tuple[Any, str]:
    """The lmdb module, from this interpreter or a throwaway venv in the scratch directory, and how it came."""
    if choice == "off":
        return None, "LMDB skipped (--lmdb off)"
    try:
        return importlib.import_module("lmdb"), "LMDB: importable here"
    except ImportError:
        pass
    venv, start = os.path.join(scratch, "lmdb-venv"), time.perf_counter()
    try:
        subprocess.run([sys.executable, "-m", "venv", venv], check=True, capture_output=True, timeout=60)
        pip = [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--quiet", "lmdb"]
        subprocess.run(pip, check=True, capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"LMDB skipped: not importable, and `pip install lmdb` into a throwaway venv failed ({e})"
    sys.path.append(glob.glob(os.path.join(venv, "lib", "python*", "site-packages"))[0])
    lmdb = importlib.import_module("lmdb")
    took = time.perf_counter() - start
    return lmdb, f"LMDB {lmdb.__version__}: installed from PyPI into a throwaway venv in {took:.1f} s"


def cpu_times() -> list[int]:
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def steal_share(before: list[int], after: list[int]) -> float:
    """Of the time this machine's vCPUs had work, the share the hypervisor gave to someone else."""
    delta = [a - b for a, b in zip(after, before)]
    busy = sum(delta) - delta[3] - delta[4]  # less idle and iowait
    return delta[7] / busy if busy > 0 and len(delta) > 7 else 0.0


def pin(choice: str) -> str:
    if choice == "none":
        return "not pinned"
    allowed = sorted(os.sched_getaffinity(0))
    cpu = allowed[-1] if choice == "last" else int(choice)
    os.sched_setaffinity(0, {cpu})
    return f"kept to CPU {cpu} (--cpu), as the scheduler keeps to one"


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="lone,map,wire,payload,recovery,torn")
    parser.add_argument("--candidates", default=",".join(c.name for c in CANDIDATES), help="the first is the reference")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every workload, the order reversed each round")
    parser.add_argument("--interval-ms", type=float, default=50.0, help="file-interval and file-lazy (default 50)")
    parser.add_argument("--gap-us", type=float, default=500.0, help="lone: the pause between groups (default 500)")
    parser.add_argument("--lone-groups", type=int, default=1000, help="lone: groups timed per run (default 1,000)")
    parser.add_argument("--tasks", type=int, default=100_000, help="map and wire: tasks (default 100,000)")
    parser.add_argument("--payloads", type=int, default=1000, help="payload: records of 1 MiB (default 1,000)")
    parser.add_argument("--small", type=int, default=1_000_000, help="recovery: records of 100 bytes (1,000,000)")
    parser.add_argument("--lmdb", choices=["auto", "off"], default="auto", help="auto: import, else a throwaway venv")
    parser.add_argument("--cpu", default="last", help="the CPU to keep to: a number, last (default) or none")
    parser.add_argument("--out", help="also write one JSON line per run to this file")
    return parser.parse_args()


def header_lines(b: Bench, lmdb_note: str, pinned: str) -> list[str]:
    fs = subprocess.run(["df", "-T", b.scratch], capture_output=True, text=True).stdout.splitlines()[-1].split()
    return [
        f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs, {pinned}",
        f"scratch {b.scratch} on {fs[0]} ({fs[1]}); {lmdb_note}",
        f"interval {b.interval * 1e3:.0f} ms; lone gap {b.gap * 1e6:.0f} us",
    ]


def run_all(args: argparse.Namespace, b: Bench, candidates: list[Candidate], out: Any) -> None:
    d = Data.make(b.tasks)
    for name in args.workloads.split(","):
        if name == "torn":
            directory = b.fresh()
            print("\n## torn and damaged stores\n")
            lines = torn_file(directory) + torn_sqlite(directory) + (torn_lmdb(b.lmdb, directory) if b.lmdb else [])
            print("\n".join(f"- {line}" for line in lines))
            continue
        start, before = time.perf_counter(), cpu_times()
        runs = sitting(b, d, name, candidates, args.rounds, out)
        steal = steal_share(before, cpu_times())
        print(f"\n## {name} ({args.rounds} rounds, {time.perf_counter() - start:.0f} s, steal {steal:.1%})\n")
        print(table(name, runs), flush=True)


def main() -> None:
    args = parse()
    scratch = tempfile.mkdtemp(prefix="journal-storage-", dir="/tmp")
    out = open(args.out, "a") if args.out else None  # closed below
    try:
        pinned = pin(args.cpu)
        b = Bench(
            scratch, args.interval_ms / 1e3, args.gap_us / 1e6, args.tasks, args.lone_groups, args.payloads, args.small
        )
        b.lmdb, note = load_lmdb(args.lmdb, scratch)
        wanted = args.candidates.split(",")
        candidates = [c for c in CANDIDATES if c.name in wanted and (c.store != "lmdb" or b.lmdb is not None)]
        candidates.sort(key=lambda c: wanted.index(c.name))
        print("\n".join(header_lines(b, note, pinned)), flush=True)
        run_all(args, b, candidates, out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if out is not None:
            out.close()


if __name__ == "__main__":
    main()
