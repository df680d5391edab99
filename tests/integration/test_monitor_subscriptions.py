"""The monitor socket on real ZeroMQ sockets: the scheduler counts its subscribers (XPUB) and records task events,
failures and output only while one subscribes; a task's printed output reaches its client before its result.

Peers are raw sockets speaking the protocol (not our client or worker classes).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import zmq

from scaler.core.scheduler import SchedulerConfig
from scaler.io.sockets import bind_publisher, read_subscriptions, recv_message, send_message
from scaler.protocol.messages import (
    ACCEPTED_BY_MONITOR,
    FLAG_STREAM_OUTPUT,
    ID_PREFIX_SHIFT,
    OUTPUT_ERROR,
    OUTPUT_STDOUT,
    DispatchTasks,
    Hello,
    PeerKind,
    PutObjects,
    Status,
    SubmitTasks,
    TaskOutput,
    TaskResults,
    TasksStarted,
    TaskStatus,
    Welcome,
)
from scaler.scheduler import server as server_module
from scaler.scheduler.server import SchedulerServer
from tests.helpers import free_address
from tests.integration.test_scheduler_shell import serve_with_peers

pytestmark = pytest.mark.timeout(60)
TIMEOUT_MS = 10_000


def wait_for(condition: Callable[[], object], what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture()
def monitor_address() -> Iterator[str]:
    path = os.path.join(tempfile.gettempdir(), f"scaler-monitor-test-{os.getpid()}")
    yield f"ipc://{path}"
    if os.path.exists(path):
        os.unlink(path)


def subscriber(ctx: zmq.Context[Any], address: str) -> zmq.Socket[Any]:
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.connect(address)
    return sock


# ----------------------------------------------------------------------------------------------- the socket
def test_the_publisher_counts_every_subscriber_coming_and_going(monitor_address: str) -> None:
    """Two SUB sockets on the same topic: each subscribe counts, and each one's closing counts as its unsubscribe."""
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        publisher = bind_publisher(monitor_address, ctx)
        count = 0

        def settles_at(expected: int) -> bool:
            nonlocal count
            count += read_subscriptions(publisher)
            return count == expected

        first, second = subscriber(ctx, monitor_address), subscriber(ctx, monitor_address)
        wait_for(lambda: settles_at(2), "two subscriptions")
        first.close()
        wait_for(lambda: settles_at(1), "the first one's end")
        second.close()
        wait_for(lambda: settles_at(0), "the second one's end")
        time.sleep(0.2)
        assert count + read_subscriptions(publisher) == 0  # nothing more comes
    finally:
        ctx.destroy(linger=0)


@pytest.mark.parametrize("option", [None, zmq.XPUB_VERBOSE], ids=["plain", "verbose"])
def test_without_verboser_a_second_subscriber_on_the_same_topic_is_not_seen(
    monitor_address: str, option: int | None
) -> None:
    """Why bind_publisher sets XPUB_VERBOSER: a plain XPUB passes only the first subscribe of a topic (and VERBOSE
    only the last unsubscribe), so a count would say 1 with two monitors, and 0 when one of two leaves (or never)."""
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        xpub = ctx.socket(zmq.XPUB)
        xpub.setsockopt(zmq.LINGER, 0)
        if option is not None:
            xpub.setsockopt(option, 1)
        xpub.bind(monitor_address)
        seen: list[bytes] = []

        def drain() -> None:
            while True:
                try:
                    seen.append(xpub.recv(zmq.NOBLOCK))
                except zmq.Again:
                    return

        first, second = subscriber(ctx, monitor_address), subscriber(ctx, monitor_address)
        wait_for(lambda: drain() or len(seen) >= (1 if option is None else 2), "the subscriptions")
        time.sleep(0.3)
        drain()
        assert seen == ([b"\x01"] if option is None else [b"\x01", b"\x01"])
        first.close()
        second.close()
        wait_for(lambda: drain() or b"\x00" in seen, "the unsubscription")
        time.sleep(0.3)
        drain()
        assert seen.count(b"\x00") == 1  # one unsubscribe for two subscribers leaving
    finally:
        ctx.destroy(linger=0)


