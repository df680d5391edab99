"""A real scaler_scheduler with keys, its log captured (stderr, to a file), and raw peers that speak to it over
CurveZMQ with hand-made routing ids: for tests that read what the scheduler answers and what it logs.

Every process is started here and stopped here, by its pid (its own process group).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import zmq

from scaler.io.curve import make_client
from scaler.protocol.errors import ProtocolError
from scaler.protocol.messages import Message, decode
from scaler.security.keys import ENV_VAR, PeerKeys, generate, load_peer_keys
from tests.helpers import encoded, free_address

M = TypeVar("M")
BIN = Path(sys.executable).parent
STOP_SECONDS = 10


@dataclass
class Scheduler:
    address: str
    keys: Path
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for_log(self, needle: str, timeout: float = 20.0) -> str:
        """The log once it holds `needle`; fails (never hangs) after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while needle not in (text := self.text()):
            if time.monotonic() > deadline:
                raise AssertionError(f"the scheduler did not log {needle!r} within {timeout}s:\n{text[-3000:]}")
            time.sleep(0.05)
        return text

    def peer_keys(self, name: str, role: str) -> PeerKeys:
        return load_peer_keys(self.keys / name if name else self.keys, role)


def program(name: str) -> str:
    path = BIN / name
    assert path.exists(), f"{name} is not installed next to {sys.executable}"
    return str(path)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group of a program started here, then SIGKILL it if it does not end in time."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(STOP_SECONDS)


def start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {key: value for key, value in os.environ.items() if key != ENV_VAR}
    with log.open("ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=out, start_new_session=True, env=env)


@contextmanager
def keyed_scheduler(root: Path, *options: str, workers: tuple[str, ...] = ()) -> Iterator[Scheduler]:
    """scaler_scheduler --keys ROOT/keys (named worker keys `workers` made too), logging at INFO to its stderr,
    captured in ROOT/scheduler.log."""
    keys = root / "keys"
    keys.mkdir(mode=0o700)
    generate(keys, workers=list(workers))
    log = root / "scheduler.log"
    address = free_address()
    args = [program("scaler_scheduler"), "--keys", str(keys), "--monitor-address", f"ipc://{root / 'monitor'}"]
    process = start([*args, *options, address, "--logging-paths", "/dev/stderr"], log)  # (nargs="+": last)
    scheduler = Scheduler(address, keys, log)
    try:
        scheduler.wait_for_log("listening on")
        yield scheduler
    finally:
        stop(process)


class RawPeer:
    """A DEALER with a routing id of our making, over CurveZMQ with `keys`: sends and reads protocol messages."""

    def __init__(self, address: str, identity: bytes, keys: PeerKeys) -> None:
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.sock: zmq.Socket[Any] = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.IDENTITY, identity)
        make_client(self.sock, keys)
        self.sock.connect(address)

    def send(self, message: Message) -> None:
        self.sock.send_multipart(encoded(message))

    def send_raw(self, *frames: bytes) -> None:
        self.sock.send_multipart(list(frames))

    def receive(self, until: type[M], timeout: float = 10.0) -> M:
        """The first message of type `until` the scheduler sends (others are skipped); fails after `timeout`."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if self.sock.poll(int(left * 1000) + 1):
                try:
                    message = decode(self.sock.recv_multipart(copy=True))
                except ProtocolError:
                    continue
                if isinstance(message, until):
                    return message
        raise AssertionError(f"no {until.__name__} from the scheduler within {timeout}s")

    def close(self) -> None:
        """Drop the connection at once, as a peer that dies does."""
        self.ctx.destroy(linger=0)

    def __enter__(self) -> RawPeer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def routing_id(kind: str, host: str, pid: int) -> tuple[bytes, str]:
    """A routing id as Scaler's peers make them, kind|host|pid|<32 hex random>, and its secret part."""
    secret = os.urandom(16).hex()
    return f"{kind}|{host}|{pid}|{secret}".encode(), secret
