"""get / submit_graph with group=K (scaler.client.grouping) against a real scheduler and two real workers: the same
values as without grouping, failures as the ungrouped graph's, and futures that behave as ScalerFutures do."""

from __future__ import annotations

import concurrent.futures
import operator
import os
import pathlib
import random
import threading
import time
from collections.abc import Hashable
from typing import Any

import pytest

from scaler import Client, ScalerFuture
from tests.helpers import Graph, sleep_and_return

TIMEOUT = 20  # seconds any single wait in this module may take


class NodeError(Exception):
    pass


def inc(x: int) -> int:
    return x + 1


def pack(*items: Any) -> tuple[Any, ...]:
    return ("packed", *items)


def fail(_: Any) -> None:
    raise NodeError("this node failed")


def random_graph(seed: int, n: int) -> dict[Hashable, Any]:
    """A random acyclic graph of literals, tasks (with keys, plain values, nested lists and tasks), aliases and
    lists of keys; each value uses earlier keys only."""
    rnd = random.Random(seed)

    def arg(earlier: list[str], depth: int) -> Any:
        roll = rnd.random()
        if depth == 0 or roll < 0.6:
            return rnd.choice(earlier) if earlier and roll < 0.45 else rnd.randint(0, 9)
        items = [arg(earlier, depth - 1) for _ in range(rnd.randint(0, 3))]
        return items if roll < 0.8 else (pack, *items)

    graph: dict[Hashable, Any] = {}
    for i in range(n):
        earlier = [f"k{j}" for j in range(max(0, i - 20), i)]
        kind = rnd.choice(["literal", "task", "task", "task", "alias", "list"] if earlier else ["literal"])
        if kind == "literal":
            graph[f"k{i}"] = rnd.randint(0, 9)
        elif kind == "alias":
            graph[f"k{i}"] = rnd.choice(earlier)
        elif kind == "list":
            graph[f"k{i}"] = [arg(earlier, 2) for _ in range(rnd.randint(1, 3))]
        else:
            graph[f"k{i}"] = (pack, *(arg(earlier, 2) for _ in range(rnd.randint(0, 3))))
    return graph


@pytest.mark.parametrize(("seed", "group"), [(1, 1), (2, 3), (3, 7), (4, 50), (5, 1000)])
def test_random_graphs_give_the_ungrouped_values(client: Client, seed: int, group: int) -> None:
    graph = random_graph(seed, 120)
    keys = random.Random(seed).sample(list(graph), 15)
    expected = client.get(graph, keys=keys, timeout=TIMEOUT)
    assert client.get(graph, keys=keys, timeout=TIMEOUT, group=group) == expected
    futures = client.submit_graph(graph, keys=keys, group=group)
    assert [f.result(timeout=TIMEOUT) for f in futures] == [expected[k] for k in keys]


def test_group_one_is_the_normal_path(client: Client) -> None:
    graph: Graph = {"a": 2, "b": (inc, "a"), "c": (operator.add, "a", "b"), "d": "c"}
    assert client.get(graph, keys=["d", "b"], group=1) == client.get(graph, keys=["d", "b"]) == {"d": 5, "b": 3}


def test_a_key_in_the_middle_of_a_block_and_a_literal(client: Client) -> None:
    graph: Graph = {"a": 1, "b": (inc, "a"), "c": (inc, "b"), "d": (inc, "c"), "e": (inc, "d")}
    futures = client.submit_graph(graph, keys=["e", "c", "a", "c"], group=100)  # one block; "c" twice
    assert [f.result(timeout=TIMEOUT) for f in futures] == [5, 3, 1, 3]
    assert futures[1] is futures[3] and all(isinstance(f, ScalerFuture) for f in futures)
    assert futures[0].task_id == futures[1].task_id != 0  # one task: the block


def test_nested_list_arguments(client: Client) -> None:
    graph: Graph = {"x": 1, "y": (inc, "x"), "s": (sum, ["x", "y", (inc, "y")]), "n": (list, [["x", 5], ["y", ("x",)]])}
    assert client.get(graph, keys=["s", "n"], group=2) == client.get(graph, keys=["s", "n"])


