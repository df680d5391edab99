"""The monitor role at the handshake: real CurveZMQ sockets on loopback, the scheduler's key gate answering libzmq's
ZAP requests. A TCP monitor address admits monitor keys only; the scheduler's address admits client and worker
keys only. (The scheduler's sockets themselves are tested in test_security.py; here a ROUTER and an XPUB stand in
for them, made CURVE servers the way the scheduler makes its own.)"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import zmq
from zmq.utils.monitor import parse_monitor_message

from scaler.io.curve import MAIN_DOMAIN, MONITOR_DOMAIN, make_client, make_server
from scaler.scheduler.gate import KeyGate
from scaler.security.keys import generate, load_peer_keys, load_server_keys

TIMEOUT = 10
_OUTCOMES = (
    zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)


@dataclass
class Scheduler:
    """A context with the key gate as its ZAP handler, and the two CURVE server sockets it guards."""

    ctx: zmq.Context[Any]
    gate: KeyGate
    main: str  # tcp:// address of the ROUTER in MAIN_DOMAIN
    monitor: str  # tcp:// address of the XPUB in MONITOR_DOMAIN
    keys: Path

    def handshake(self, role: str, address: str, keys_dir: Path | None = None) -> tuple[str, int]:
        """Connect with `role`'s key from `keys_dir` (default: the scheduler's keys directory), answering ZAP
        requests meanwhile; returns how the handshake ended ("succeeded" or "refused") and the event's value."""
        kind = zmq.DEALER if address == self.main else zmq.SUB
        sock = self.ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        make_client(sock, load_peer_keys(keys_dir or self.keys, role))
        events = sock.get_monitor_socket(_OUTCOMES)
        sock.connect(address)
        poller = zmq.Poller()
        poller.register(events, zmq.POLLIN)
        assert self.gate.sock is not None
        poller.register(self.gate.sock, zmq.POLLIN)
        deadline = time.monotonic() + TIMEOUT
        try:
            while (left := deadline - time.monotonic()) > 0:
                ready = dict(poller.poll(int(left * 1000) + 1))
                if self.gate.sock in ready:
                    self.gate.on_readable()
                if events in ready:
                    event = parse_monitor_message(events.recv_multipart())
                    outcome = "succeeded" if event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED else "refused"
                    if event["event"] not in (zmq.EVENT_HANDSHAKE_SUCCEEDED, zmq.EVENT_HANDSHAKE_FAILED_AUTH):
                        outcome = f"failed ({zmq.Event(event['event']).name})"
                    return outcome, int(event["value"])
            pytest.fail(f"no handshake outcome for a {role} key on {address} within {TIMEOUT}s")
        finally:
            sock.disable_monitor()
            events.close(linger=0)
            sock.close(linger=0)


@pytest.fixture()
def scheduler(tmp_path: Path) -> Iterator[Scheduler]:
    keys = tmp_path / "keys"
    generate(keys, monitors=["ops"])
    server = load_server_keys(keys)
    ctx: zmq.Context[Any] = zmq.Context()
    gate = KeyGate(ctx, server)
    gate.start()  # before any CURVE socket binds
    sockets = []
    try:
        addresses = []
        for kind, domain in ((zmq.ROUTER, MAIN_DOMAIN), (zmq.XPUB, MONITOR_DOMAIN)):
            sock = ctx.socket(kind)
            sock.setsockopt(zmq.LINGER, 0)
            make_server(sock, server.pair.secret, domain)
            sock.bind("tcp://127.0.0.1:*")
            sockets.append(sock)
            addresses.append(sock.getsockopt_string(zmq.LAST_ENDPOINT))
        yield Scheduler(ctx, gate, addresses[0], addresses[1], keys)
    finally:
        for sock in sockets:
            sock.close(linger=0)
        gate.close()
        ctx.term()


def test_the_monitor_address_admits_monitor_keys_only(scheduler: Scheduler) -> None:
    assert scheduler.handshake("monitor", scheduler.monitor) == ("succeeded", 0)
    assert scheduler.handshake("monitor", scheduler.monitor, scheduler.keys / "ops") == ("succeeded", 0)
    assert scheduler.handshake("client", scheduler.monitor) == ("refused", 400)
    assert scheduler.handshake("worker", scheduler.monitor) == ("refused", 400)
    assert scheduler.gate.denied == 2


def test_the_scheduler_address_admits_client_and_worker_keys_only(scheduler: Scheduler) -> None:
    assert scheduler.handshake("client", scheduler.main) == ("succeeded", 0)
    assert scheduler.handshake("worker", scheduler.main) == ("succeeded", 0)
    assert scheduler.handshake("monitor", scheduler.main) == ("refused", 400)
    assert scheduler.handshake("monitor", scheduler.main, scheduler.keys / "ops") == ("refused", 400)
    assert scheduler.gate.denied == 2


def test_a_removed_monitor_key_is_refused_at_its_next_handshake(scheduler: Scheduler) -> None:
    assert scheduler.handshake("monitor", scheduler.monitor, scheduler.keys / "ops") == ("succeeded", 0)
    (scheduler.keys / "authorized_monitors" / "ops.key").unlink()
    assert scheduler.gate.reload() == frozenset()  # the core never had a session of it
    assert scheduler.handshake("monitor", scheduler.monitor, scheduler.keys / "ops") == ("refused", 400)
    assert scheduler.handshake("monitor", scheduler.monitor) == ("succeeded", 0)
