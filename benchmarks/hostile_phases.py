"""Attacks by peers that hold no key, against a keyed scheduler limited to 1,024 file descriptors, for
benchmarks/hostile.py --unauthenticated: stalled connections, frames started before the handshake, and floods of
subscriptions and hellos on the monitor address. Each phase reports the scheduler's RSS (MB) and open descriptors
before, at their peak during the attack and after it, and a legitimate client's round trips during and after.

Runs against whatever `scaler` is importable (PYTHONPATH=<a checkout>/src measures another version).
"""

from __future__ import annotations

import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import zmq

from scaler import Client
from scaler.protocol.messages import Hello, PeerKind, encode
from scaler.security.keys import generate

BIN = Path(sys.executable).parent
DESCRIPTORS = 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RoundTrips(threading.Thread):
    """A legitimate client doing one round trip every 50 ms: latencies (ms) and failures."""

    def __init__(self, address: str, keys: str) -> None:
        super().__init__(daemon=True)
        self.address, self.keys = address, keys
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            with Client(self.address, keys=self.keys, timeout_seconds=30) as client:
                while not self.stop.is_set():
                    started = time.perf_counter()
                    try:
                        assert client.submit(pow, 2, 10).result(timeout=15) == 1024
                        self.latencies.append((time.perf_counter() - started) * 1000)
                    except Exception as exc:  # counted: the point is to see them
                        self.failures.append(f"{type(exc).__name__}: {exc}"[:200])
                    self.stop.wait(0.05)
        except Exception as exc:
            self.failures.append(f"{type(exc).__name__}: {exc}"[:200])

    def summary(self) -> dict[str, Any]:
        return {
            "round_trips": len(self.latencies),
            "failures": len(self.failures),
            "first_failure": self.failures[0] if self.failures else None,
            "median_ms": round(statistics.median(self.latencies), 2) if self.latencies else None,
            "max_ms": round(max(self.latencies), 1) if self.latencies else None,
        }


class Sampler(threading.Thread):
    def __init__(self, process: psutil.Process) -> None:
        super().__init__(daemon=True)
        self.process = process
        self.rss_mb = 0.0
        self.fds = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.1):
            try:
                self.rss_mb = max(self.rss_mb, self.process.memory_info().rss / 1e6)
                self.fds = max(self.fds, self.process.num_fds())
            except psutil.Error:
                return


def one_round_trip(address: str, keys: str) -> float | None:
    started = time.perf_counter()
    try:
        with Client(address, keys=keys, timeout_seconds=15) as client:
            assert client.submit(pow, 2, 10).result(timeout=15) == 1024
    except Exception:
        return None
    return round((time.perf_counter() - started) * 1000, 1)


def phase(name: str, cluster: dict[str, Any], attack: Callable[[], dict[str, Any]], settle: float = 5.0) -> None:
    process: psutil.Process = cluster["process"]
    address, keys = cluster["address"], cluster["keys"]
    before = {"rss_mb": round(process.memory_info().rss / 1e6, 1), "fds": process.num_fds()}
    sampler, during = Sampler(process), RoundTrips(address, keys)
    sampler.start()
    during.start()
    details = attack()
    during.stop.set()
    during.join(30)
    time.sleep(settle)
    sampler.stop.set()
    sampler.join(5)
    after_trips = RoundTrips(address, keys)
    after_trips.start()
    time.sleep(2.0)
    after_trips.stop.set()
    after_trips.join(30)
    alive = cluster["workers"].poll() is None and cluster["scheduler"].poll() is None
    figures = {
        "attack": name,
        **details,
        "rss_mb": {
            "before": before["rss_mb"],
            "peak": round(sampler.rss_mb, 1),
            "after": round(process.memory_info().rss / 1e6, 1),
        },
        "fds": {"before": before["fds"], "peak": sampler.fds, "after": process.num_fds()},
        "client_during": during.summary(),
        "client_after": after_trips.summary(),
        "new_client_after_ms": one_round_trip(address, keys),
        "workers_alive": alive,
    }
    print(json.dumps(figures), flush=True)


