"""SchedulerCore's log lines never show a routing id's secret part (docs/security.md: routing ids are never
published; with one a peer could take over another's route). Every event that logs about a peer is fed here, from
peers with and without sessions, and no log text may hold the random part of any of their routing ids: a peer is
named by its session (`client alice`) or by its routing id's `kind|host|pid`.
"""

from __future__ import annotations

import logging
import os

from scaler.core.limiter import BURST
from scaler.core.scheduler import Command, Forbidden, Log, Malformed, PeerKey, Received, Tick
from scaler.protocol.messages import (
    Heartbeat,
    Hello,
    PeerKind,
    PutObjects,
    SubmitTasks,
    TaskResults,
    TaskStatus,
)
from tests.unit.scheduler_driver import Driver, logs, submit, tid

SECRETS = [os.urandom(16).hex().encode() for _ in range(4)]
CLIENT = b"C|laptop|4242|" + SECRETS[0]
WORKER = b"W|gpu-box|77|" + SECRETS[1]
STRANGER = b"C|evil-host|666|" + SECRETS[2]
ODD = b"made-up-" + SECRETS[3]  # not in the kind|host|pid|random form: all of it may be secret
ALICE = PeerKey(PeerKind.CLIENT, "alice", b"A" * 40)
GPU = PeerKey(PeerKind.WORKER, "gpu", b"G" * 40)
MALLORY = PeerKey(PeerKind.WORKER, "mallory", b"M" * 40)


def feed_everything_that_logs_about_peers() -> list[Log]:
    d = Driver(max_payload_bytes=8)
    out: list[Log] = []

    def take(commands: list[Command]) -> None:
        out.extend(logs(commands))

    prefix = d.client(CLIENT, "alice", key=ALICE)
    take(d.recv(CLIENT, PutObjects([tid(prefix, 1)], [b"f"]), ALICE))
    take(d.recv(WORKER, Hello(PeerKind.WORKER, "gpu-box-77-0", queue_capacity=2), GPU))
    for peer in (STRANGER, ODD, CLIENT):  # malformed, past the burst: answered, logged, then summed up
        for _ in range(BURST + 3):
            take(d._after(d.core.handle(Malformed(d.now, peer, "not a Cap'n Proto message"))))
    take(d.recv(CLIENT, PutObjects([tid(prefix + 9, 1)], [b"x"]), ALICE))  # refused request: not its prefix
    take(d.recv(CLIENT, PutObjects([tid(prefix, 2)], [b"123456789"]), ALICE))  # too large
    take(d.recv(CLIENT, submit((tid(prefix, 3), tid(prefix, 1), [b"123456789"])), ALICE))  # too large
    take(d.recv(WORKER, SubmitTasks([], [], b"", [], [], None, []), GPU))  # a worker may not submit
    take(d.recv(CLIENT, Heartbeat(), MALLORY))  # a message for a session, with another key
    take(d.recv(STRANGER, Hello(PeerKind.CLIENT, "x", protocol_version=99)))  # a refused hello
    take(d.recv(WORKER, TaskResults([1], bytes([TaskStatus.SUCCESS]), [b"r" * 9]), GPU))  # stale result
    take(d._after(d.core.handle(Forbidden(d.now, ODD, MALLORY.public, "its key is no longer authorized"))))
    take(d._after(d.core.handle(Forbidden(d.now, WORKER, GPU.public, "its key is no longer authorized"))))
    take(d._after(d.core.handle(Received(d.now, STRANGER, Heartbeat()))))  # no session: answered, not logged
    take(d.tick(10.0))  # the limiter's summary: who sent the most
    return out


def test_no_log_line_holds_the_secret_part_of_a_routing_id() -> None:
    texts = [str(log.text) for log in feed_everything_that_logs_about_peers()]
    assert len(texts) > 20
    leaks = [text for text in texts for secret in SECRETS if secret.decode() in text]
    assert leaks == []
    assert all("b'" not in text for text in texts), texts  # no bytes repr of any id


def test_peers_are_named_by_their_session_or_by_kind_host_and_pid() -> None:
    warnings = [str(log.text) for log in feed_everything_that_logs_about_peers() if log.level == logging.WARNING]
    assert "dropped a message from peer C|evil-host|666: not a Cap'n Proto message" in warnings
    assert "dropped a message from client alice (C|laptop|4242): not a Cap'n Proto message" in warnings
    assert any(w.startswith("dropped a message from a peer whose routing id is not shown") for w in warnings)
    assert any(w.startswith("refused a request from client alice (C|laptop|4242): 1 object ids") for w in warnings)
    assert any(w.startswith("refused objects from client alice (C|laptop|4242): 1 objects carry") for w in warnings)
    assert any(
        w.startswith("refused a request from worker gpu-box-77-0 (W|gpu-box|77): a worker may") for w in warnings
    )
    assert any(
        w.startswith("dropped a message for client alice (C|laptop|4242): it came with <PeerKey worker mallory")
        for w in warnings
    )
    assert any(w.startswith("refused a message from worker gpu-box-77-0 (W|gpu-box|77): its key") for w in warnings)
    [summary] = [w for w in warnings if "more 'malformed message' events" in w]
    assert (
        "most from" in summary and "peer C|evil-host|666: 3" in summary and "client alice (C|laptop|4242): 3" in summary
    )


def test_a_tick_alone_still_logs_nothing() -> None:
    d = Driver()
    assert logs(d.core.handle(Tick(100.0))) == []
