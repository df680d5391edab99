"""Large task arguments through host-local shared memory (docs/protocol.md, "Python payloads"; ADR 0013).

A client writes an argument's serialized bytes once into a POSIX shared-memory segment (a file in /dev/shm) and
sends a small reference instead; the processor that runs the task reads the bytes straight from the segment. The
scheduler carries the reference as an ordinary payload and never reads it. A processor that cannot reach the
segment (another host, another /dev/shm, another user) answers a distinct `failed`, and the client sends that task
again with its arguments inline. The client unlinks a segment when its task has ended, and every one it still has
when it closes; segments of clients that died are swept by the next client of the same user on the host.

Pure helpers (encoding, checks) and the two ends' file operations; no sockets, no threads.
"""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
import pickle
import re
import stat
import struct
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import cloudpickle

SHM_DIR = "/dev/shm"
DEFAULT_THRESHOLD = 1 << 20  # arguments at least this big (serialized) travel by shared memory
KEEP_FREE_FRACTION = 0.25  # a segment is made only if /dev/shm keeps at least this much of its size free

# Payload tags: in a task flagged FLAG_SHARED_ARGUMENTS (protocol.records), every payload starts with one of these.
TAG_INLINE = 0
TAG_REFERENCE = 1

# The reference (after its tag): version, data size, nonce, host token, then the segment's name (ASCII).
_REFERENCE = struct.Struct("<BQ16s16s")
REFERENCE_VERSION = 1
# The segment's header: magic, nonce, data size; the data starts at DATA_OFFSET.
_MAGIC = b"SCLRSHM1"
_HEADER = struct.Struct("<8s16sQ")
DATA_OFFSET = 64
_NAME = re.compile(r"scaler-(\d{1,20})-(\d{1,10})-(\d{1,20})-[0-9a-f]{32}")

# A processor's answer when it cannot read a segment: `failed`, with this text first. The client sends the task again
# with its arguments inline; any other `failed` is the task's own outcome.
UNREACHABLE_PREFIX = b"scaler: shared memory unreachable: "

_MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)  # (Linux 5.14; Python 3.11 has no name for it)
_READ_CHUNK = 1 << 30  # os.pread/os.write move at most about 2 GiB per call
SEGMENT_MODE = 0o600
# A segment is opened without following a link, without blocking (a FIFO or a device named like a segment must not
# hold the processor in open() or read()), and checked with fstat before anything is read or mapped.
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
_KINDS = {"p": "a FIFO", "c": "a character device", "b": "a block device", "s": "a socket", "d": "a directory"}
_CHECK = "a Scaler client makes only regular files there; check what else writes scaler-* files in that folder"


class SharedMemoryUnreachable(Exception):
    """This process cannot read a reference's segment (another host, /dev/shm or user; gone; not the one meant).
    The task is answered `failed` with UNREACHABLE_PREFIX, and its client sends it again inline."""

    def payload(self) -> bytes:
        return UNREACHABLE_PREFIX + str(self).encode(errors="replace")


class MalformedReference(ValueError):
    """A payload flagged as a shared-memory reference that is not one: a bug or a foreign peer, never retried."""


@dataclass(frozen=True)
class Reference:
    name: str
    size: int
    nonce: bytes
    token: bytes


# ------------------------------------------------------------------------------------------- pure parts
def encode_reference(ref: Reference) -> bytes:
    """The payload standing for an argument in a flagged task (tag included)."""
    head = _REFERENCE.pack(REFERENCE_VERSION, ref.size, ref.nonce, ref.token)
    return bytes((TAG_REFERENCE,)) + head + ref.name.encode("ascii")


def decode_reference(payload: Any) -> Reference:
    """The reference in a payload tagged TAG_REFERENCE; MalformedReference says what is wrong otherwise."""
    view = memoryview(payload)
    if len(view) < 1 + _REFERENCE.size or view[0] != TAG_REFERENCE:
        raise MalformedReference(f"a shared-memory reference of {len(view)} bytes is too short or not tagged")
    version, size, nonce, token = _REFERENCE.unpack_from(view, 1)
    if version != REFERENCE_VERSION:
        raise MalformedReference(f"shared-memory reference version {version}, this worker reads {REFERENCE_VERSION}")
    try:
        name = bytes(view[1 + _REFERENCE.size :]).decode("ascii")
    except UnicodeDecodeError:
        raise MalformedReference("a shared-memory reference's segment name is not ASCII") from None
    if not _NAME.fullmatch(name):
        raise MalformedReference(f"{name[:80]!r} is not the name of a Scaler shared-memory segment")
    return Reference(name, size, nonce, token)


