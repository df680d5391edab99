"""LogLimiter and peer_label: a few lines per peer and kind, then one summary; peers named without their secrets."""

from __future__ import annotations

from collections.abc import Hashable

import pytest

from scaler.core.limiter import BURST, LogLimiter, peer_label

RANDOM = "0123456789abcdef" * 2


@pytest.mark.parametrize(
    ("peer", "session", "label"),
    [
        (f"W|gpu-box|77|{RANDOM}".encode(), "", "peer W|gpu-box|77"),
        (f"C|laptop|4242|{RANDOM}".encode(), "client alice", "client alice (C|laptop|4242)"),
        (f"C|host|1|{RANDOM}|more|bars".encode(), "", "peer C|host|1"),
        (b"made-up-" + RANDOM.encode(), "", "a peer whose routing id is not shown"),
        (b"C|short", "", "a peer whose routing id is not shown"),
        (b"C|" + RANDOM.encode(), "worker w", "worker w"),
        (b"W|bad\nhost\x1b[31m|1|" + RANDOM.encode(), "", "peer W|bad?host?[31m|1"),
        ("10.0.0.7", "", "'10.0.0.7'"),
        (3, "", "3"),
    ],
)
def test_peer_label_shows_who_without_the_secret(peer: Hashable, session: str, label: str) -> None:
    assert peer_label(peer, session) == label


def test_a_long_host_is_cut() -> None:
    label = peer_label(b"W|" + b"h" * 500 + b"|1|" + RANDOM.encode())
    assert label.startswith("peer W|hhh") and len(label) <= 5 + 100 and RANDOM not in label


def test_the_summary_names_peers_by_label_never_by_routing_id() -> None:
    limiter = LogLimiter()
    peer = f"C|laptop|4242|{RANDOM}".encode()
    for _ in range(BURST + 5):
        limiter.allow(0.0, "malformed message", peer)
    [line] = limiter.summary(10.0)
    expected = "5 more 'malformed message' events in the last 10s were not logged (1 peers; most from {}: 5)"
    assert line == expected.format("peer C|laptop|4242")
    for _ in range(BURST + 2):
        limiter.allow(20.0, "malformed message", peer)
    [line] = limiter.summary(30.0, label=lambda p: "client alice")
    assert line.endswith("(1 peers; most from client alice: 2)")
