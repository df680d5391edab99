"""The monitor socket on real ZeroMQ sockets: monitors say hello and get statuses until they leave; the socket stays
bounded whatever peers send; task data reaches only the monitors allowed it; the scheduler records task events,
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
from scaler.io.sockets import connect_subscriber, recv_message, send_frames, send_message, subscribe
from scaler.protocol.messages import (
    ACCEPTED_BY_MONITOR,
    FLAG_STREAM_OUTPUT,
    ID_PREFIX_SHIFT,
    OUTPUT_ERROR,
    OUTPUT_STDOUT,
    DispatchTasks,
    FunctionStatus,
    Hello,
    Message,
    OutputRecord,
    PeerKind,
    PutObjects,
    Refused,
    Status,
    SubmitTasks,
    TaskFailure,
    TaskOutput,
    TaskResults,
    TasksStarted,
    TaskStatus,
    Welcome,
    encode,
)
from scaler.scheduler import server as server_module
from scaler.scheduler.monitors import (
    MAX_MONITORS,
    MONITOR_FRAME_BYTES,
    MonitorChannel,
    bind_monitor_router,
    withheld_because,
)
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
    return connect_subscriber(address, ctx, name="test")


def messages(sock: zmq.Socket[Any], seconds: float) -> list[Message]:
    """What the monitor socket sends `sock` within `seconds`."""
    got: list[Message] = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if sock.poll(int(left * 1000)):
            got.append(recv_message(sock, 0, ACCEPTED_BY_MONITOR))
    return got


class Channel:
    """A MonitorChannel on a real socket, served by the test's own calls (on_readable, publish)."""

    def __init__(self, ctx: zmq.Context[Any], address: str, withheld: str = "") -> None:
        self.sock = bind_monitor_router(address, ctx, None)
        self.spoken: list[int] = []
        self.channel = MonitorChannel(self.sock, "test-scheduler", withheld, self.spoken.append)

    def serve_until(self, condition: Callable[[], object], what: str) -> None:
        def served() -> object:
            self.channel.on_readable(time.monotonic())
            return condition()

        wait_for(served, what)


# ----------------------------------------------------------------------------------------------- the socket
def test_monitors_say_hello_and_get_statuses_until_they_leave(monitor_address: str) -> None:
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        served = Channel(ctx, monitor_address)
        first, second = subscriber(ctx, monitor_address), subscriber(ctx, monitor_address)
        served.serve_until(lambda: len(served.channel) == 2, "two monitors")
        assert len(served.spoken) == 2  # each hello marked its connection as one that spoke
        served.channel.publish(Status(scheduler_name="s", failures=[TaskFailure(1, "f", "w", 1, "boom", 0)]))
        for sock in (first, second):
            got = messages(sock, 1.0)
            assert isinstance(got[0], Welcome) and isinstance(got[1], Status)
            assert got[1].failures[0].text == "boom" and got[1].withheld == ""
        first.close()

        def first_forgotten() -> bool:
            served.channel.publish(Status())
            return len(served.channel) == 1

        wait_for(first_forgotten, "the first monitor to be forgotten")  # a status to it failed: it left
    finally:
        ctx.destroy(linger=0)


def test_task_data_is_withheld_where_the_operator_does_not_allow_it(monitor_address: str) -> None:
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        reason = withheld_because("auto", "tcp://0.0.0.0:1", keys=False)
        assert "tcp:// monitor address without keys" in reason
        assert withheld_because("auto", "tcp://0.0.0.0:1", keys=True) == ""
        assert withheld_because("auto", monitor_address, keys=False) == ""
        assert withheld_because("on", "tcp://0.0.0.0:1", keys=False) == ""
        assert "--monitor-task-data off" in withheld_because("off", monitor_address, keys=True)
        served = Channel(ctx, monitor_address, withheld=reason)
        sock = subscriber(ctx, monitor_address)
        served.serve_until(lambda: len(served.channel) == 1, "a monitor")
        failure, output = TaskFailure(1, "f", "w", 1, "secret", 0), OutputRecord(1, "f", "w", 1, "secret", 0)
        served.channel.publish(Status(failures=[failure], outputs=[output], functions=[FunctionStatus("f")]))
        status = next(m for m in messages(sock, 1.0) if isinstance(m, Status))
        assert status.failures == [] and status.outputs == [] and status.withheld == reason
        assert [f.name for f in status.functions] == ["f"]  # function names are not task data
    finally:
        ctx.destroy(linger=0)


def test_a_monitor_socket_stays_bounded_whatever_peers_send(monitor_address: str) -> None:
    """Hellos in a loop, garbage, a client's hello, frames over the limit, more monitors than MAX_MONITORS: each gets
    at most an answer, the table never holds more than MAX_MONITORS, and a real monitor is still served."""
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        served = Channel(ctx, monitor_address)
        loud = ctx.socket(zmq.DEALER)
        loud.setsockopt(zmq.LINGER, 0)
        loud.connect(monitor_address)
        for _ in range(500):  # one socket saying hello over and over (within its queue): one subscriber
            send_frames(loud, list(encode(Hello(PeerKind.MONITOR, "loud"))), zmq.NOBLOCK)
        served.serve_until(lambda: len(served.channel) == 1, "the loud monitor")
        send_frames(loud, [b"garbage"], zmq.NOBLOCK)
        served.serve_until(lambda: served.channel.refused >= 1, "the garbage refused")
        assert len(served.channel) == 0  # the refusal ended its subscription
        wrong = ctx.socket(zmq.DEALER)
        wrong.setsockopt(zmq.LINGER, 0)
        wrong.connect(monitor_address)
        send_frames(wrong, list(encode(Hello(PeerKind.CLIENT, "a client"))))
        served.serve_until(lambda: served.channel.refused >= 2, "the client refused")
        refusal = next(m for m in messages(wrong, 1.0) if isinstance(m, Refused))
        assert "clients and workers connect to its address" in refusal.reason
        big = ctx.socket(zmq.DEALER)
        big.setsockopt(zmq.LINGER, 0)
        big.connect(monitor_address)
        send_frames(big, [b"x" * (MONITOR_FRAME_BYTES + 1)])  # ZeroMQ drops the connection before reading it
        many = {}
        for index in range(MAX_MONITORS + 5):
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.ROUTING_ID, b"crowd-%d" % index)
            sock.connect(monitor_address)
            subscribe(sock)
            many[b"crowd-%d" % index] = sock
        served.serve_until(lambda: served.channel.refused >= 7, "the monitors past the limit refused")
        assert len(served.channel) == MAX_MONITORS
        served.channel.publish(Status(scheduler_name="still serving"))
        one = next(peer for peer in served.channel.subscribers if peer in many)
        assert any(isinstance(m, Status) for m in messages(many[one], 1.0))
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
    assert checked == ["recorded", "stopped"] and server.monitors is not None and len(server.monitors) == 0


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
        if isinstance(status, Welcome):
            continue
        assert isinstance(status, Status)
        statuses.append(status)
    return statuses
