"""A scheduler's recovery from its journal (ADR 0023; scaler.core.scheduler.recovery): the entries a journaled core
emitted, fed to a new core, rebuild what was journaled (the sessions still open, their unfinished tasks and their
objects; what ran at a worker is queued again; what went to its client is not brought back), and the entries
compaction keeps rebuild the same again. A crash after any event of a seeded random run, too. Events in, commands
out."""

from __future__ import annotations

import random

import pytest

from scaler.core.scheduler import SchedulerCore
from scaler.core.scheduler.config import SchedulerConfig
from scaler.core.scheduler.events import JournalEnded, JournalEntry, JournalMessage, JournalResult, JournalSession
from scaler.core.scheduler.recovery import kept_entries, live_ids, replay
from scaler.core.scheduler.tasks import TaskState
from scaler.protocol.messages import (
    CancelTasks,
    FreeObjects,
    Heartbeat,
    HeartbeatEcho,
    Hello,
    PeerKind,
    PutObjects,
    TaskResults,
    TaskStatus,
)
from tests.simulation.recovery_check import assert_recovers, snapshot
from tests.unit.scheduler_driver import Driver, TaskSpec, of_type, ok, submit, tid

C, C2, W = b"c1", b"c2", b"w1"
NOW = 100.0


def journaled() -> Driver:
    return Driver(SchedulerConfig(journaled=True))


def recover(entries: list[JournalEntry]) -> tuple[SchedulerCore, list[int]]:
    core = SchedulerCore(SchedulerConfig(journaled=True))
    done = replay(core, NOW, entries)
    core.validate()
    return core, done.kept


def test_unfinished_work_comes_back_and_what_went_to_its_client_does_not() -> None:
    d = journaled()
    p = d.client(C)
    f, x = tid(p, 1), tid(p, 2)
    d.put(C, (f, b"fn"), (x, b"data"))
    specs: list[TaskSpec] = [(tid(p, 10 + n), f, [x, b"%d" % n]) for n in range(6)]
    d.recv(C, submit(*specs))
    d.worker(W, capacity=2)  # takes two of them
    assigned = sorted(d.core.workers[W].assigned)
    d.recv(W, ok(assigned[0]))  # one ended and went to its client
    d.recv(C, CancelTasks([tid(p, 15)]))  # one cancelled while queued
    core, kept = recover(list(d.core.journal))
    assert_recovers(core, d.core)
    after = snapshot(core)
    ids = [t[0] for t in after["tasks"]]
    assert assigned[0] not in ids and tid(p, 15) not in ids and assigned[1] in ids
    assert all(core.tasks[i].state == TaskState.QUEUED for i in ids)
    assert core.clients[C].awaiting and core.clients[C].recovered
    # compaction: the kept entries rebuild the same again
    again, _ = recover([d.core.journal[i] for i in kept])
    assert snapshot(again) == after


def test_a_session_that_ended_is_not_brought_back() -> None:
    d = journaled()
    p = d.client(C)
    d.put(C, (tid(p, 1), b"fn"))
    d.recv(C, submit((tid(p, 2), tid(p, 1), [b"a"])))
    d.gone(C)
    d.client(C2)
    core, kept = recover(list(d.core.journal))
    assert list(core.clients) == [C2] and not core.tasks and not core.objects
    assert [type(d.core.journal[i]) for i in kept] == [JournalSession]


def test_a_result_held_for_a_client_not_back_is_not_computed_again_and_goes_first_when_it_resumes() -> None:
    d = journaled()
    p = d.client(C)
    f = tid(p, 1)
    d.put(C, (f, b"fn"))
    d.recv(C, submit((tid(p, 2), f, [b"a"]), (tid(p, 3), f, [b"b"])))
    core, _ = recover(list(d.core.journal))  # the first restart: the client is not back yet
    second = Driver(SchedulerConfig(journaled=True))
    second.core = core
    second.worker(W, capacity=1)
    second.worker(b"w2", capacity=1)
    ran = sorted(core.workers[W].assigned) + sorted(core.workers[b"w2"].assigned)
    second.recv(W, ok(*core.workers[W].assigned))
    held = core.clients[C].held
    assert [r.task_ids for r in held] == [[ran[0]]] and isinstance(core.journal[-1], JournalResult)
    # a second restart before the client comes back: the held result is held again, its task not queued again
    entries = list(d.core.journal) + list(core.journal)
    third, kept = recover(entries)
    assert ran[0] not in third.tasks and sorted(third.tasks) == [ran[1]]
    assert [r.task_ids for r in third.clients[C].held] == [[ran[0]]]
    assert any(isinstance(entries[i], JournalResult) for i in kept)
    # it resumes: the held result goes before the echo that has it send its unfinished work again
    resumed = Driver(SchedulerConfig(journaled=True))
    resumed.core = third
    commands = resumed.recv(C, Heartbeat(resumed=True, sent=0))
    kinds = [type(m) for _, m in of_type(commands, object)]
    assert kinds.index(TaskResults) < kinds.index(HeartbeatEcho)
    assert third.journal[-1] == JournalEnded(C, [ran[0]], bytes([TaskStatus.SUCCESS])) and not third.clients[C].held


