"""plan_graph: dask-style graphs to an ordered plan. Checked by running the plan locally against a reference
evaluator that follows dask's rules (keys are replaced by values, tasks are called, lists are walked)."""

from __future__ import annotations

import gc
import operator
import weakref
from collections.abc import Hashable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.client.client import collector_paused
from scaler.client.graph import (
    GraphPlan,
    KeyArg,
    TaskNode,
    ValueArg,
    build_list,
    identity,
    plan_graph,
)
from tests.helpers import Graph


def inc(x: int) -> int:
    return x + 1


def total(*items: Any) -> int:
    return sum(_flatten(items))


def pack(*items: Any) -> tuple[Any, ...]:
    """Any arguments at all: the random graphs below compare structures, not sums."""
    return ("packed", *items)


def _flatten(items: Any) -> list[int]:
    out: list[int] = []
    for item in items:
        out.extend(_flatten(item) if isinstance(item, (list, tuple)) else [item])
    return out


def run_plan(plan: GraphPlan) -> dict[Hashable, Any]:
    """Evaluate a plan in order, the way the client and workers do between them."""
    values: dict[Hashable, Any] = dict(plan.literals)
    for node in plan.tasks:
        args = [values[a.key] if isinstance(a, KeyArg) else a.value for a in node.args]
        values[node.key] = node.function(*args)
    return values


def reference_get(graph: dict[Hashable, Any], key: Hashable, cache: dict[Hashable, Any] | None = None) -> Any:
    """dask's semantics, by recursion (memoized)."""
    cache = {} if cache is None else cache

    def evaluate(value: Any) -> Any:
        try:
            if value in graph:
                return reference_get(graph, value, cache)
        except TypeError:
            pass
        if isinstance(value, tuple) and value and callable(value[0]):
            return value[0](*(evaluate(a) for a in value[1:]))
        if isinstance(value, list):
            return [evaluate(v) for v in value]
        return value

    if key not in cache:
        value = graph[key]
        cache[key] = value if isinstance(value, Hashable) and value == key else evaluate(value)
    return cache[key]


def keys_of(plan: GraphPlan) -> list[Hashable]:
    return [*plan.literals, *(node.key for node in plan.tasks)]


# ----------------------------------------------------------------------------------------------- examples
def test_literals_and_a_task() -> None:
    plan = plan_graph({"a": 1, "b": (inc, "a")}, ["b"])
    assert plan.literals == {"a": 1}
    assert plan.tasks == [TaskNode("b", inc, [KeyArg("a")])]


def test_every_kind_of_value() -> None:
    graph: Graph = {
        "x": 1,
        "lit": [1, 2],  # a list without keys is a plain value
        "pair": ("not", "a task"),  # a tuple not starting with a callable too
        "y": (inc, "x"),
        "alias": "y",
        "lst": ["x", "y", 5],
        "z": (operator.add, "x", (inc, "y")),  # a nested task
        "s": (total, [["x", 1], (inc, 2)]),  # nested lists and tasks inside a list
    }
    plan = plan_graph(graph, list(graph))
    assert plan.literals == {"x": 1, "lit": [1, 2], "pair": ("not", "a task")}
    by_key = {node.key: node for node in plan.tasks}
    assert by_key["alias"] == TaskNode("alias", identity, [KeyArg("y")])
    assert by_key["lst"] == TaskNode("lst", build_list, [KeyArg("x"), KeyArg("y"), ValueArg(5)])
    assert by_key["z"].args[0] == KeyArg("x") and isinstance(by_key["z"].args[1], KeyArg)
    values = run_plan(plan)
    assert {k: values[k] for k in graph} == {k: reference_get(graph, k) for k in graph}
    assert values["s"] == 1 + 1 + 3 and values["lst"] == [1, 2, 5] and values["z"] == 4


