"""The processor's cache of deserialized objects: dropping objects forgets exactly their values, by id (not by a
walk over every cached value, which cost a scan of the whole cache per free message)."""

from __future__ import annotations

import mmap
import os
import socket
from collections.abc import Iterator

import pytest

from scaler.serializer import DefaultSerializer
from scaler.worker.link import BlockingLink
from scaler.worker.processor import Processor


@pytest.fixture()
def processor() -> Iterator[Processor]:
    ours, theirs = socket.socketpair()
    running = mmap.mmap(-1, 8)
    proc = Processor(BlockingLink(ours), running, 0, os.getppid())
    try:
        yield proc
    finally:
        ours.close()
        theirs.close()
        running.close()


def test_dropping_objects_forgets_their_values_for_every_serializer_and_keeps_the_others(processor: Processor) -> None:
    one, two = DefaultSerializer(), DefaultSerializer()
    for object_id in (1, 2, 3):
        processor.raw_objects[object_id] = one.serialize([object_id])
    first = processor._object(one, 1)
    assert processor._object(one, 1) is first  # cached
    processor._object(two, 1)
    kept = processor._object(one, 2)
    processor._on_drop([1, 3, 99])  # 3 was never deserialized, 99 never came
    assert 1 not in processor.raw_objects and 3 not in processor.raw_objects
    with pytest.raises(RuntimeError, match="never reached this worker"):
        processor._object(one, 1)
    with pytest.raises(RuntimeError, match="never reached this worker"):
        processor._object(two, 1)
    assert processor._object(one, 2) is kept
