"""SchedulerCore and hostile or unauthorized peers: keys and roles, revoked keys, rate-limited warnings, session ids
that are reused but never confused, and payload limits. State is built only by feeding events (Driver validates
the core's invariants after each one).
"""

from __future__ import annotations

from scaler.core.limiter import BURST
from scaler.core.scheduler import Command, Forbidden, Log, PeerKey, Received, Revoked, Tick
from scaler.core.scheduler.prefixes import REUSE_PREFIXES_FROM
from scaler.protocol.messages import (
    CancelTasks,
    Disconnect,
    DispatchTasks,
    Error,
    ErrorCode,
    Heartbeat,
    HeartbeatEcho,
    Hello,
    PeerKind,
    PutObjects,
    Refused,
    TaskResults,
    TaskStatus,
    Welcome,
)
from tests.helpers import payload_bytes
from tests.unit.scheduler_driver import Driver, logs, of_type, results, sends, submit, tid

C, C2, W1, W2 = b"c1", b"c2", b"w1", b"w2"
ALICE = PeerKey(PeerKind.CLIENT, "alice", b"A" * 40)
BOB = PeerKey(PeerKind.CLIENT, "bob", b"B" * 40)
GPU = PeerKey(PeerKind.WORKER, "gpu", b"G" * 40)
FN = b"<function>"


def refusals(commands: list[Command]) -> list[str]:
    return [m.reason for _, m in of_type(commands, Refused)]


# ------------------------------------------------------------------------------------------------ keys and roles
def test_a_client_key_cannot_open_a_worker_session() -> None:
    d = Driver()
    commands = d.recv(W1, Hello(PeerKind.WORKER, "w1", queue_capacity=4), ALICE)
    [reason] = refusals(commands)
    assert "'alice' is authorized for clients only" in reason and "cannot be used as a worker" in reason
    assert not d.core.workers and d.core.refused == 1 and d.core.status().refused_peers == 1


def test_a_worker_key_cannot_open_a_client_session_so_cannot_submit() -> None:
    d = Driver()
    [reason] = refusals(d.recv(C, Hello(PeerKind.CLIENT, "c"), GPU))
    assert "authorized for workers only" in reason
    commands = d.recv(C, submit((tid(1, 2), tid(1, 1), [b"x"])), GPU)
    assert of_type(commands, Error) == [(C, Error(ErrorCode.NOT_CONNECTED, "no session: send hello first"))]
    assert not d.core.tasks and not d.core.clients


def test_each_role_with_its_own_key_gets_a_session_that_remembers_the_key() -> None:
    d = Driver()
    d.client(C, key=ALICE)
    d.worker(W1, key=GPU)
    assert d.core.clients[C].key == ALICE.public and d.core.workers[W1].key == GPU.public
    assert [str(m.text) for m in logs(d.recv(C2, Hello(PeerKind.CLIENT, "c2"), BOB))] == [
        "client c2 (key bob) connected"
    ]


def test_a_message_for_a_session_from_a_connection_with_another_key_is_dropped_silently() -> None:
    d = Driver()
    prefix = d.client(C, key=ALICE)
    d.recv(C, PutObjects([tid(prefix, 1)], [FN]), ALICE)
    for intruder in (BOB, None, GPU):
        commands = d.recv(C, submit((tid(prefix, 2), tid(prefix, 1), [b"x"])), intruder)
        assert sends(commands) == []  # no answer: it would go to whoever holds the routing id now
        assert not d.core.tasks
    assert d.core.refused == 3 and C in d.core.clients
    echo = HeartbeatEcho(workers=0, worker_capacity=0, workers_stated=True)  # to a client: the workers it may use
    assert sends(d.recv(C, Heartbeat(), ALICE)) == [(C, echo)]  # the session itself is untouched


def test_a_hello_with_another_key_cannot_take_over_a_session() -> None:
    d = Driver()
    d.client(C, key=ALICE)
    [reason] = refusals(d.recv(C, Hello(PeerKind.CLIENT, "mallory"), BOB))
    assert "another key" in reason
    assert d.core.clients[C].key == ALICE.public and d.core.clients[C].name == "c1"


