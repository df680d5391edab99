"""What a client's futures do when things go wrong: the scheduler killed with -9 (over tcp and ipc, with and without
keys), restarted on its address (with a journal: played by the stand-in), a connection reset towards a scheduler
that is still there, clear() and disconnect() with tasks pending; and the docs' example of a task that is safe to
run twice.

Real sockets throughout. The schedulers are real processes (SchedulerClusterCombo), except the stand-in scheduler
of this module, a thread of the test process speaking the protocol, for what the real one cannot be made to do on
purpose (keep a client's session across a reset, send a result after a cancel). Every process killed here is a
descendant of this test process (checked before each kill).
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import zmq

from scaler import Client, SchedulerClusterCombo
from scaler.core.client.session import RECONNECT_GRACE_SECONDS
from scaler.errors import ClientClosedError, ConnectionFailedError
from scaler.protocol.messages import (
    CancelTasks,
    Error,
    ErrorCode,
    Heartbeat,
    HeartbeatEcho,
    Hello,
    PutObjects,
    SubmitTasks,
    TaskResults,
    TaskStatus,
    Welcome,
    decode,
)
from scaler.security.keys import generate
from scaler.serializer import DEFAULT_SERIALIZER
from tests.helpers import encoded, free_address, free_port, sleep_and_return, wait_until

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 20
QUIET: dict[str, Any] = {"logging_level": "WARNING"}
BAR_SECONDS = 10.0  # with default client settings, pending futures raise this soon after kill -9 of the scheduler


def mark_and_sleep(marker_dir: str, seconds: float, value: int) -> int:
    """Leave a file named `value` in marker_dir (the task started), then sleep."""
    Path(marker_dir, str(value)).touch()
    time.sleep(seconds)
    return value


def count_started(marker_dir: Path) -> int:
    return len(list(marker_dir.iterdir()))


def kill_descendant(pid: int) -> None:
    """Kill one of our own descendants with SIGKILL, never anything else."""
    assert pid in {p.pid for p in psutil.Process().children(recursive=True)}, f"{pid} is not ours"
    os.kill(pid, signal.SIGKILL)


def kill_scheduler(combo: SchedulerClusterCombo) -> float:
    """kill -9 the combo's scheduler (its workers stay); returns when, on the monotonic clock."""
    process = combo._scheduler
    kill_descendant(process.pid)
    killed = time.monotonic()
    process.join(10)
    return killed


# ----------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def keys_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("keys")
    generate(root)
    return root


@pytest.fixture()
def short_dir() -> Iterator[str]:
    """A directory with a short path, for ipc sockets (a socket path has at most 107 bytes)."""
    path = tempfile.mkdtemp(prefix="scaler-cf-", dir="/tmp")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# Each transport once and keys on and off once (the four combinations took 21 s of the suite's 10 minutes)
TRANSPORTS = [("tcp", False), ("ipc", True)]
TRANSPORT_IDS = ["tcp", "ipc-keys"]


def address_for(transport: str, directory: str) -> str:
    return free_address() if transport == "tcp" else f"ipc://{directory}/scheduler"


