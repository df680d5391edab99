"""Failing fast and saying why (issue 25, item 3), with real sockets and processes on loopback: a client at a dead
port, a cluster and scaler_top aimed at nothing, a monitor given a scheduler's address instead of its monitor address,
and a client whose handshake ZeroMQ ended for good before its hello left (it used to wait for ever on that send)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.client.connection import Connection
from scaler.core.client.session import CloseKind
from scaler.errors import ConnectionFailedError
from scaler.io.sockets import new_dealer, send_message
from scaler.protocol.messages import Hello, PeerKind
from scaler.security.keys import ENV_VAR
from tests.helpers import free_address, free_port, wait_until
from tests.integration.keyed_scheduler import keyed_scheduler

pytestmark = pytest.mark.timeout(40)
BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
ENV = {key: value for key, value in os.environ.items() if key != ENV_VAR}
ENV["PYTHONPATH"] = os.pathsep.join([str(ROOT), ENV.get("PYTHONPATH", "")])
# A ZMTP 3.0 greeting of a CurveZMQ server: signature, version 3.0, mechanism "CURVE", as-server, filler (64 bytes).
CURVE_GREETING = b"\xff" + bytes(8) + b"\x7f" + b"\x03\x00" + b"CURVE".ljust(20, b"\0") + b"\x01" + bytes(31)


def program(name: str) -> str:
    path = BIN / name
    assert path.exists(), f"{name} is not installed next to {sys.executable}"
    return str(path)


class CurveGreeter:
    """A TCP server that greets every connection as a CurveZMQ server would and reads until the peer closes: a peer
    without keys sees the mechanism mismatch itself, and ZeroMQ then ends that connection for good (no retry)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"tcp://127.0.0.1:{self.listener.getsockname()[1]}"
        self.closed = threading.Event()  # a peer closed its connection
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            conn.sendall(CURVE_GREETING)
            conn.settimeout(20)
            try:
                while conn.recv(4096):
                    pass
            except OSError:
                pass
            self.closed.set()

    def close(self) -> None:
        self.listener.close()


@pytest.fixture()
def greeter() -> Iterator[CurveGreeter]:
    server = CurveGreeter()
    try:
        yield server
    finally:
        server.close()


# ----------------------------------------------------------------------------------------------- clients
def test_a_client_at_a_port_where_nothing_listens_fails_within_5s_saying_so() -> None:
    address = free_address()
    start = time.monotonic()
    with pytest.raises(ConnectionFailedError) as caught:
        Client(address, keys=False, timeout_seconds=60)
    elapsed = time.monotonic() - start
    assert elapsed < 5, f"ConnectionFailedError took {elapsed:.1f}s"
    message = str(caught.value)
    assert address in message and "nothing listens" in message, message
    assert "port" in message and "the scheduler is running" in message, message


def test_a_client_started_before_its_scheduler_connects_once_it_listens() -> None:
    address = free_address()
    outcome: list[object] = []

    def connect() -> None:
        try:
            outcome.append(Client(address, keys=False, timeout_seconds=30))
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=connect)
    thread.start()  # its attempts are refused until the scheduler below binds (starting it takes about a second)
    combo = SchedulerClusterCombo(address=address, n_workers=0, logging_level="WARNING")
    try:
        thread.join(30)
        [client] = outcome
        assert isinstance(client, Client), client
        client.disconnect()
    finally:
        combo.shutdown()


def test_a_send_on_a_connection_zeromq_ended_for_good_returns_at_once(greeter: CurveGreeter) -> None:
    """Without keys against a CurveZMQ server ZeroMQ ends the connection and does not try again: the DEALER is left
    with nowhere to queue a message. send_message then drops it (the handshake watch says why) instead of blocking.
    (ZeroMQ takes the connection's queue away a moment after closing it: sends until then still go into it.)"""
    sock = new_dealer(b"C|test|1|dropped")
    sent: list[bool] = []

    def send_until_dropped() -> None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            sent.append(send_message(sock, Hello(PeerKind.CLIENT, "x")))
            if sent[-1] is False:
                return
            time.sleep(0.01)  # (paces the sends; nothing waits on it)

    sender = threading.Thread(target=send_until_dropped, daemon=True)  # before the fix a send blocked for ever
    sock.connect(greeter.address)
    try:
        assert greeter.closed.wait(10), "the socket did not close its connection after the mismatch"
        sender.start()
        sender.join(10)
        assert not sender.is_alive(), "send_message blocked on a connection ZeroMQ ended for good"
        assert sent and sent[-1] is False, f"every send was taken: {sent[-5:]}"
    finally:
        if not sender.is_alive():  # (a socket is not closed under a thread blocked on it: libzmq would abort)
            sock.close(linger=0)


