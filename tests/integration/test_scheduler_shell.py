"""The scheduler's shell (SchedulerServer) run in this process, on real sockets, driven by a raw DEALER in a thread.

What only the shell decides is checked here: how much it reads per wake-up before it answers, what it does with an
exception in a handler, and that a lone task and its result go through its one decoding and encoding path.
"""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import zmq

from scaler.core.scheduler import SchedulerConfig
from scaler.io.sockets import recv_message, send_message
from scaler.protocol.messages import (
    ID_PREFIX_SHIFT,
    DispatchTasks,
    Heartbeat,
    HeartbeatEcho,
    Hello,
    PeerKind,
    PutObjects,
    Refused,
    SubmitTasks,
    TaskResults,
    TaskStatus,
    Welcome,
    decode,
)
from scaler.scheduler import server as server_module
from scaler.scheduler.server import SchedulerServer
from tests.helpers import encoded, free_address, payload_bytes

HEARTBEATS = 30
TIMEOUT_MS = 10_000


def serve_with_peers(server: SchedulerServer, peers: Callable[[zmq.Context[Any]], None]) -> None:
    """Run `server` in this thread until `peers` (run in another thread with a ZeroMQ context of its own) returns;
    then stop it and raise whatever `peers` raised."""
    failure: list[BaseException] = []

    def run_peers(loop: asyncio.AbstractEventLoop) -> None:
        ctx: zmq.Context[Any] = zmq.Context()
        try:
            peers(ctx)
        except BaseException as exc:
            failure.append(exc)
        finally:
            ctx.destroy(linger=0)
            loop.call_soon_threadsafe(server._on_signal, signal.SIGTERM)

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(0.2, lambda: threading.Thread(target=run_peers, args=(loop,), daemon=True).start())
        await asyncio.wait_for(server.run(), timeout=30)

    asyncio.run(serve())
    if failure:
        raise failure[0]


def run_server_with_peer(monkeypatch: pytest.MonkeyPatch, slice_seconds: float) -> tuple[int, list[object]]:
    """Serve until a raw client said hello and sent HEARTBEATS heartbeats back to back; returns how many flushes the
    core made meanwhile and what the client received."""
    monkeypatch.setattr(server_module, "SLICE_SECONDS", slice_seconds)
    address = free_address()
    monitor = f"ipc://{tempfile.gettempdir()}/scaler-shell-test-{os.getpid()}"
    server = SchedulerServer(address, monitor, SchedulerConfig())
    flushes = 0
    core_flush = server.core.flush

    def counting_flush() -> Any:
        nonlocal flushes
        flushes += 1
        return core_flush()

    monkeypatch.setattr(server.core, "flush", counting_flush)
    received: list[object] = []

    def peer(ctx: zmq.Context[Any]) -> None:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IDENTITY, b"C|shell-test")
        sock.connect(address)
        send_message(sock, Hello(PeerKind.CLIENT, "shell-test"))
        assert sock.poll(TIMEOUT_MS), "no welcome"
        received.append(recv_message(sock))
        for _ in range(HEARTBEATS):  # they queue up in the scheduler's socket
            send_message(sock, Heartbeat())
        while len(received) < 1 + HEARTBEATS:
            assert sock.poll(TIMEOUT_MS), f"only {len(received)} answers"
            received.append(recv_message(sock))

    serve_with_peers(server, peer)
    return flushes, received