def test_without_keys_nothing_changes() -> None:
    d = Driver()
    prefix = d.client(C)
    d.recv(C, PutObjects([tid(prefix, 1)], [FN]))
    d.worker(W1)
    commands = d.recv(C, submit((tid(prefix, 2), tid(prefix, 1), [b"x"])))
    assert of_type(commands, DispatchTasks)
    assert d.core.refused == 0


def _keyed_cluster() -> tuple[Driver, int]:
    d = Driver()
    prefix = d.client(C, key=ALICE)
    d.recv(C, PutObjects([tid(prefix, 1)], [FN]), ALICE)
    d.worker(W1, key=GPU)
    d.recv(C, submit((tid(prefix, 2), tid(prefix, 1), [b"x"]), (tid(prefix, 3), tid(prefix, 1), [b"y"])), ALICE)
    assert len(d.core.workers[W1].assigned) == 2
    return d, prefix


def test_a_revoked_client_key_ends_its_session_and_cancels_its_tasks() -> None:
    d, prefix = _keyed_cluster()
    commands = d._after(d.core.handle(Revoked(d.now, frozenset({ALICE.public}))))
    assert "removed from the authorized keys" in refusals(commands)[0]
    assert C not in d.core.clients
    assert of_type(commands, CancelTasks) == [(W1, CancelTasks([tid(prefix, 2), tid(prefix, 3)]))]


def test_a_revoked_worker_key_ends_its_session_and_its_tasks_run_elsewhere() -> None:
    d, prefix = _keyed_cluster()
    d.worker(W2, key=PeerKey(PeerKind.WORKER, "other", b"O" * 40))
    commands = d._after(d.core.handle(Revoked(d.now, frozenset({GPU.public}))))
    assert W1 not in d.core.workers and refusals(commands)
    [(peer, dispatched)] = of_type(commands, DispatchTasks)
    assert peer == W2 and dispatched.task_ids == [tid(prefix, 2), tid(prefix, 3)]
    assert all(task.attempts == 0 for task in d.core.tasks.values())  # not their fault: no attempt counted


def test_a_message_with_a_revoked_key_is_refused_and_ends_its_session() -> None:
    d, _ = _keyed_cluster()
    commands = d._after(d.core.handle(Forbidden(d.now, W1, GPU.public, "its key is no longer authorized")))
    assert refusals(commands) == ["its key is no longer authorized"]
    assert W1 not in d.core.workers and d.core.refused == 1
    # a Forbidden for a key that is not the session's leaves the session alone
    d._after(d.core.handle(Forbidden(d.now, C, BOB.public, "its key is no longer authorized")))
    assert C in d.core.clients


def test_messages_without_a_session_get_a_few_not_connected_answers() -> None:
    d = Driver()
    answered = sum(len(of_type(d.recv(b"x", Heartbeat()), Error)) for _ in range(1000))
    assert answered == BURST and d.core.dropped == 1000


def test_a_hello_storm_from_one_connection_reuses_a_bounded_set_of_prefixes() -> None:
    d = Driver()
    storm = 3 * REUSE_PREFIXES_FROM
    for _ in range(storm):
        d.core.handle(Received(d.now, b"storm", Hello(PeerKind.CLIENT, "x")))
    d.core.validate()
    assert len(d.core.clients) == 1  # one live session per connection
    assert d.core.prefixes.next <= REUSE_PREFIXES_FROM + 2  # fresh prefixes are not used up
    d.client(C)  # and a new client still connects


def test_when_fresh_prefixes_run_out_ended_ones_are_reused() -> None:
    d = Driver()
    d.core.prefixes.last = 3
    for n in range(10):
        peer = f"p{n}".encode()
        prefix = d.client(peer)
        assert 1 <= prefix <= 3
        d.recv(peer, Disconnect("bye"))
    assert d.client(C) in (1, 2, 3)


def test_every_prefix_in_use_gets_a_clear_refusal() -> None:
    d = Driver()
    d.core.prefixes.last = 2
    d.client(C)
    d.client(C2)
    [reason] = refusals(d.recv(b"c3", Hello(PeerKind.CLIENT, "c3")))
    assert "as many sessions open as it can hold" in reason


