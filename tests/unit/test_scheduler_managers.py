"""Worker managers in the scheduler's core (core/scheduler/managers.py): sessions, reports, the scaling policy's
decisions carried out (scaleUnits, draining workers), and what explain() says. Events in, commands out."""

from __future__ import annotations

import math
from typing import Any

import pytest

from scaler.core.scheduler import Command, Tick, views
from scaler.core.scheduler.tasks import TaskState
from scaler.protocol.messages import (
    MAX_EXPLAINED,
    BalanceRequest,
    BalanceResponse,
    Error,
    ErrorCode,
    ExplainTasks,
    Heartbeat,
    Hello,
    ManagerReport,
    PeerKind,
    Refused,
    ScaleUnits,
    SubmitTasks,
    TaskExplanations,
    TaskResults,
    TasksStarted,
    TaskStatus,
    Welcome,
    decode,
    encode,
)
from tests.unit.scheduler_driver import Driver, of_type, ok, sends, submit, tid

C, M, W1, W2 = b"c1", b"m1", b"w1", b"w2"
P = 1
F = tid(P, 1)
FN = b"<function>"
PY = "payload=python"


def t(n: int) -> int:
    return tid(P, n + 1)


def tasks(*numbers: int) -> SubmitTasks:
    return submit(*((t(n), F, [b"x"]) for n in numbers))


def requiring(batch: SubmitTasks, *requirements: list[str]) -> SubmitTasks:
    batch.requirements = list(requirements)
    batch.requirement_index = None
    return batch


def report(max_units: int = 4, idle_ms: int = 5_000, **fields: object) -> ManagerReport:
    return ManagerReport(max_units=max_units, idle_ms=idle_ms, start_timeout_ms=60_000, **fields)  # type: ignore[arg-type]


def with_manager(name: str = "local", capabilities: tuple[str, ...] = (PY,), **settings: Any) -> Driver:
    d = Driver(**settings)
    assert d.client(C) == P
    d.put(C, (F, FN))
    commands = d.recv(M, Hello(PeerKind.MANAGER, name, capabilities=list(capabilities)))
    [(peer, welcome)] = of_type(commands, Welcome)
    assert peer == M and welcome.id_prefix == 0  # a manager mints no ids
    d.recv(M, report())
    return d


def scale(commands: list[Command]) -> list[ScaleUnits]:
    return [m for peer, m in of_type(commands, ScaleUnits) if peer == M]


def unit_worker(d: Driver, peer: bytes, unit: str, capabilities: tuple[str, ...] = (PY,)) -> list[Command]:
    hello = Hello(PeerKind.WORKER, peer.decode(), queue_capacity=2, capabilities=list(capabilities), unit=unit)
    return d.recv(peer, hello)


def test_waiting_work_asks_for_units_at_the_next_scaling_tick_counting_those_on_their_way() -> None:
    d = with_manager()
    assert scale(d.tick(0.3)) == []  # no work: no unit (min 0)
    d.recv(C, tasks(1, 2, 3))
    [order] = scale(d.tick(0.6))
    assert order.start == ["local-1", "local-2", "local-3"] and order.stop == []
    assert "3 tasks wait for room" in order.reason
    assert scale(d.tick(0.9)) == []  # asked already: not again while they start
    explained = d.core.explain(t(1))
    assert explained.endswith("worker manager local requested 3 units 0s ago, 0 connected"), explained


def test_a_unit_s_workers_get_tasks_then_idle_units_are_drained_and_stopped_never_below_min() -> None:
    d = with_manager()
    d.recv(C, tasks(1))
    [order] = scale(d.tick(0.3))
    assert order.start == ["local-1"]
    unit_worker(d, W1, "local-1")
    assert d.core.workers[W1].assigned  # the task went to the unit's worker
    d.tick(0.6)
    d.recv(W1, ok(t(1)))  # busy until 0.6 at least: the next tick sees it ended a task
    drained_at = stopped_at = None
    now = 0.6
    while stopped_at is None and now < 20:
        now = round(now + 0.25, 2)
        orders = scale(d.tick(now))
        if drained_at is None and d.core.workers[W1].held_until == math.inf:
            drained_at = now
        if orders:
            assert orders == [ScaleUnits([], ["local-1"], "stop local-1: drained: its workers hold no task")]
            stopped_at = now
    assert drained_at is not None and stopped_at is not None
    assert 0.85 + 5 <= drained_at <= 0.85 + 5 + 0.5, drained_at  # idle from the tick after its last task: 5 s
    assert stopped_at - drained_at <= 0.5


def test_work_that_comes_back_while_a_unit_drains_keeps_it() -> None:
    d = with_manager()
    d.recv(C, tasks(1))
    d.tick(0.3)
    unit_worker(d, W1, "local-1")
    d.recv(W1, ok(t(1)))
    now = 0.3
    while d.core.workers[W1].held_until != math.inf:  # until it is drained
        now = round(now + 0.25, 2)
        d.tick(now)
        assert now < 10
    d.recv(C, tasks(2))
    assert not d.core.workers[W1].assigned  # a draining worker gets nothing
    commands = d.tick(now + 0.25)  # undrained rather than a new unit asked for
    assert scale(commands) == []
    assert d.core.workers[W1].held_until == 0.0
    assert t(2) in d.core.workers[W1].assigned