def test_every_message_waiting_is_answered_when_each_wake_up_reads_only_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no time to read (a slice of 0 s), each wake-up reads one message, answers, and comes back for the rest
    at once: nothing is left waiting in the socket, and each heartbeat got its own flush."""
    flushes, received = run_server_with_peer(monkeypatch, 0.0)
    assert isinstance(received[0], Welcome)
    assert [type(m) for m in received[1:]] == [HeartbeatEcho] * HEARTBEATS
    assert flushes >= HEARTBEATS


def test_with_time_to_read_a_wake_up_answers_many_messages_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    flushes, received = run_server_with_peer(monkeypatch, 60.0)
    assert [type(m) for m in received[1:]] == [HeartbeatEcho] * HEARTBEATS
    assert flushes < HEARTBEATS  # the heartbeats that waited together were read in one wake-up


def test_a_lone_task_and_its_result_go_through_on_real_sockets() -> None:
    """On real sockets: a lone task reaches the worker as the dispatch of the very task the client sent (after the
    function, which the worker lacks the first time), its result the client as the very results the worker sent."""
    address = free_address()
    monitor = f"ipc://{tempfile.gettempdir()}/scaler-shell-forward-{os.getpid()}"
    server = SchedulerServer(address, monitor, SchedulerConfig())

    def exchange(ctx: zmq.Context[Any]) -> None:
        socks = {}
        base = 0
        for role, kind in (("worker", PeerKind.WORKER), ("client", PeerKind.CLIENT)):
            sock = socks[role] = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.IDENTITY, f"{role}|forward-test".encode())
            sock.connect(address)
            send_message(sock, Hello(kind, role, queue_capacity=4))
            assert sock.poll(TIMEOUT_MS), f"no welcome for the {role}"
            welcome = recv_message(sock)
            assert isinstance(welcome, Welcome)
            base = welcome.id_prefix << ID_PREFIX_SHIFT  # the client's (the last one welcomed)
        function = base | 1
        send_message(socks["client"], PutObjects([function], [b"function"]))

        def receive(role: str) -> list[bytes]:
            assert socks[role].poll(TIMEOUT_MS), f"nothing reached the {role}"
            frames: list[bytes] = socks[role].recv_multipart()
            return frames

        for counter in (2, 3):
            task = SubmitTasks([base | counter], [function], b"\x00", [1], [0], None, [b"arg"])
            socks["client"].send_multipart(encoded(task))
            frames = receive("worker")
            if counter == 2:  # the worker lacks the function: it goes first
                assert decode(frames) == PutObjects([function], [b"function"])
                frames = receive("worker")
            assert decode(frames) == DispatchTasks([base | counter], [function], b"\x00", [1], [0], None, [b"arg"])
            result = TaskResults([base | counter], b"\x00", [b"result"])
            socks["worker"].send_multipart(encoded(result))
            assert decode(receive("client")) == result

    serve_with_peers(server, exchange)
    assert not server.core.tasks


def test_an_exception_in_the_tick_is_counted_and_the_scheduler_still_times_out_a_silent_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before the shells shared a driver, an exception in SchedulerCore._on_tick ended the tick task silently: the
    scheduler kept serving but never again timed out a dead worker."""
    address = free_address()
    monitor = f"ipc://{tempfile.gettempdir()}/scaler-shell-tick-{os.getpid()}"
    server = SchedulerServer(address, monitor, SchedulerConfig(worker_timeout_seconds=0.5))
    server.driver.debug = False  # the production rule: log, count, serve on
    ticks = 0
    on_tick = server.core._on_tick

    def tick_once_broken() -> None:
        nonlocal ticks
        ticks += 1
        if ticks == 3:
            raise RuntimeError("a bug in the tick")
        on_tick()

    monkeypatch.setattr(server.core, "_on_tick", tick_once_broken)
    lost: list[bool] = []

    def peer(ctx: zmq.Context[Any]) -> None:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IDENTITY, b"W|tick-test")
        sock.connect(address)
        send_message(sock, Hello(PeerKind.WORKER, "silent", queue_capacity=1))
        assert sock.poll(TIMEOUT_MS) and isinstance(recv_message(sock), Welcome)
        deadline = time.monotonic() + 10
        while b"W|tick-test" in server.core.workers and time.monotonic() < deadline:
            time.sleep(0.05)  # silent: no heartbeat
        lost.append(b"W|tick-test" not in server.core.workers)

    serve_with_peers(server, peer)
    assert ticks > 3 and server.driver.errors == 1
    assert lost == [True], "the silent worker was never timed out"


def test_capabilities_on_real_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker offering an invalid capability is refused saying why; a lone task requiring what the worker offers
    reaches it; one requiring what nobody offers fails with the "missing capabilities" text."""
    address = free_address()
    monitor = f"ipc://{tempfile.gettempdir()}/scaler-shell-capabilities-{os.getpid()}"
    server = SchedulerServer(address, monitor, SchedulerConfig())

    def exchange(ctx: zmq.Context[Any]) -> None:
        def connect(identity: bytes, hello: Hello) -> tuple[zmq.Socket[Any], object]:
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.IDENTITY, identity)
            sock.connect(address)
            send_message(sock, hello)
            assert sock.poll(TIMEOUT_MS), f"no answer to {identity!r}"
            return sock, recv_message(sock)

        _, refused = connect(b"bad-worker", Hello(PeerKind.WORKER, "bad", queue_capacity=1, capabilities=[" gpu"]))
        assert isinstance(refused, Refused) and "white space" in refused.reason
        worker, welcome = connect(
            b"worker", Hello(PeerKind.WORKER, "w", queue_capacity=4, capabilities=["payload=python", "lang=py"])
        )
        client, welcome = connect(b"client", Hello(PeerKind.CLIENT, "c"))
        assert isinstance(welcome, Welcome)
        base = welcome.id_prefix << ID_PREFIX_SHIFT
        function = base | 1
        send_message(client, PutObjects([function], [b"function"]))
        for counter in (2, 3):
            submit = SubmitTasks([base | counter], [function], b"\x00", [1], [0], None, [b"arg"])
            submit.requirements = [["payload=python"]]
            client.send_multipart(encoded(submit))
            assert worker.poll(TIMEOUT_MS)
            received = worker.recv_multipart()
            if counter == 2:
                assert isinstance(decode(received), PutObjects)
                assert worker.poll(TIMEOUT_MS)
                received = worker.recv_multipart()
            dispatched = decode(received)
            assert isinstance(dispatched, DispatchTasks) and dispatched.task_ids == [base | counter]
            send_message(worker, TaskResults([base | counter], b"\x00", [b"result"]))
            assert client.poll(TIMEOUT_MS) and isinstance(recv_message(client), TaskResults)
        gpu = SubmitTasks([base | 4], [function], b"\x00", [1], [0], None, [b"arg"])
        gpu.requirements = [["payload=python", "gpu"]]
        send_message(client, gpu)
        assert client.poll(TIMEOUT_MS)
        failed = recv_message(client)
        assert isinstance(failed, TaskResults) and failed.statuses == bytes([TaskStatus.FAILED])
        text = payload_bytes(failed.payloads[0])
        assert text.startswith(b"missing capabilities: the task requires gpu, payload=python;")

    serve_with_peers(server, exchange)
