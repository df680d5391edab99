"""io.curve.Attempts: what a connecting socket's ZeroMQ events say, fed as libzmq emits them (sequences recorded on
loopback: a dead port, a late scheduler, a keyless client against a keyed scheduler). No clock: the time that counts
is ZeroMQ's own, the wait each EVENT_CONNECT_RETRIED announces before the next attempt."""

from __future__ import annotations

import pytest
import zmq

from scaler.io.curve import REFUSED_SECONDS, UNCLEAR_FAILURES, Attempts

ADDRESS = "tcp://127.0.0.1:5999"
DELAYED, CLOSED, RETRIED = int(zmq.EVENT_CONNECT_DELAYED), int(zmq.EVENT_CLOSED), int(zmq.EVENT_CONNECT_RETRIED)
CONNECTED, DISCONNECTED = int(zmq.EVENT_CONNECTED), int(zmq.EVENT_DISCONNECTED)
SUCCEEDED, NO_DETAIL = int(zmq.EVENT_HANDSHAKE_SUCCEEDED), int(zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
MISMATCH = (int(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL), int(zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH))
# The waits ZeroMQ announces after each refused attempt at a dead port, with RECONNECT_IVL 100 and RECONNECT_IVL_MAX
# 2000 (new_dealer): attempts at 0, 0.1, 0.3, 0.7, 1.5, 3.1, 5.1 s.
WAITS_MS = [100, 200, 400, 800, 1600, 2000, 2000]

pytestmark = pytest.mark.timeout(10)


def refusal(wait_ms: int) -> list[tuple[int, int]]:
    """One refused attempt, as libzmq reports it: (kind, value) events."""
    return [(DELAYED, 115), (CLOSED, 12), (RETRIED, wait_ms)]


def refusals(waits_ms: list[int]) -> list[tuple[int, int]]:
    return [event for wait in waits_ms for event in refusal(wait)]


def feed(attempts: Attempts, events: list[tuple[int, int]]) -> list[str]:
    """Feed (kind, value) events; the failures reported, in order."""
    failures = []
    for kind, value in events:
        failure = attempts.feed(kind, value)
        if failure is not None:
            failures.append(failure)
    return failures


def test_a_dead_port_is_refused_at_the_first_attempt_past_the_grace_period() -> None:
    attempts = Attempts(ADDRESS, None, "client")
    for wait in WAITS_MS[:5]:  # the attempts at 0, 0.1, 0.3, 0.7 and 1.5 s
        assert feed(attempts, refusal(wait)) == []
        assert attempts.refused is None, wait  # a scheduler that is starting may still be reached
    assert sum(WAITS_MS[:5]) / 1000 >= REFUSED_SECONDS
    assert feed(attempts, refusal(WAITS_MS[5])) == []  # the attempt at 3.1 s; refusals are not failed handshakes
    assert attempts.refused is not None
    assert ADDRESS in attempts.refused and "nothing listens" in attempts.refused and "3s" in attempts.refused
    assert "the scheduler is running" in attempts.refused


def test_a_scheduler_that_starts_within_the_grace_period_is_reached_and_nothing_is_said() -> None:
    attempts = Attempts(ADDRESS, None, "client")
    events = [*refusals(WAITS_MS[:5]), (DELAYED, 115), (CONNECTED, 13), (SUCCEEDED, 0)]  # reached at 3.1 s
    assert feed(attempts, events) == []
    assert attempts.refused is None and attempts.succeeded


def test_a_connection_made_clears_refused_and_the_count_starts_again() -> None:
    attempts = Attempts(ADDRESS, None, "worker")
    feed(attempts, refusals(WAITS_MS))
    assert attempts.refused is not None
    feed(attempts, [(CONNECTED, 13)])
    assert attempts.refused is None
    # the scheduler went away again: its closing starts a new count, which needs the whole grace period again
    feed(attempts, [(DISCONNECTED, 13), (RETRIED, 100), *refusals([200, 400, 800, 1600])])
    assert attempts.refused is None
    feed(attempts, refusal(2000))
    assert attempts.refused is not None


def test_retries_after_connections_closed_during_the_handshake_are_not_refusals() -> None:
    """A scheduler that accepts and then closes (too busy, wrong keys) is there: ZeroMQ's retries then follow
    connections made, which clear the count each time."""
    attempts = Attempts(ADDRESS, None, "client")
    for _ in range(10):
        feed(attempts, [(DELAYED, 115), (CONNECTED, 13), (DISCONNECTED, 13), (RETRIED, 2000)])
    assert attempts.refused is None


def test_a_keyless_client_against_a_keyed_scheduler_however_the_events_come() -> None:
    """Either side may see the mechanism mismatch first. If the scheduler does, it closes and the client sees a
    handshake closed without a word (EPIPE), then ZeroMQ tries again; if the client does, ZeroMQ reports the mismatch
    and stops trying. The failure is reported either way, and names the missing keys."""
    first_client = [(DELAYED, 115), (CONNECTED, 14), MISMATCH, (DISCONNECTED, 14)]
    unclear = [(CONNECTED, 14), (NO_DETAIL, 32), (DISCONNECTED, 14)]
    scheduler_first = [*unclear, (RETRIED, 100), (CONNECTED, 15), MISMATCH]
    for events in (first_client, scheduler_first):
        attempts = Attempts(ADDRESS, None, "client")
        [failure] = feed(attempts, events)
        assert "requires keys and this client has none" in failure, failure


def test_handshakes_closed_without_a_word_count_after_several_in_a_row() -> None:
    attempts = Attempts(ADDRESS, None, "client")
    closed = [(CONNECTED, 14), (NO_DETAIL, 104), (RETRIED, 100)]
    for _ in range(UNCLEAR_FAILURES - 1):
        assert feed(attempts, closed) == []
    feed(attempts, [(SUCCEEDED, 0)])  # one that succeeds starts the count again
    for _ in range(UNCLEAR_FAILURES - 1):
        assert feed(attempts, closed) == []
    assert len(feed(attempts, closed)) == 1


def test_a_monitor_is_told_to_check_the_monitor_address() -> None:
    attempts = Attempts(ADDRESS, None, "monitor")
    feed(attempts, refusals(WAITS_MS))
    assert attempts.refused is not None and "monitor address" in attempts.refused