def test_a_handshake_that_failed_before_the_hello_left_still_ends_the_client_as_unauthenticated(
    greeter: CurveGreeter,
) -> None:
    """The race seen under load (test_security's keyless client got "no scheduler answered" instead of
    AuthenticationError): ZeroMQ ended the connection before the I/O thread sent its hello, and that send waited for
    ever. Here the I/O thread is held (it takes the socket's lock after connecting) until the connection has ended."""
    connection = Connection(greeter.address, "held", heartbeat_interval=1, timeout=30)
    lock: Any = connection._sock_lock  # the I/O thread takes it right after connect, before its first send
    lock.acquire()
    try:
        connection.start()
        assert greeter.closed.wait(10), "the client did not close its connection after the mismatch"
    finally:
        lock.release()
    try:
        assert connection.closed.wait(5), "the client's I/O thread is stuck (its hello waits on a dead connection)"
        assert connection.close_kind == CloseKind.UNAUTHENTICATED, connection.close_reason
        assert "requires keys and this client has none" in connection.close_reason, connection.close_reason
    finally:
        connection.close()


# ----------------------------------------------------------------------------------------------- scaler_cluster
def start_cluster(log: Path, address: str, *args: str) -> subprocess.Popen[bytes]:
    command = [program("scaler_cluster"), address, "-n", "1", *args, "--logging-paths", str(log)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, env=ENV)


def stop_process(process: subprocess.Popen[bytes]) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            pytest.fail("scaler_cluster did not stop within 15s of SIGTERM")
    return process.returncode


def wait_for_line(log: Path, pattern: str, timeout: float) -> str:
    wait_until(lambda: log.exists() and re.search(pattern, log.read_text()), timeout=timeout, what=repr(pattern))
    return log.read_text()


def test_a_cluster_aimed_at_nothing_says_so_within_15s_and_keeps_trying(tmp_path: Path) -> None:
    address = free_address()
    log = tmp_path / "cluster.log"
    process = start_cluster(log, address, "--death-timeout-seconds", "120")
    try:
        text = wait_for_line(log, "nothing listens at", timeout=15)
        line = next(line for line in text.splitlines() if "nothing listens at" in line)
        assert address in line and "WARNING" in line, line
        assert "the scheduler is running" in line and "--death-timeout-seconds" in line, line
        assert process.poll() is None, "the cluster gave up before its death timeout"
    finally:
        assert stop_process(process) == 0, log.read_text()


def test_a_cluster_aimed_at_nothing_still_exits_at_its_death_timeout(tmp_path: Path) -> None:
    log = tmp_path / "cluster.log"
    process = start_cluster(log, free_address(), "--death-timeout-seconds", "5")
    try:
        process.wait(25)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the cluster outlived its 5s death timeout:\n{log.read_text()}")
    finally:
        stop_process(process)
    text = log.read_text()
    assert "nothing listens at" in text and "silent for" in text, text
    assert text.index("nothing listens at") < text.index("silent for"), text


# ----------------------------------------------------------------------------------------------- monitors
def run_top(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    done = subprocess.run([program("scaler_top"), *args], capture_output=True, text=True, timeout=30, env=ENV)
    return done, time.monotonic() - start


def test_scaler_top_at_a_port_where_nothing_listens_says_so_before_its_timeout() -> None:
    address = f"tcp://127.0.0.1:{free_port()}"
    done, elapsed = run_top(address, "--once", "--timeout", "20")
    assert done.returncode == 1, done
    assert elapsed < 10, f"scaler_top took {elapsed:.1f}s"
    output = done.stdout + done.stderr
    assert "nothing listens at" in output and "monitor address" in output, output


@pytest.mark.parametrize("with_keys", [False, True])
def test_a_monitor_given_a_keyed_schedulers_address_is_told_to_use_the_monitor_address(
    tmp_path: Path, with_keys: bool
) -> None:
    with keyed_scheduler(tmp_path) as scheduler:
        keys = ["--keys", str(scheduler.keys)] if with_keys else []
        done, elapsed = run_top(scheduler.address, "--once", "--timeout", "20", *keys)
        assert done.returncode == 1, done
        assert elapsed < 10, f"scaler_top took {elapsed:.1f}s"
        output = done.stdout + done.stderr
        assert "authentication failed" in output and "give this monitor its monitor address" in output, output
        if not with_keys:
            log = scheduler.wait_for_log("failed its handshake")
            line = next(line for line in log.splitlines() if "failed its handshake" in line)
            assert "wrong scheduler key" not in line and "monitor address" in line, line