def test_a_gone_clients_prefix_waits_until_its_last_task_ends() -> None:
    d = Driver()
    d.core.prefixes.last = 2
    prefix = d.client(C)
    d.recv(C, PutObjects([tid(prefix, 1)], [FN]))
    d.worker(W1)  # takes prefix 2, then the fresh ones are used up
    d.recv(C, submit((tid(prefix, 2), tid(prefix, 1), [b"x"])))
    d.gone(C)  # its task is being cancelled on W1: the prefix must not be reused yet
    assert d.core.tasks and [m.reason for _, m in of_type(d.recv(C2, Hello(PeerKind.CLIENT, "c2")), Refused)]
    d.recv(W1, results((tid(prefix, 2), TaskStatus.CANCELED, b"")))
    assert not d.core.tasks
    assert d.client(C2) == prefix  # now nothing of the old session remains
    # the new session's task with the same id is a new task: W1's stale answer for the old one was already consumed
    d.recv(C2, PutObjects([tid(prefix, 1)], [FN]))
    commands = d.recv(C2, submit((tid(prefix, 2), tid(prefix, 1), [b"z"])))
    assert of_type(commands, DispatchTasks) and d.core.tasks[tid(prefix, 2)].client.identity == C2


def test_a_gone_clients_prefix_waits_for_its_objects() -> None:
    d = Driver()
    prefix = d.client(C)
    d.recv(C, PutObjects([tid(prefix, 1)], [FN]))
    d.worker(W1)
    d.recv(C, submit((tid(prefix, 2), tid(prefix, 1), [b"x"])))
    d.gone(C)
    assert prefix not in d.core.prefixes.free
    d.recv(W1, results((tid(prefix, 2), TaskStatus.CANCELED, b"")))
    assert prefix in d.core.prefixes.free and not d.core.objects


# ------------------------------------------------------------------------------------------------ payload limits
def test_the_welcome_states_the_payload_limit() -> None:
    d = Driver(max_payload_bytes=1234)
    commands = d.recv(C, Hello(PeerKind.CLIENT, "c"))
    [(_, welcome)] = of_type(commands, Welcome)
    assert welcome.max_payload_bytes == 1234


def test_tasks_with_a_payload_over_the_limit_are_refused_too_large_and_the_others_run() -> None:
    d = Driver(max_payload_bytes=8)
    prefix = d.client(C)
    d.recv(C, PutObjects([tid(prefix, 1)], [FN[:8]]))
    d.worker(W1)
    big, small = tid(prefix, 2), tid(prefix, 3)
    commands = d.recv(C, submit((big, tid(prefix, 1), [b"123456789"]), (small, tid(prefix, 1), [b"12345678"])))
    [(_, error)] = of_type(commands, Error)
    assert error.code == ErrorCode.TOO_LARGE and error.ids == [big]
    assert "more than 8 bytes" in error.message
    assert list(d.core.tasks) == [small]


def test_objects_over_the_limit_are_refused_too_large() -> None:
    d = Driver(max_payload_bytes=8)
    prefix = d.client(C)
    commands = d.recv(C, PutObjects([tid(prefix, 1), tid(prefix, 2)], [b"x" * 9, b"x" * 8]))
    [(_, error)] = of_type(commands, Error)
    assert error.code == ErrorCode.TOO_LARGE and error.ids == [tid(prefix, 1)]
    assert list(d.core.objects) == [tid(prefix, 2)]


def test_a_result_over_the_limit_fails_its_task_with_a_clear_text() -> None:
    d = Driver(max_payload_bytes=8)
    prefix = d.client(C)
    d.recv(C, PutObjects([tid(prefix, 1)], [b"f"]))
    d.worker(W1)
    d.recv(C, submit((tid(prefix, 2), tid(prefix, 1), [b"x"])))
    commands = d.recv(W1, TaskResults([tid(prefix, 2)], bytes([TaskStatus.SUCCESS]), [b"r" * 9]))
    [(_, result)] = of_type(commands, TaskResults)
    assert result.statuses == bytes([TaskStatus.FAILED])
    assert b"is 9 bytes, more than this scheduler's limit of 8" in payload_bytes(result.payloads[0])


def test_ticks_alone_log_nothing_about_limits() -> None:
    d = Driver()
    assert [c for c in d.core.handle(Tick(100.0)) if isinstance(c, Log)] == []
