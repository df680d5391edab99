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


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.booleans()), max_size=12))
def test_plan_balance_asks_only_busy_answered_workers_and_leaves_them_a_task(workers: list[tuple[int, bool]]) -> None:
    loads = [load for load, _ in workers]
    pending = [p for _, p in workers]
    plan = plan_balance(loads, pending)
    if not loads or min(loads) > 0:
        assert plan == {}
    for i, count in plan.items():
        assert not pending[i]
        assert 1 <= count <= loads[i] - 1
        assert loads[i] - count >= sum(loads) / len(loads) - 0.5  # nobody is asked to drop below the mean