# ----------------------------------------------------------------------------------------------- the scheduler lost
@pytest.mark.timeout(90)
@pytest.mark.parametrize(("transport", "use_keys"), TRANSPORTS, ids=TRANSPORT_IDS)
def test_kill_9_of_the_scheduler_fails_pending_futures_within_seconds(
    transport: str, use_keys: bool, keys_dir: Path, short_dir: str
) -> None:
    """Its connection closed and nothing answers there any more: the futures fail after the reconnect grace, not
    after timeout_seconds (60 s by default) of silence."""
    address = address_for(transport, short_dir)
    keys: Path | bool = keys_dir if use_keys else False
    combo = SchedulerClusterCombo(address=address, n_workers=1, keys=keys, **QUIET)
    try:
        client = Client(address, keys=keys)  # default settings: timeout_seconds=60
        assert client.submit(pow, 2, 5).result(timeout=TIMEOUT) == 32  # the worker serves
        running = client.submit(sleep_and_return, 60, 1)
        queued = [client.submit(sleep_and_return, 60, i) for i in range(2, 5)]
        client.send_object([1, 2, 3])  # the session holds an object too
        killed = kill_scheduler(combo)

        done, pending = concurrent.futures.wait([running, *queued], timeout=BAR_SECONDS)
        elapsed = time.monotonic() - killed
        assert not pending, f"{len(pending)} futures still pending {BAR_SECONDS}s after kill -9 of the scheduler"
        print(f"\n{transport}{'+keys' if use_keys else ''}: pending futures raised {elapsed:.2f}s after kill -9")
        for future in done:
            error = future.exception()
            assert isinstance(error, ConnectionFailedError), repr(error)
            assert "the connection to the scheduler closed and was not made again" in str(error)
            assert address in str(error)
        with pytest.raises(ConnectionFailedError, match="this client lost its scheduler"):
            client.submit(pow, 2, 2)
        client.disconnect()
    finally:
        combo.shutdown()


@pytest.mark.timeout(60)
def test_kill_9_of_the_scheduler_ends_a_lone_wait_in_result() -> None:
    """In a lone round trip the thread waiting in result() reads the socket itself (Connection.wait): it is
    woken too."""
    address = free_address()
    combo = SchedulerClusterCombo(address=address, n_workers=0, **QUIET)
    try:
        client = Client(address)
        future = client.submit(pow, 2, 5)  # no workers: it waits in the scheduler
        outcome: list[BaseException] = []

        def wait() -> None:
            try:
                future.result(timeout=60)
            except BaseException as exc:
                outcome.append(exc)

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        wait_until(lambda: client._connection._reader is future, timeout=TIMEOUT, what="the waiter to read")
        killed = kill_scheduler(combo)
        waiter.join(BAR_SECONDS)
        assert not waiter.is_alive(), f"result() still waiting {BAR_SECONDS}s after kill -9 of the scheduler"
        print(f"\nlone wait: result() raised {time.monotonic() - killed:.2f}s after kill -9")
        assert len(outcome) == 1 and isinstance(outcome[0], ConnectionFailedError), outcome
        client.disconnect()
    finally:
        combo.shutdown()


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("transport", "use_keys"), [("tcp", False), ("ipc", True)], ids=["tcp", "ipc-keys"])
def test_a_scheduler_restarted_on_the_same_address_no_longer_knows_the_client(
    transport: str, use_keys: bool, keys_dir: Path, short_dir: str
) -> None:
    """The client reconnects to the new scheduler, which has never heard of its session: the futures fail with the
    error that says so (the client heartbeats as soon as the connection is made again, and the scheduler answers
    notConnected), not with the reconnect grace's."""
    address = address_for(transport, short_dir)
    keys: Path | bool = keys_dir if use_keys else False
    first = SchedulerClusterCombo(address=address, n_workers=0, keys=keys, **QUIET)
    second: SchedulerClusterCombo | None = None
    try:
        client = Client(address, keys=keys)
        futures = [client.submit(pow, 2, i) for i in range(3)]  # no workers: they wait in the scheduler
        killed = kill_scheduler(first)
        second = SchedulerClusterCombo(address=address, n_workers=0, keys=keys, **QUIET)
        restarted = time.monotonic() - killed
        assert restarted < RECONNECT_GRACE_SECONDS - 2.5, f"the new scheduler took {restarted:.1f}s to start"

        done, pending = concurrent.futures.wait(futures, timeout=BAR_SECONDS)
        assert not pending, "futures still pending after the scheduler restarted"
        print(f"\n{transport}: restarted after {restarted:.2f}s, futures raised {time.monotonic() - killed:.2f}s")
        for future in done:
            error = future.exception()
            assert isinstance(error, ConnectionFailedError), repr(error)
            assert "the scheduler no longer knows this client" in str(error)
        with pytest.raises(ConnectionFailedError, match="no longer knows this client"):
            client.submit(pow, 2, 2)
        client.disconnect()
        with Client(address, keys=keys, timeout_seconds=TIMEOUT) as fresh:  # the new scheduler serves new clients
            assert repr(fresh).startswith(f"<Client {address} connected")
    finally:
        first.shutdown()
        if second is not None:
            second.shutdown()


