"""A scheduler core restored after a restart (ADR 0023; SchedulerCore.restore_client): a client session the journal
held waits for its client, holds what is for it, resumes on its resumed heartbeat (the echo says `recovered`), and
ignores the ids it already holds when the client sends its unfinished work again. And what a journaled scheduler
tells the shell to journal. Events in, commands out."""

from __future__ import annotations

from scaler.core.scheduler.config import SchedulerConfig
from scaler.core.scheduler.events import JournalSession
from scaler.core.scheduler.tasks import TaskState
from scaler.protocol.messages import (
    Error,
    Heartbeat,
    HeartbeatEcho,
    Hello,
    PeerKind,
    PutObjects,
    Shutdown,
    TaskResults,
    Welcome,
)
from tests.unit.scheduler_driver import Driver, of_type, ok, submit, tid

C, W = b"C|host|1|secret", b"w1"
P = 7  # the restored session's prefix
F, X = tid(P, 1), tid(P, 2)


def t(n: int) -> int:
    return tid(P, 10 + n)


def restored(**settings: object) -> Driver:
    """A core with client C restored (prefix 7) and its journaled messages replayed: function F, object X, tasks
    t(1) and t(2)."""
    d = Driver(SchedulerConfig(journaled=True, **settings))  # type: ignore[arg-type]
    client = d.core.restore_client(d.now, C, "analytics", P)
    assert client.awaiting and client.recovered
    d.recv(C, PutObjects([F, X], [b"fn", b"data"]))
    d.recv(C, submit((t(1), F, [b"a"]), (t(2), F, [b"b"])))
    assert d.core.tasks[t(1)].state == TaskState.QUEUED
    return d


def test_results_for_a_client_not_back_yet_wait_and_go_when_it_resumes() -> None:
    d = restored()
    d.worker(W, capacity=4)  # a worker came back by itself: it runs the restored tasks
    commands = d.recv(W, ok(t(1), t(2)))
    assert of_type(commands, TaskResults) == []  # nothing is sent to a client that is not back
    commands = d.recv(C, Heartbeat(resumed=True, sent=123))  # its connection was made again: it resumes
    [(_, echo)] = of_type(commands, HeartbeatEcho)
    assert echo.resumed and echo.recovered  # (its count is not compared: the scheduler restarted)
    [(peer, results)] = of_type(commands, TaskResults)
    assert peer == C and sorted(results.task_ids) == [t(1), t(2)]
    assert not d.core.clients[C].awaiting


def test_work_sent_again_after_the_restart_is_ignored_where_held_and_taken_where_not() -> None:
    d = restored()
    d.recv(C, Heartbeat(resumed=True, sent=0))
    # the client sends again every unfinished task and every object: what the journal held is ignored, without an
    # error; t(3), whose submit the journal lost, is taken
    commands = d.recv(C, PutObjects([F, X], [b"fn", b"data"]))
    commands += d.recv(C, submit((t(1), F, [b"a"]), (t(2), F, [b"b"]), (t(3), F, [b"c"])))
    assert of_type(commands, Error) == []
    assert sorted(task for task in d.core.tasks if task >> 40 == P) == [t(1), t(2), t(3)]
    assert d.core.functions.by_id[F].submitted == 3  # each counted once
    # outside a restored session, a repeated id is refused as always
    d.client(b"c2")
    other = d.prefixes[b"c2"]
    d.recv(b"c2", PutObjects([tid(other, 1)], [b"fn"]))
    d.recv(b"c2", submit((tid(other, 5), tid(other, 1), [b"a"])))
    [(_, error)] = of_type(d.recv(b"c2", submit((tid(other, 5), tid(other, 1), [b"a"]))), Error)
    assert "already in use" in error.message


def test_a_restored_client_that_never_comes_back_is_let_go_after_the_client_timeout() -> None:
    d = restored(client_timeout_seconds=30.0)
    d.tick(29.0)
    assert C in d.core.clients
    d.tick(31.0)
    assert C not in d.core.clients and not d.core.tasks  # its tasks cancelled, as any silent client's
    assert d.core.journal[-1] == JournalSession(C)  # the shell journals that it ended


def test_restored_prefixes_are_not_handed_out_again() -> None:
    d = restored()
    for n in range(10):
        assert d.client(b"c%d" % n) != P


def test_a_journaled_scheduler_tells_clients_so_and_lists_sessions_opened_and_ended() -> None:
    d = Driver(SchedulerConfig(journaled=True))
    commands = d.recv(b"c1", Hello(PeerKind.CLIENT, "analytics"))
    [(_, welcome)] = of_type(commands, Welcome)
    assert welcome.journaled
    assert d.core.journal == [JournalSession(b"c1", "analytics", welcome.id_prefix, None)]
    d.core.journal.clear()  # (the shell takes them)
    d.worker(W)
    assert d.core.journal == []  # workers are not journaled: they come back by themselves
    [(_, worker_welcome)] = of_type(d.worker(b"w2"), Welcome)
    assert not worker_welcome.journaled
    d.gone(b"c1")
    assert d.core.journal == [JournalSession(b"c1")]
    plain = Driver()
    [(_, welcome)] = of_type(plain.recv(b"c1", Hello(PeerKind.CLIENT, "x")), Welcome)
    assert not welcome.journaled and plain.core.journal == []


def test_a_journaled_scheduler_stopped_by_a_signal_tells_its_clients_it_comes_back_with_their_sessions() -> None:
    d = Driver(SchedulerConfig(journaled=True))
    d.client(b"c1")
    d.core.journal.clear()
    d.core.stop("the scheduler received SIGTERM", workers_stay=True)
    [(_, shutdown)] = of_type(d.core.flush(), Shutdown)
    assert shutdown.workers_stay  # to a client: wait for it, the session stays in the journal
    assert d.core.journal == []  # (not ended: no closed record)
    for journaled, workers_stay in ((True, False), (False, True)):  # the cluster ends; or no journal
        d = Driver(SchedulerConfig(journaled=journaled))
        d.client(b"c1")
        d.core.stop("stop", workers_stay=workers_stay)
        [(_, shutdown)] = of_type(d.core.flush(), Shutdown)
        assert not shutdown.workers_stay
