"""Simulated workers for benchmarks/fleet.py: one cheap process holding many DEALER sockets, each a fake worker.

    python benchmarks/fleet_peers.py ADDRESS COUNT [--name fleet0] [--capacity 1000] [--heartbeat 2.0]

Each fake worker says hello as a worker, heartbeats every --heartbeat seconds (staggered), answers every
dispatchTasks at once with a taskResults of successes (payload: None serialized as Python peers do), every
balanceRequest with an empty balanceResponse (nothing is ever left queued) and every cancelTasks with `canceled`
results. A worker the scheduler answers `notConnected` says hello again, as a real worker does.
Prints "ready N" once every worker is welcomed, then counts on stdout at exit (SIGTERM or stdin closed).
Speaks the real protocol through scaler.protocol.messages; runs no user code.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import secrets
import signal
import socket
import sys
import time
from typing import Any

import zmq

from scaler.io.curve import make_client
from scaler.protocol.messages import (
    BalanceRequest,
    BalanceResponse,
    CancelTasks,
    DispatchTasks,
    Error,
    ErrorCode,
    Heartbeat,
    Hello,
    PeerKind,
    TaskResults,
    Welcome,
    decode,
    encode,
)
from scaler.security.keys import load_peer_keys

NONE_PAYLOAD = pickle.dumps(None, protocol=pickle.HIGHEST_PROTOCOL)  # what the Python worker returns for None
CANCELED = 2


class Fleet:
    """COUNT fake workers on one zmq poller."""

    def __init__(
        self, address: str, count: int, name: str, capacity: int, heartbeat: float, keys: str | None = None
    ) -> None:
        self.ctx: zmq.Context[Any] = zmq.Context(io_threads=1)
        self.ctx.setsockopt(zmq.MAX_SOCKETS, count + 64)
        self.poller = zmq.Poller()
        self.sockets: list[zmq.Socket[Any]] = []
        self.hellos: list[Hello] = []
        self.heartbeat = heartbeat
        self.counts: dict[str, int] = {}
        host, pid = socket.gethostname(), os.getpid()
        for i in range(count):
            sock: zmq.Socket[Any] = self.ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDHWM, 0)
            sock.setsockopt(zmq.RCVHWM, 0)
            sock.setsockopt(zmq.ROUTING_ID, f"W|{host}|{pid}|{secrets.token_hex(16)}".encode())
            if keys is not None:
                make_client(sock, load_peer_keys(keys, "worker"))
            sock.connect(address)
            hello = Hello(
                PeerKind.WORKER,
                f"{name}-{i}",
                host,
                pid,
                int(heartbeat * 1000),
                capacity,
                capabilities=["payload=python"],
            )
            # here and below: encode's frames are bytes or buffers (Payload in its type); zmq sends them as they are
            sock.send_multipart(encode(hello))  # type: ignore[arg-type]
            self.hellos.append(hello)
            self.poller.register(sock, zmq.POLLIN)
            self.sockets.append(sock)
        self.index = {sock: i for i, sock in enumerate(self.sockets)}
        now = time.monotonic()
        self.next_beat = [now + heartbeat * (i + 1) / count for i in range(count)]  # staggered over one interval
        self.welcomed: set[int] = set()

    def _count(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    def handle(self, index: int, sock: zmq.Socket[Any]) -> None:
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            message = decode(frames)
            kind = type(message).__name__
            self._count(kind)
            if isinstance(message, DispatchTasks):
                ids = message.task_ids
                self._count("tasks", len(ids))
                reply = TaskResults(list(ids), bytes(len(ids)), [NONE_PAYLOAD] * len(ids))
                sock.send_multipart(encode(reply))  # type: ignore[arg-type]
            elif isinstance(message, BalanceRequest):
                sock.send_multipart(encode(BalanceResponse([])))  # type: ignore[arg-type]
            elif isinstance(message, CancelTasks):
                ids = message.ids
                reply = TaskResults(list(ids), bytes([CANCELED]) * len(ids), [b""] * len(ids))
                sock.send_multipart(encode(reply))  # type: ignore[arg-type]
            elif isinstance(message, Welcome):
                self.welcomed.add(index)
            elif isinstance(message, Error) and message.code == ErrorCode.NOT_CONNECTED:
                # the scheduler has no session for it (its connection was ended, e.g. as silent while thousands
                # joined at once on a busy machine): say hello again, as a real worker does (core.worker.agent)
                self._count("hellos again")
                sock.send_multipart(encode(self.hellos[index]))  # type: ignore[arg-type]

    def run(self, stop: list[bool]) -> None:
        announced = False
        beat = encode(Heartbeat())
        while not stop[0]:
            for sock, _ in self.poller.poll(50):
                self.handle(self.index[sock], sock)
            now = time.monotonic()
            for i, due in enumerate(self.next_beat):
                if due <= now:
                    self.sockets[i].send_multipart(beat)  # type: ignore[arg-type]
                    self.next_beat[i] = due + self.heartbeat
                    self._count("heartbeats sent")
            if not announced and len(self.welcomed) == len(self.sockets):
                announced = True
                print(f"ready {len(self.sockets)}", flush=True)

    def close(self) -> None:
        for sock in self.sockets:
            sock.close(linger=0)
        self.ctx.term()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("address")
    p.add_argument("count", type=int)
    p.add_argument("--name", default="fleet")
    p.add_argument("--capacity", type=int, default=1000, help="queueCapacity (the Python worker's default)")
    p.add_argument("--heartbeat", type=float, default=2.0, help="seconds between heartbeats")
    p.add_argument("--keys", default=None, help="a keys directory: connect with its worker key (CurveZMQ)")
    args = p.parse_args()
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    signal.signal(signal.SIGINT, lambda *_: stop.__setitem__(0, True))
    fleet = Fleet(args.address, args.count, args.name, args.capacity, args.heartbeat, args.keys)
    try:
        fleet.run(stop)
    finally:
        print(json.dumps(fleet.counts), flush=True)
        fleet.close()
    sys.exit(0)


if __name__ == "__main__":
    main()
