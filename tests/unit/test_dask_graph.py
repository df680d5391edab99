"""Dask's graphs made plannable (scaler.client.dask_graph) and Dask's scheduler protocol on a client
(scaler.integrations.dask): the shape of the answer, and which calls of client.get have a shape only Dask gives
(deprecated there). Plans are run here, every function and argument through cloudpickle as on a worker, against
dask's own synchronous scheduler."""

from __future__ import annotations

import operator
from collections.abc import Hashable
from typing import Any

import cloudpickle
import dask
import dask.array as da
import dask.bag as db
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from dask._task_spec import Alias, DataNode, Task, TaskRef

from scaler.client.dask_graph import as_task_tuples, dask_form, dask_node, run_node
from scaler.client.graph import KeyArg, identity, plan_graph
from scaler.integrations import dask as dask_protocol

GRAPH = {"a": 1, ("b", 0): (operator.add, "a", 1)}


def run(graph: Any, keys: list[Hashable]) -> dict[Hashable, Any]:
    """The plan of graph for keys, run the way the client and workers run it between them."""
    plan = plan_graph(as_task_tuples(graph), keys)
    values = dict(plan.literals)
    for node in plan.tasks:
        args = [
            values[a.key] if isinstance(a, KeyArg) else cloudpickle.loads(cloudpickle.dumps(a.value)) for a in node.args
        ]
        values[node.key] = cloudpickle.loads(cloudpickle.dumps(node.function))(*args)
    return {key: values[key] for key in keys}


def spy_on_dask(collection: Any) -> tuple[Any, Any]:
    """The graph and keys dask hands its scheduler for collection.compute()."""
    seen: list[tuple[Any, Any]] = []

    def schedule(graph: Any, keys: Any) -> Any:
        seen.append((graph, keys))
        return dask.get(graph, keys)

    collection.compute(scheduler=schedule)
    return seen[0]