# ----------------------------------------------------------------------------------------------- the scheduler
def test_the_scheduler_records_for_monitors_only_while_one_subscribes(
    monkeypatch: pytest.MonkeyPatch, monitor_address: str
) -> None:
    """A worker and a client (raw sockets) run a task flagged stream output that prints and raises: the client gets
    the printed line before the result; a subscriber's status shows the task's events and its failure with the
    error text the worker sent; once the subscriber leaves, the scheduler stops recording."""
    monkeypatch.setattr(server_module, "STATUS_SECONDS", 0.1)
    address = free_address()
    server = SchedulerServer(address, monitor_address, SchedulerConfig())
    checked: list[str] = []

    def peers(ctx: zmq.Context[Any]) -> None:
        monitor = subscriber(ctx, monitor_address)
        wait_for(lambda: server.core.monitored, "monitoring to start")
        worker, _ = connect(ctx, address, PeerKind.WORKER)
        client, prefix = connect(ctx, address, PeerKind.CLIENT)
        function, task = (prefix << ID_PREFIX_SHIFT) | 1, (prefix << ID_PREFIX_SHIFT) | 2
        send_message(client, PutObjects([function], [b"<function>"], ["job"]))
        send_message(client, SubmitTasks([task], [function], bytes([FLAG_STREAM_OUTPUT]), [0], [], None, []))
        while not isinstance(receive(worker), DispatchTasks):  # the function comes first (putObjects)
            pass
        send_message(worker, TasksStarted([task]))
        send_message(worker, TaskOutput([task, task], bytes([OUTPUT_STDOUT, OUTPUT_ERROR]), ["hello\n", "Boom!"]))
        send_message(worker, TaskResults([task], bytes([TaskStatus.ERROR]), [b"<exception>"]))
        assert receive(client) == TaskOutput([task], bytes([OUTPUT_STDOUT]), ["hello\n"])
        result = receive(client)
        assert isinstance(result, TaskResults) and result.task_ids == [task]
        statuses = statuses_until(monitor, lambda s: bool(s.failures))
        events = [e for s in statuses for e in zip(s.events.task_ids, s.events.kinds, strict=True)]
        assert events == [(task, 0), (task, 1)]
        [failure] = statuses[-1].failures
        assert (failure.function, failure.worker, failure.text) == ("job", "worker", "Boom!")
        assert [(o.text, o.stream) for s in statuses for o in s.outputs] == [("hello\n", OUTPUT_STDOUT)]
        assert [(f.name, f.submitted, f.error) for f in statuses[-1].functions] == [("job", 1, 1)]
        checked.append("recorded")
        monitor.close()
        wait_for(lambda: not server.core.monitored, "monitoring to stop")
        checked.append("stopped")

    serve_with_peers(server, peers)
    assert checked == ["recorded", "stopped"] and server.subscribers == 0


def connect(ctx: zmq.Context[Any], address: str, kind: PeerKind) -> tuple[zmq.Socket[Any], int]:
    """A raw DEALER with a session (named after its kind); returns it and its id prefix."""
    name = kind.name.lower()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.IDENTITY, f"{name}|monitor-test".encode())
    sock.connect(address)
    send_message(sock, Hello(kind, name, queue_capacity=4))
    welcome = receive(sock)
    assert isinstance(welcome, Welcome)
    return sock, welcome.id_prefix


def receive(sock: zmq.Socket[Any]) -> Any:
    assert sock.poll(TIMEOUT_MS), "nothing came"
    return recv_message(sock)


def statuses_until(monitor: zmq.Socket[Any], done: Callable[[Status], bool]) -> list[Status]:
    statuses: list[Status] = []
    while not statuses or not done(statuses[-1]):
        assert monitor.poll(TIMEOUT_MS), "no status came"
        status = recv_message(monitor, accept=ACCEPTED_BY_MONITOR)
        assert isinstance(status, Status)
        statuses.append(status)
    return statuses