def stalled(port: int, count: int, hold: float) -> dict[str, Any]:
    opened, refused = [], 0
    for _ in range(count):
        try:
            opened.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        except OSError:
            refused += 1
    time.sleep(hold)
    for sock in opened:
        sock.close()
    return {"stalled": len(opened), "connect_refused": refused}


def preauth_frame(port: int, declared: int, seconds: float) -> int:
    greeting = b"\xff" + bytes(8) + b"\x7f" + b"\x03\x00" + b"CURVE".ljust(20, b"\x00") + b"\x00" + bytes(31)
    chunk, sent = bytes(1 << 20), 0
    with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
        sock.sendall(greeting + b"\x06" + declared.to_bytes(8, "big"))
        end = time.monotonic() + seconds
        while time.monotonic() < end and sent < declared:
            try:
                sent += sock.send(chunk[: declared - sent])
            except TimeoutError:
                continue
            except OSError:
                break
    return sent


def preauth(port: int, hold: float) -> dict[str, Any]:
    """Two connections at a time, each starting a 300 MB frame before its handshake, again and again for `hold` s."""
    sent: list[int] = []
    connections = 0
    end = time.monotonic() + hold

    def attacker() -> None:
        nonlocal connections
        while time.monotonic() < end:
            connections += 1
            sent.append(preauth_frame(port, 300 << 20, max(0.1, end - time.monotonic())))

    threads = [threading.Thread(target=attacker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(hold + 30)
    return {"connections": connections, "declared_mb_each": 300, "sent_mb": round(sum(sent) / 1e6, 1)}


def subscriptions(monitor: str, hold: float) -> dict[str, Any]:
    ctx: zmq.Context[Any] = zmq.Context()
    sent = hellos = 0
    try:
        sub = ctx.socket(zmq.XSUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SNDTIMEO, 100)
        sub.connect(monitor)
        loud = ctx.socket(zmq.DEALER)
        loud.setsockopt(zmq.LINGER, 0)
        loud.connect(monitor)
        end = time.monotonic() + hold
        while time.monotonic() < end:
            try:
                sub.send(b"\x01" + sent.to_bytes(8, "little") + os.urandom(503))
                sent += 1
            except zmq.Again:
                pass
            try:
                loud.send_multipart(list(encode(Hello(PeerKind.MONITOR, f"loud-{hellos}"))), zmq.NOBLOCK)
                hellos += 1
            except (zmq.Again, AttributeError):
                pass
    finally:
        ctx.destroy(linger=0)
    return {"subscriptions_sent": sent, "monitor_hellos_sent": hellos}


@contextmanager
def keyed_cluster(work: Path) -> Iterator[dict[str, Any]]:
    keys = str(work / "keys")
    generate(keys)
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    monitor = f"ipc://{work}/monitor"

    def limited() -> None:
        os.setsid()
        resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS, DESCRIPTORS))

    scheduler = subprocess.Popen(
        [
            str(BIN / "scaler_scheduler"),
            address,
            "--keys",
            keys,
            "--monitor-address",
            monitor,
            "-lp",
            str(work / "s.log"),
        ],
        preexec_fn=limited,
    )
    workers = subprocess.Popen(
        [str(BIN / "scaler_cluster"), address, "--keys", keys, "-n", "1", "-lp", str(work / "c.log")],
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while one_round_trip(address, keys) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster did not serve within 30 s: see {work}")
        yield {
            "address": address,
            "port": port,
            "monitor": monitor,
            "keys": keys,
            "scheduler": scheduler,
            "workers": workers,
            "process": psutil.Process(scheduler.pid),
        }
    finally:
        for process in (workers, scheduler):
            if process.poll() is None:
                process.terminate()
        for process in (workers, scheduler):
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()


def run_unauthenticated(count: int, hold: float) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, count + 1000)), hard))
    work = Path(tempfile.mkdtemp(prefix="scaler-hostile-"))
    with keyed_cluster(work) as cluster:
        phase("stalled", cluster, lambda: stalled(cluster["port"], count, hold))
        phase("preauth", cluster, lambda: preauth(cluster["port"], hold))
        phase("subscriptions", cluster, lambda: subscriptions(cluster["monitor"], hold))
