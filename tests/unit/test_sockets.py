"""scaler.io.sockets against real ZeroMQ sockets (inproc): reading what waits, one message at a time."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
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


def test_the_router_listens_with_a_backlog_for_a_fleet_starting_at_once() -> None:
    """libzmq's default backlog of 100 made 5,000 workers starting together take 16-36 s to join (dropped SYNs)."""
    from scaler.io.sockets import ROUTER_BACKLOG, bind_router
    from tests.helpers import free_address

    ctx: zmq.Context[Any] = zmq.Context()
    try:
        address = free_address()
        router = bind_router(address, ctx)
        assert router.getsockopt(zmq.BACKLOG) == ROUTER_BACKLOG >= 1024
        port = address.rsplit(":", 1)[1]
        listening = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, timeout=10)
        if listening.returncode == 0 and listening.stdout.strip():  # the kernel's view: Send-Q is the backlog
            backlog = int(listening.stdout.split()[2])
            somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())
            assert backlog == min(ROUTER_BACKLOG, somaxconn), listening.stdout
    finally:
        ctx.destroy(linger=0)