def tag_inline(payload: Any) -> bytes:
    """A payload that travels inline in a flagged task."""
    if isinstance(payload, Parts):
        return b"".join((b"\x00", *payload.chunks))
    return b"\x00" + bytes(payload)


def untag(payloads: Sequence[Any]) -> tuple[Any, ...]:
    """Payloads that go inline in a task not flagged (Parts joined)."""
    return tuple(p.join() if isinstance(p, Parts) else p for p in payloads)


def split_payload(payload: Any) -> tuple[int, memoryview]:
    """(tag, rest) of a payload of a flagged task."""
    view = memoryview(payload)
    if not len(view) or view[0] not in (TAG_INLINE, TAG_REFERENCE):
        raise MalformedReference("a payload of a task with shared-memory arguments has no valid tag")
    return view[0], view


def encode_header(nonce: bytes, size: int) -> bytes:
    return _HEADER.pack(_MAGIC, nonce, size).ljust(DATA_OFFSET, b"\x00")


def check_header(header: Any, ref: Reference) -> None:
    """Raise SharedMemoryUnreachable unless the segment's header is the one the reference was made with."""
    if len(header) < _HEADER.size:
        raise SharedMemoryUnreachable(f"segment {ref.name} is too short")
    magic, nonce, size = _HEADER.unpack_from(header)
    if magic != _MAGIC or nonce != ref.nonce or size != ref.size:
        raise SharedMemoryUnreachable(f"segment {ref.name} is not the one the task was given")


def is_unreachable(status_failed: bool, payload: Any) -> bool:
    """Whether a task's outcome is a processor's 'cannot read the segment' (the client then sends it inline)."""
    return status_failed and bytes(memoryview(payload)[: len(UNREACHABLE_PREFIX)]) == UNREACHABLE_PREFIX


def parse_name(name: str) -> tuple[int, int, int] | None:
    """(pid namespace, pid, process start time) of a segment name of ours, or None."""
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3))


# ------------------------------------------------------------------------------------------- this host
_token_cache: dict[int, bytes] = {}


def host_token() -> bytes:
    """16 bytes that equal another process's only if both see the same /dev/shm as the same user on the same boot:
    the kernel's boot id, the device and inode of /dev/shm, and the uid. b"" where there is no /dev/shm."""
    uid = os.getuid()
    token = _token_cache.get(uid)
    if token is None:
        try:
            with open("/proc/sys/kernel/random/boot_id", "rb") as file:
                boot = file.read().strip()
            st = os.stat(SHM_DIR)
        except OSError:
            token = b""
        else:
            token = hashlib.sha256(b"%s|%d|%d|%d" % (boot, st.st_dev, st.st_ino, uid)).digest()[:16]
        _token_cache[uid] = token
    return token


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


_prefixes: dict[int, str] = {}


def process_prefix() -> str:
    """The start of the names of this process's segments: scaler-<pid namespace>-<pid>-<start time>- (read from /proc
    once per process: a forked child has its own)."""
    pid = os.getpid()
    prefix = _prefixes.get(pid)
    if prefix is None:
        prefix = _prefixes[pid] = f"scaler-{_pid_namespace()}-{pid}-{_start_time(pid) or 0}-"
    return prefix


