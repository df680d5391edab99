"""Shared-memory references to files that are not segments, on real processes (scaler.shm, ADR 0013): a task whose
reference names a FIFO, a directory or a character device in /dev/shm fails within seconds with a message naming the
file and what it is, and the same processor runs the next task. A client whose own segment was replaced by a FIFO
before the processor read it gets a clear TaskFailedError, not a hang in its I/O thread.

One worker with one processor, so "the next task" runs where the hostile one did (checked by its pid). The crafted
task comes from a hand-built client without keys (hello, the function, a task flagged FLAG_SHARED_ARGUMENTS), as an
outside peer would send it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import zmq

from scaler import Client, SchedulerClusterCombo
from scaler.errors import TaskFailedError
from scaler.payloads import pack_function
from scaler.protocol.messages import (
    ID_PREFIX_SHIFT,
    Hello,
    PeerKind,
    PutObjects,
    SubmitTasks,
    TaskResults,
    TaskStatus,
    Welcome,
    decode,
)
from scaler.protocol.records import FLAG_SHARED_ARGUMENTS
from scaler.serializer import DEFAULT_SERIALIZER
from scaler.shm import SHM_DIR, UNREACHABLE_PREFIX, Reference, encode_reference, host_token
from tests.helpers import encoded, free_address, make_char_device, make_fifo, payload_bytes, wait_until

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.skipif(not os.path.isdir(SHM_DIR) or not host_token(), reason="needs /dev/shm"),
]

TIMEOUT = 20
FAILS_WITHIN = 10  # seconds: the hostile task's answer comes at once; a blocked processor never answers
FAST: dict[str, Any] = {"heartbeat_interval_seconds": 0.5, "worker_timeout_seconds": 5, "logging_level": "WARNING"}
BIG = 2 * 1024 * 1024  # above the client's default threshold (1 MiB)


# ----------------------------------------------------------------------------------------------- task functions
def pid() -> int:
    return os.getpid()


def hold_until(started: str, release: str) -> int:
    """Say it started, then hold the processor until the test creates `release` (at most TIMEOUT seconds)."""
    Path(started).touch()
    deadline = time.monotonic() + TIMEOUT
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.01)
    return os.getpid()


def length(data: bytes) -> int:
    return len(data)


# ----------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def combo() -> Iterator[SchedulerClusterCombo]:
    cluster = SchedulerClusterCombo(address=free_address(), n_workers=1, max_processors_per_worker=1, **FAST)
    try:
        yield cluster
    finally:
        cluster.shutdown()


@pytest.fixture()
def client(combo: SchedulerClusterCombo) -> Iterator[Client]:
    with Client(address=combo.address, timeout_seconds=TIMEOUT) as c:
        yield c


@pytest.fixture()
def shm_path() -> Iterator[Path]:
    """A free segment-shaped name in /dev/shm, removed after the test whatever it became."""
    path = Path(SHM_DIR) / f"scaler-1-{os.getpid()}-1-{os.urandom(16).hex()}"
    try:
        yield path
    finally:
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        elif os.path.lexists(path):
            path.unlink()


def make_directory(path: Path) -> None:
    path.mkdir(mode=0o700)


def submit_crafted(address: str, payload: bytes) -> TaskResults:
    """A hand-built client: hello, the function `length`, one task flagged FLAG_SHARED_ARGUMENTS whose one argument
    is `payload`; returns the task's results, failing the test if they do not come within FAILS_WITHIN seconds."""
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        sock: zmq.Socket[Any] = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IDENTITY, b"C|crafted|1|" + os.urandom(16).hex().encode())
        sock.connect(address)
        sock.send_multipart(encoded(Hello(PeerKind.CLIENT, "crafted", "crafted-host", os.getpid())))
        welcome = receive(sock, Welcome, TIMEOUT)
        function_id = (welcome.id_prefix << ID_PREFIX_SHIFT) | 1
        task_id = (welcome.id_prefix << ID_PREFIX_SHIFT) | 2
        put = PutObjects([function_id], [pack_function(DEFAULT_SERIALIZER, length)], ["length"])
        sock.send_multipart(encoded(put))
        flags = bytes((FLAG_SHARED_ARGUMENTS,))
        sock.send_multipart(encoded(SubmitTasks([task_id], [function_id], flags, [1], [0], None, [payload])))
        results = receive(sock, TaskResults, FAILS_WITHIN)
        assert results.task_ids == [task_id]
        return results
    finally:
        ctx.destroy(linger=0)


M = TypeVar("M")


def receive(sock: zmq.Socket[Any], kind: type[M], seconds: float) -> M:
    """The first message of `kind` the scheduler sends within `seconds` (the others are skipped)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if sock.poll(int(left * 1000) + 1):
            message = decode(sock.recv_multipart(copy=True))
            if isinstance(message, kind):
                return message
    pytest.fail(f"no {kind.__name__} within {seconds}s: the processor is stuck on the crafted reference")


# ----------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize(
    ("make", "kind"),
    [(make_fifo, "a FIFO"), (make_directory, "a directory"), (make_char_device, "a character device")],
)
def test_a_reference_to_a_file_that_is_not_a_segment_fails_at_once_and_the_processor_goes_on(
    combo: SchedulerClusterCombo, client: Client, shm_path: Path, make: Callable[[Path], None], kind: str
) -> None:
    before = client.submit(pid).result(timeout=TIMEOUT)
    make(shm_path)
    size = max(0, os.lstat(shm_path).st_size - 64)  # the file's own size: only what it is can refuse it
    crafted = encode_reference(Reference(shm_path.name, size, os.urandom(16), host_token()))

    results = submit_crafted(combo.address, crafted)

    assert results.statuses == bytes((TaskStatus.FAILED,))
    text = payload_bytes(results.payloads[0]).decode()
    assert text.startswith(UNREACHABLE_PREFIX.decode())
    assert f"segment {shm_path} is {kind}, not a regular file" in text, text
    assert "check what else writes scaler-* files" in text, text
    # the same processor serves the next task
    assert client.submit(pid).result(timeout=TIMEOUT) == before
    assert client.submit(length, b"x" * BIG).result(timeout=TIMEOUT) == BIG  # shared memory still works


def test_a_segment_replaced_by_a_fifo_fails_its_task_clearly_and_nothing_hangs(client: Client, tmp_path: Path) -> None:
    """The processor refuses the FIFO; the client, reading its segment back to send the task again inline, refuses
    it too (a blocked read there would hang the client's I/O thread) and fails the future saying why."""
    started, release = tmp_path / "started", tmp_path / "release"
    holder = client.submit(hold_until, str(started), str(release))  # keeps the one processor busy meanwhile
    wait_until(started.exists, timeout=TIMEOUT, what="the holding task to start")
    shared = client._shared
    assert shared is not None
    before = set(shared.live)
    future = client.submit(length, b"y" * BIG)
    (name,) = set(shared.live) - before
    segment = Path(SHM_DIR) / name
    segment.unlink()
    os.mkfifo(segment, 0o600)
    release.touch()

    processor = holder.result(timeout=TIMEOUT)
    with pytest.raises(TaskFailedError) as caught:
        future.result(timeout=FAILS_WITHIN)
    message = str(caught.value)
    assert f"segment {segment} is a FIFO, not a regular file" in message, message
    assert client.submit(pid).result(timeout=TIMEOUT) == processor
    wait_until(lambda: not os.path.lexists(segment), timeout=TIMEOUT, what="the client to unlink the FIFO")
