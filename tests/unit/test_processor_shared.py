"""The processor's reading of a task flagged FLAG_SHARED_ARGUMENTS: tagged inline payloads and references to
segments; a segment it cannot read is answered `failed` with the text the client recognises, a malformed payload is
the task's `error` with a clear message."""

from __future__ import annotations

import mmap
import os
import pickle
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scaler import shm
from scaler.payloads import pack_function, unpack_exception
from scaler.protocol.records import FLAG_SHARED_ARGUMENTS, TaskStatus
from scaler.serializer import DefaultSerializer
from scaler.worker import processor as processor_module
from scaler.worker.link import BlockingLink
from scaler.worker.processor import Processor
from tests.helpers import payload_bytes

FUNCTION = 3


def pair(a: Any, b: Any = None, *, key: Any = None) -> tuple[Any, Any, Any]:
    return a, b, key


@pytest.fixture()
def processor(monkeypatch: pytest.MonkeyPatch) -> Iterator[Processor]:
    # A task that took FLUSH_AFTER_NS (a loaded machine can stretch any run so) sends its result at once, and run()
    # would then find no status left to read: these tests look at the staged results, so nothing is sent by time.
    monkeypatch.setattr(processor_module, "FLUSH_AFTER_NS", 1 << 62)
    ours, theirs = socket.socketpair()
    running = mmap.mmap(-1, 8)
    proc = Processor(BlockingLink(ours), running, 0, os.getppid())
    proc.raw_objects[FUNCTION] = pack_function(DefaultSerializer(), pair)
    try:
        yield proc
    finally:
        ours.close()
        theirs.close()
        running.close()


def run(proc: Processor, payloads: list[bytes], keywords: tuple[str, ...] | None = None) -> tuple[int, Any]:
    refs = (0,) * len(payloads)
    proc._run_one((1, FUNCTION, FLAG_SHARED_ARGUMENTS, refs, keywords), tuple(payloads))
    status, payload = proc._results.statuses[-1], proc._results.payloads[-1]
    if status == TaskStatus.SUCCESS:
        return status, pickle.loads(payload_bytes(payload))
    return status, payload


@pytest.fixture()
def shared() -> Iterator[shm.SharedArguments]:
    arguments = shm.SharedArguments(1000)
    try:
        yield arguments
    finally:
        arguments.close()


def test_inline_and_shared_arguments_and_keywords(processor: Processor, shared: shm.SharedArguments) -> None:
    big = os.urandom(5000)
    result = shared.share([pickle.dumps(b"small"), pickle.dumps(big), pickle.dumps("kw")])
    assert result is not None
    payloads, names = result
    assert len(names) == 1
    status, value = run(processor, list(payloads), ("", "", "key"))
    assert status == TaskStatus.SUCCESS
    assert value == (b"small", big, "kw")
    assert not any(name in Path("/proc/self/maps").read_text() for name in names)  # mapping closed


def test_unreachable_segment_is_failed_with_the_known_text(processor: Processor, shared: shm.SharedArguments) -> None:
    result = shared.share([pickle.dumps(os.urandom(5000))])
    assert result is not None
    ref = shm.decode_reference(result[0][0])
    elsewhere = shm.encode_reference(shm.Reference(ref.name, ref.size, ref.nonce, b"x" * 16))
    status, payload = run(processor, [elsewhere])
    assert status == TaskStatus.FAILED
    assert shm.is_unreachable(True, payload) and b"another host" in payload
    shared.release(result[1])
    status, payload = run(processor, [result[0][0]])  # the segment is gone
    assert status == TaskStatus.FAILED and b"is gone" in payload


@pytest.mark.parametrize(
    ("payload", "says"),
    [(b"\x05" + pickle.dumps(1), "no valid tag"), (b"\x01short", "too short"), (b"", "no valid tag")],
)
def test_malformed_payloads_are_the_tasks_error(processor: Processor, payload: bytes, says: str) -> None:
    status, error = run(processor, [payload])
    assert status == TaskStatus.ERROR
    exc = unpack_exception(error)
    assert says in str(exc)
    assert type(exc) is ValueError  # a builtin type: a client without scaler.shm unpickles it
