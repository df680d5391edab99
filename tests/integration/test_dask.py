"""Dask collections computed by the cluster with the client as Dask's scheduler (scheduler=client, client.dask_get:
scaler.integrations.dask), with the real dask package, each result compared with dask's own synchronous scheduler
(scheduler="sync"); client.get answers {key: value} whoever calls it."""

from __future__ import annotations

import operator
from typing import Any

import dask
import dask.array as da
import dask.bag as db
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from dask.local import get_sync

from scaler import Client
from scaler.integrations import dask as dask_protocol


def inc(i: int) -> int:
    return i + 1


def add(a: int, b: int) -> int:
    return a + b


def divide(a: float, b: float) -> float:
    return a / b


def total(*items: Any) -> int:
    return sum(items)


def spy(collection: Any) -> tuple[Any, Any]:
    """The graph and keys dask hands its scheduler for collection.compute()."""
    seen: list[tuple[Any, Any]] = []

    def scheduler(graph: Any, keys: Any) -> Any:
        seen.append((graph, keys))
        return get_sync(graph, keys)

    collection.compute(scheduler=scheduler)
    return seen[0]


def both(scheduler: Any, *collections: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The collections computed with `scheduler`, and with dask's synchronous one."""
    return dask.compute(*collections, scheduler=scheduler), dask.compute(*collections, scheduler="sync")


@pytest.fixture(scope="module")
def numbers() -> Any:
    return da.arange(400, chunks=50).reshape(20, 20).rechunk((5, 10))


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return pd.DataFrame({"k": np.arange(60) % 4, "v": np.arange(60.0), "w": np.arange(60) % 7})


# ------------------------------------------------------------------------------------------------ array
def test_array_reductions(client: Client, numbers: Any) -> None:
    ours, theirs = both(client, numbers.sum(), numbers.mean(), numbers.std(axis=0), numbers.max())
    for mine, expected in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(mine, expected)


def test_array_map_blocks_and_rechunk(client: Client, numbers: Any) -> None:
    blocks = numbers.map_blocks(lambda block: block * 2 + 1).rechunk((10, 4))
    ours = blocks.compute(scheduler=client.dask_get)
    np.testing.assert_array_equal(ours, blocks.compute(scheduler="sync"))
    assert ours.shape == (20, 20)


# ------------------------------------------------------------------------------------------------ bag
def test_bag_map_filter_fold(client: Client) -> None:
    bag = db.from_sequence(range(100), npartitions=5)
    odd = bag.map(inc).filter(lambda i: i % 2 == 1)
    ours, theirs = both(client, odd.fold(operator.add), odd, odd.count())
    assert ours == theirs
    assert ours[0] == sum(i for i in range(1, 101) if i % 2)


# ------------------------------------------------------------------------------------------------ dataframe
def test_dataframe_groupby_aggregate(client: Client, frame: pd.DataFrame) -> None:
    grouped = dd.from_pandas(frame, npartitions=4).groupby("k").agg({"v": ["sum", "mean"], "w": "max"})
    ours = grouped.compute(scheduler=client)
    pd.testing.assert_frame_equal(ours, grouped.compute(scheduler="sync"))
    pd.testing.assert_frame_equal(ours, frame.groupby("k").agg({"v": ["sum", "mean"], "w": "max"}))


@pytest.mark.parametrize("shuffle", [None, "tasks"])  # dask's default without dask.distributed: "disk"
def test_dataframe_merge(client: Client, frame: pd.DataFrame, shuffle: str | None) -> None:
    names = dd.from_pandas(pd.DataFrame({"k": [0, 1, 2, 3], "name": list("abcd")}), npartitions=2)
    with dask.config.set({"dataframe.shuffle.method": shuffle}):
        merged = dd.from_pandas(frame, npartitions=3).merge(names, on="k")
        ours = merged.compute(scheduler=client).sort_values("v").reset_index(drop=True)
        theirs = merged.compute(scheduler="sync").sort_values("v").reset_index(drop=True)
    pd.testing.assert_frame_equal(ours, theirs)
    assert len(ours) == 60


# ------------------------------------------------------------------------------------------------ delayed
def test_delayed(client: Client) -> None:
    parts = [dask.delayed(inc)(i) for i in range(5)]
    summed = dask.delayed(total)(*parts)
    keyword = dask.delayed(add)(summed, b=dask.delayed(inc)(10))
    nested = dask.delayed(list)([summed, {"x": parts[0]}, (parts[1], 7)])
    ours, theirs = both(client.dask_get, summed, keyword, nested)
    assert ours == theirs == (15, 26, [15, {"x": 1}, (2, 7)])


def test_nested_arguments_and_config_scheduler(client: Client, numbers: Any) -> None:
    """dask.compute walks lists and dicts for collections; dask.config.set picks the scheduler."""
    value = dask.delayed(add)(1, 2)
    with dask.config.set(scheduler=client):
        ours = dask.compute({"sum": numbers.sum(), "more": [value, 5]})
        assert numbers.sum().compute() == 79800
    assert ours == dask.compute({"sum": numbers.sum(), "more": [value, 5]}, scheduler="sync")


def test_other_ways_to_name_the_scheduler(client: Client, numbers: Any) -> None:
    assert dask.compute(numbers.sum(), scheduler=client.dask_get) == (79800,)
    assert dask.compute(numbers.sum(), scheduler=client.options(retries=1, priority=2)) == (79800,)
    assert dask.compute(numbers.sum(), scheduler=client.options(retries=1).dask_get) == (79800,)
    assert dask.compute(numbers.sum(), scheduler=client, timeout=60) == (79800,)  # dask passes it on
    assert dask_protocol.get(client, *spy(numbers.sum())) == (79800,)  # the module's function


def test_client_get_as_a_scheduler_still_works_and_warns(client: Client, numbers: Any) -> None:
    """Deprecated: client.get given what only Dask gives (here an expression) answers as dask_get, and says so."""
    with pytest.warns(FutureWarning, match="scheduler=client"):
        assert dask.compute(numbers.sum(), scheduler=client.get) == (79800,)
    with pytest.warns(FutureWarning, match="scheduler=client"):
        assert dask.compute(numbers.sum(), scheduler=client.options(priority=1).get) == (79800,)


def test_a_failing_task_raises_its_exception(client: Client) -> None:
    failing = dask.delayed(divide)(1, dask.delayed(operator.sub)(2, 2))
    with pytest.raises(ZeroDivisionError):
        failing.compute(scheduler=client)
    assert dask.delayed(inc)(1).compute(scheduler=client) == 2  # and the client still works


# ------------------------------------------------------------------------------------------------ persist
def test_persist(client: Client, numbers: Any) -> None:
    persisted = (numbers + 1).persist(scheduler=client)
    assert all(isinstance(chunk, np.ndarray) for chunk in dict(persisted.__dask_graph__()).values())  # in memory
    np.testing.assert_array_equal(persisted.compute(scheduler=client), (numbers + 1).compute(scheduler="sync"))
    bag, value = dask.persist(
        db.from_sequence(range(10), npartitions=3).map(inc), dask.delayed(inc)(1), scheduler=client.dask_get
    )
    assert bag.compute(scheduler="sync") == list(range(1, 11))
    assert value.compute(scheduler="sync") == 2


# ------------------------------------------------------------------------------------------------ the protocol itself
def test_task_spec_graph_with_tuple_keys(client: Client) -> None:
    """A graph of dask's task-spec nodes given directly: scaler's own form (flat keys) still answers a dict."""
    from dask._task_spec import Alias, DataNode, Dict, List, Task, TaskRef

    graph = {
        ("x", 0): DataNode(("x", 0), 1),
        ("x", 1): Task(("x", 1), inc, TaskRef(("x", 0))),
        "pair": DataNode("pair", ("x", 0)),  # a literal that looks like a key: stays a literal
        "listed": Task("listed", list, List(TaskRef(("x", 0)), TaskRef(("x", 1)), Task(None, inc, TaskRef(("x", 1))))),
        "mapped": Task("mapped", dict, Dict({"a": TaskRef(("x", 1)), "b": 3})),
        "same": Alias("same", ("x", 1)),
    }
    expected = {"listed": [1, 2, 3], "mapped": {"a": 2, "b": 3}, "same": 2, "pair": ("x", 0), ("x", 1): 2}
    assert client.get(graph, keys=list(expected)) == expected
    assert [f.result(timeout=20) for f in client.submit_graph(graph, keys=["same", "pair"])] == [2, ("x", 0)]


def test_legacy_task_tuples_as_dask_2024_handed_them(client: Client) -> None:
    """Dask before 2025 handed a scheduler a dict (or HighLevelGraph) of task tuples with tuple keys, and the keys
    of each collection as a list (of lists for arrays): the answer has the same shape."""
    graph = {
        ("x", 0): 1,
        ("x", 1): (inc, ("x", 0)),
        ("y", 0, 0): (add, ("x", 0), ("x", 1)),
        ("y", 0, 1): (sum, [("x", 0), ("x", 1), 9]),  # a list of keys is a list of their values
        "sum": (total, ("y", 0, 0), ("y", 0, 1)),
        "alias": ("x", 1),
    }
    keys: Any = [[[("y", 0, 0), ("y", 0, 1)]], ["sum"], ["alias"]]  # dask's nested lists of keys
    assert client.dask_get(graph, keys) == (((3, 12),), (15,), (2,)) == get_sync(graph, keys)  # tuples, like dask's
    assert client.dask_get(graph, ("y", 0, 1)) == 12 == get_sync(graph, ("y", 0, 1))  # a single key: its value
    assert client(graph, "sum") == 15
    # dask 2024's persist: flat keys and a dict: dask_get answers a tuple in the order of the keys
    assert client.dask_get(graph, ["sum", ("x", 0)]) == (15, 1) == get_sync(graph, ["sum", ("x", 0)])


def test_client_get_answers_a_dict_whoever_calls_it(client: Client) -> None:
    """Scaler's form, a dict and a flat list of keys, gets {key: value} even from a module of dask's: get does not
    look at its caller (it used to, and answered a tuple there)."""
    graph = {("x", 0): 1, ("x", 1): (inc, ("x", 0)), "sum": (total, ("x", 0), ("x", 1))}
    as_dask = compile("answer = schedule(graph, keys)", "dask/base.py", "exec")
    scope: dict[str, Any] = {"__name__": "dask.base", "schedule": client.get, "graph": graph, "keys": ["sum", ("x", 0)]}
    exec(as_dask, scope)
    assert scope["answer"] == {"sum": 3, ("x", 0): 1}
    with pytest.warns(FutureWarning, match="deprecated"):  # a shape only Dask gives: the old answer, and a warning
        nested: Any = [["sum"], [("x", 1)]]  # lists of keys: a shape only Dask gives
        assert client.get(graph, nested) == ((3,), (2,))
