"""Placement arithmetic: water_fill (who gets how many new tasks) and plan_balance (who gives some back)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.core.scheduler.placement import plan_balance, water_fill


# ----------------------------------------------------------------------------------------------- water_fill
@pytest.mark.parametrize(
    ("loads", "capacities", "count", "expected"),
    [
        ([0, 0], [1, 1], 1, [1, 0]),
        ([0, 0, 0], [4, 4, 4], 7, [3, 2, 2]),
        ([3, 0, 1], [4, 4, 4], 4, [0, 3, 1]),  # up to level 3; the tie goes to the least loaded
        ([3, 0, 1], [4, 4, 4], 100, [1, 4, 3]),  # capped by the total spare room
        ([0, 0], [1, 10], 6, [1, 5]),  # a small worker fills up, the big one takes the rest
        ([2, 0], [2, 5], 3, [0, 3]),  # a full worker gets nothing
        ([5], [3], 2, [0]),  # over capacity: nothing, never a negative share
        ([0, 0], [4, 4], 0, [0, 0]),
        ([], [], 5, []),
    ],
)
def test_water_fill_examples(loads: list[int], capacities: list[int], count: int, expected: list[int]) -> None:
    assert water_fill(loads, capacities, count) == expected


def test_water_fill_gives_ties_to_the_least_loaded_first() -> None:
    assert water_fill([1, 0, 1, 0], [9, 9, 9, 9], 2) == [0, 1, 0, 1]
    assert water_fill([1, 0, 1, 0], [9, 9, 9, 9], 3) == [0, 2, 0, 1]


workers = st.integers(min_value=1, max_value=12).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 30), min_size=n, max_size=n),
        st.lists(st.integers(1, 30), min_size=n, max_size=n),
    )
)


@settings(max_examples=300, deadline=None)
@given(workers, st.integers(0, 400))
def test_water_fill_fills_evenly_within_capacities(lc: tuple[list[int], list[int]], count: int) -> None:
    loads, capacities = lc
    give = water_fill(loads, capacities, count)
    spare = [max(0, c - load) for load, c in zip(loads, capacities, strict=True)]
    assert len(give) == len(loads)
    assert all(0 <= g <= s for g, s in zip(give, spare, strict=True))
    assert sum(give) == min(count, sum(spare))
    after = [load + g for load, g in zip(loads, give, strict=True)]
    # levelled: a worker that got a task is at most one above any worker that still had room
    for i, g in enumerate(give):
        if not g:
            continue
        for j in range(len(loads)):
            if after[j] < capacities[j]:
                assert after[i] <= after[j] + 1, (i, j, after)


def test_water_fill_with_a_grain_uses_only_the_least_loaded_workers_it_needs() -> None:
    # 10 tasks, grain 2: max(2, ceil(10 / 2)) = 5 of the 8 workers, the least loaded; 11 tasks: 6 of them
    assert water_fill([0, 3, 0, 1, 0, 0, 2, 0], [9] * 8, 10, grain=2) == [2, 0, 2, 0, 2, 2, 0, 2]
    assert water_fill([0, 3, 0, 1, 0, 0, 2, 0], [9] * 8, 11, grain=2) == [2, 0, 2, 1, 2, 2, 0, 2]
    assert water_fill([0] * 100, [1000] * 100, 4096, grain=64) == [64] * 64 + [0] * 36
    assert water_fill([0] * 100, [10] * 100, 4096, grain=64) == [10] * 100  # too little room: everyone fills up
    assert water_fill([0, 0], [1000, 1000], 4096, grain=64) == [1000, 1000]
    assert water_fill([0, 0], [100_000, 100_000], 4096, grain=64) == [2048, 2048]  # a few workers: split evenly
    assert water_fill([2, 1, 1], [9, 9, 9], 1, grain=64) == [0, 1, 0]  # a lone task: the least loaded, first of ties


@settings(max_examples=300, deadline=None)
@given(workers, st.integers(0, 400), st.integers(1, 8))
def test_water_fill_with_a_grain_levels_the_workers_it_uses(
    lc: tuple[list[int], list[int]], count: int, grain: int
) -> None:
    loads, capacities = lc
    give = water_fill(loads, capacities, count, grain)
    spare = [max(0, c - load) for load, c in zip(loads, capacities, strict=True)]
    assert all(0 <= g <= s for g, s in zip(give, spare, strict=True))
    assert sum(give) == min(count, sum(spare))
    if len(loads) <= grain:  # a fleet of at most `grain` workers: as if all took part
        assert give == water_fill(loads, capacities, count)
    used = [i for i, g in enumerate(give) if g]
    wanted = max(grain, -(-count // grain))
    # more workers than wanted only when the wanted ones are full
    assert len(used) <= wanted or all(g == s for g, s in zip(give, spare, strict=True) if g)
    after = [load + g for load, g in zip(loads, give, strict=True)]
    for i in used:
        for j in used:
            if after[j] < capacities[j]:
                assert after[i] <= after[j] + 1, (i, j, after)  # levelled among those that got tasks
        for j, g in enumerate(give):
            if not g and spare[j]:
                assert loads[j] >= loads[i], (i, j, loads)  # nobody less loaded was left out


# ----------------------------------------------------------------------------------------------- plan_balance
@pytest.mark.parametrize(
    ("loads", "pending", "expected"),
    [
        ([0, 4], [False, False], {1: 2}),
        ([0, 6, 6], [False, False, False], {1: 2, 2: 2}),
        ([0, 3], [False, False], {1: 1}),
        ([0, 1], [False, False], {}),  # one task cannot be split
        ([1, 8], [False, False], {}),  # nobody idle
        ([0, 8], [False, True], {}),  # the busy one has not answered the last request yet
        ([0, 0, 9], [False, False, False], {2: 6}),
        ([0], [False], {}),
        ([], [], {}),
    ],
)
def test_plan_balance_examples(loads: list[int], pending: list[bool], expected: dict[int, int]) -> None:
    assert plan_balance(loads, pending) == expected


def test_plan_balance_asks_no_more_than_the_idle_workers_hold_most_loaded_first() -> None:
    loads, pending = [0, 6, 9, 12], [False] * 4  # mean 6.75: keep 7
    assert plan_balance(loads, pending, [10, 4, 1, 0]) == {3: 5, 2: 2}  # the idle worker holds 10
    assert plan_balance(loads, pending, [3, 4, 1, 0]) == {3: 3}
    assert plan_balance(loads, pending, [0, 4, 1, 0]) == {}  # the idle worker is full (capacity 0)
    assert plan_balance(loads, [False, False, False, True], [10, 4, 1, 0]) == {2: 2}  # pending: skipped


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.booleans(), st.integers(0, 20)), max_size=12), st.booleans())
def test_plan_balance_asks_only_busy_answered_workers_and_leaves_them_a_task(
    workers: list[tuple[int, bool, int]], bounded: bool
) -> None:
    loads = [load for load, _, _ in workers]
    pending = [p for _, p, _ in workers]
    rooms = [room for _, _, room in workers] if bounded else None
    plan = plan_balance(loads, pending, rooms)
    if rooms is not None:  # no more than the idle workers can hold, the most loaded asked first
        assert sum(plan.values()) <= sum(room for load, room in zip(loads, rooms, strict=True) if not load)
        for i in plan:
            assert all(loads[j] <= loads[i] for j in range(len(loads)) if j not in plan and not pending[j])
    if not loads or min(loads) > 0:
        assert plan == {}
    for i, count in plan.items():
        assert not pending[i]
        assert 1 <= count <= loads[i] - 1
        assert loads[i] - count >= sum(loads) / len(loads) - 0.5  # nobody is asked to drop below the mean