def _start_time(pid: int) -> int | None:
    """The start time (clock ticks since boot) of a live process, None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
    except OSError:
        return None
    try:
        return int(stat[stat.rindex(b")") + 2 :].split()[19])
    except (ValueError, IndexError):
        return None


def sweep(directory: str = SHM_DIR) -> int:
    """Unlink this user's segments left by dead clients of this pid namespace (a client killed, say); how many.
    A segment's name carries its client's pid and start time, so a pid used again by another process is no cover."""
    namespace = _pid_namespace()
    uid = os.getuid()
    removed = 0
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    for entry in entries:
        parsed = parse_name(entry.name)
        if parsed is None or parsed[0] != namespace:
            continue
        _, pid, started = parsed
        if _start_time(pid) == started:
            continue  # its client is alive
        try:
            if entry.stat(follow_symlinks=False).st_uid != uid:
                continue
            os.unlink(entry.path)
            removed += 1
        except OSError:
            pass
    return removed


# ------------------------------------------------------------------------------------------- writer (client)
SMALL_KINDS = frozenset({int, float, bool, complex, type(None)})  # never big: no need to look for Parts
SIZED_KINDS = frozenset({bytes, bytearray, str})  # plain, and their length says whether they may be big


def may_be_big(value: Any, threshold: int) -> bool:
    """False for a value that is surely smaller than threshold once pickled (a number; a short str or bytes)."""
    kind = type(value)
    return kind not in SMALL_KINDS and (kind not in SIZED_KINDS or len(value) >= threshold)


class Parts:
    """A serialized argument as the pickler wrote it: small pieces and the big buffers themselves (bytes, bytearray,
    an array's memory), not yet copied into one bytes object. It is copied once, into a segment (or joined, should
    it go inline after all). It refers to the caller's objects: it lives only within the submit that made it."""

    __slots__ = ("chunks", "size")

    def __init__(self, chunks: list[Any], size: int) -> None:
        self.chunks = chunks
        self.size = size

    def __len__(self) -> int:
        return self.size

    def join(self) -> bytes:
        return b"".join(self.chunks)


class _Collect:
    """A pickler's file that keeps what it is given."""

    __slots__ = ("chunks",)

    def __init__(self) -> None:
        self.chunks: list[Any] = []

    def write(self, chunk: Any) -> None:
        self.chunks.append(chunk)


