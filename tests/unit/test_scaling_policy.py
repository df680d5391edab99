"""The scaling policy (core/scheduler/scaling.py): one place decides how many units each worker manager runs; fast
up, drained before down, min/max, tiers, capabilities, units that never connect."""

from __future__ import annotations

import pytest

from scaler.core.scheduler.scaling import (
    TARGET_SECONDS,
    Drain,
    ManagerJoined,
    ManagerSpec,
    ScalingDecision,
    ScalingPolicy,
    StartUnit,
    StopUnit,
    Tick,
    Undrain,
    UnitEnded,
    WorkerJoined,
    WorkerLeft,
)

pytestmark = pytest.mark.timeout(30)

NONE: frozenset[str] = frozenset()
GPU = frozenset({"gpu"})


def tick(
    policy: ScalingPolicy,
    now: float,
    backlog: int = 0,
    held: dict[bytes, int] | None = None,
    need: frozenset[str] = NONE,
) -> list[ScalingDecision]:
    return policy.handle(Tick(now, {need: backlog} if backlog else {}, held or {}))


def starts(decisions: list[ScalingDecision]) -> list[StartUnit]:
    return [d for d in decisions if isinstance(d, StartUnit)]


def connect(
    policy: ScalingPolicy, decisions: list[ScalingDecision], now: float, caps: frozenset[str] = NONE
) -> list[bytes]:
    workers = []
    for d in starts(decisions):
        worker = d.unit.encode()
        policy.feed(WorkerJoined(now, worker, 1, caps, d.unit))
        workers.append(worker)
    return workers


def test_nothing_waits_nothing_starts() -> None:
    policy = ScalingPolicy()
    policy.feed(ManagerJoined(0, ManagerSpec("local", max_units=4)))
    assert tick(policy, 1) == []
    assert tick(policy, 100) == []


def test_waiting_work_asks_at_once_up_to_max_and_never_twice_while_units_are_on_their_way() -> None:
    policy = ScalingPolicy()
    policy.feed(ManagerJoined(0, ManagerSpec("local", max_units=4)))
    first = tick(policy, 1, backlog=10)
    assert [d.manager for d in starts(first)] == ["local"] * 4
    assert len({d.unit for d in starts(first)}) == 4
    for now in range(2, 30):  # a slow queue: none connected yet, none asked again
        assert tick(policy, now, backlog=10) == []


def test_units_on_their_way_count_for_what_they_will_hold() -> None:
    policy = ScalingPolicy()
    policy.feed(ManagerJoined(0, ManagerSpec("slurm", max_units=10, workers_per_unit=2, slots_per_worker=4)))
    assert len(starts(tick(policy, 1, backlog=8))) == 1  # one unit holds 8
    assert len(starts(tick(policy, 2, backlog=20))) == 2  # 20 - 8 on its way: 2 more


def test_workers_started_by_hand_are_counted_before_asking() -> None:
    policy = ScalingPolicy()
    policy.feed(ManagerJoined(0, ManagerSpec("local", max_units=4)))
    policy.feed(WorkerJoined(0, b"by-hand", 3, NONE, None))
    assert tick(policy, 1, backlog=3, held={b"by-hand": 3}) == []
    assert len(starts(tick(policy, 2, backlog=5, held={b"by-hand": 3}))) == 2


def test_an_idle_unit_is_drained_then_stopped_and_min_units_stay() -> None:
    policy = ScalingPolicy()
    policy.feed(ManagerJoined(0, ManagerSpec("local", min_units=1, max_units=3, idle_seconds=5)))
    first = tick(policy, 0, backlog=3)
    assert len(starts(first)) == 3
    workers = connect(policy, first, 1)
    held = {w: 1 for w in workers}
    assert tick(policy, 2, backlog=3, held=held) == []
    assert tick(policy, 3, held={}) == []  # idle since 3
    assert tick(policy, 7, held={}) == []  # 4 s: not yet
    drained = tick(policy, 8, held={})
    assert drained == [Drain("local", drained[0].unit, (workers[2],), "its workers have held no task for 5s")]
    stopped = tick(policy, 9, held={})  # nothing held: stop it; and drain the next
    assert [type(d) for d in stopped] == [StopUnit, Drain]
    assert stopped[0].unit == drained[0].unit and stopped[1] == Drain(
        "local", stopped[1].unit, (workers[1],), drained[0].why
    )
    assert [type(d) for d in tick(policy, 10, held={})] == [StopUnit]
    assert tick(policy, 100, held={}) == []  # min_units 1 stays
    assert policy.status(100)[0]["connected"] == 1


