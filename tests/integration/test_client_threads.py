"""One client shared by several threads doing different things at once: every result right, nothing stuck.

Each thread draws operations from its own seeded random stream for a few seconds: submit of a function made on the
spot, map, send_object, cancel of half a batch, a graph, as_completed, and functions created by one thread and used
by the others at once. The order in which they meet differs from run to run; what must hold does not. A second
run does the same while processors are killed (kill -9) under it.
"""

from __future__ import annotations

import concurrent.futures
import random
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

import psutil

from scaler import Client, SchedulerClusterCombo
from tests.helpers import combo_cluster, free_address, kill_if_alive

TIMEOUT = 30
SECONDS = 6
THREADS = 6


def square(x: int) -> int:
    return x * x


def add(a: int, b: int) -> int:
    return a + b


def pause_and_return(x: int) -> int:
    time.sleep(0.01)
    return x


def make_decrement(ballast: bytes) -> Callable[[int], int]:
    """A new function object carrying `ballast` (its pickle is that big)."""

    def decrement(z: int) -> int:
        return z - 1 + 0 * len(ballast)

    return decrement


def run_mixed_operations(client: Client, seed: int, until: float, shared: list[Callable[[int], int]]) -> None:
    rng = random.Random(seed)
    while time.monotonic() < until:
        op = rng.randrange(8)
        if op == 0:  # a function this client never saw
            assert client.submit(lambda x, k=seed: x + k, 1).result(timeout=TIMEOUT) == 1 + seed
        elif op == 1:
            n = rng.randrange(1, 300)
            assert client.map(square, [(i,) for i in range(n)]) == [i * i for i in range(n)]
        elif op == 2:
            value = rng.randrange(1000)
            ref = client.send_object(value)
            assert client.submit(add, ref, 1).result(timeout=TIMEOUT) == value + 1
        elif op == 3:
            futures = [client.submit(pause_and_return, i) for i in range(20)]
            for future in futures[::2]:
                future.cancel()
            done, _ = concurrent.futures.wait(futures, timeout=TIMEOUT)
            assert len(done) == len(futures)
            assert all(f.result() == i for i, f in enumerate(futures) if not f.cancelled())
        elif op == 4:
            graph: dict[Hashable, Any] = {"a": 1, "b": (add, "a", 2), "c": (square, "b")}
            assert client.get(graph, keys=["c"]) == {"c": 9}
        elif op == 5:
            futures = [client.submit(square, i) for i in range(50)]
            assert len(list(concurrent.futures.as_completed(futures, timeout=TIMEOUT))) == 50
            assert [f.result() for f in futures] == [i * i for i in range(50)]
        elif op == 6:  # a new function, with a payload to pickle, that the other threads start using at once
            shared[0] = make_decrement(bytes(rng.randrange(1, 200_000)))
            assert client.submit(shared[0], 10).result(timeout=TIMEOUT) == 9
        else:
            assert client.submit(shared[0], 10).result(timeout=TIMEOUT) == 9


def run_threads(client: Client, seconds: float, during: Callable[[], None] | None = None) -> None:
    """THREADS threads doing mixed operations on `client` for `seconds`; `during` runs meanwhile, here."""
    until = time.monotonic() + seconds
    shared: list[Callable[[int], int]] = [lambda z: z - 1]
    errors: list[BaseException] = []

    def thread_main(seed: int) -> None:
        try:
            run_mixed_operations(client, seed, until, shared)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=thread_main, args=(seed,)) for seed in range(THREADS)]
    for thread in threads:
        thread.start()
    if during is not None:
        during()
    for thread in threads:
        thread.join(seconds + 2 * TIMEOUT)
    assert not [t for t in threads if t.is_alive()], "a thread is stuck"
    assert not errors, errors[:3]


def test_threads_sharing_a_client_get_every_result_right(client: Client) -> None:
    run_threads(client, SECONDS)


def test_threads_sharing_a_client_get_every_result_right_while_processors_die() -> None:
    """Every second a random processor of this test's own cluster is killed: the tasks it ran run again (retries
    are set high enough that none runs out), and every thread still gets every result right."""
    with SchedulerClusterCombo(
        address=free_address(),
        n_workers=2,
        max_task_retries=50,
        heartbeat_interval_seconds=0.5,
        worker_timeout_seconds=3,
        logging_level="ERROR",
    ) as combo:
        cluster = psutil.Process(combo_cluster(combo).pid)
        killed = []

        def kill_processors() -> None:
            rng = random.Random(7)
            until = time.monotonic() + SECONDS
            while time.monotonic() < until:
                time.sleep(1.0)
                try:
                    processors = [p for agent in cluster.children() for p in agent.children()]
                except psutil.NoSuchProcess:  # an agent replacing its processor, or ended, while we listed
                    continue
                if processors:
                    victim = rng.choice(processors)
                    if kill_if_alive(victim):  # a processor may end (or be replaced) after the listing
                        killed.append(victim.pid)

        with Client(address=combo.address, timeout_seconds=TIMEOUT) as client:
            run_threads(client, SECONDS, during=kill_processors)
        assert len(killed) >= SECONDS // 2