# ----------------------------------------------------------------------------------------------- connection resets
class StandIn:
    """A stand-in scheduler on real sockets, in a thread of this process: it welcomes clients, echoes their
    heartbeats, notes the tasks they submit and cancel, sends a result when told to, and can close its connections
    and listen again on its address a moment later, as the same scheduler (sessions kept): a connection reset. It
    counts messages as docs/protocol.md "Connection resets" says and answers a resumed heartbeat with its count plus
    `lost` (a test sets it to play a scheduler whose messages were lost in the reset). `journaled`: it says in its
    welcome that it keeps a journal, and restart() plays a scheduler restarted from its journal (it answers the resumed
    heartbeat `recovered`, its counts started again) or, with `forgot`, one that lost the session (notConnected)."""

    def __init__(self, address: str, journaled: bool = False) -> None:
        self.address = address
        self.journaled = journaled
        self.restarted = False  # until the next resumed heartbeat
        self.forgot = False
        self.lost = 0
        self.sent = 0  # messages sent to the (one) client, echoes excluded
        self.received = 0  # messages from it, heartbeats excluded
        self.resumes: list[tuple[int, int]] = []  # (what a resumed heartbeat said it sent, what came)
        self.submitted: list[int] = []
        self.put: list[int] = []  # object ids, as they came
        self.arrivals: list[tuple[str, list[int]]] = []  # ("put" or "submit", ids), in the order they came
        self.cancelled: list[int] = []
        self.heartbeats: list[float] = []  # when each came (monotonic)
        self.peers: list[bytes] = []
        self.listening_since = 0.0
        self._ctx = zmq.Context()
        self._commands: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock = self._listen()
        self._thread = threading.Thread(target=self._run, name="stand-in-scheduler", daemon=True)
        self._thread.start()

    def _listen(self) -> zmq.Socket[Any]:
        sock: zmq.Socket[Any] = self._ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        sock.bind(self.address)
        self.listening_since = time.monotonic()
        return sock

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                commands, self._commands = self._commands, []
            for command in commands:
                command()
            if self._sock.poll(20):
                peer, *parts = self._sock.recv_multipart()
                self._on_message(peer, decode(parts))
        self._sock.close(linger=0)
        self._ctx.term()

    def _on_message(self, peer: bytes, message: object) -> None:
        if not isinstance(message, (Hello, Heartbeat)):
            self.received += 1
        if isinstance(message, Hello):
            self.peers.append(peer)
            welcome = Welcome(len(self.peers), "stand-in", protected=True, peer_timeout_ms=600_000)
            welcome.journaled = self.journaled
            self._send(peer, welcome)
        elif isinstance(message, Heartbeat):
            self.heartbeats.append(time.monotonic())
            if message.resumed and self.restarted:
                self.restarted = False
                self.resumes.append((message.sent, self.received))
                if self.forgot:
                    self._send(peer, Error(ErrorCode.NOT_CONNECTED, "no session: send hello first"))
                else:
                    self._send(peer, HeartbeatEcho(resumed=True, sent=self.sent, recovered=True))
            elif message.resumed:
                self.resumes.append((message.sent, self.received))
                self._send(peer, HeartbeatEcho(resumed=True, sent=self.sent + self.lost))
            else:
                self._send(peer, HeartbeatEcho())
        elif isinstance(message, SubmitTasks):
            self.submitted.extend(message.task_ids)
            self.arrivals.append(("submit", list(message.task_ids)))
        elif isinstance(message, PutObjects):
            self.put.extend(message.object_ids)
            self.arrivals.append(("put", list(message.object_ids)))
        elif isinstance(message, CancelTasks):
            self.cancelled.extend(message.ids)

    def _send(self, peer: bytes, message: Any) -> None:
        self._sock.send_multipart([peer, *encoded(message)])
        if not isinstance(message, HeartbeatEcho):
            self.sent += 1

    def _do(self, command: Callable[[], None]) -> None:
        with self._lock:
            self._commands.append(command)

    def reset(self, down_seconds: float) -> None:
        """Close every connection (and stop listening) now; listen again `down_seconds` later."""

        def reset() -> None:
            self._sock.close(linger=0)
            time.sleep(down_seconds)
            self._sock = self._listen()

        self._do(reset)

    def restart(self, down_seconds: float) -> None:
        """Die (every connection closed) and come back `down_seconds` later from a journal: the session is known,
        the counts start again, and what came last may be lost (the client sends it again)."""

        def restart() -> None:
            self._sock.close(linger=0)
            self.sent = self.received = 0
            self.restarted = True
            time.sleep(down_seconds)
            self._sock = self._listen()

        self._do(restart)

    def complete(self, task_id: int, value: object, peer: int = 0) -> None:
        payload = DEFAULT_SERIALIZER.serialize(value)
        self._do(lambda: self._send(self.peers[peer], TaskResults([task_id], bytes([TaskStatus.SUCCESS]), [payload])))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture()