def test_a_draining_unit_that_still_holds_a_task_is_not_stopped_and_work_coming_back_keeps_it() -> None:
    policy = ScalingPolicy()
    policy.feed(ManagerJoined(0, ManagerSpec("local", max_units=1, idle_seconds=1)))
    worker = connect(policy, tick(policy, 0, backlog=1), 0)[0]
    assert [type(d) for d in tick(policy, 2)] == [Drain]
    # a task placed on it just before the drain was applied: it runs to its end
    assert tick(policy, 3, backlog=1, held={worker: 1}) == []
    assert [type(d) for d in tick(policy, 4, backlog=2, held={worker: 1})] == [Undrain]
    assert tick(policy, 5, backlog=1, held={worker: 1}) == []


def test_a_unit_that_never_connects_is_given_up_and_its_manager_asked_again_after_a_back_off() -> None:
    policy = ScalingPolicy()
    policy.feed(ManagerJoined(0, ManagerSpec("slurm", max_units=1, start_timeout_seconds=60)))
    unit = starts(tick(policy, 0, backlog=1))[0].unit
    assert tick(policy, 59, backlog=1) == []
    gave_up = tick(policy, 60, backlog=1)
    assert gave_up == [StopUnit("slurm", unit, "it did not connect within 60s")]
    assert tick(policy, 64, backlog=1) == []  # back-off: 5 s
    again = starts(tick(policy, 65, backlog=1))
    assert len(again) == 1 and again[0].unit != unit
    assert policy.given_up == 1


def test_a_unit_that_ends_before_any_worker_connected_backs_its_manager_off_and_says_why() -> None:
    """A failed start (sbatch refused the job, the pod could not be scheduled, the job died at once) must not make the
    next tick ask again at once, four times a second for ever: it counts as a failure, as a late unit does."""
    policy = ScalingPolicy()
    policy.feed(ManagerJoined(0, ManagerSpec("slurm", max_units=1)))
    unit = starts(tick(policy, 0, backlog=1))[0].unit
    policy.feed(UnitEnded(1, "slurm", unit, "sbatch failed: invalid partition specified: nosuch"))
    assert tick(policy, 1.25, backlog=1) == []
    assert tick(policy, 5.9, backlog=1) == []  # back-off: 5 s from the failure
    assert len(starts(tick(policy, 6, backlog=1))) == 1
    assert policy.given_up == 1
    (row,) = policy.status(6)
    assert row["last_failure"] == "slurm-1: sbatch failed: invalid partition specified: nosuch"


def test_a_unit_whose_workers_came_and_went_ends_without_a_back_off() -> None:
    policy = ScalingPolicy()
    policy.feed(ManagerJoined(0, ManagerSpec("slurm", max_units=1)))
    first = tick(policy, 0, backlog=1)
    worker = connect(policy, first, 0)[0]
    policy.feed(WorkerLeft(5, worker))  # (its worker left first: the unit still had connected once)
    policy.feed(UnitEnded(5, "slurm", first[0].unit, "Slurm job 3 completed"))
    assert len(starts(tick(policy, 5.25, backlog=1))) == 1
    assert policy.given_up == 0


def test_tiers_fill_the_first_and_retire_the_last_first() -> None:
    policy = ScalingPolicy()
    policy.feed(ManagerJoined(0, ManagerSpec("local", max_units=2, idle_seconds=1)))
    policy.feed(ManagerJoined(0, ManagerSpec("cloud", max_units=10, tier=1, idle_seconds=1)))
    first = tick(policy, 0, backlog=5)
    assert [d.manager for d in starts(first)] == ["local", "local", "cloud", "cloud", "cloud"]
    connect(policy, first, 0)
    drains = [d for d in tick(policy, 2) if isinstance(d, Drain)]
    assert [d.manager for d in drains] == ["cloud", "local"]  # one per manager per tick, the last tier first
    assert policy.managers["local"].spec.tier == 0