class PlanRunner:
    """A stand-in for a client, in Scaler's form only: get(dict, flat keys) -> {key: value}, run here."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[Hashable, Any], list[Hashable], dict[str, Any]]] = []

    def get(self, graph: dict[Hashable, Any], keys: list[Hashable], **kwargs: Any) -> dict[Hashable, Any]:
        assert isinstance(graph, dict) and isinstance(keys, list) and not dask_form(graph, keys)
        self.calls.append((graph, keys, kwargs))
        return run(graph, keys)


# ----------------------------------------------------------------------------------------------- which form
@pytest.mark.parametrize("keys", [["a"], [("b", 0), "a"], ("a", ("b", 0)), []])
def test_scaler_form_is_a_dict_graph_and_flat_keys(keys: Any) -> None:
    assert not dask_form(GRAPH, keys)


def test_what_is_not_keys_is_left_to_get_to_refuse() -> None:
    assert not dask_form(GRAPH, {"a"})  # get() raises its TypeError
    assert not dask_form(GRAPH, None)
    assert not dask_form([1, 2], {"a"})


@pytest.mark.parametrize("keys", ["a", ("b", 0), [["a"], [("b", 0), "a"]]])
def test_a_single_key_or_nested_keys_are_a_shape_only_dask_gives(keys: Any) -> None:
    assert dask_form(GRAPH, keys)


def test_an_expression_with_flat_keys_is_a_shape_only_dask_gives() -> None:
    expression, keys = spy_on_dask(da.ones(4, chunks=2).sum())
    assert isinstance(keys, list) and not any(isinstance(key, list) for key in keys)
    assert dask_form(expression, keys)  # an expression is not a dict: only Dask hands one over


# ----------------------------------------------------------------------------------------------- the protocol
@pytest.mark.parametrize(
    ("keys", "answer"),
    [
        ("a", 1),  # a single key: its value
        (("b", 0), 2),  # a tuple that is a key is that key, as in dask
        ([["a"], [("b", 0), "a"]], ((1,), (2, 1))),  # nested lists: nested tuples
        (["a", ("b", 0)], (1, 2)),  # flat keys: a tuple too (what dask.persist hands over)
        ([], ()),
    ],
)
def test_dask_get_answers_in_the_shape_of_keys(keys: Any, answer: Any) -> None:
    client = PlanRunner()
    assert dask_protocol.get(client, GRAPH, keys, timeout=5) == answer
    [(graph, flat, kwargs)] = client.calls
    assert graph is GRAPH and kwargs == {"timeout": 5}
    assert flat == dask_protocol.flat_keys(keys)


def test_dask_get_computes_each_key_once() -> None:
    assert dask_protocol.flat_keys([["a", ("b", 0)], ["a"]]) == ["a", ("b", 0)]


def test_what_is_not_dask_keys_or_graph_is_refused() -> None:
    with pytest.raises(TypeError, match="keys must be graph keys or lists of them, not dict"):
        dask_protocol.flat_keys([["a"], [{}]])
    with pytest.raises(TypeError, match="keys must be a graph key or a list of them, not set"):
        dask_protocol.flat_keys({"a"})
    with pytest.raises(TypeError, match="a Dask graph is a dict"):
        dask_protocol.get(PlanRunner(), [1, 2], ["a"])


def test_an_expression_is_materialized() -> None:
    expression, keys = spy_on_dask(da.ones(4, chunks=2).sum())
    assert not isinstance(expression, dict)
    assert dask_protocol.get(PlanRunner(), expression, keys) == (4.0,)


# ----------------------------------------------------------------------------------------------- graphs
def test_plain_graphs_are_left_to_the_planner() -> None:
    assert as_task_tuples(GRAPH) is GRAPH
    assert as_task_tuples([1, 2]) == [1, 2]  # not a graph: plan_graph refuses it


def test_task_spec_nodes() -> None:
    graph = {
        "one": DataNode("one", 1),
        "word": DataNode("word", "one"),  # a value that is a key: still a literal
        "keys": DataNode("keys", ["one", ("x", 0)]),
        ("x", 0): Task(("x", 0), operator.add, TaskRef("one"), 2),
        "alias": Alias("alias", ("x", 0)),
        "legacy": (operator.mul, ("x", 0), 10),  # a task tuple among nodes: read as dask reads it
    }
    plain = as_task_tuples(graph)
    assert plain["one"] == 1 and plain["alias"] == ("x", 0)
    assert plain["word"][0] is run_node and plain["keys"][0] is run_node
    assert run(graph, list(graph)) == {
        "one": 1,
        "word": "one",
        "keys": ["one", ("x", 0)],
        ("x", 0): 3,
        "alias": 3,
        "legacy": 30,
    }
    assert plan_graph(plain, ["alias"]).tasks[-1].function is identity


def test_a_node_needing_a_missing_key_is_refused() -> None:
    with pytest.raises(KeyError, match="needs 'nowhere'"):
        as_task_tuples({"a": Task("a", operator.neg, TaskRef("nowhere"))})


def test_run_node_passes_dependencies_by_key() -> None:
    node = Task("c", operator.sub, TaskRef("a"), TaskRef("b"))
    assert run_node(dask_node(node, ("b", "a")), 1, 10) == 9


@pytest.mark.parametrize(
    "collection",
    [
        pytest.param(lambda: da.arange(36, chunks=5).reshape(6, 6).rechunk(4).T.sum(axis=0), id="array"),
        pytest.param(lambda: db.from_sequence(range(9), npartitions=3).map(operator.neg).filter(bool), id="bag"),
        pytest.param(
            lambda: (
                dd.from_pandas(pd.DataFrame({"k": [1, 2, 1, 3], "v": [1.0, 2, 3, 4]}), npartitions=2)
                .groupby("k")
                .v.mean()
            ),
            id="dataframe",
        ),
        pytest.param(lambda: dask.delayed(sum)([dask.delayed(operator.neg)(i) for i in range(4)]), id="delayed"),
    ],
)
def test_collections_run_from_the_plan_as_with_dask(collection: Any) -> None:
    wanted = collection()
    graph, keys = spy_on_dask(wanted)
    assert len(keys) == 1  # dask.compute hands over one finalized key per collection
    (ours,) = dask_protocol.get(PlanRunner(), graph, keys)
    theirs = wanted.compute(scheduler="sync")
    if isinstance(theirs, pd.Series):
        pd.testing.assert_series_equal(ours, theirs)
    else:
        np.testing.assert_array_equal(ours, theirs)
