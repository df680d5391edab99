"""FairQueue: per-owner order kept, owners served in turns, nothing lost; checked against a plain model."""

from __future__ import annotations

import functools
from collections import deque
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.core.fair import FairQueue, owner_of_task
from scaler.protocol.messages import ID_PREFIX_SHIFT


def owner(item: tuple[str, int]) -> str:
    return item[0]


def test_owners_take_turns_and_keep_their_own_order() -> None:
    q: FairQueue[tuple[str, int]] = FairQueue(owner)
    for i in range(5):
        q.append(("a", i))
    q.append(("b", 0))
    q.append(("c", 0))
    q.append(("b", 1))
    taken = [q.popleft() for _ in range(len(q))]
    assert taken == [("a", 0), ("b", 0), ("c", 0), ("a", 1), ("b", 1), ("a", 2), ("a", 3), ("a", 4)]
    assert not q and len(q) == 0 and q.owners() == 0
    with pytest.raises(IndexError):
        q.popleft()


def test_a_latecomer_is_served_within_one_round() -> None:
    q: FairQueue[tuple[str, int]] = FairQueue(owner)
    for i in range(1000):
        q.append(("big", i))
    for _ in range(10):
        q.popleft()
    q.append(("small", 0))
    assert [q.popleft() for _ in range(2)] == [("big", 10), ("small", 0)]


def test_items_put_back_at_the_front_come_next_in_their_order() -> None:
    q: FairQueue[tuple[str, int]] = FairQueue(owner)
    for item in [("a", 2), ("b", 0), ("a", 3)]:
        q.append(item)
    q.extendleft([("b", -1), ("a", 0), ("a", 1)])  # given back: ahead of everything, in this order
    assert q.popleft() == ("b", -1)  # the first item put back
    assert [q.popleft() for _ in range(len(q))] == [("a", 0), ("b", 0), ("a", 1), ("a", 2), ("a", 3)]
    q.append(("x", 0))
    q.appendleft(("y", 0))
    q.appendleft(("x", -1))
    assert [q.popleft() for _ in range(3)] == [("x", -1), ("y", 0), ("x", 0)]


def test_iteration_clear_and_the_owner_of_a_task_id() -> None:
    q: FairQueue[tuple[str, int]] = FairQueue(owner)
    items = [("a", 0), ("b", 0), ("a", 1)]
    for item in items:
        q.append(item)
    assert sorted(q) == sorted(items) and len(q) == 3 and "3 items of 2 owners" in repr(q)
    q.clear()
    assert list(q) == [] and not q
    assert owner_of_task((7 << ID_PREFIX_SHIFT) | 12345) == 7


operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.sampled_from("abcd")),
        st.tuples(st.just("appendleft"), st.sampled_from("abcd")),
        st.tuples(st.just("pop"), st.just("")),
    ),
    max_size=200,
)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_against_a_model(ops: list[tuple[str, str]]) -> None:
    """Per owner, a FairQueue is a deque; across owners, while an owner has items, no other owner is served twice
    before it (unless appendleft put an item back at the front)."""
    q: FairQueue[tuple[str, int]] = FairQueue(owner)
    model: dict[str, deque[tuple[str, int]]] = {}
    served_since: dict[str, dict[str, int]] = {}  # owner with items -> how often each other owner was served since
    jumped = False
    counter = 0
    for op, who in ops:
        counter += 1
        if op in ("append", "appendleft"):
            if who not in model:
                model[who] = deque()
                served_since[who] = {}
            if op == "append":
                q.append((who, counter))
                model[who].append((who, counter))
            else:
                q.appendleft((who, counter))
                model[who].appendleft((who, counter))
                jumped = True
        elif q:
            item = q.popleft()
            served = item[0]
            assert item == model[served].popleft()  # per owner: FIFO, items put back first
            for other, counts in served_since.items():
                if other != served:
                    counts[served] = counts.get(served, 0) + 1
                    assert jumped or counts[served] <= 1, (other, served, counts)
            served_since[served] = {}
            if not model[served]:
                del model[served], served_since[served]
        assert len(q) == sum(len(lane) for lane in model.values())
        assert q.owners() == len(model)
    assert sorted(q) == sorted(item for lane in model.values() for item in lane)


def cost_of(item: tuple[str, int]) -> float:
    return 1000.0 if item[0] == "long" else 1.0