def test_a_gpu_manager_is_asked_only_for_tasks_that_require_gpu() -> None:
    policy = ScalingPolicy()
    policy.feed(ManagerJoined(0, ManagerSpec("cpu", max_units=4)))
    policy.feed(ManagerJoined(0, ManagerSpec("gpu", max_units=4, capabilities=GPU)))
    assert [d.manager for d in starts(tick(policy, 0, backlog=2))] == ["cpu", "cpu"]
    assert [d.manager for d in starts(tick(policy, 1, backlog=1, need=GPU))] == ["gpu"]
    assert policy.serves(GPU) and not policy.serves(frozenset({"tpu"}))


def test_a_unit_that_ends_on_its_resource_manager_is_replaced_while_work_waits() -> None:
    policy = ScalingPolicy()
    policy.feed(ManagerJoined(0, ManagerSpec("slurm", max_units=1)))
    first = tick(policy, 0, backlog=1)
    worker = connect(policy, first, 0)[0]
    policy.feed(UnitEnded(5, "slurm", first[0].unit, "time limit"))
    policy.feed(WorkerLeft(5, worker))
    assert len(starts(tick(policy, 6, backlog=1))) == 1


def test_a_spec_that_cannot_be_used_is_refused_naming_why() -> None:
    with pytest.raises(ValueError, match="min_units 3 and max_units 2"):
        ScalingPolicy().feed(ManagerJoined(0, ManagerSpec("x", min_units=3, max_units=2)))


def test_room_a_new_unit_has_beyond_one_need_serves_the_others() -> None:
    """One unit of 8 slots holds 3 tasks requiring gpu and fast, and 5 requiring gpu: one unit, not two."""
    policy = ScalingPolicy()
    policy.feed(ManagerJoined(0, ManagerSpec("gpu", max_units=10, slots_per_worker=8, capabilities=GPU | {"fast"})))
    decisions = policy.handle(Tick(0, {GPU | {"fast"}: 3, GPU: 5}, {}))
    assert len(starts(decisions)) == 1


def test_tasks_of_known_run_time_ask_for_the_slots_that_end_them_within_the_target() -> None:
    """10,000 tasks of 1 ms are 10 s of work: one slot ends them within TARGET_SECONDS, not max_units slots."""
    policy = ScalingPolicy()
    policy.feed(ManagerJoined(0, ManagerSpec("local", max_units=8)))
    assert TARGET_SECONDS == 10.0
    assert len(starts(policy.handle(Tick(0, {NONE: 10_000}, {}, {NONE: (10_000, 10.0)})))) == 1
    assert policy.handle(Tick(1, {NONE: 10_000}, {}, {NONE: (10_000, 10.0)})) == []  # one on its way: enough
    assert len(starts(policy.handle(Tick(2, {NONE: 10_000}, {}, {NONE: (10_000, 35.0)})))) == 3  # 35 s: 4 slots


def test_tasks_of_unknown_run_time_count_a_slot_each_and_long_ones_at_most_a_slot_each() -> None:
    policy = ScalingPolicy()
    policy.feed(ManagerJoined(0, ManagerSpec("local", max_units=20)))
    # 6 tasks of unknown run time, 4 known of 0.5 s together: 6 + 1 slots
    assert len(starts(policy.handle(Tick(0, {NONE: 10}, {}, {NONE: (4, 0.5)})))) == 7
    policy = ScalingPolicy()
    policy.feed(ManagerJoined(0, ManagerSpec("local", max_units=20)))
    # 3 tasks of 100 s: 30 s of work each slot could share, but a task runs on one slot: 3, not ceil(300 / 10)
    assert len(starts(policy.handle(Tick(0, {NONE: 3}, {}, {NONE: (3, 300.0)})))) == 3


def test_known_run_times_are_per_need() -> None:
    """Short gpu tasks ask the gpu manager for one unit; the plain tasks, of unknown run time, for a unit each."""
    policy = ScalingPolicy()
    policy.feed(ManagerJoined(0, ManagerSpec("cpu", max_units=8)))
    policy.feed(ManagerJoined(0, ManagerSpec("gpu", max_units=8, capabilities=GPU)))
    decisions = policy.handle(Tick(0, {GPU: 500, NONE: 3}, {}, {GPU: (500, 2.0)}))
    assert sorted(d.manager for d in starts(decisions)) == ["cpu", "cpu", "cpu", "gpu"]
