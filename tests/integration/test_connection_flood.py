"""Connections that never authenticate, against a keyed scheduler whose file descriptor limit is the usual 1,024
(real processes, real TCP): the scheduler ends the oldest silent ones, keeps its descriptors, and every client and
worker keeps its session during the flood and after it."""

from __future__ import annotations

import concurrent.futures
import contextlib
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from scaler import Client
from scaler.security.keys import generate
from tests.helpers import free_port, wait_until

BIN = Path(sys.executable).parent
DESCRIPTORS = 1024  # the scheduler's soft and hard limit: it cannot raise it
STALLED = 1100


@dataclass
class KeyedCluster:
    address: str
    keys: Path
    log: Path
    scheduler: subprocess.Popen[bytes]
    cluster: subprocess.Popen[bytes]

    def round_trip(self) -> int:
        with Client(self.address, keys=str(self.keys), timeout_seconds=20) as client:
            return int(client.submit(pow, 2, 10).result(timeout=20))


def _low_descriptor_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS, DESCRIPTORS))


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[KeyedCluster]:
    keys = tmp_path / "keys"
    generate(keys)
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    log = tmp_path / "cluster.log"
    with log.open("wb") as out:
        scheduler = subprocess.Popen(
            [str(BIN / "scaler_scheduler"), address, "--keys", str(keys), "--monitor-address", f"ipc://{tmp_path}/m"],
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_low_descriptor_limit,
        )
        cluster = subprocess.Popen(
            [str(BIN / "scaler_cluster"), address, "--keys", str(keys), "-n", "1"], stdout=out, stderr=subprocess.STDOUT
        )
    started = KeyedCluster(address, keys, log, scheduler, cluster)
    try:
        yield started
    finally:
        for process in (cluster, scheduler):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in (cluster, scheduler):
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


@pytest.fixture
def descriptors_for_the_attacker() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = STALLED + 500
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"this process may open {hard} files, the flood needs {wanted}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def stalled_connections(port: int, count: int) -> list[socket.socket]:
    """`count` TCP connections that send nothing, ever."""
    opened = []
    for _ in range(count):
        opened.append(socket.create_connection(("127.0.0.1", port), timeout=5))
    return opened


@pytest.mark.timeout(180)
def test_stalled_connections_do_not_take_a_keyed_cluster_down(
    keyed: KeyedCluster, descriptors_for_the_attacker: None
) -> None:
    assert keyed.round_trip() == 1024
    scheduler = psutil.Process(keyed.scheduler.pid)
    port = int(keyed.address.rsplit(":", 1)[1])
    flood = stalled_connections(port, STALLED)
    try:
        # Either the scheduler ends the connections past its limits, or (as before) it runs out of descriptors.
        wait_until(
            lambda: "too many connections: ended" in keyed.log.read_text() or scheduler.num_fds() >= DESCRIPTORS - 8,
            20,
            what="the flood to be handled",
        )
        assert scheduler.num_fds() < DESCRIPTORS - 64  # what the key folders and new peers need stays free
        assert keyed.round_trip() == 1024  # during the flood
        assert keyed.cluster.poll() is None, keyed.log.read_text()[-3000:]
    finally:
        for sock in flood:
            sock.close()
    assert keyed.round_trip() == 1024  # after it
    text = keyed.log.read_text()
    assert keyed.cluster.poll() is None and keyed.scheduler.poll() is None, text[-3000:]
    for ended in ("no longer authorized", "session ended", "Too many open files", "cannot be listed"):
        assert ended not in text, text[-3000:]
    assert re.search(r"Scheduler: worker \S+ left", text) is None, text[-3000:]  # no worker lost meanwhile


def unauthenticated_frame(port: int, declared: int, seconds: float) -> int:
    """A raw TCP peer that greets as a CurveZMQ client (ZMTP 3.0, mechanism CURVE) and starts a frame of `declared`
    bytes instead of its handshake's HELLO, then sends as much of it as it can for `seconds`; returns bytes sent."""
    greeting = b"\xff" + bytes(8) + b"\x7f" + b"\x03\x00" + b"CURVE".ljust(20, b"\x00") + b"\x00" + bytes(31)
    frame_head = b"\x06" + declared.to_bytes(8, "big")  # a long command frame
    chunk = bytes(1 << 20)
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
        sock.sendall(greeting + frame_head)
        end = time.monotonic() + seconds
        while time.monotonic() < end and sent < declared:
            try:
                sent += sock.send(chunk[: declared - sent])
            except TimeoutError:
                continue
            except OSError:  # the scheduler dropped the connection: the frame is over its limit
                break
    return sent


@pytest.mark.timeout(120)
def test_frames_before_authentication_do_not_fill_the_schedulers_memory(keyed: KeyedCluster) -> None:
    """Two connections each start a 300 MB frame before any key is checked: ZeroMQ drops them at the frame's size
    (the scheduler takes no frame over MAX_FRAME), so the scheduler's memory does not grow with what they send."""
    assert keyed.round_trip() == 1024
    scheduler = psutil.Process(keyed.scheduler.pid)
    port = int(keyed.address.rsplit(":", 1)[1])
    before = scheduler.memory_info().rss
    peak = before
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        attacks = [pool.submit(unauthenticated_frame, port, 300 << 20, 5.0) for _ in range(2)]
        while not all(a.done() for a in attacks):
            peak = max(peak, scheduler.memory_info().rss)
            time.sleep(0.05)
        sent = sum(a.result() for a in attacks)
    grown_mb = (peak - before) / 1e6
    assert grown_mb < 50, f"the scheduler grew by {grown_mb:.0f} MB while {sent / 1e6:.0f} MB were sent to it"
    assert keyed.round_trip() == 1024


class DroppingProxy:
    """A TCP forwarder to `port` that closes the first `drops` connections once they have sent something (as a
    scheduler ends a connection it finds silent among too many), then forwards the others both ways."""

    def __init__(self, port: int, drops: int) -> None:
        self.target = port
        self.drops = drops
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            if self.accepted <= self.drops:
                with contextlib.suppress(OSError):  # a client that went first: nothing to drop
                    conn.recv(64)
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=10)
            except OSError:  # the scheduler is not listening (yet): the client tries again
                conn.close()
                continue
            upstream.settimeout(None)
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self.listener.close()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@pytest.mark.timeout(60)
def test_a_connection_closed_during_its_handshake_is_tried_again_not_reported_as_wrong_keys(
    keyed: KeyedCluster,
) -> None:
    """A scheduler flooded with connections may end a legitimate one during its handshake: the client sees the
    same as with a wrong scheduler key (closed without a word), so one such close is retried; only a few in a row
    mean wrong keys (test_security checks those still fail within seconds)."""
    assert keyed.round_trip() == 1024  # the scheduler is up
    proxy = DroppingProxy(int(keyed.address.rsplit(":", 1)[1]), drops=2)
    try:
        with Client(f"tcp://127.0.0.1:{proxy.port}", keys=str(keyed.keys), timeout_seconds=20) as client:
            assert client.submit(pow, 2, 10).result(timeout=20) == 1024
        assert proxy.accepted >= 3
    finally:
        proxy.close()