def pickle_parts(value: Any, plain: bool, threshold: int) -> Any:
    """What DefaultSerializer.serialize(value) gives, as Parts when it is at least `threshold` bytes (the pickler hands
    its big buffers to the writer as they are: they are never copied here), else as bytes."""
    writer = _Collect()
    if plain:
        pickle.Pickler(writer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    else:
        cloudpickle.CloudPickler(writer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    chunks = writer.chunks
    size = sum(memoryview(chunk).nbytes for chunk in chunks)
    if size >= threshold:
        return Parts(chunks, size)
    return chunks[0] if len(chunks) == 1 and type(chunks[0]) is bytes else b"".join(chunks)


# ------------------------------------------------------------------------------------------- objects in place
# A send_object value in a segment (ADR 0024): pickled with protocol 5, its big buffers (an array's memory, a
# bytearray) out of band. The segment's data: this table, one u64 size per buffer, then at 64-byte boundaries the
# pickle stream and each buffer. A processor unpickles it with the buffers as slices of its read-only mapping: an
# array is read in place, by every processor of the host, without a copy.
_OBJECT_TABLE = struct.Struct("<8sIIQ")  # magic, number of buffers, 0, the pickle stream's size
_OBJECT_MAGIC = b"SCLROBJ1"
_BUFFER_SIZE = struct.Struct("<Q")
_ALIGN = 64
_MAX_BUFFERS = 1 << 20  # (a table saying more is refused before anything is computed from it)


def _aligned(size: int) -> int:
    return (size + _ALIGN - 1) & ~(_ALIGN - 1)


def _object_offsets(stream_size: int, buffer_sizes: Sequence[int]) -> tuple[list[int], int]:
    """Where the stream and each buffer start in an object's data, and the data's size."""
    offset = _aligned(_OBJECT_TABLE.size + _BUFFER_SIZE.size * len(buffer_sizes))
    offsets = [offset]
    end = offset + stream_size
    for size in buffer_sizes:
        offset = _aligned(end)
        offsets.append(offset)
        end = offset + size
    return offsets, end


def pickle_object(value: Any, plain: bool, threshold: int) -> Parts | bytes:
    """value pickled (protocol 5) as a segment's object data (see _OBJECT_TABLE), each of its buffers of at least
    `threshold` bytes out of band and not copied here; or, when it has none and its pickle is smaller than
    `threshold`, that pickle as bytes (an ordinary payload, as DefaultSerializer would give)."""
    stream = _Collect()
    buffers: list[pickle.PickleBuffer] = []

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:  # (False: out of band)
        if memoryview(buffer).nbytes < threshold:
            return True
        buffers.append(buffer)
        return False

    if plain:
        pickle.Pickler(stream, protocol=5, buffer_callback=out_of_band).dump(value)
    else:
        cloudpickle.CloudPickler(stream, protocol=5, buffer_callback=out_of_band).dump(value)
    stream_size = sum(memoryview(chunk).nbytes for chunk in stream.chunks)
    if not buffers and stream_size < threshold:
        return b"".join(stream.chunks)
    views = []
    for buffer in buffers:
        try:
            views.append(buffer.raw())
        except BufferError:  # not contiguous: copied (NumPy hands out only contiguous ones)
            views.append(memoryview(memoryview(buffer).tobytes()))
    sizes = [view.nbytes for view in views]
    offsets, end = _object_offsets(stream_size, sizes)
    table = _OBJECT_TABLE.pack(_OBJECT_MAGIC, len(views), 0, stream_size) + b"".join(
        _BUFFER_SIZE.pack(size) for size in sizes
    )
    chunks: list[Any] = [table.ljust(offsets[0], b"\x00"), *stream.chunks]
    position = offsets[0] + stream_size
    for offset, view in zip(offsets[1:], views, strict=True):
        chunks.append(bytes(offset - position))
        chunks.append(view)
        position = offset + view.nbytes
    return Parts(chunks, end)


def _object_views(data: memoryview) -> tuple[memoryview, list[memoryview]]:
    """The pickle stream and the buffers of an object's data (a segment's, after its header); MalformedReference if
    the table does not describe data of that size."""
    if len(data) < _OBJECT_TABLE.size:
        raise MalformedReference("a shared object's segment is too short for its table")
    magic, count, _, stream_size = _OBJECT_TABLE.unpack_from(data)
    if magic != _OBJECT_MAGIC or count > _MAX_BUFFERS or _OBJECT_TABLE.size + 8 * count > len(data):
        raise MalformedReference("a shared object's segment has no valid table")
    sizes = [_BUFFER_SIZE.unpack_from(data, _OBJECT_TABLE.size + 8 * k)[0] for k in range(count)]
    offsets, end = _object_offsets(stream_size, sizes)
    if end != len(data):
        raise MalformedReference(f"a shared object's table describes {end} bytes of data, its segment has {len(data)}")
    stream = data[offsets[0] : offsets[0] + stream_size]
    return stream, [data[offset : offset + size] for offset, size in zip(offsets[1:], sizes, strict=True)]


class _Call:
    """Pickles as a call of function(reference): the small payload standing for a value in a segment, which
    unpickling reads (load_object, load_result)."""

    __slots__ = ("function", "reference")

    def __init__(self, function: Callable[[bytes], Any], ref: Reference) -> None:
        self.function = function
        self.reference = encode_reference(ref)

    def __reduce__(self) -> tuple[Any, ...]:
        return self.function, (self.reference,)

    def dumps(self) -> bytes:
        return pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)


def object_payload(ref: Reference) -> bytes:
    """What a shared object's payload is: a small pickle that, unpickled on the segment's host, reads it in place."""
    return _Call(load_object, ref).dumps()


def load_object(reference: bytes, directory: str = SHM_DIR) -> Any:
    """The value a shared object's segment holds, its big buffers read in place: slices of a private, copy-on-write
    mapping, which stays open while the value keeps one. The value is this process's own: writing into it copies
    the pages written, and the segment never changes. SharedMemoryUnreachable if this process cannot read it."""
    ref = decode_reference(reference)
    mapping = open_reference(ref, directory, private=True)
    whole = memoryview(mapping)
    data = whole[DATA_OFFSET:]
    try:
        stream, buffers = _object_views(data)
        try:
            return pickle.loads(stream, buffers=buffers)
        finally:
            stream.release()
            buffers.clear()  # (the views the value did not take go now)
    finally:
        data.release()
        whole.release()
        try:
            mapping.close()
        except BufferError:  # the value holds a view of it: the mapping goes when the value does
            pass


def _write_all(fd: int, parts: Sequence[Any]) -> None:
    for part in parts:
        view = memoryview(part).cast("B")
        while len(view):
            written = os.write(fd, view[:_READ_CHUNK])
            view = view[written:]


class SharedArguments:
    """A client's segments: made for large arguments, read back for a task sent again inline, unlinked when their
    task ends and all on close (and at interpreter exit). Thread-safe."""

    def __init__(self, threshold: int, directory: str = SHM_DIR) -> None:
        self.threshold = threshold
        self.directory = directory
        self.token = host_token()
        pid = os.getpid()
        self._prefix = process_prefix()
        # Results of this client's tasks come back in segments named so (a processor adds 24 hex digits)
        self.results_prefix = self._prefix + os.urandom(4).hex()
        self._live: dict[str, int] = {}  # name -> size
        self._lock = threading.Lock()
        self._inline_until = 0.0  # after a fallback, arguments go inline until then
        self._backoff = 1.0
        self.enabled = bool(self.token) and os.path.isdir(directory)
        self.shared = 0  # segments made (for tests and the curious)
        self.fallbacks = 0
        if self.enabled:
            sweep(directory)
        self._finalizer = weakref.finalize(
            self, _unlink_all, directory, self._live, self._lock, pid, self.results_prefix
        )

    def active(self) -> bool:
        """False for a while after a processor could not read a segment (see fell_back)."""
        return time.monotonic() >= self._inline_until

    def wanted(self, payloads: Sequence[Any]) -> bool:
        """Whether a task has payloads big enough to travel by shared memory (or Parts, which must be written out)."""
        threshold = self.threshold
        for payload in payloads:  # (a loop, not any() over a generator: called for every task of a map)
            if len(payload) >= threshold:
                return True
        return False

    def share(self, payloads: Sequence[Any]) -> tuple[tuple[bytes, ...], list[str]] | None:
        """The tagged payloads of a task whose large ones were written to segments, and those segments' names; None
        if none could be made (/dev/shm full, a fallback not long ago): the task then goes inline, untagged (see
        untag)."""
        if not self.active():
            return None
        refs = [self._create(p) if len(p) >= self.threshold else None for p in payloads]
        names = [ref.name for ref in refs if ref is not None]
        if not names:
            return None
        pairs = zip(payloads, refs, strict=True)
        tagged = tuple(tag_inline(p) if ref is None else encode_reference(ref) for p, ref in pairs)
        return tagged, names

    def share_object(self, value: Any, plain: bool) -> tuple[Reference, int] | None:
        """A send_object value written to a segment (pickle_object), and its size there; None when it is smaller
        than the threshold or no segment could be made (it then goes inline)."""
        if not self.active():
            return None
        parts = pickle_object(value, plain, self.threshold)
        if not isinstance(parts, Parts):
            return None
        ref = self._create(parts)
        return None if ref is None else (ref, parts.size)

    def _create(self, payload: Any) -> Reference | None:
        size = len(payload)
        if not _room_for(self.directory, size):
            return None
        name = self._prefix + os.urandom(16).hex()
        with self._lock:
            self._live[name] = size
        ref = write_segment(self.directory, name, payload, self.token)
        if ref is None:
            self.release([name])
            return None
        self.shared += 1
        return ref

    def read_back(self, name: str) -> bytes:
        """The argument's bytes, for a task sent again inline (checked as a processor checks a segment: the file may
        have been replaced since). SharedMemoryUnreachable if it cannot be read."""
        path = os.path.join(self.directory, name)
        with self._lock:
            size = self._live.get(name)
        if size is None:
            raise SharedMemoryUnreachable(f"segment {path} was released already")
        mapping = _map_segment(path, size)
        try:
            return mapping[DATA_OFFSET:]
        finally:
            mapping.close()

    def release(self, names: Sequence[str]) -> None:
        """Unlink the segments of a task that ended."""
        with self._lock:
            for name in names:
                self._live.pop(name, None)
        for name in names:
            try:
                os.unlink(os.path.join(self.directory, name))
            except FileNotFoundError:
                pass

    def fell_back(self) -> None:
        """A processor could not read a segment: arguments go inline for a while (doubling up to a minute), so a
        client whose workers are on other hosts stops trying after the first few."""
        self.fallbacks += 1
        self._inline_until = time.monotonic() + self._backoff
        self._backoff = min(60.0, self._backoff * 2)

    def read_ok(self) -> None:
        """A task with shared arguments succeeded: a worker on this host reads them."""
        self._backoff = 1.0

    def reply_trailer(self, limit: int) -> bytes:
        """What follows this client's function objects (after their pickle, which pickle.loads stops before): where
        and from what size a processor on this host may write the results of its tasks flagged FLAG_SHARED_RESULT,
        and up to what size (the scheduler's payload limit: a bigger result goes inline, and the scheduler fails it
        as it does any payload over its limit)."""
        prefix = self.results_prefix.encode("ascii")
        return _REPLY.pack(_REPLY_MAGIC, self.token, self.threshold, limit) + prefix + bytes((len(prefix),))

    @property
    def live(self) -> list[str]:
        with self._lock:
            return list(self._live)

    def close(self) -> None:
        self._finalizer()


def _room_for(directory: str, size: int) -> bool:
    """Whether a segment of `size` bytes leaves a quarter of /dev/shm free."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return False
    return (st.f_bavail * st.f_frsize) - size - DATA_OFFSET >= st.f_blocks * st.f_frsize * KEEP_FREE_FRACTION


def write_segment(directory: str, name: str, payload: Any, token: bytes) -> Reference | None:
    """A new segment `name` holding payload (bytes or Parts), mode 0600; its reference, None if it could not be made
    (the name taken, /dev/shm full: what was made is unlinked)."""
    size = len(payload)
    nonce = os.urandom(16)
    path = os.path.join(directory, name)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError:
        return None
    try:
        os.fchmod(fd, SEGMENT_MODE)  # whatever the umask: readers accept nothing else
        chunks = payload.chunks if isinstance(payload, Parts) else [payload]
        _write_all(fd, [encode_header(nonce, size), *chunks])
    except OSError:  # ENOSPC: /dev/shm is full
        _unlink_quietly(path)
        return None
    finally:
        os.close(fd)
    return Reference(name, size, nonce, token)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _unlink_all(directory: str, live: dict[str, int], lock: threading.Lock, owner: int, results: str) -> None:
    """A client's close: its argument and object segments, and the results of its tasks it did not read (named
    `results`...)."""
    if os.getpid() != owner:  # a forked copy of the client's process, exiting: the segments are the parent's
        return
    with lock:
        names = list(live)
        live.clear()
    try:
        names += [entry.name for entry in os.scandir(directory) if entry.name.startswith(results)]
    except OSError:
        pass
    for name in names:
        _unlink_quietly(os.path.join(directory, name))


# ------------------------------------------------------------------------------------------- results
# A client with shared memory on ends its function objects with a reply trailer (SharedArguments.reply_trailer): magic,
# its host token, the size from which results go by shared memory, the size up to which they may (the scheduler's
# payload limit), the prefix of their segments' names, and that prefix's length in the last byte. A processor whose
# token is the same writes a task's result of a size in that range
# (a task flagged FLAG_SHARED_RESULT: its result goes to its client only) into a segment and sends result_payload's
# small pickle instead; the client's unpickling of it reads the result (one copy out) and unlinks the segment.
_REPLY_MAGIC = b"SCLRRPLY"
_REPLY = struct.Struct("<8s16sQQ")
_RESULTS_PREFIX = re.compile(r"scaler-\d{1,20}-\d{1,10}-\d{1,20}-[0-9a-f]{8}")


@dataclass(frozen=True)
class Reply:
    token: bytes
    threshold: int
    prefix: str
    limit: int


def parse_reply(function_object: Any) -> Reply | None:
    """The reply trailer of a function object, None if it has none (another client's, shared memory off)."""
    view = memoryview(function_object)
    if not len(view):
        return None
    length = view[-1]
    start = len(view) - 1 - length - _REPLY.size
    if length == 0 or start < 0:
        return None
    magic, token, threshold, limit = _REPLY.unpack_from(view, start)
    if magic != _REPLY_MAGIC:
        return None
    try:
        prefix = bytes(view[start + _REPLY.size : -1]).decode("ascii")
    except UnicodeDecodeError:
        return None
    if not _RESULTS_PREFIX.fullmatch(prefix) or not 1 <= threshold <= limit:
        return None
    return Reply(token, threshold, prefix, limit)


def share_result(payload: Any, reply: Reply, directory: str = SHM_DIR) -> bytes | None:
    """A result's payload written to a segment for its client (whose reply trailer is `reply`), and the small payload
    that stands for it; None when the client is on another host, the result is small, or no segment could be made:
    it then goes inline."""
    size = len(payload)
    if not reply.threshold <= size <= reply.limit or reply.token != host_token() or not _room_for(directory, size):
        return None
    ref = write_segment(directory, reply.prefix + os.urandom(12).hex(), payload, reply.token)
    if ref is None:
        return None
    return _Call(load_result, ref).dumps()


def load_result(reference: bytes, directory: str = SHM_DIR) -> Any:
    """A result a processor wrote to a segment (as an object: pickle_object), read in place as load_object reads one;
    the segment is then unlinked if it is named for a client of this process (a result is read once, by the client
    that asked; a value read in place keeps its pages until it goes)."""
    ref = decode_reference(reference)
    try:
        return load_object(reference, directory)
    finally:
        if ref.name.startswith(process_prefix()):
            _unlink_quietly(os.path.join(directory, ref.name))


# ------------------------------------------------------------------------------------------- reader (processor)
def open_reference(ref: Reference, directory: str = SHM_DIR, private: bool = False) -> mmap.mmap:
    """The segment's mapping (header checked): read-only and shared, or private (copy-on-write: writable, writes
    never reach the segment); the caller closes it. SharedMemoryUnreachable if this process cannot read it."""
    token = host_token()
    if not token or token != ref.token:
        raise SharedMemoryUnreachable("the worker is on another host, /dev/shm or user than the client")
    mapping = _map_segment(os.path.join(directory, ref.name), ref.size, private)
    try:
        check_header(mapping[:DATA_OFFSET], ref)
    except BaseException:
        mapping.close()
        raise
    return mapping


def _map_segment(path: str, size: int, private: bool = False) -> mmap.mmap:
    """The mapping of the segment at `path`, whose data is `size` bytes (read-only, or private: copy-on-write):
    opened without blocking or following a link, and mapped only if fstat says it is a regular file of this user,
    mode 0600, of that size."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise SharedMemoryUnreachable(f"segment {path} is gone") from None
        if exc.errno == errno.ELOOP:
            raise SharedMemoryUnreachable(f"segment {path} is a symbolic link, not a regular file; {_CHECK}") from None
        raise SharedMemoryUnreachable(f"segment {path} cannot be opened ({exc.strerror})") from None
    try:
        problem = _segment_problem(os.fstat(fd), DATA_OFFSET + size, os.geteuid())
        if problem is not None:
            raise SharedMemoryUnreachable(f"segment {path} {problem}")
        if not private:
            flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
            return mmap.mmap(fd, DATA_OFFSET + size, flags=flags, prot=mmap.PROT_READ)
        # (MAP_POPULATE would copy every page of a private writable mapping: the pages are read ahead instead)
        mapping = mmap.mmap(fd, DATA_OFFSET + size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        try:
            mapping.madvise(_MADV_POPULATE_READ)
        except (OSError, ValueError):  # (a kernel before 5.14): the pages come on first touch
            pass
        return mapping
    except OSError as exc:  # mmap refused it (out of memory, say)
        raise SharedMemoryUnreachable(f"segment {path} cannot be mapped ({exc.strerror})") from None
    finally:
        os.close(fd)


def _segment_problem(st: os.stat_result, length: int, uid: int) -> str | None:
    """Why a file (its fstat) is not a segment of `length` bytes a client of user `uid` made; None if it may be."""
    if not stat.S_ISREG(st.st_mode):
        kind = _KINDS.get(stat.filemode(st.st_mode)[0], "not a file")
        return f"is {kind}, not a regular file; {_CHECK}"
    if st.st_uid != uid:
        return f"belongs to uid {st.st_uid}, not {uid} (the worker's user); {_CHECK}"
    if stat.S_IMODE(st.st_mode) != SEGMENT_MODE:
        return f"has mode {stat.S_IMODE(st.st_mode):04o}, not {SEGMENT_MODE:04o}; {_CHECK}"
    if st.st_size != length:
        return f"is {st.st_size} bytes, not {length} as the task's reference says"
    return None


def read_argument(ref: Reference, use: Callable[[memoryview], Any], directory: str = SHM_DIR) -> Any:
    """use(a view of the argument's bytes), with the segment mapped only meanwhile: whatever use() returns must not
    keep the view (a deserialized value does not)."""
    mapping = open_reference(ref, directory)
    whole = memoryview(mapping)
    view = whole[DATA_OFFSET:]
    try:
        return use(view)
    finally:
        view.release()
        whole.release()
        try:
            mapping.close()
        except BufferError:  # use() kept a view of it: the mapping goes when that view does
            pass
