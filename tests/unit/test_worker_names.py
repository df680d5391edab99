"""SchedulerCore and worker names with keys: a name is bound to the key it first joined with, for as long as the
scheduler remembers the name (a session has it, or its losses or its hold-back are remembered). A hello with that
name from another key is refused and changes nothing: it cannot add losses to the name nor hold its worker back.
Without keys nothing changes. State is built only by feeding events (Driver validates the core after each one).
"""

from __future__ import annotations

import logging
from typing import Any

from scaler.core.scheduler import Command, Log, PeerKey, Revoked, Send
from scaler.protocol.messages import (
    Disconnect,
    DispatchTasks,
    Hello,
    PeerKind,
    PutObjects,
    Refused,
    Welcome,
)
from tests.unit.scheduler_driver import Driver, of_type, sends, submit, tid

C, REAL, INTRUDER, OTHER = b"c1", b"W|real-host|1|aa", b"W|bad-host|2|bb", b"W|real-host|3|cc"
ALICE = PeerKey(PeerKind.CLIENT, "alice", b"C" * 40)
KEY_A = PeerKey(PeerKind.WORKER, "a", b"A" * 40)
KEY_B = PeerKey(PeerKind.WORKER, "b", b"B" * 40)
NAME = "gpu-box-77-0"
FN = b"<function>"
TAKEN = (
    f"the worker name {NAME!r} belongs to another key; choose another name "
    "(scaler_cluster --worker-name-prefix, or Cluster(worker_names=...))"
)


def hello(name: str = NAME) -> Hello:
    return Hello(PeerKind.WORKER, name, "host", 1, queue_capacity=4)


def welcomed(commands: list[Command]) -> bool:
    return bool(of_type(commands, Welcome))


def with_real_worker(**settings: Any) -> Driver:
    """Worker REAL (key A) joined as NAME; client C (ALICE) has its function object stored and two tasks queued."""
    d = Driver(**settings)
    prefix = d.client(C, key=ALICE)
    d.recv(C, PutObjects([tid(prefix, 1)], [FN]), ALICE)
    assert welcomed(d.recv(REAL, hello(), KEY_A))
    return d


def test_a_hello_with_the_name_of_another_keys_worker_is_refused_with_the_reason() -> None:
    d = with_real_worker()
    commands = d.recv(INTRUDER, hello(), KEY_B)
    assert commands == [
        Send(INTRUDER, Refused(TAKEN)),
        Log(logging.WARNING, f"refused worker {NAME!r} (key b): {TAKEN}"),
    ]
    assert list(d.core.workers) == [REAL] and d.core.refused == 1


def test_an_intruder_dropping_six_times_under_the_name_never_holds_the_real_worker_back() -> None:
    """The red team's attack: a worker key that says hello with a real worker's name and drops, six times. Before,
    the name was lost six times and held back 80 s, and the real worker with it."""
    d = with_real_worker()
    prefix = d.prefixes[C]
    for n in range(6):
        d.now = float(n)
        assert sends(d.recv(INTRUDER, hello(), KEY_B)) == [(INTRUDER, Refused(TAKEN))]
        assert d.gone(INTRUDER) == []  # it has no session: nothing is lost, nothing is counted
    assert d.core.workers[REAL].held_until == 0.0
    assert [(w.name, w.held_back_ms) for w in d.core.status().workers] == [(NAME, 0)]
    commands = d.recv(C, submit((tid(prefix, 2), tid(prefix, 1), [b"x"])), ALICE)
    assert [peer for peer, _ in of_type(commands, DispatchTasks)] == [REAL]  # the real worker keeps working


def test_the_key_of_the_name_comes_back_under_it_held_back_as_before_and_others_are_still_refused() -> None:
    d = with_real_worker()
    d.gone(REAL)
    d.now = 1.0
    assert welcomed(d.recv(OTHER, hello(), KEY_A))  # the same key, a new connection: as today
    commands = d.gone(OTHER)  # the second loss: held back 5 s
    assert any("was lost 2 times" in str(c.text) for c in commands if isinstance(c, Log))
    assert sends(d.recv(INTRUDER, hello(), KEY_B)) == [(INTRUDER, Refused(TAKEN))]  # remembered for its losses
    commands = d.recv(REAL, hello(), KEY_A)
    assert welcomed(commands) and d.core.workers[REAL].held_until == 6.0
    assert any(str(c.text).endswith("held back for 5s") for c in commands if isinstance(c, Log))