def stand_in() -> Iterator[StandIn]:
    scheduler = StandIn(free_address())
    try:
        yield scheduler
    finally:
        scheduler.close()


@pytest.mark.timeout(60)
def test_a_connection_reset_to_a_scheduler_that_keeps_the_session_fails_nothing(stand_in: StandIn) -> None:
    """ZeroMQ makes the connection again on its own; within the grace period the session goes on: the future
    pending across the reset gets its result, and the client heartbeats at once on the new connection (not only when
    its next heartbeat is due: here, 20 s later)."""
    client = Client(stand_in.address, timeout_seconds=60, heartbeat_interval_seconds=20)
    try:
        future = client.submit(pow, 2, 5)
        wait_until(lambda: future.task_id in stand_in.submitted, timeout=TIMEOUT, what="the task to reach the stand-in")
        stand_in.reset(down_seconds=1.0)
        wait_until(
            lambda: stand_in.heartbeats and stand_in.heartbeats[-1] > stand_in.listening_since + 0.5,
            timeout=TIMEOUT,
            what="a heartbeat on the new connection",
        )
        # at once, not when the next one is due (20 s later); a loaded machine may take seconds to get there
        assert stand_in.heartbeats[-1] - stand_in.listening_since < 10, "no heartbeat at once on the new connection"
        # Past the grace period, counted from the reset: nothing failed.
        with pytest.raises(concurrent.futures.TimeoutError):
            future.result(timeout=RECONNECT_GRACE_SECONDS + 1)
        later = client.submit(pow, 3, 3)  # the session still takes work
        wait_until(lambda: later.task_id in stand_in.submitted, timeout=TIMEOUT, what="the second task")
        stand_in.complete(future.task_id, 32)
        stand_in.complete(later.task_id, 27)
        assert future.result(timeout=TIMEOUT) == 32
        assert later.result(timeout=TIMEOUT) == 27
        assert len(stand_in.peers) == 1, "the client said hello again"
        assert stand_in.resumes and all(said == came for said, came in stand_in.resumes), stand_in.resumes
    finally:
        client.disconnect()