def test_tuple_keys_and_nonstring_keys() -> None:
    graph = {("x", 0): 10, ("x", 1): (inc, ("x", 0)), 7: (operator.mul, ("x", 1), 2)}
    assert run_plan(plan_graph(graph, [7]))[7] == 22


def test_every_task_comes_after_the_tasks_it_needs() -> None:
    graph: Graph = {"d": (total, "c", "b"), "c": (inc, "b"), "b": (inc, "a"), "a": (inc, 0)}
    order = [node.key for node in plan_graph(graph, ["d"]).tasks]
    assert order == ["a", "b", "c", "d"]


def test_missing_keys_are_reported_by_name() -> None:
    with pytest.raises(KeyError, match="'nope', 3"):
        plan_graph({"a": 1}, ["a", "nope", 3])
    with pytest.raises(KeyError):
        # a call mypy refuses, made anyway: the run-time check is what is tested
        plan_graph({"a": 1}, [["unhashable"]])  # type: ignore[list-item]


def test_a_graph_must_be_a_dict() -> None:
    with pytest.raises(TypeError, match="not list"):
        # a call mypy refuses, made anyway: the run-time check is what is tested
        plan_graph([("a", 1)], ["a"])  # type: ignore[arg-type]


def test_cycles_are_reported_with_their_keys() -> None:
    with pytest.raises(ValueError, match="cycle among keys 'a', 'b'"):
        plan_graph({"a": (inc, "b"), "b": (inc, "a"), "c": 1}, ["c", "a"])
    # a cycle no wanted key needs is never looked at, as with dask
    assert plan_graph({"a": (inc, "b"), "b": (inc, "a"), "c": 1}, ["c"]).literals == {"c": 1}
    with pytest.raises(ValueError, match="cycle"):
        plan_graph({"a": (inc, "a")}, ["a"])
    with pytest.raises(ValueError, match="cycle"):
        plan_graph({"a": "b", "b": "a"}, ["a"])


def test_a_key_naming_itself_is_a_literal() -> None:
    assert plan_graph({"a": "a"}, ["a"]).literals == {"a": "a"}


def test_unhashable_values_are_plain_values() -> None:
    graph: Graph = {"a": (len, {"k": "v"}), "b": (len, [{"x"}])}
    assert run_plan(plan_graph(graph, ["a", "b"])) == {"a": 1, "b": 1}


def test_only_what_the_wanted_keys_need_is_planned() -> None:
    graph: Graph = {"a": 1, "b": (inc, "a"), "unrelated": (inc, 100), "big": list(range(10))}
    plan = plan_graph(graph, ["b"])
    assert sorted(map(str, keys_of(plan))) == ["a", "b"]


class Untouchable:
    """A value that fails loudly if the planner so much as hashes or compares it."""

    def __hash__(self) -> int:
        raise AssertionError("an entry no wanted key needs was looked at")

    def __eq__(self, other: object) -> bool:
        raise AssertionError("an entry no wanted key needs was looked at")


def test_entries_no_wanted_key_needs_are_never_looked_at() -> None:
    graph: Graph = {"a": 1, "b": (inc, "a"), "unrelated": (inc, Untouchable()), "also": [Untouchable()]}
    assert run_plan(plan_graph(graph, ["b"])) == {"a": 1, "b": 2}


def test_a_long_chain_is_planned_in_order_without_recursion() -> None:
    n = 50_000  # far deeper than Python's recursion limit
    graph: dict[Hashable, Any] = {0: 0, **{i: (inc, i - 1) for i in range(1, n)}}
    plan = plan_graph(graph, [n - 1])
    assert [node.key for node in plan.tasks] == list(range(1, n))
    assert run_plan(plan)[n - 1] == n - 1


def test_a_cycle_deep_in_a_chain_names_only_the_keys_on_it() -> None:
    graph: dict[Hashable, Any] = {i: (inc, i + 1) for i in range(100)}
    graph[100] = (inc, 98)  # 98 -> 99 -> 100 -> 98
    with pytest.raises(ValueError, match=r"cycle among keys 100, 98, 99$"):
        plan_graph(graph, [0])