def test_a_refused_hello_leaves_the_intruders_own_session_as_it_was() -> None:
    d = with_real_worker()
    assert welcomed(d.recv(INTRUDER, hello("mine"), KEY_B))
    assert sends(d.recv(INTRUDER, hello(), KEY_B)) == [(INTRUDER, Refused(TAKEN))]
    assert d.core.workers[INTRUDER].name == "mine" and d.core.workers[REAL].name == NAME


def test_the_binding_is_forgotten_with_the_name_after_a_goodbye() -> None:
    d = with_real_worker()
    d.recv(REAL, Disconnect("bye"), KEY_A)  # a goodbye: no loss, nothing left to remember of the name
    assert d.core.names.records == {}
    assert welcomed(d.recv(INTRUDER, hello(), KEY_B))  # the name is free: the first key to join takes it
    assert sends(d.recv(REAL, hello(), KEY_A)) == [(REAL, Refused(TAKEN))]


def test_the_binding_is_forgotten_once_the_losses_leave_the_window() -> None:
    d = with_real_worker()
    d.gone(REAL)
    assert sends(d.recv(INTRUDER, hello(), KEY_B)) == [(INTRUDER, Refused(TAKEN))]
    d.tick(599.0)
    assert NAME in d.core.names.records
    d.tick(601.0)  # the loss is out of the 10 min window: the name is forgotten, binding and all
    assert d.core.names.records == {} and d.core.names.lost == {}
    assert welcomed(d.recv(INTRUDER, hello(), KEY_B))


def test_a_revoked_key_lets_go_of_its_names() -> None:
    d = with_real_worker()
    d.gone(REAL)
    d.gone(REAL)
    d._after(d.core.handle(Revoked(d.now, frozenset({KEY_A.public}))))
    assert d.core.names.records == {}  # the key can never come back: its names are free
    assert welcomed(d.recv(INTRUDER, hello(), KEY_B))


def test_several_sessions_of_one_key_share_its_name_and_its_hold() -> None:
    d = with_real_worker(losses_before_hold_back=1)
    assert welcomed(d.recv(OTHER, hello(), KEY_A))
    assert d.core.names.records[NAME].sessions == 2
    d.gone(OTHER)  # one loss holds the name back: the other session of that name too
    assert d.core.workers[REAL].held_until == 5.0
    d.recv(REAL, Disconnect("bye"), KEY_A)
    assert d.core.names.records[NAME].sessions == 0 and NAME in d.core.names.lost  # kept for its loss


def test_a_nameless_worker_does_not_inherit_a_generated_name_another_key_took() -> None:
    """A nameless worker is called unnamed-worker-<prefix>; a peer of another key that named itself so beforehand
    neither refuses it nor holds it back with its own losses."""
    d = Driver(losses_before_hold_back=1)
    assert welcomed(d.recv(INTRUDER, hello("unnamed-worker-2"), KEY_B))  # prefix 1; the next session gets 2
    assert welcomed(d.recv(REAL, hello(""), KEY_A))
    assert d.core.workers[REAL].name == "unnamed-worker-2"
    d.gone(INTRUDER)  # the intruder's name is lost once: held back
    assert d.core.names.records["unnamed-worker-2"].key == KEY_B.public
    assert d.core.workers[REAL].held_until == 0.0
    d.gone(REAL)  # and the nameless worker's losses are not the intruder's name's
    assert d.core.names.records["unnamed-worker-2"].losses == [0.0]


def test_without_keys_a_name_is_shared_as_before() -> None:
    d = Driver(losses_before_hold_back=2)
    assert welcomed(d.recv(REAL, hello()))
    assert welcomed(d.recv(INTRUDER, hello()))
    d.gone(INTRUDER)
    assert welcomed(d.recv(INTRUDER, hello()))
    d.gone(INTRUDER)  # the name's second loss holds back every session of the name, as before
    assert d.core.workers[REAL].held_until == 5.0 and d.core.refused == 0


def test_names_are_remembered_no_longer_than_their_sessions_losses_and_holds() -> None:
    """A storm of names from one key, each lost once: every name is forgotten once out of the window, and the
    names of live sessions go with their sessions."""
    d = Driver()
    for n in range(500):
        peer = b"W|storm|9|%d" % n
        assert welcomed(d.recv(peer, hello(f"storm-{n}"), KEY_B))
        if n % 2:
            d.gone(peer)
        else:
            d.recv(peer, Disconnect("bye"), KEY_B)
    assert len(d.core.names.records) == len(d.core.names.lost) == 250  # only the lost ones are remembered
    d.tick(601.0)
    assert d.core.names.records == {} and d.core.names.lost == {}