def test_with_a_cost_owners_take_turns_by_time_not_by_item() -> None:
    """Issue 25: an owner of tiny items is not held to one item per long item of another."""
    q: FairQueue[tuple[str, int]] = FairQueue(owner, cost=cost_of)
    for i in range(5):
        q.append(("long", i))
    q.append(("tiny", 0))
    for i in range(1, 300):
        q.append(("tiny", i))
    taken = [q.popleft() for _ in range(len(q))]
    assert taken[:2] == [("long", 0), ("tiny", 0)]  # level at first: in turn order
    assert taken[2:301] == [("tiny", i) for i in range(1, 300)]  # then tiny until it has used as much as long
    assert taken[301:] == [("long", i) for i in range(1, 5)]


def test_with_a_cost_one_owner_is_plain_fifo_and_a_newcomer_starts_level() -> None:
    q: FairQueue[tuple[str, int]] = FairQueue(owner, cost=cost_of)
    for i in range(10):
        q.append(("long", i))
    assert [q.popleft() for _ in range(5)] == [("long", i) for i in range(5)]  # alone: nothing charged
    q.append(("tiny", 0))
    q.append(("tiny", 1))
    assert q.peek() == ("long", 5)
    assert [q.popleft() for _ in range(4)] == [("long", 5), ("tiny", 0), ("tiny", 1), ("long", 6)]


def test_with_a_cost_items_put_back_stay_first_of_their_lane_without_taking_the_turn() -> None:
    q: FairQueue[tuple[str, int]] = FairQueue(owner, cost=cost_of)
    q.append(("tiny", 0))
    q.append(("long", 0))
    q.append(("long", 1))
    assert q.popleft() == ("tiny", 0)
    q.append(("tiny", 1))
    assert q.popleft() == ("long", 0)  # charged 1000 now
    q.extendleft([("long", 7), ("long", 8)])
    assert q.peek() == ("tiny", 1)  # putting back does not make it long's turn
    assert [q.popleft() for _ in range(4)] == [("tiny", 1), ("long", 7), ("long", 8), ("long", 1)]
    q.append(("tiny", 2))  # an owner that comes back starts level with the one served last: no saved-up credit
    q.append(("long", 9))
    assert [q.popleft() for _ in range(2)] == [("tiny", 2), ("long", 9)]
    q.append(("x", 0))
    q.clear()
    assert not q and q.owners() == 0


def _priority_of(item: tuple[str, int]) -> int:
    return item[1] % 3 - 1  # -1, 0 or 1: lanes become levels and back


def _state(q: FairQueue[tuple[str, int]]) -> tuple[object, ...]:
    lanes = {owner: (type(lane).__name__, list(lane)) for owner, lane in q._lanes.items()}
    return lanes, list(q._turns), dict(q._used), q._clock, len(q)


batches = st.lists(
    st.one_of(
        st.tuples(st.just("extend"), st.lists(st.sampled_from(["a", "b", "long"]), max_size=6)),
        st.tuples(st.just("popmany"), st.integers(0, 8)),
        st.tuples(st.just("appendleft"), st.lists(st.sampled_from(["a", "b", "long"]), max_size=2)),
    ),
    max_size=40,
)


@given(batches, st.booleans(), st.booleans())
@settings(max_examples=300)
def test_extend_and_popmany_do_what_as_many_appends_and_poplefts_do(
    ops: list[tuple[str, Any]], with_priority: bool, with_cost: bool
) -> None:
    """The batch calls the scheduler uses (one per submitTasks, one per dispatch) against the one-item calls: the same
    items in the same order, and the same state after each (lanes, turns, charges)."""
    make = functools.partial(FairQueue, owner, _priority_of if with_priority else None, cost_of if with_cost else None)
    batched: FairQueue[tuple[str, int]] = make()
    single: FairQueue[tuple[str, int]] = make()
    serial = 0
    for op, arg in ops:
        if op == "extend":
            items = [(who, serial + i) for i, who in enumerate(arg)]
            serial += len(items)
            batched.extend(items)
            for item in items:
                single.append(item)
        elif op == "appendleft":
            for who in arg:
                batched.appendleft((who, serial))
                single.appendleft((who, serial))
                serial += 1
        else:
            taken = batched.popmany(arg)
            assert taken == [single.popleft() for _ in range(min(arg, len(single)))]
        assert _state(batched) == _state(single)
