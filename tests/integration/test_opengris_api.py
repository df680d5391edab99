"""opengris-scaler 2.x scripts (issue 29): client.starmap, client.submit_verbose, Client() without an address inside a
task, and map()'s TypeError saying its tuple rule. Against the module's real cluster (tests/conftest.py)."""

from __future__ import annotations

from typing import Any

import pytest

from scaler import Client
from scaler.errors import MissingCapabilityError

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