def test_a_task_whose_result_went_to_its_client_runs_again_for_a_task_still_waiting_on_it_silently() -> None:
    d = journaled()
    p = d.client(C)
    f, a, b = tid(p, 1), tid(p, 2), tid(p, 3)
    d.put(C, (f, b"fn"))
    d.recv(C, submit((a, f, [b"x"])))
    d.recv(C, submit((b, f, [a])))  # b waits on a
    d.worker(W, capacity=1)
    d.recv(W, ok(a))  # a's result went to the client, and is kept (as an object) for b
    assert b in d.core.tasks and a not in d.core.tasks
    core, kept = recover(list(d.core.journal))
    assert core.tasks[a].state == TaskState.QUEUED and core.tasks[b].state == TaskState.WAITING
    again = Driver(SchedulerConfig(journaled=True))
    again.core = core
    again.worker(W, capacity=1)
    commands = again.recv(W, ok(a))  # a ran again: its result is not sent again (the client has it)
    assert [m.task_ids for _, m in of_type(commands, TaskResults)] == []
    assert core.tasks[b].state in (TaskState.QUEUED, TaskState.ASSIGNED)
    assert snapshot(recover([d.core.journal[i] for i in kept])[0]) == snapshot(recover(list(d.core.journal))[0])


def test_entries_name_their_session_and_work_comes_as_it_was_taken() -> None:
    d = journaled()
    p = d.client(C)
    raw = [b"header", b"fn"]
    put = PutObjects([tid(p, 1)], [b"fn"])
    d.core.journal.clear()
    from scaler.core.scheduler.events import Received

    d._after(d.core.handle(Received(d.now, C, put, None, raw)))
    d.recv(C, FreeObjects([tid(p, 1)]))
    d.recv(C, Heartbeat())  # not work: not journaled
    assert d.core.journal == [JournalMessage(C, put, raw), JournalMessage(C, FreeObjects([tid(p, 1)]))]
    plain = Driver()
    plain.client(C)
    plain.put(C, (tid(plain.prefixes[C], 1), b"fn"))
    assert plain.core.journal == []