def test_a_failing_node_fails_its_block_and_the_blocks_after_it_with_its_own_exception(client: Client) -> None:
    graph: Graph = {
        "one": 1,
        "bad": (fail, "one"),
        "b1": (inc, "bad"),
        "b2": (inc, "b1"),
        "b3": (inc, "b2"),
        "ok": (inc, 5),
    }
    ungrouped = client.submit_graph(graph, keys=["bad", "b3", "ok"])
    grouped = client.submit_graph(graph, keys=["bad", "b3", "ok"], group=2)  # blocks [bad b1] [b2 b3] [ok]
    for futures in (ungrouped, grouped):
        for future in futures[:2]:
            with pytest.raises(NodeError, match="this node failed"):
                future.result(timeout=TIMEOUT)
            assert isinstance(future.exception(timeout=TIMEOUT), NodeError)
        assert futures[2].result(timeout=TIMEOUT) == 6


def test_the_futures_behave_as_futures(client: Client) -> None:
    graph: Graph = {"a": (sleep_and_return, 0.3, 1), "b": (inc, "a"), "c": (inc, "b")}
    b, c = client.submit_graph(graph, keys=["b", "c"], group=2)
    assert not b.done() and b.running()
    called = threading.Event()
    c.add_done_callback(lambda f: called.set())
    done, _ = concurrent.futures.wait([b, c], timeout=TIMEOUT)
    assert done == {b, c} and called.wait(TIMEOUT)
    assert (b.result(), c.result(), b.exception()) == (2, 3, None)
    assert b.cancel() is False


def sleep_then_touch(seconds: float, path: str) -> str:
    time.sleep(seconds)
    with open(path, "w"):
        pass
    return path


def test_cancelling_every_keys_future_cancels_the_blocks(client: Client, tmp_path: pathlib.Path) -> None:
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    graph: Graph = {
        "s1": (sleep_then_touch, 1.5, first),
        "a": (len, "s1"),
        "s2": (sleep_then_touch, 1.5, second),
        "c": (len, "s2"),
    }
    a, c = client.submit_graph(graph, keys=["a", "c"], group=2)  # two blocks: [s1 a] [s2 c]
    assert a.cancel() and a.cancelled() and not c.done()  # "c" is still wanted: the blocks run on
    assert c.cancel() and c.cancelled()
    time.sleep(2.5)  # past the time the blocks would have taken: they were stopped before writing their files
    assert not os.path.exists(first) and not os.path.exists(second)
    assert client.map(inc, [(i,) for i in range(4)], timeout=TIMEOUT) == [1, 2, 3, 4]


def test_get_past_its_timeout_cancels_the_grouped_graph(client: Client) -> None:
    graph: Graph = {
        "s1": (sleep_and_return, 60, 1),
        "s2": (sleep_and_return, 60, 2),
        "late": (operator.add, "s1", "s2"),
    }
    with pytest.raises(TimeoutError, match=r"1 of 1 keys had not been computed after 0.5s"):
        client.get(graph, keys=["late"], timeout=0.5, group=1)
    assert client.map(inc, [(i,) for i in range(4)], timeout=TIMEOUT) == [1, 2, 3, 4]


def test_an_object_reference_argument(client: Client) -> None:
    ref = client.send_object(10, name="ten")
    graph: Graph = {"x": (operator.add, ref, 5), "y": (operator.mul, "x", ref), "r": ref}
    assert client.get(graph, keys=["y", "x", "r"], group=5) == {"y": 150, "x": 15, "r": ref}


@pytest.mark.parametrize("bad", [0, -1, 2.5, "10", True])
def test_a_bad_group_is_refused_before_anything_is_submitted(client: Client, bad: object) -> None:
    with pytest.raises(ValueError, match="group must be a whole number of graph nodes per task, at least 1"):
        # a call mypy refuses, made anyway: the run-time check is what is tested
        client.get({"a": (inc, 1)}, keys=["a"], group=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="group must be"):
        client.submit_graph({"a": (inc, 1)}, keys=["a"], group=bad)  # type: ignore[arg-type]


def test_with_task_options(client: Client) -> None:
    graph: Graph = {"a": 1, "b": (inc, "a"), "c": (inc, "b")}
    with_options = client.options(priority=3)
    assert with_options.get(graph, keys=["c"], group=2) == {"c": 3}
    assert [f.result(timeout=TIMEOUT) for f in with_options.submit_graph(graph, keys=["b"], group=2)] == [2]


def test_dask_collections_with_group(client: Client) -> None:
    dask = pytest.importorskip("dask")
    array = pytest.importorskip("dask.array")
    numbers = array.arange(400, chunks=10)  # 40 chunks, then the sum's tree
    assert dask.compute((numbers * 2).sum(), scheduler=client, group=7, timeout=60) == (159600,)
    with pytest.raises(ValueError, match="group must be"):  # dask passes group on to dask_get
        dask.compute(numbers.sum(), scheduler=client.dask_get, group=0)
