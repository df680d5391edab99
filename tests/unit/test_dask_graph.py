"""scaler.client.dask_graph: when get() answers the way dask's schedulers do, and dask's graphs made plannable.
Plans are run here, every function and argument through cloudpickle as on a worker, against dask's own
synchronous scheduler."""

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

from scaler.client.dask_graph import as_task_tuples, dask_call, dask_node, run_node
from scaler.client.graph import KeyArg, identity, plan_graph

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


# ----------------------------------------------------------------------------------------------- which form
@pytest.mark.parametrize("keys", [["a"], [("b", 0), "a"], ("a", ("b", 0)), []])
def test_scaler_form_is_a_dict_graph_and_flat_keys(keys: Any) -> None:
    assert dask_call(GRAPH, keys, "tests") is None


def test_what_is_not_keys_is_left_to_get_to_refuse() -> None:
    assert dask_call(GRAPH, {"a"}, "tests") is None  # get() raises its TypeError
    assert dask_call(GRAPH, None, "tests") is None
    with pytest.raises(TypeError, match="keys must be graph keys or lists of them, not dict"):
        dask_call(GRAPH, [["a"], [{}]], "tests")


@pytest.mark.parametrize(
    ("keys", "caller", "answer"),
    [
        ("a", "tests", 10),  # a single key: its value
        (("b", 0), "tests", 20),  # a tuple that is a key is that key, as in dask
        ([["a"], [("b", 0), "a"]], "tests", ((10,), (20, 10))),  # nested lists: nested tuples
        (["a", ("b", 0)], "dask.base", (10, 20)),  # dask's own code calling: flat keys too
        (["a"], "dask", (10,)),
    ],
)
def test_dask_form_answers_in_the_shape_of_keys(keys: Any, caller: str, answer: Any) -> None:
    call = dask_call(GRAPH, keys, caller)
    assert call is not None
    assert call.graph is GRAPH
    assert call.answer({"a": 10, ("b", 0): 20}) == answer


def test_dask_form_computes_each_key_once() -> None:
    call = dask_call(GRAPH, [["a", ("b", 0)], ["a"]], "tests")
    assert call is not None and call.keys == ["a", ("b", 0)]


def test_an_expression_is_dask_form_and_materialized() -> None:
    expression, keys = spy_on_dask(da.ones(4, chunks=2).sum())
    assert not isinstance(expression, dict)
    call = dask_call(expression, keys, "tests")
    assert call is not None and isinstance(call.graph, dict)
    assert call.answer(run(call.graph, call.keys)) == (4.0,)


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
    call = dask_call(graph, keys, "dask.base")
    assert call is not None
    assert len(keys) == 1  # dask.compute hands over one finalized key per collection
    (ours,) = call.answer(run(call.graph, call.keys))
    theirs = wanted.compute(scheduler="sync")
    if isinstance(theirs, pd.Series):
        pd.testing.assert_series_equal(ours, theirs)
    else:
        np.testing.assert_array_equal(ours, theirs)
