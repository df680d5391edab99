"""Idempotent-keyed tasks in the scheduler core (scaler.core.scheduler.keyed; issue 28): a task sent with the key of a
result kept ends at once with it and does not run; one result is ever delivered for a key; keys live in the namespace
of the client's credentials; the results kept are bounded; a journaled core journals each one before it is sent, and
its replay (and compaction) brings them back. Events in, commands out."""

from __future__ import annotations

from scaler.core.scheduler import SchedulerCore
from scaler.core.scheduler.config import SchedulerConfig
from scaler.core.scheduler.events import JournalEnded, JournalKeyed, PeerKey
from scaler.core.scheduler.keyed import OVERHEAD_BYTES
from scaler.core.scheduler.recovery import kept_entries, live_ids, replay
from scaler.protocol.messages import (
    DispatchTasks,
    Error,
    Heartbeat,
    PeerKind,
    SubmitTasks,
    TaskResults,
    TaskStatus,
)
from scaler.protocol.records import MAX_IDEMPOTENCY_KEY_BYTES
from tests.unit.scheduler_driver import Driver, TaskSpec, of_type, ok, results, submit, tid

C, C2, W = b"c1", b"c2", b"w1"


def keyed(*specs: tuple[TaskSpec, str]) -> SubmitTasks:
    batch = submit(*(spec for spec, _ in specs))
    batch.idempotency_keys = [key for _, key in specs]
    return batch


def delivered(commands: list) -> dict[int, tuple[int, bytes]]:  # type: ignore[type-arg]
    """Each task id a result went out for: its status and payload."""
    return {
        task_id: (status, bytes(payload))  # type: ignore[call-overload]
        for _, message in of_type(commands, TaskResults)
        for task_id, status, payload in zip(message.task_ids, message.statuses, message.payloads)
    }


def dispatched(commands: list) -> list[int]:  # type: ignore[type-arg]
    return [i for _, message in of_type(commands, DispatchTasks) for i in message.task_ids]


def setup(config: SchedulerConfig | None = None) -> tuple[Driver, int, int]:
    d = Driver(config)
    p = d.client(C)
    f = tid(p, 1)
    d.put(C, (f, b"fn"))
    return d, p, f


def test_a_task_sent_with_a_kept_key_gets_that_result_at_once_and_does_not_run() -> None:
    d, p, f = setup()
    d.worker(W, capacity=1)
    first = d.recv(C, keyed(((tid(p, 2), f, [b"a"]), "report")))
    assert dispatched(first) == [tid(p, 2)]
    assert delivered(d.recv(W, ok(tid(p, 2), payload=b"42"))) == {tid(p, 2): (TaskStatus.SUCCESS, b"42")}
    again = d.recv(C, keyed(((tid(p, 3), f, [b"other args"]), "report"), ((tid(p, 4), f, [b"b"]), "")))
    assert delivered(again) == {tid(p, 3): (TaskStatus.SUCCESS, b"42")}
    assert dispatched(again) == [tid(p, 4)]  # the unkeyed one runs; the keyed one did not
    assert d.core.keyed.served == 1 and tid(p, 3) not in d.core.tasks and not d.core.keyed_tasks.get(tid(p, 4))
    d.core.validate()


def test_two_runs_of_one_key_at_once_deliver_the_first_result_twice() -> None:
    d, p, f = setup()
    d.worker(W, capacity=2)
    d.recv(C, keyed(((tid(p, 2), f, [b"a"]), "k"), ((tid(p, 3), f, [b"a"]), "k")))
    got = delivered(d.recv(W, results((tid(p, 3), TaskStatus.SUCCESS, b"first"))))
    got.update(delivered(d.recv(W, results((tid(p, 2), TaskStatus.SUCCESS, b"second")))))
    assert got == {tid(p, 3): (TaskStatus.SUCCESS, b"first"), tid(p, 2): (TaskStatus.SUCCESS, b"first")}
    assert d.core.keyed.items() == [((b"", "k"), b"first")] and not d.core.keyed_tasks


def test_a_failure_is_not_kept_and_the_key_runs_again() -> None:
    d, p, f = setup()
    d.worker(W, capacity=1)
    d.recv(C, keyed(((tid(p, 2), f, [b"a"]), "k")))
    d.recv(W, results((tid(p, 2), TaskStatus.FAILED, b"boom")))
    assert len(d.core.keyed) == 0 and not d.core.keyed_tasks
    assert dispatched(d.recv(C, keyed(((tid(p, 3), f, [b"a"]), "k")))) == [tid(p, 3)]
    d.recv(C, keyed(((tid(p, 4), f, [b"a"]), "cancelled")))
    from scaler.protocol.messages import CancelTasks

    d.recv(C, CancelTasks([tid(p, 4)]))  # ended without a result: its key is let go
    assert tid(p, 4) not in d.core.keyed_tasks
    d.core.validate()


