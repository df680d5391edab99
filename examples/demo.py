"""Scaler demo: a scheduler and workers on this machine doing real work (run by scripts/demo).

    python examples/demo.py [--workers 2] [--address tcp://127.0.0.1:PORT] [--tasks 100000]

It starts a local SchedulerClusterCombo, prints its address and monitor address (scaler_top connects there),
then runs: 100 submits of math.sqrt, a map of --tasks no-op tasks with its tasks/second, a graph, and a
nested fibonacci; and shuts everything down.
"""

from __future__ import annotations

import argparse
import math
import socket
import sys
import time

from scaler import Client, SchedulerClusterCombo


def noop(x: int) -> int:
    return x


def inc(i: int) -> int:
    return i + 1


def add(a: int, b: int) -> int:
    return a + b


def minus(a: int, b: int) -> int:
    return a - b


def fibonacci(clnt: Client, n: int) -> int:
    if n < 2:
        return n
    a = clnt.submit(fibonacci, clnt, n - 1)
    b = clnt.submit(fibonacci, clnt, n - 2)
    return a.result() + b.result()


def free_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def step(title: str) -> float:
    print(f"\n== {title}", flush=True)
    return time.perf_counter()


def run(client: Client, n_tasks: int) -> None:
    start = step("submit: 100 tasks of math.sqrt, summed")
    futures = [client.submit(math.sqrt, i) for i in range(100)]
    total = sum(future.result() for future in futures)
    print(f"sum of sqrt(0..99) = {total:.2f} (expected 661.46)  [{time.perf_counter() - start:.2f}s]")
    assert abs(total - 661.46) < 0.01

    start = step(f"map: {n_tasks:,} no-op tasks")
    results = client.map(noop, [(i,) for i in range(n_tasks)])
    elapsed = time.perf_counter() - start
    assert results == list(range(n_tasks))
    print(f"{len(results):,} results in order in {elapsed:.2f}s = {n_tasks / elapsed:,.0f} tasks/s")

    start = step("graph: e = (a + b) - (a + 1) with a = b = 2")
    graph = {"a": 2, "b": 2, "c": (inc, "a"), "d": (add, "a", "b"), "e": (minus, "d", "c")}
    result = client.get(graph, keys=["e"])
    print(f"client.get(graph, keys=['e']) = {result} (expected {{'e': 1}})  [{time.perf_counter() - start:.2f}s]")
    assert result == {"e": 1}

    start = step("nested tasks: fibonacci(8), each call submitting its two children")
    fib = client.submit(fibonacci, client, 8).result()
    print(f"fibonacci(8) = {fib} (expected 21)  [{time.perf_counter() - start:.2f}s]")
    assert fib == 21


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", "-n", type=int, default=2, help="workers to start (default: 2)")
    parser.add_argument("--address", default=None, help="scheduler address (default: a free port on 127.0.0.1)")
    parser.add_argument("--tasks", type=int, default=100_000, help="tasks in the map step (default: 100000)")
    args = parser.parse_args(argv)
    address = args.address or free_address()

    began = time.perf_counter()
    cluster = SchedulerClusterCombo(address=address, n_workers=args.workers, logging_level="WARNING")
    try:
        print(f"scheduler address: {cluster.address} with {args.workers} workers")
        print(f"monitor address:   {cluster.monitor_address}  (watch with: scaler_top {cluster.monitor_address})")
        with Client(address=cluster.address) as client:
            run(client, args.tasks)
    finally:
        start = step("shutdown")
        cluster.shutdown()
        print(f"scheduler and workers stopped in {time.perf_counter() - start:.2f}s")
    print(f"\ndemo finished in {time.perf_counter() - began:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
