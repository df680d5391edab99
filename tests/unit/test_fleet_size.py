"""What the scheduler tells a client about its workers (core/scheduler/fleet_size.py): in the Welcome and in the
echo of each heartbeat, the workers that may take tasks now (connected, not held back) and their queue capacities
added up; workers are told nothing of it. State is built only by feeding events (Driver validates after each)."""

from __future__ import annotations

from scaler.protocol.messages import Heartbeat, HeartbeatEcho, Hello, PeerKind, Welcome
from tests.unit.scheduler_driver import Driver, sends

C, W1, W2 = b"c1", b"W|host|1|aa", b"W|host|2|bb"


def echo(driver: Driver) -> HeartbeatEcho:
    [(peer, message)] = sends(driver.recv(C, Heartbeat()))
    assert peer == C and isinstance(message, HeartbeatEcho)
    return message


def stated(message: Welcome | HeartbeatEcho) -> tuple[int, int] | None:
    return (message.workers, message.worker_capacity) if message.workers_stated else None


def test_a_client_is_told_the_workers_that_may_take_tasks_and_a_worker_is_not() -> None:
    d = Driver()
    [(_, welcome)] = sends(d.recv(C, Hello(PeerKind.CLIENT, "alice")))
    assert isinstance(welcome, Welcome) and stated(welcome) == (0, 0)  # stated: none yet
    [(_, to_worker), *_] = sends(d.recv(W1, Hello(PeerKind.WORKER, "one", queue_capacity=3)))
    assert isinstance(to_worker, Welcome) and stated(to_worker) is None
    assert stated(echo(d)) == (1, 3)
    d.recv(W2, Hello(PeerKind.WORKER, "two", queue_capacity=5))
    assert stated(echo(d)) == (2, 8)
    [(_, later)] = sends(d.recv(b"c2", Hello(PeerKind.CLIENT, "bob")))
    assert isinstance(later, Welcome) and stated(later) == (2, 8)
    [(_, worker_echo)] = sends(d.recv(W1, Heartbeat()))
    assert isinstance(worker_echo, HeartbeatEcho) and stated(worker_echo) is None


def test_a_lost_worker_leaves_the_count_and_a_held_back_one_counts_once_its_hold_ends() -> None:
    d = Driver()
    d.client(C)
    d.recv(W1, Hello(PeerKind.WORKER, "flaky", queue_capacity=2))
    d.recv(W2, Hello(PeerKind.WORKER, "steady", queue_capacity=4))
    d.gone(W1)
    assert stated(echo(d)) == (1, 4)
    d.recv(W1, Hello(PeerKind.WORKER, "flaky", queue_capacity=2))
    d.gone(W1)  # its name lost twice: held back when it comes again
    d.recv(W1, Hello(PeerKind.WORKER, "flaky", queue_capacity=2))
    held_until = d.core.workers[W1].held_until
    assert held_until > d.now
    assert stated(echo(d)) == (1, 4)  # connected, but may take no task yet
    d.now = held_until
    assert stated(echo(d)) == (2, 6)