def test_keys_live_in_the_namespace_of_the_clients_credentials() -> None:
    d = Driver()
    alice = PeerKey(PeerKind.CLIENT, "alice", b"A" * 40)
    mallory = PeerKey(PeerKind.CLIENT, "mallory", b"M" * 40)
    pa, pm = d.client(C, key=alice), d.client(C2, key=mallory)
    fa, fm = tid(pa, 1), tid(pm, 1)
    d.recv(C, submit(), alice)
    from scaler.protocol.messages import PutObjects

    d.recv(C, PutObjects([fa], [b"fn"]), alice)
    d.recv(C2, PutObjects([fm], [b"fn"]), mallory)
    d.worker(W, capacity=4)
    d.recv(C, keyed(((tid(pa, 2), fa, [b"x"]), "salary")), alice)
    d.recv(W, ok(tid(pa, 2), payload=b"secret"))
    guess = d.recv(C2, keyed(((tid(pm, 2), fm, [b"x"]), "salary")), mallory)
    assert delivered(guess) == {} and dispatched(guess) == [tid(pm, 2)]  # not answered from alice's result
    assert sorted(name for name, _ in d.core.keyed.items()) == [(b"A" * 40, "salary")]


def test_the_results_kept_are_bounded_and_the_oldest_go_first() -> None:
    payload = b"x" * 1000
    bound = 2 * (1000 + OVERHEAD_BYTES + 4 * 2) + 10  # room for two
    d, p, f = setup(SchedulerConfig(keyed_results_bytes=bound))
    d.worker(W, capacity=1)
    for n, key in enumerate(("k1", "k2", "k3")):
        d.recv(C, keyed(((tid(p, 10 + n), f, [b"a"]), key)))
        d.recv(W, ok(tid(p, 10 + n), payload=payload))
    assert [name[1] for name, _ in d.core.keyed.items()] == ["k2", "k3"] and d.core.keyed.evicted == 1
    assert d.core.keyed.bytes <= bound
    assert dispatched(d.recv(C, keyed(((tid(p, 20), f, [b"a"]), "k1")))) == [tid(p, 20)]  # let go: it runs again
    d.core.validate()


def test_a_client_that_fills_the_store_pushes_out_its_own_results_not_anothers() -> None:
    """One bound for all credentials, but past it the heaviest namespace gives way: mallory's flood of keyed results
    lets go of mallory's oldest, and alice's result stays."""
    payload = b"x" * 1000
    one = 1000 + OVERHEAD_BYTES + 40 + 4 * 2  # a result of 1,000 bytes under a 40-byte namespace and a 2-letter key
    d = Driver(SchedulerConfig(keyed_results_bytes=4 * one + 10))
    alice = PeerKey(PeerKind.CLIENT, "alice", b"A" * 40)
    mallory = PeerKey(PeerKind.CLIENT, "mallory", b"M" * 40)
    pa, pm = d.client(C, key=alice), d.client(C2, key=mallory)
    from scaler.protocol.messages import PutObjects

    d.recv(C, PutObjects([tid(pa, 1)], [b"fn"]), alice)
    d.recv(C2, PutObjects([tid(pm, 1)], [b"fn"]), mallory)
    d.worker(W, capacity=1)
    d.recv(C, keyed(((tid(pa, 2), tid(pa, 1), [b"x"]), "a1")), alice)
    d.recv(W, ok(tid(pa, 2), payload=payload))
    for n in range(10):
        d.recv(C2, keyed(((tid(pm, 10 + n), tid(pm, 1), [b"x"]), f"m{n}")), mallory)
        d.recv(W, ok(tid(pm, 10 + n), payload=payload))
    kept = [name for name, _ in d.core.keyed.items()]
    assert (b"A" * 40, "a1") in kept and len(kept) == 4 and d.core.keyed.evicted == 7
    assert [key for namespace, key in kept if namespace == b"M" * 40] == ["m7", "m8", "m9"]  # its newest three
    d.core.validate()