def test_a_draining_worker_is_asked_for_the_tasks_it_holds_and_has_not_started() -> None:
    d = with_manager()
    d.recv(C, tasks(1))
    d.tick(0.3)
    unit_worker(d, W1, "local-1")
    d.recv(C, tasks(2, 3))
    d.recv(W1, TasksStarted([t(1)]))
    drain = d.core.managers
    commands = sends(d.core.handle(_drain_now(d)))
    assert (W1, BalanceRequest([t(2)])) in commands  # (capacity 2: t(3) waits in the scheduler)
    d.recv(W1, BalanceResponse([t(2)]))
    assert list(d.core.workers[W1].assigned) == [t(1)]  # the one running finishes there
    assert drain.draining == {W1: "local-1"}


def _drain_now(d: Driver) -> Tick:
    """The policy's Drain of unit local-1 (as if idle), fed through the core's normal tick path."""
    from scaler.core.scheduler.scaling import Drain

    d.core.managers.policy._out.append(Drain("local", "local-1", (W1,), "test"))
    d.now += 0.3
    return Tick(d.now)


def test_a_task_only_a_managers_workers_could_run_waits_for_them_instead_of_failing() -> None:
    d = with_manager("gpus", capabilities=(PY, "gpu"), capability_grace_seconds=1.0)
    d.worker(W2, capabilities=[PY])  # a worker without gpu: the task cannot run anywhere now
    d.recv(C, requiring(tasks(1), [PY, "gpu"]))
    [order] = scale(d.tick(0.3))
    assert order.start == ["gpus-1"] and "requiring gpu, payload=python" in order.reason
    assert of_type(d.tick(5.0), TaskResults) == []  # past the grace period: still waiting
    unit_worker(d, W1, "gpus-1", (PY, "gpu"))
    assert t(1) in d.core.workers[W1].assigned


def test_a_gpu_manager_is_not_asked_for_tasks_any_worker_runs() -> None:
    d = with_manager("gpus", capabilities=(PY, "gpu"))
    d.recv(C, tasks(1))
    assert scale(d.tick(0.3)) == []


def test_without_a_manager_that_could_help_the_task_still_fails_after_the_grace_period() -> None:
    d = with_manager("cpus", capabilities=(PY,), capability_grace_seconds=1.0)
    d.worker(W2, capabilities=[PY])
    d.recv(C, requiring(tasks(1), [PY, "gpu"]))
    d.tick(0.5)
    [(_, result)] = of_type(d.tick(1.6), TaskResults)
    assert result.statuses == bytes([TaskStatus.FAILED])


def test_bad_reports_and_messages_are_refused_and_change_nothing() -> None:
    d = with_manager()
    before = d.core.managers.policy.managers["local"].spec
    [(_, error)] = of_type(d.recv(M, ManagerReport(min_units=3, max_units=2)), Error)
    assert error.code == ErrorCode.BAD_REQUEST and "min_units 3 and max_units 2" in error.message
    [(_, error)] = of_type(d.recv(M, report(max_units=10**9)), Error)
    assert "more than" in error.message
    assert d.core.managers.policy.managers["local"].spec == before
    [(_, error)] = of_type(d.recv(M, tasks(9)), Error)
    assert error.message == "a worker manager may not send submitTasks"
    [(_, error)] = of_type(d.recv(C, report()), Error)
    assert error.code == ErrorCode.BAD_REQUEST  # a client may not report units
    [(_, refused)] = of_type(d.recv(b"m2", Hello(PeerKind.MANAGER, "local")), Refused)
    assert "named 'local' is connected already" in refused.reason
    [(_, refused)] = of_type(d.recv(b"m3", Hello(PeerKind.MANAGER, "")), Refused)
    assert "needs a name" in refused.reason


def test_a_silent_manager_is_forgotten_and_its_units_workers_stay_as_ordinary_workers() -> None:
    d = with_manager(worker_timeout_seconds=3.0)
    d.recv(C, tasks(1))
    d.tick(0.3)
    unit_worker(d, W1, "local-1")
    d.recv(W1, ok(t(1)))
    d.core.workers[W1].last_seen = 100.0  # (the worker keeps beating; the manager does not)
    d.tick(3.5)
    assert d.core.managers.sessions == {} and d.core.managers.policy.managers == {}
    assert W1 in d.core.workers
    d.recv(M, Hello(PeerKind.MANAGER, "local", capabilities=[PY]))  # it comes back, running local-1 still
    d.recv(M, report(units=["local-1"]))
    assert d.core.managers.policy.units["local-1"].workers == {W1}