class RandomRun:
    """Clients and workers of a journaled core doing random things, seeded: one step() is one event."""

    OPS = ("put", "submit", "graph", "cancel", "free", "results", "lost", "worker", "client", "gone")

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.d = journaled()
        self.counters: dict[bytes, list[int]] = {}  # client -> [prefix, ids minted]
        self.objects: dict[bytes, list[int]] = {}  # client -> its live objects (the first: its function)
        self.tasks: dict[bytes, list[int]] = {}
        self.workers: list[bytes] = []
        self.peers = 0

    def new_id(self, peer: bytes) -> int:
        self.counters[peer][1] += 1
        return tid(*self.counters[peer])

    def step(self) -> str:
        op = self.rng.choice(self.OPS)
        live = [c for c in self.counters if c in self.d.core.clients]
        if op == "client" or not live:
            self.peers += 1
            peer = b"c%d" % self.peers
            self.counters[peer] = [self.d.client(peer), 0]
            self.objects[peer], self.tasks[peer] = [self.new_id(peer)], []
            self.d.put(peer, (self.objects[peer][0], b"fn"))
            return "client"
        peer = self.rng.choice(live)
        if op in ("put", "submit", "graph", "cancel", "free"):
            getattr(self, op if op != "graph" else "submit")(peer, op == "graph")
        elif op == "results":
            for worker in [w for w in self.workers if w in self.d.core.workers]:
                held = list(self.d.core.workers[worker].assigned)
                if held:
                    picked = self.rng.sample(held, self.rng.randint(1, len(held)))
                    self.d.recv(worker, ok(*picked, payload=b"r%d" % self.rng.randrange(100)))
        elif op == "lost" and self.workers:
            self.d.gone(self.workers.pop(self.rng.randrange(len(self.workers))))
        elif op == "worker":
            self.peers += 1
            self.workers.append(b"w%d" % self.peers)
            self.d.worker(self.workers[-1], capacity=self.rng.randint(1, 3))
        elif op == "gone" and self.rng.random() < 0.3:
            self.d.gone(peer)
        return op

    def put(self, peer: bytes, _: bool) -> None:
        oid = self.new_id(peer)
        self.d.put(peer, (oid, b"o%d" % oid))
        self.objects[peer].append(oid)

    def submit(self, peer: bytes, graph: bool) -> None:
        specs = []
        for _ in range(self.rng.randint(1, 4)):
            args: list[int | bytes] = [b"v"]
            if graph and self.tasks[peer] and self.rng.random() < 0.7:
                args.append(self.rng.choice(self.tasks[peer]))
            if len(self.objects[peer]) > 1 and self.rng.random() < 0.4:
                args.append(self.rng.choice(self.objects[peer][1:]))
            specs.append((self.new_id(peer), self.objects[peer][0], args))
            self.tasks[peer].append(specs[-1][0])
        batch = submit(*specs)
        if self.rng.random() < 0.4:  # idempotent-keyed tasks, from a few keys (some kept, some sent again)
            batch.idempotency_keys = [self.rng.choice(("", "k1", "k2", "k3")) for _ in specs]
        self.d.recv(peer, batch)

    def cancel(self, peer: bytes, _: bool) -> None:
        if self.tasks[peer]:
            self.d.recv(peer, CancelTasks(self.rng.sample(self.tasks[peer], min(2, len(self.tasks[peer])))))

    def free(self, peer: bytes, _: bool) -> None:
        if len(self.objects[peer]) > 1:
            oid = self.rng.choice(self.objects[peer][1:])
            self.objects[peer].remove(oid)
            self.d.recv(peer, FreeObjects([oid]))


@pytest.mark.parametrize("seed", range(1, 13))
def test_a_crash_after_any_event_of_a_random_run_recovers_what_was_journaled(seed: int) -> None:
    """A seeded random run of clients and workers; after every event, the journal so far is replayed into a new core
    and compared with the crashed one (assert_recovers), and the compacted journal (at start, and while serving)
    rebuilds the same."""
    run = RandomRun(seed)
    for step in range(120):
        op = run.step()
        entries = list(run.d.core.journal)
        core, kept = recover(entries)
        assert_recovers(core, run.d.core, f"step {step} ({op})")
        # the shell writes the kept entries, then what the replay journaled (results it held for clients not back)
        compacted, _ = recover([entries[i] for i in kept] + core.journal)
        assert snapshot(compacted) == snapshot(core), f"step {step}: compaction changed the state"
        # compaction while serving: the entries the live core still needs rebuild what all of them do
        served = kept_entries(entries, *live_ids(run.d.core))
        assert snapshot(recover([entries[i] for i in served])[0]) == snapshot(core), f"step {step}: served"


def test_replay_ignores_a_hello_it_never_sees() -> None:
    # (the journal holds sessions, not hellos: a hello is never replayed)
    d = journaled()
    d.recv(C, Hello(PeerKind.CLIENT, "x"))
    assert all(not isinstance(e, JournalMessage) for e in d.core.journal)


def test_a_resend_that_crossed_its_tasks_result_in_one_flush_is_journaled_after_that_result() -> None:
    """A task ends (its result in the client's outbox) and, read in the same flush, its client's resend after a
    restart makes it anew (a new run: at least once). The journal must say the end came first, or a replay takes the
    resend as one of a task it holds (ignored), then ends it: the new run would be lost."""
    from scaler.core.scheduler.events import Received

    d = journaled()
    p = d.client(C)
    f, t = tid(p, 1), tid(p, 2)
    d.put(C, (f, b"fn"))
    d.recv(C, submit((t, f, [b"a"])))
    core, _ = recover(list(d.core.journal))  # a restart: the task is queued again, its client not back yet
    live = Driver(SchedulerConfig(journaled=True))
    live.core = core
    entries = list(d.core.journal)
    live.worker(W, capacity=1)
    live.recv(C, Heartbeat(resumed=True, sent=0))
    assert core.tasks[t].worker is not None
    core.feed(Received(NOW, W, ok(t)))  # its result, and the resend, read in one flush
    core.feed(Received(NOW, C, submit((t, f, [b"a"]))))
    core.flush()
    assert t in core.tasks  # made anew by the resend
    entries += core.journal
    again, _ = recover(entries)
    assert_recovers(again, core, journal=entries)
    assert t in again.tasks
