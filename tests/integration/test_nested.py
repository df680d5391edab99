"""Nested tasks deeper than a worker's processors: waiting tasks run others inside their waits, never deadlock.

Each cluster here allows few processors per worker (max_processors_per_worker), so that a modest recursion already
keeps every processor blocked in a nested wait and the rest must run inside those waits (the agent's help).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.io.sockets import connect_subscriber
from scaler.monitor.top import next_status
from tests.helpers import Graph, fibonacci, free_address
from tests.integration.test_faults import agents_of, wait_for_workers_joined

TIMEOUT = 90
FAST: dict[str, Any] = {"heartbeat_interval_seconds": 0.5, "worker_timeout_seconds": 5, "logging_level": "ERROR"}


def tree_map(clnt: Client, depth: int) -> int:
    """2 ** depth, each level waiting in Client.map."""
    if depth == 0:
        return 1
    return sum(clnt.map(tree_map, [(clnt, depth - 1), (clnt, depth - 1)]))


def add(a: int, b: int) -> int:
    return a + b


def tree_get(clnt: Client, depth: int) -> int:
    """2 ** depth, each level waiting in Client.get."""
    if depth == 0:
        return 1
    graph: Graph = {"a": (tree_get, clnt, depth - 1), "b": (tree_get, clnt, depth - 1), "sum": (add, "a", "b")}
    return int(clnt.get(graph, keys=["sum"])["sum"])


def chain(clnt: Client, n: int) -> int:
    """A chain of n waiting tasks whose last one raises."""
    if n == 0:
        raise ValueError("the bottom of the chain")
    return int(clnt.submit(chain, clnt, n - 1).result())


def chain_caught(clnt: Client, n: int) -> str:
    """Like chain, but the top catches the error and goes on: the processor must be usable after it."""
    try:
        chain(clnt, n)
    except ValueError as exc:
        return f"caught: {exc}"
    return "not raised"


def wait_for_first_status(sock: Any) -> None:
    """Until the monitor subscription is live (a first status came). The work a test then watches can be over within
    a second or two, and a first status later than that (a slow subscribe on a loaded machine) missed all of it."""
    deadline = time.monotonic() + TIMEOUT
    while next_status(sock, 500) is None:
        assert time.monotonic() < deadline, "no status from the scheduler's monitor"


@pytest.fixture(scope="module")
def narrow() -> Iterator[SchedulerClusterCombo]:
    """Two workers of two processors each, and room for only 4 queued tasks per worker."""
    combo = SchedulerClusterCombo(
        address=free_address(), n_workers=2, max_processors_per_worker=2, per_worker_queue_size=4, **FAST
    )
    try:
        yield combo
    finally:
        combo.shutdown()


@pytest.fixture()
def client(narrow: SchedulerClusterCombo) -> Iterator[Client]:
    with Client(address=narrow.address, timeout_seconds=30) as c:
        yield c


@pytest.mark.timeout(150)
def test_a_recursion_far_deeper_than_the_processors_finishes(client: Client) -> None:
    # fibonacci(13): up to 376 tasks wait at once, for 4 processors and 8 queue places in all
    assert client.submit(fibonacci, client, 13).result(timeout=TIMEOUT) == 233


@pytest.mark.timeout(150)
def test_the_monitor_counts_the_tasks_waiting_on_nested_tasks(narrow: SchedulerClusterCombo, client: Client) -> None:
    sock = connect_subscriber(narrow.monitor_address)
    try:
        wait_for_first_status(sock)
        future = client.submit(fibonacci, client, 13)
        most = 0
        deadline = time.monotonic() + TIMEOUT
        while not future.done() and time.monotonic() < deadline:
            status = next_status(sock, 500)
            if status is not None:
                most = max(most, sum(w.waiting for w in status.workers))
        assert future.result(timeout=TIMEOUT) == 233
    finally:
        sock.close()
    assert most > 4  # more waiting tasks than the 4 processors: the workers reported their piles


@pytest.mark.timeout(150)
def test_waits_in_map_and_get_run_tasks_too(client: Client) -> None:
    assert client.submit(tree_map, client, 6).result(timeout=TIMEOUT) == 64
    assert client.submit(tree_get, client, 5).result(timeout=TIMEOUT) == 32


@pytest.mark.timeout(150)
def test_an_error_deep_in_a_chain_of_waits_reaches_the_top(client: Client) -> None:
    # 60 levels: the tasks run inside waits span several threads of a processor (a fresh stack every 16 levels)
    with pytest.raises(ValueError, match="the bottom of the chain"):
        client.submit(chain, client, 60).result(timeout=TIMEOUT)
    assert client.submit(chain_caught, client, 60).result(timeout=TIMEOUT) == "caught: the bottom of the chain"
    assert client.submit(fibonacci, client, 10).result(timeout=TIMEOUT) == 55  # the workers still serve


@pytest.mark.timeout(150)
def test_hundreds_of_waits_piled_in_one_processor() -> None:
    # One processor: every level of the chain runs inside the wait of the level above, 300 deep. One thread's stack
    # and Python's recursion limit would not hold them (RecursionError): each 16 levels get a thread of their own.
    with SchedulerClusterCombo(address=free_address(), n_workers=1, max_processors_per_worker=1, **FAST) as combo:
        with Client(address=combo.address, timeout_seconds=30) as c:
            caught = c.submit(chain_caught, c, 300).result(timeout=TIMEOUT)
    assert caught == "caught: the bottom of the chain"


@pytest.mark.timeout(150)
def test_a_worker_killed_with_a_pile_of_waiting_tasks_loses_nothing() -> None:
    # Its pile dies with it: the scheduler runs those tasks again on the other workers, and their parents get their
    # results as if nothing happened.
    with SchedulerClusterCombo(address=free_address(), n_workers=3, max_processors_per_worker=2, **FAST) as combo:
        with Client(address=combo.address, timeout_seconds=30) as c:
            wait_for_workers_joined(c, 3)
            agents = sorted(agents_of(combo), key=lambda p: p.create_time())  # started in the order of their index
            sock = connect_subscriber(combo.monitor_address)
            try:
                wait_for_first_status(sock)
                future = c.submit(fibonacci, c, 15)
                victim = None
                deadline = time.monotonic() + TIMEOUT
                while victim is None and not future.done() and time.monotonic() < deadline:
                    status = next_status(sock, 500)
                    piles = [w for w in status.workers if w.waiting > 2] if status is not None else []
                    victim = piles[0].name if piles else None
                assert victim is not None and not future.done()
                agents[int(victim.rsplit("-", 1)[1])].kill()  # names end with the worker's index; processors follow
                # The scheduler drops the worker we meant (not another one). scaler_cluster restarts it under the
                # same name, maybe before a status shows it missing: the status's departed list says it left.
                gone = False
                deadline = time.monotonic() + TIMEOUT
                while not gone and time.monotonic() < deadline:
                    status = next_status(sock, 500)
                    gone = status is not None and (
                        victim not in {w.name for w in status.workers}
                        or victim in {d.name for d in status.departed if d.lost}
                    )
                assert gone
            finally:
                sock.close()
            assert future.result(timeout=TIMEOUT) == 610


@pytest.mark.timeout(150)
def test_a_worker_paused_past_its_timeout_with_waits_piled_in_one_processor_recovers() -> None:
    # The scheduler gives up on the paused worker and runs its tasks again; the worker comes back to a new session.
    # Its processor, blocked in the old chain's waits, is replaced: before, the re-runs ran inside those waits, on the
    # same stack, each level of the chain starting a chain of its own (over two minutes instead of seconds).
    timing: dict[str, Any] = {"heartbeat_interval_seconds": 0.5, "worker_timeout_seconds": 2, "logging_level": "ERROR"}
    with SchedulerClusterCombo(address=free_address(), n_workers=1, max_processors_per_worker=1, **timing) as combo:
        with Client(address=combo.address, timeout_seconds=30) as c:
            wait_for_workers_joined(c, 1)
            [agent] = agents_of(combo)
            sock = connect_subscriber(combo.monitor_address)
            try:
                wait_for_first_status(sock)
                future = c.submit(chain_caught, c, 300)
                deep = False
                deadline = time.monotonic() + TIMEOUT
                while not deep and not future.done() and time.monotonic() < deadline:
                    status = next_status(sock, 500)
                    deep = status is not None and sum(w.waiting for w in status.workers) >= 100
            finally:
                sock.close()
            assert deep and not future.done()
            agent.suspend()
            try:
                time.sleep(3.5)  # past the worker timeout
            finally:
                agent.resume()
            assert future.result(timeout=60) == "caught: the bottom of the chain"