def test_a_unit_the_manager_says_ended_is_forgotten() -> None:
    d = with_manager()
    d.recv(C, tasks(1))
    d.tick(0.3)
    d.recv(M, report(units=[], ended=["local-1"], reason="local-9: killed by SIGKILL; local-1: exit code 1"))
    assert "local-1" not in d.core.managers.policy.units
    assert scale(d.tick(0.6)) == []  # it never connected: a failed start, asked again after a back-off (5 s)
    explained = d.core.explain(t(1))
    assert "its last unit failed to start: local-1: exit code 1; asked again in 5s" in explained, explained
    [order] = scale(d.tick(5.5))  # the task still waits: asked again
    assert order.start == ["local-2"]


def test_a_client_asks_why_its_tasks_wait_and_gets_one_text_each_in_order_and_only_about_its_own() -> None:
    d = with_manager()
    d.recv(C, tasks(1, 2))
    d.tick(0.3)  # two units asked for
    d.tick(2.4)
    [(peer, answer)] = of_type(d.recv(C, ExplainTasks([t(2), t(99), t(1)])), TaskExplanations)
    assert peer == C and answer.task_ids == [t(2), t(99), t(1)]
    waiting = "is queued: no worker is connected; worker manager local requested 2 units 2s ago, 0 connected"
    assert answer.texts == [
        f"task {t(2):#x} {waiting}",
        f"task {t(99):#x} is not in the scheduler (never submitted, or already ended)",
        f"task {t(1):#x} {waiting}",
    ]
    d.client(b"c2")  # another client learns nothing of c1's tasks
    [(_, other)] = of_type(d.recv(b"c2", ExplainTasks([t(1)])), TaskExplanations)
    assert other.texts == [f"task {t(1):#x} is not in the scheduler (never submitted, or already ended)"]
    [(_, error)] = of_type(d.recv(C, ExplainTasks([t(1)] * (MAX_EXPLAINED + 1))), Error)  # too many: refused
    assert error.code == ErrorCode.BAD_REQUEST and f"at most {MAX_EXPLAINED}" in error.message
    assert of_type(d.recv(C, ExplainTasks([])), TaskExplanations) == [(C, TaskExplanations([], []))]
    assert d.core.tasks[t(1)].state == TaskState.QUEUED  # nothing changed by asking


def test_the_status_shows_managers_their_units_the_waiting_tasks_and_the_scale_events() -> None:
    d = with_manager()
    d.recv(C, requiring(tasks(1, 2, 3), [PY]))
    d.tick(0.3)
    d.tick(1.8)
    status = views.status(d.core)
    [row] = status.managers
    assert (row.name, row.capabilities, row.min_units, row.max_units) == ("local", [PY], 0, 4)
    assert (row.connected, row.draining, row.pending, row.oldest_pending_ms) == (0, 0, 3, 1500)
    assert (row.failures, row.last_failure, row.retry_in_ms) == (0, "", 0)
    [group] = status.waiting
    assert group.capabilities == [PY] and group.tasks == 3
    assert group.reason == "no worker is connected; worker manager local requested 3 units 2s ago, 0 connected"
    assert (status.units_started, status.units_stopped, status.units_failed) == (3, 0, 0)
    unit_worker(d, W1, "local-1")  # holds 2 of the 3: one still waits
    d.tick(2.1)
    status = views.status(d.core)
    assert (status.managers[0].connected, status.managers[0].pending) == (1, 2)
    assert [(g.tasks, g.reason.split(";")[0]) for g in status.waiting] == [
        (1, "every worker's queue is full (1 workers)")
    ]
    for now in range(3, 63):  # the two other units never connect: given up after start_timeout (60 s)
        d.recv(M, Heartbeat())
        d.recv(W1, Heartbeat())
        d.tick(float(now))
    status = views.status(d.core)
    assert (status.units_started, status.units_stopped, status.units_failed) == (3, 2, 2)
    assert status.managers[0].failures == 2 and status.managers[0].retry_in_ms > 0
    assert "did not connect within 60s" in status.managers[0].last_failure
    assert decode(encode(status)) == status


def test_a_backlog_of_a_function_whose_tasks_are_short_asks_for_no_unit_beyond_the_one_it_has() -> None:
    """Its first task took 1 ms on its worker: 1,000 more are a second of work, which local-1 ends alone (the scaling
    policy's TARGET_SECONDS), not 3 more units (of max 4)."""
    d = with_manager()
    d.recv(C, tasks(1))
    d.tick(0.3)
    unit_worker(d, W1, "local-1")
    d.now = 0.301
    d.recv(W1, ok(t(1)))
    assert d.core.function_stats(F).expected_us == pytest.approx(1_000)
    d.recv(C, tasks(*range(2, 1_002)))
    assert scale(d.tick(0.6)) == []
    d.recv(C, tasks(*range(1_002, 32_002)))  # 31 s of work: 4 slots
    [order] = scale(d.tick(0.9))
    assert order.start == ["local-2", "local-3", "local-4"]