@pytest.mark.timeout(60)
def test_a_reset_that_lost_a_message_from_the_scheduler_fails_the_pending_futures_at_once(stand_in: StandIn) -> None:
    """The session goes on across the reset, but the echo of the resumed heartbeat says the scheduler sent one
    message more than came (a result lost in the reset, say): the client ends the session, and the future that
    result was for fails at once with why, instead of waiting for ever."""
    client = Client(stand_in.address, timeout_seconds=60, heartbeat_interval_seconds=20)
    try:
        future = client.submit(pow, 2, 5)
        wait_until(lambda: future.task_id in stand_in.submitted, timeout=TIMEOUT, what="the task to reach the stand-in")
        stand_in.lost = 1
        started = time.monotonic()
        stand_in.reset(down_seconds=0.5)
        with pytest.raises(ConnectionError, match=r"messages from it were lost \(it sent \d+, \d+ came\)") as error:
            future.result(timeout=TIMEOUT)
        assert time.monotonic() - started < 10, "not at once"
        assert stand_in.resumes and stand_in.resumes[0][0] == stand_in.resumes[0][1]  # the client's own count held
        assert "results may be missing, so the session ends" in str(error.value)
    finally:
        client.disconnect()


class Proxy:
    """Forwards TCP connections from a port of its own to `target`; cut() closes (resets) every one it carries, and
    later connections are forwarded again."""

    def __init__(self, target: str) -> None:
        host, _, port = target.removeprefix("tcp://").rpartition(":")
        self.target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"tcp://127.0.0.1:{self._listener.getsockname()[1]}"
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="proxy", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                inbound, _ = self._listener.accept()
            except OSError:
                return
            outbound = socket.create_connection(self.target)
            with self._lock:
                self._pairs.append((inbound, outbound))
            threading.Thread(target=self._pump, args=(inbound, outbound), daemon=True).start()
            threading.Thread(target=self._pump, args=(outbound, inbound), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(1 << 16):
                sink.sendall(data)
        except OSError:
            pass

    def cut(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for sock in pair:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")  # close with a reset
                sock.close()

    def close(self) -> None:
        self._listener.close()
        self.cut()


@pytest.mark.timeout(60)
def test_a_connection_reset_to_a_live_scheduler_never_leaves_a_future_waiting(
    cluster: SchedulerClusterCombo, tmp_path: Path
) -> None:
    """The scheduler usually ends a client's session when its connection closes (scheduler/server.py probes the
    peer), and the client, connected again, is told so. If the client's connection is made again before the probe,
    the probe reaches it and the session goes on; both sides then check that no message was lost in the reset
    (docs/protocol.md "Connection resets"). Either way the future ends: with its result, or at once with why."""
    proxy = Proxy(cluster.address)
    client = Client(proxy.address, timeout_seconds=30)
    try:
        future = client.submit(mark_and_sleep, str(tmp_path), 2, 7)
        wait_until(lambda: count_started(tmp_path) == 1, timeout=TIMEOUT, what="the task to start")
        cut = time.monotonic()
        proxy.cut()  # while the task runs on a worker
        try:
            assert future.result(timeout=TIMEOUT) == 7  # the session went on, nothing lost
        except ConnectionError as exc:
            said = str(exc)
            assert "no longer knows this client" in said or "were lost" in said, said
            assert time.monotonic() - cut < 10, "the session's end was not noticed at once"
    finally:
        client.disconnect()
        proxy.close()


# ----------------------------------------------------------------------------------------------- a journaled scheduler
@pytest.mark.timeout(60)
def test_a_client_of_a_journaled_scheduler_waits_for_its_restart_and_sends_unfinished_work_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """ADR 0023: the connection closes for longer than the 5 s reconnect grace; the session waits (the scheduler
    keeps a journal), holding what is submitted meanwhile. The scheduler comes back restarted: the client sends again
    the objects it has not freed, then its unfinished tasks, then what it held, and the futures get their results."""
    stand_in = StandIn(free_address(), journaled=True)
    client = Client(
        stand_in.address, timeout_seconds=3, heartbeat_interval_seconds=1, scheduler_restart_grace_seconds=30
    )
    try:
        with caplog.at_level(logging.INFO, logger="scaler.client.connection"):
            done = client.submit(pow, 2, 3)
            wait_until(lambda: done.task_id in stand_in.submitted, timeout=TIMEOUT, what="the first task")
            stand_in.complete(done.task_id, 8)
            assert done.result(timeout=TIMEOUT) == 8
            future = client.submit(pow, 2, 5)
            wait_until(lambda: future.task_id in stand_in.submitted, timeout=TIMEOUT, what="the task to reach it")
            function_id = stand_in.put[0]
            before = len(stand_in.arrivals)
            stand_in.restart(down_seconds=RECONNECT_GRACE_SECONDS + 1.5)  # past the reconnect grace and the timeout
            wait_until(lambda: "waiting up to 30s" in caplog.text, timeout=TIMEOUT, what="the warning")
            later = client.submit(pow, 3, 3)  # held while the scheduler is away
            wait_until(lambda: later.task_id in stand_in.submitted, timeout=TIMEOUT, what="the held task")
            assert not future.done() and not later.done()
            assert stand_in.arrivals[before:] == [
                ("put", [function_id]),  # the function, not freed
                ("submit", [future.task_id]),  # the unfinished task (the finished one is not sent again)
                ("submit", [later.task_id]),  # then what was held
            ]
            stand_in.complete(future.task_id, 32)
            stand_in.complete(future.task_id, 32)  # a task that ran again: its second result is dropped
            stand_in.complete(later.task_id, 27)
            assert future.result(timeout=TIMEOUT) == 32
            assert later.result(timeout=TIMEOUT) == 27
        assert len(stand_in.peers) == 1, "the client said hello again"
        assert client.__reduce__()[1][-1] == 30.0  # a client passed to a task keeps its grace
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warnings == [
            f"the connection to the scheduler at {stand_in.address} closed; it keeps a journal: waiting up to 30s "
            "for it to come back, unfinished tasks are kept (1)"
        ]
        assert f"resumed the session with the scheduler at {stand_in.address}: it restarted" in caplog.text
    finally:
        client.disconnect()
        stand_in.close()


@pytest.mark.parametrize("grace", [0, -1.0, float("nan")])
def test_the_restart_grace_must_be_positive(grace: float) -> None:
    with pytest.raises(ValueError, match="scheduler_restart_grace_seconds must be positive"):
        Client(free_address(), scheduler_restart_grace_seconds=grace)


@pytest.mark.timeout(60)
def test_a_journaled_scheduler_that_lost_the_session_fails_the_pending_futures_clearly() -> None:
    stand_in = StandIn(free_address(), journaled=True)
    client = Client(stand_in.address, timeout_seconds=30, scheduler_restart_grace_seconds=30)
    try:
        future = client.submit(pow, 2, 5)
        wait_until(lambda: future.task_id in stand_in.submitted, timeout=TIMEOUT, what="the task to reach it")
        stand_in.forgot = True
        stand_in.restart(down_seconds=0.5)
        with pytest.raises(
            ConnectionFailedError, match=r"no longer knows this client \(it restarted without the journal"
        ):
            future.result(timeout=TIMEOUT)
    finally:
        client.disconnect()
        stand_in.close()


# ----------------------------------------------------------------------------------------------- clear, disconnect
@pytest.mark.timeout(60)
def test_clear_cancels_the_pending_futures_before_it_returns(cluster: SchedulerClusterCombo, tmp_path: Path) -> None:
    with Client(cluster.address, timeout_seconds=TIMEOUT) as client:
        # The module's cluster has 2 workers: two of the tasks run, four wait.
        futures = [client.submit(mark_and_sleep, str(tmp_path), 60, i) for i in range(6)]
        waiter_saw: list[BaseException] = []

        def wait_for_it() -> None:
            try:
                futures[-1].result(timeout=TIMEOUT)
            except BaseException as exc:
                waiter_saw.append(exc)

        waiter = threading.Thread(target=wait_for_it, daemon=True)
        waiter.start()
        wait_until(lambda: count_started(tmp_path) == 2, timeout=TIMEOUT, what="two tasks to start")
        client.clear()
        assert [f.cancelled() for f in futures] == [True] * 6
        waiter.join(5)
        assert len(waiter_saw) == 1 and isinstance(waiter_saw[0], concurrent.futures.CancelledError), waiter_saw
        # The scheduler confirms every cancel; the running tasks were stopped, so the workers serve again.
        wait_until(lambda: not client._connection.sinks, timeout=TIMEOUT, what="the scheduler to confirm the cancels")
        started = time.monotonic()
        assert client.map(pow, [(2, i) for i in range(4)], timeout=TIMEOUT) == [1, 2, 4, 8]
        assert time.monotonic() - started < 10


@pytest.mark.timeout(60)
def test_a_result_that_comes_after_clear_is_dropped(stand_in: StandIn) -> None:
    """The task ended on its worker before the cancel reached the scheduler: the result still comes, and the
    cancelled future does not take it."""
    client = Client(stand_in.address, timeout_seconds=30)
    try:
        future = client.submit(pow, 2, 5)
        wait_until(lambda: future.task_id in stand_in.submitted, timeout=TIMEOUT, what="the task to reach the stand-in")
        client.clear()
        assert future.cancelled()
        wait_until(lambda: future.task_id in stand_in.cancelled, timeout=TIMEOUT, what="the cancel request")
        stand_in.complete(future.task_id, 32)
        wait_until(lambda: not client._connection.sinks, timeout=TIMEOUT, what="the result to be read")
        assert future.cancelled()
        with pytest.raises(concurrent.futures.CancelledError):
            future.result(timeout=0)
        again = client.submit(pow, 3, 3)  # the client goes on
        wait_until(lambda: again.task_id in stand_in.submitted, timeout=TIMEOUT, what="the next task")
        stand_in.complete(again.task_id, 27)
        assert again.result(timeout=TIMEOUT) == 27
    finally:
        client.disconnect()


@pytest.mark.timeout(60)
def test_disconnect_cancels_the_pending_futures(cluster: SchedulerClusterCombo) -> None:
    """docs/guide/tasks.md: futures pending at disconnect() are cancelled (CancelledError)."""
    client = Client(cluster.address, timeout_seconds=TIMEOUT)
    futures = [client.submit(sleep_and_return, 60, i) for i in range(4)]
    client.disconnect()
    assert [f.cancelled() for f in futures] == [True] * 4
    with pytest.raises(concurrent.futures.CancelledError):
        futures[0].result(timeout=0)
    with pytest.raises(ClientClosedError):
        client.submit(pow, 2, 2)
    with Client(cluster.address, timeout_seconds=TIMEOUT) as other:  # the scheduler cancelled them: workers serve
        assert other.map(pow, [(2, i) for i in range(4)], timeout=TIMEOUT) == [1, 2, 4, 8]


# ----------------------------------------------------------------------------------------------- the docs' example
def docs_example(heading: str) -> str:
    """The first python block of the documentation's section `heading` (its text; "### " and the like are ignored, as
    sections move between pages and levels), on whichever page of docs/ holds it."""
    title = heading.lstrip("# ")
    pattern = re.compile(rf"^#{{1,6}} {re.escape(title)}\n", re.M)
    pages = [page.read_text() for page in sorted((ROOT / "docs").rglob("*.md"))]
    found = [pattern.split(text, 1)[1] for text in pages if pattern.search(text)]
    assert len(found) == 1, f"{len(found)} sections of docs/ are titled {title!r}"
    section = found[0]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, f"no python example under {heading}"
    return match.group(1)


@pytest.mark.timeout(90)
def test_the_execution_semantics_example_runs(tmp_path: Path) -> None:
    port = free_port()
    source = docs_example("## Execution semantics").replace("127.0.0.1:2345", f"127.0.0.1:{port}")
    script = tmp_path / "example.py"
    script.write_text(source)
    with SchedulerClusterCombo(address=f"tcp://127.0.0.1:{port}", n_workers=2, **QUIET):
        run = subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
        )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == "[0, 1, 4, 9, 16]", run.stdout
