"""grouping: a planned graph cut into blocks of consecutive nodes, each block one task (run_block). Checked by
evaluating the grouped graph locally, block task by block task, against the original graph evaluated node by node."""

from __future__ import annotations

import pickle
from collections.abc import Hashable
from typing import Any

import cloudpickle
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scaler.payloads  # noqa: F401  (every client packs through it: it registers the shipped helpers by value)
from scaler.client.dask_graph import run_node
from scaler.client.graph import build_list, identity, plan_graph
from scaler.client.grouping import BlockKey, GroupedGraph, check_group, group_plan, run_block
from scaler.client.shipped import run_batch
from tests.helpers import Graph, modules_named
from tests.unit.test_graph_plan import graphs, inc, reference_get, run_plan


def grouped_values(grouped: GroupedGraph) -> dict[Hashable, Any]:
    """The value of every key the graph was grouped for, computed as the scheduler and workers would: the grouped
    graph is planned as an ordinary graph, each block task runs run_block, then each key is read out of its block."""
    values = run_plan(plan_graph(grouped.graph, grouped.keys))
    return {
        key: values[source] if index < 0 else values[source][index] for key, (source, index) in grouped.where.items()
    }


def block_sizes(grouped: GroupedGraph) -> list[int]:
    return [len(value[1]["steps"]) for key, value in grouped.graph.items() if isinstance(key, BlockKey)]


def boom(_: Any) -> None:
    raise ArithmeticError("node failed")


def test_a_chain_in_blocks_of_two() -> None:
    graph: Graph = {"a": 1, "b": (inc, "a"), "c": (inc, "b"), "d": (inc, "c"), "e": (inc, "d"), "f": (inc, "e")}
    grouped = group_plan(plan_graph(graph, ["f", "c"]), ["f", "c"], 2)
    assert block_sizes(grouped) == [2, 2, 1]
    assert [key.index for key in grouped.keys if isinstance(key, BlockKey)] == [2, 0]
    assert grouped_values(grouped) == {"f": 6, "c": 3}
    assert grouped.graph["a"] == 1  # literals stay literals, under their own keys
    assert grouped.graph[grouped.keys[1]][1]["outputs"] == (1,)  # only "c" leaves the first block ("b" stays inside)


def test_a_key_in_the_middle_of_a_block_is_an_output() -> None:
    graph: Graph = {"a": (inc, 0), "b": (inc, "a"), "c": (inc, "b")}
    grouped = group_plan(plan_graph(graph, ["c", "a"]), ["c", "a"], 10)
    (block,) = grouped.keys
    assert grouped.blocks == 1 and grouped.where == {"c": (block, 0), "a": (block, 1)}
    assert grouped_values(grouped) == {"c": 3, "a": 1}


def test_nested_lists_and_tasks_in_arguments() -> None:
    graph: Graph = {"x": 1, "y": (inc, "x"), "s": (sum, ["x", "y", (inc, "y")]), "n": (list, [["x", 5], "y"])}
    keys: list[Hashable] = ["s", "n"]
    grouped = group_plan(plan_graph(graph, keys), keys, 2)
    assert grouped_values(grouped) == {"s": 1 + 2 + 3, "n": [[1, 5], 2]}


def test_a_literal_asked_for_is_asked_of_the_grouped_graph_as_it_is() -> None:
    grouped = group_plan(plan_graph({"a": 5, "b": (inc, "a")}, ["a", "b"]), ["a", "b"], 3)
    assert grouped.where["a"] == ("a", -1) and "a" in grouped.keys
    assert grouped_values(grouped) == {"a": 5, "b": 6}


def test_a_node_failure_is_the_blocks_with_the_nodes_own_exception() -> None:
    graph: Graph = {"a": (inc, 1), "b": (boom, "a"), "c": (inc, "a")}
    grouped = group_plan(plan_graph(graph, ["c", "b"]), ["c", "b"], 5)
    _, spec, *inputs = grouped.graph[grouped.keys[0]]
    with pytest.raises(ArithmeticError, match="node failed"):
        run_block(spec, *inputs)


def test_the_spec_survives_pickling_and_is_builtins_only() -> None:
    # Builtins only: a worker without the scaler package unpickles it (tests/protocol/test_payload_golden.py runs one).
    graph: Graph = {"a": 1, "b": (inc, "a"), "c": (sum, ["a", "b"])}
    grouped = group_plan(plan_graph(graph, ["c"]), ["c"], 2)
    for key in grouped.keys:
        spec = grouped.graph[key][1]
        for dump, load in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, pickle.loads)):
            assert load(dump(spec)) == spec
        assert type(spec) is dict and set(spec) == {"steps", "outputs"}
        for function, args in spec["steps"]:
            assert function is not None and type(args) is tuple
            assert all(type(arg) is tuple and len(arg) == 3 for arg in args)


def test_the_helpers_and_a_block_travel_by_value() -> None:
    for function in (run_block, build_list, identity, run_node, run_batch):
        payload = cloudpickle.dumps(function)
        assert not {m for m in modules_named(payload) if m.split(".")[0] == "scaler"}, function
        assert pickle.loads(payload) is not function  # a copy of its code, not a reference to it
    graph: Graph = {"a": 1, "b": (inc, "a"), "c": (sum, ["a", "b"]), "d": "c"}  # build_list and identity nodes
    grouped = group_plan(plan_graph(graph, ["d"]), ["d"], 5)
    (block,) = grouped.keys
    named = modules_named(cloudpickle.dumps(grouped.graph[block]))
    assert "tests.unit.test_graph_plan" in named  # inc: the user's function, by reference as always
    assert not {m for m in named if m.split(".")[0] == "scaler"}


@pytest.mark.parametrize("bad", [0, -3, 2.5, "10", True, [4]])
def test_a_bad_group_is_refused_with_a_clear_message(bad: object) -> None:
    with pytest.raises(ValueError, match="group must be a whole number of graph nodes per task, at least 1"):
        check_group(bad)
    with pytest.raises(ValueError, match="group must be"):
        # a call mypy refuses, made anyway: the run-time check is what is tested
        group_plan(plan_graph({"a": (inc, 1)}, ["a"]), ["a"], bad)  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None)
@given(graphs(), st.integers(1, 8), st.randoms(use_true_random=False))
def test_random_grouped_graphs_compute_what_the_nodes_compute_one_by_one(
    graph: dict[Hashable, Any], size: int, rnd: Any
) -> None:
    keys = rnd.sample(list(graph), rnd.randint(1, len(graph)))
    plan = plan_graph(graph, keys)
    grouped = group_plan(plan, keys, size)
    sizes = block_sizes(grouped)
    assert sum(sizes) == len(plan.tasks) and all(1 <= s <= size for s in sizes)
    assert grouped.blocks == -(-len(plan.tasks) // size)
    got = grouped_values(grouped)
    cache: dict[Hashable, Any] = {}
    assert got == {key: reference_get(graph, key, cache) for key in keys}
