"""scaler.io.sockets against real ZeroMQ sockets (inproc): reading what waits, one message at a time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from scaler.io.sockets import has_input, read_waiting, send_frames


@pytest.fixture()
def pair() -> Iterator[tuple[zmq.Socket[Any], zmq.Socket[Any]]]:
    ctx: zmq.Context[Any] = zmq.Context()
    receiver = ctx.socket(zmq.PAIR)
    receiver.bind("inproc://read-waiting")
    sender = ctx.socket(zmq.PAIR)
    sender.connect("inproc://read-waiting")
    try:
        yield sender, receiver
    finally:
        ctx.destroy(linger=0)


def test_a_reader_that_stops_early_leaves_the_rest_in_the_socket(pair: tuple[zmq.Socket[Any], ...]) -> None:
    sender, receiver = pair
    for i in range(5):
        send_frames(sender, [b"header %d" % i, b"payload"])
    assert receiver.poll(2000)
    read = []
    for frames in read_waiting(receiver, burst=True, limit=64):
        read.append(frames[0].bytes)
        if len(read) == 2:
            break  # as the scheduler does when its time slice is over
    assert read == [b"header 0", b"header 1"]
    assert has_input(receiver)
    rest = [frames[0].bytes for frames in read_waiting(receiver, burst=True, limit=64)]
    assert rest == [b"header 2", b"header 3", b"header 4"]
    assert not has_input(receiver)


def test_without_a_burst_one_message_is_read_and_nothing_is_not_an_error(pair: tuple[zmq.Socket[Any], ...]) -> None:
    sender, receiver = pair
    assert list(read_waiting(receiver, burst=True, limit=64)) == []  # the FD fired for something else
    for i in range(3):
        send_frames(sender, [b"m%d" % i])
    assert receiver.poll(2000)
    assert [f[0].bytes for f in read_waiting(receiver, burst=False, limit=64)] == [b"m0"]
    assert [f[0].bytes for f in read_waiting(receiver, burst=True, limit=1)] == [b"m1"]
    assert [f[0].bytes for f in read_waiting(receiver, burst=True, limit=64)] == [b"m2"]
