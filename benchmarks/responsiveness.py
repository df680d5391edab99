"""How long another client waits while one client hands a large graph to the scheduler.

Starts a SchedulerClusterCombo with 2 workers. A prober client, in a thread, runs one no-op round trip every 10 ms.
After a second, the main client hands over a random graph of NODES `add` tasks (each using two of the 1,000 nodes
before it, every sink asked for) with `submit_graph`, and the prober keeps going for 8 s more. Prints how long the
hand-over took and the prober's median and longest round trip from its start until 8 s after it: the longest is how
long the scheduler left other peers waiting while it took the graph in. Both clients live in this process, so the
prober also waits for the interpreter lock while the main thread plans the graph.

usage:
  python benchmarks/responsiveness.py [--nodes 300000] [--seconds 8]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import threading
import time

from peer_runs import make_graph

from scaler import Client, SchedulerClusterCombo


def noop(x: int) -> int:
    return x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=300_000)
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args()
    graph, sinks, _ = make_graph(args.nodes)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    cluster = SchedulerClusterCombo(address=address, n_workers=2, logging_level="WARNING")
    stop = threading.Event()
    probes: list[float] = []

    def probe() -> None:
        with Client(address=address) as prober:
            prober.submit(noop, 0).result(timeout=30)
            while not stop.is_set():
                start = time.perf_counter()
                prober.submit(noop, 1).result(timeout=120)
                probes.append(time.perf_counter() - start)
                time.sleep(0.01)

    thread = threading.Thread(target=probe)
    try:
        thread.start()
        time.sleep(1.0)
        with Client(address=address) as client:
            probes.clear()
            start = time.perf_counter()
            client.submit_graph(graph, sinks)
            handed = time.perf_counter() - start
            time.sleep(args.seconds)
            stop.set()
            thread.join(150)
        print(
            f"{args.nodes:,} nodes handed over in {handed:.2f} s; the other client's round trips from then until "
            f"{args.seconds:g} s after: {len(probes)}, median {statistics.median(probes) * 1000:.1f} ms, "
            f"longest {max(probes) * 1000:.0f} ms",
            flush=True,
        )
    finally:
        stop.set()
        cluster.shutdown()


if __name__ == "__main__":
    main()