def test_a_key_over_the_limit_fails_its_task_with_a_clear_error_and_it_does_not_run() -> None:
    d, p, f = setup()
    d.worker(W, capacity=1)
    commands = d.recv(C, keyed(((tid(p, 2), f, [b"a"]), "é" * MAX_IDEMPOTENCY_KEY_BYTES)))
    (status, text), *_ = delivered(commands).values()
    assert status == TaskStatus.FAILED and b"idempotency key" in text and b"over the limit" in text
    assert dispatched(commands) == [] and not of_type(commands, Error) and not d.core.tasks


def test_a_kept_result_serves_the_tasks_waiting_on_a_keyed_task_sent_again() -> None:
    d, p, f = setup()
    d.worker(W, capacity=1)
    d.recv(C, keyed(((tid(p, 2), f, [b"a"]), "base")))
    d.recv(W, ok(tid(p, 2), payload=b"7"))
    # a graph sent again: its keyed node is answered from the kept result, and the node after it is queued at once
    commands = d.recv(C, keyed(((tid(p, 3), f, [b"a"]), "base"), ((tid(p, 4), f, [tid(p, 3)]), "")))
    assert delivered(commands)[tid(p, 3)] == (TaskStatus.SUCCESS, b"7")
    assert dispatched(commands) == [tid(p, 4)]
    d.core.validate()


def journaled_keyed_run() -> tuple[Driver, int, int]:
    d, p, f = setup(SchedulerConfig(journaled=True))
    d.worker(W, capacity=1)
    d.recv(C, keyed(((tid(p, 2), f, [b"a"]), "k")))
    d.recv(C, submit((tid(p, 3), f, [tid(p, 2)])))  # waits on the keyed task
    d.recv(W, ok(tid(p, 2), payload=b"kept"))
    return d, p, f


def test_a_journaled_core_journals_a_kept_result_before_its_end_and_a_replay_brings_it_back() -> None:
    d, p, f = journaled_keyed_run()
    journal = list(d.core.journal)
    at = next(i for i, e in enumerate(journal) if isinstance(e, JournalKeyed))
    assert journal[at] == JournalKeyed(b"", "k", b"kept")
    assert any(isinstance(e, JournalEnded) and tid(p, 2) in e.ids for e in journal[at:])
    core = SchedulerCore(SchedulerConfig(journaled=True))
    replay(core, 1.0, journal)
    core.validate()
    assert core.keyed.items() == [((b"", "k"), b"kept")]
    # the keyed task is not run again for the task waiting on it: that one is queued with the kept result
    assert tid(p, 2) not in core.tasks and tid(p, 3) in core.tasks and not core.reruns
    again = Driver(SchedulerConfig(journaled=True))
    again.core = core
    commands = again.worker(W, capacity=2)
    assert dispatched(commands) == [tid(p, 3)]
    # its client comes back and sends the keyed task again (its result was lost in the restart): answered from the
    # kept result (which its id names, kept for the waiting task), not run
    again.recv(C, Heartbeat(resumed=True, sent=0))
    commands = again.recv(C, keyed(((tid(p, 2), f, [b"a"]), "k")))
    assert delivered(commands) == {tid(p, 2): (TaskStatus.SUCCESS, b"kept")} and dispatched(commands) == []


def test_a_replay_answers_a_keyed_task_the_journal_sent_after_its_key_was_kept() -> None:
    d, p, f = journaled_keyed_run()
    d.recv(C, keyed(((tid(p, 5), f, [b"b"]), "k")))  # answered from the kept result in the crashed core
    core = SchedulerCore(SchedulerConfig(journaled=True))
    replay(core, 1.0, list(d.core.journal))
    assert tid(p, 5) not in core.tasks and core.keyed.served == 1


def test_compaction_keeps_the_last_result_of_each_name_kept_and_drops_the_ones_let_go() -> None:
    bound = 2 * (1 + OVERHEAD_BYTES + 4) + 10
    d, p, f = setup(SchedulerConfig(journaled=True, keyed_results_bytes=bound))
    d.worker(W, capacity=1)
    for n, key in enumerate(("a", "b", "c", "a")):  # "a" is let go, then kept again
        d.recv(C, keyed(((tid(p, 10 + n), f, [b"x"]), key)))
        d.recv(W, ok(tid(p, 10 + n), payload=b"%d" % n))
    entries = list(d.core.journal)
    kept = [entries[i] for i in kept_entries(entries, *live_ids(d.core))]
    assert [(e.key, e.payload) for e in kept if isinstance(e, JournalKeyed)] == [("c", b"2"), ("a", b"3")]
    core = SchedulerCore(SchedulerConfig(journaled=True, keyed_results_bytes=bound))
    replay(core, 1.0, kept)
    assert core.keyed.items() == d.core.keyed.items()