def test_the_collector_is_paused_and_restored() -> None:
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        with collector_paused():
            assert not gc.isenabled()
            raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()  # the caller's choice is left alone
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_what_outlives_the_pause_is_not_walked_by_a_young_pass_at_once() -> None:
    """After the pause the collector's young counts start again: the objects made meanwhile are in the oldest
    generation, not all in the youngest waiting for one long pass (at 1,000,000 nodes, most of a second)."""
    with collector_paused():
        made = [[i] for i in range(50_000)]
        assert gc.get_count()[0] >= 50_000
    marker = made[-1]  # (without the promotion, a young pass walked them all and left them in generation 1)
    assert [g for g in range(3) if any(o is marker for o in gc.get_objects(generation=g))] == [2]
    assert gc.get_count()[0] < gc.get_threshold()[0] and gc.get_freeze_count() == 0


def test_cycles_made_in_the_pause_are_still_collected() -> None:
    class Node:
        other: Node

    with collector_paused():
        a, b = Node(), Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
    assert gone() is not None  # a cycle: only the collector frees it
    gc.collect()
    assert gone() is None


def test_objects_the_program_froze_stay_frozen() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with collector_paused():
            made = [[i] for i in range(1000)]
        # neither thawed (0) nor more frozen; fewer may be: another thread of this process freed frozen objects
        assert 0 < gc.get_freeze_count() <= frozen and len(made) == 1000
    finally:
        gc.unfreeze()


# ----------------------------------------------------------------------------------------------- random graphs
@st.composite
def graphs(draw: st.DrawFn) -> dict[Hashable, Any]:
    """A random acyclic dask graph over keys k0..kn: each value uses only earlier keys."""
    rnd = draw(st.randoms(use_true_random=False))
    n = draw(st.integers(1, 25))

    def arg(earlier: list[str], depth: int) -> Any:
        roll = rnd.random()
        if depth == 0 or roll < 0.5:
            return rnd.choice(earlier) if earlier and roll < 0.35 else rnd.randint(0, 9)
        items = [arg(earlier, depth - 1) for _ in range(rnd.randint(0, 3))]
        return items if roll < 0.75 else (pack, *items)

    graph: dict[Hashable, Any] = {}
    for i in range(n):
        earlier = [f"k{j}" for j in range(i)]
        kind = rnd.choice(["literal", "task", "alias", "list"] if earlier else ["literal", "task"])
        if kind == "literal":
            graph[f"k{i}"] = rnd.randint(0, 9)
        elif kind == "alias":
            graph[f"k{i}"] = rnd.choice(earlier)
        elif kind == "list":
            graph[f"k{i}"] = [arg(earlier, 2) for _ in range(rnd.randint(1, 3))]
        else:
            graph[f"k{i}"] = (pack, *(arg(earlier, 2) for _ in range(rnd.randint(0, 3))))
    keys = list(graph)
    rnd.shuffle(keys)  # the plan must not depend on the insertion order
    return {k: graph[k] for k in keys}


@settings(max_examples=120, deadline=None)
@given(graphs())
def test_random_graph_plans_compute_what_dask_would(graph: dict[Hashable, Any]) -> None:
    plan = plan_graph(graph, list(graph))
    planned = keys_of(plan)
    assert len(planned) == len(set(planned))
    assert set(graph) <= set(planned)
    seen: set[Hashable] = set(plan.literals)
    for node in plan.tasks:  # topological: every argument key is computed before its user
        assert all(a.key in seen for a in node.args if isinstance(a, KeyArg)), node
        seen.add(node.key)
    values = run_plan(plan)
    cache: dict[Hashable, Any] = {}
    for key in graph:
        assert values[key] == reference_get(graph, key, cache), key
