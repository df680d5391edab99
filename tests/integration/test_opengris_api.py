"""opengris-scaler 2.x scripts (issue 29): client.starmap, client.submit_verbose, Client() without an address inside a
task, and map()'s TypeError saying its tuple rule. Against the module's real cluster (tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.errors import MissingCapabilityError
from tests.integration.test_client_faults import docs_example

TIMEOUT = 20


def add(x: int, y: int) -> int:
    return x + y


def takes_profiling(x: int, profiling: str = "") -> str:
    return f"{x}:{profiling}"


def area(rectangle: tuple[int, int]) -> int:
    width, height = rectangle
    return width * height


def fibonacci(n: int) -> int:
    """A nested client made the opengris 2.x way: Client() inside the task, no address."""
    if n < 2:
        return n
    with Client() as client:
        a, b = client.submit(fibonacci, n - 1), client.submit(fibonacci, n - 2)
        return int(a.result()) + int(b.result())


def test_starmap_calls_fn_with_each_tuple(client: Client) -> None:
    assert client.starmap(add, [(1, 10), (2, 20), (3, 30)]) == [11, 22, 33]
    assert client.starmap(add, [[1, 2], iter((3, 4))]) == [3, 7]  # any iterable of arguments
    assert client.starmap(add, []) == []
    assert client.options(priority=1).starmap(add, [(5, 5)]) == [10]
    with pytest.raises(TypeError, match="item 1 is 7"):
        client.starmap(add, [(1, 2), 7])  # type: ignore[list-item]


def test_submit_verbose_gives_every_keyword_to_fn_and_takes_capabilities(client: Client) -> None:
    assert client.submit_verbose(round, args=(3.15,), kwargs={}).result(TIMEOUT) == 3
    # profiling is reserved in submit(), not here: it reaches the function
    assert client.submit_verbose(takes_profiling, (1,), {"profiling": "mine"}).result(TIMEOUT) == "1:mine"
    profiled = client.submit_verbose(add, (1, 2), profiling=True)
    assert profiled.result(TIMEOUT) == 3 and profiled.profiling_info() is not None
    with pytest.raises(MissingCapabilityError, match="gpu"):  # no worker of this cluster offers it
        client.submit_verbose(round, args=(3.15,), kwargs={}, capabilities={"gpu": -1}).result(TIMEOUT)
    assert client.options(retries=1).submit_verbose(add, (2, 3)).result(TIMEOUT) == 5
    with pytest.raises(TypeError, match="args as a tuple"):
        client.submit_verbose(add, 1)  # type: ignore[arg-type]


def test_a_client_made_in_a_task_without_an_address_reaches_its_workers_scheduler(client: Client) -> None:
    assert client.submit(fibonacci, 7).result(TIMEOUT * 3) == 13


def test_a_client_without_an_address_outside_a_task_says_what_to_give() -> None:
    with pytest.raises(TypeError, match=r"needs the scheduler's address: Client\('tcp://HOST:PORT'\)"):
        Client()


def test_map_says_its_tuple_rule_when_the_first_call_would_fail(client: Client) -> None:
    rectangles: list[Any] = [(2, 3), (4, 5)]
    with pytest.raises(TypeError, match=r"map calls area\(\*item\) with each tuple item.*\[\(item,\) for item in"):
        client.map(area, rectangles)
    assert client.map(area, [(r,) for r in rectangles]) == [6, 20]  # as the error says
    with pytest.raises(TypeError, match="with 3 iterables, map calls add"):
        client.map(add, [1], [2], [3])


# ----------------------------------------------------------------------------------- dask.distributed habits
def test_scatter_and_gather_as_a_dask_user_writes_them(client: Client) -> None:
    [numbers] = client.scatter([[1, 2, 3]])
    single = client.scatter({"a": 10})
    futures = [client.submit(sum, numbers), client.submit(add, single["a"], 1)]
    assert client.gather(futures) == [6, 11]
    assert client.gather({"x": futures[0], "nested": (futures[1], 5)}) == {"x": 6, "nested": (11, 5)}
    failing = client.submit(add, 1, "a")
    with pytest.raises(TypeError):
        client.gather([futures[0], failing])
    assert client.gather([futures[0], failing], errors="skip") == [6]
    with pytest.raises(ValueError, match='errors must be "raise" or "skip"'):
        client.gather(futures, errors="warn")
    assert client.submit(len, client.scatter("abc", broadcast=True)).result(TIMEOUT) == 3


def test_dask_client_methods_scaler_lacks_say_what_to_use(client: Client) -> None:
    with pytest.raises(AttributeError, match=r"no compute\(\).*dask\.compute\(x, scheduler=client\)"):
        client.compute  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(AttributeError, match=r"no persist\(\)"):
        client.persist  # type: ignore[attr-defined]  # noqa: B018
    assert not hasattr(client, "compute")  # (an AttributeError all the same: duck typing is not fooled)
    with pytest.raises(AttributeError, match="has no attribute 'frobnicate'"):
        client.frobnicate  # type: ignore[attr-defined]  # noqa: B018


def test_the_docs_example_runs_as_written(cluster: SchedulerClusterCombo) -> None:
    source = docs_example("### Habits from dask.distributed").replace("tcp://127.0.0.1:2345", cluster.address)
    out = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout == "[6, 3]\n"


def slow_inc(x: int) -> int:
    import time

    time.sleep(0.01)
    return x + 1


def chain_graph(length: int) -> dict[str, Any]:
    graph: dict[str, Any] = {"n0": 0}
    for i in range(1, length + 1):
        graph[f"n{i}"] = (slow_inc, f"n{i - 1}")
    return graph


def test_get_tells_every_task_of_the_graph_not_only_the_keys_asked_for(client: Client) -> None:
    ended: list[Any] = []
    assert client.get(chain_graph(40), keys=["n40"], on_task_end=ended.append) == {"n40": 40}
    assert sorted(ended, key=lambda k: int(k[1:])) == [f"n{i}" for i in range(1, 41)]  # 40 tasks: each once
    with pytest.raises(TypeError, match="on_task_end must be callable"):
        client.get(chain_graph(1), keys=["n1"], on_task_end=3)  # type: ignore[arg-type]


def test_dasks_progress_bar_and_callbacks_see_every_task(client: Client) -> None:
    import io

    import dask
    from dask.callbacks import Callback
    from dask.diagnostics import ProgressBar

    seen: list[Any] = []
    total = dask.delayed(sum)([dask.delayed(slow_inc)(i) for i in range(40)])
    out = io.StringIO()
    with ProgressBar(out=out, dt=0.01), Callback(posttask=lambda key, *_: seen.append(key)):
        assert dask.compute(total, scheduler=client) == (sum(range(1, 41)),)
    assert "100% Completed" in out.getvalue()
    assert len(seen) == 41  # 40 increments and the sum: every task, each once
