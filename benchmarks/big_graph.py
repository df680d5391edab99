"""Large dask-style graphs side by side: how long the client takes to hand the graph over, and to get every result.

The graph is a random DAG like `../shared/bench/peer_bench.py`'s `graph` workload, built here: two literals, then
NODES tasks `add(a, b)`, a and b two distinct nodes drawn from the WINDOW nodes before (seeded, so every engine gets
the same graph). The keys asked for are the sinks (the nodes nothing uses), so every node runs. Each engine takes the
graph as a dict the way its documents say, on 2 workers of one CPU each:

  ours   SchedulerClusterCombo(n_workers=2); client.submit_graph(graph, keys) returns futures, then result()
  dask   LocalCluster(2 processes, 1 thread each); client.get(graph, keys, sync=False) returns futures, then gather

`submit_s` is the time until the call returns its futures (planning and sending the graph), `total_s` until every
result is back and checked. Each run is a fresh process with a time limit. One JSON line per run.

usage:
  python benchmarks/big_graph.py [--peers ours,dask] [--nodes 100000] [--window 1000] [--limit 300] [--out FILE]
"""

from __future__ import annotations

import argparse

from peer_runs import GRAPH_SOURCE, check_peers, emit, run_script

GRAPH = (
    """
import json, socket, sys, time
"""
    + GRAPH_SOURCE
    + """
def report(submit_s, total_s, results, expected, sinks):
    print(json.dumps({"submit_s": submit_s, "total_s": total_s, "sinks": len(sinks), "correct": results == expected}),
          flush=True)
"""
)

OURS = (
    GRAPH
    + """
from scaler import Client, SchedulerClusterCombo

if __name__ == "__main__":
    graph, sinks, expected = make_graph(int(sys.argv[1]), int(sys.argv[2]))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    cluster = SchedulerClusterCombo(address=address, n_workers=2, logging_level="ERROR")
    with Client(address=address) as client:
        start = time.perf_counter()
        futures = client.submit_graph(graph, keys=sinks)
        submitted = time.perf_counter() - start
        results = [future.result() for future in futures]
        report(submitted, time.perf_counter() - start, results, expected, sinks)
    cluster.shutdown()
"""
)

DASK = (
    GRAPH
    + """
import logging
from distributed import Client, LocalCluster

if __name__ == "__main__":
    graph, sinks, expected = make_graph(int(sys.argv[1]), int(sys.argv[2]))
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                           silence_logs=logging.ERROR)
    with Client(cluster) as client:
        start = time.perf_counter()
        futures = client.get(graph, sinks, sync=False)
        submitted = time.perf_counter() - start
        results = client.gather(futures)
        report(submitted, time.perf_counter() - start, results, expected, sinks)
    cluster.close()
"""
)

SCRIPTS = {"ours": OURS, "dask": DASK}


def run(peer: str, nodes: int, window: int, limit: float) -> dict[str, object]:
    line: dict[str, object] = {"peer": peer, "nodes": nodes, "window": window}
    result, why_not = run_script(peer, SCRIPTS[peer], [str(nodes), str(window)], limit)
    if result is None:
        line.update(finished=False, note=why_not)
        return line
    line.update(
        finished=bool(result["correct"]),
        submit_s=round(float(result["submit_s"]), 3),
        total_s=round(float(result["total_s"]), 3),
        sinks=result["sinks"],
    )
    if not result["correct"]:
        line["note"] = "wrong results"
    return line


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--peers", default="ours,dask")
    p.add_argument("--nodes", default="100000", help="graph sizes, comma-separated")
    p.add_argument("--window", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--limit", type=float, default=300.0, help="seconds before a run counts as not finished")
    p.add_argument("--out", help="append the JSON lines to this file")
    args = p.parse_args()
    peers = args.peers.split(",")
    check_peers(p, peers, SCRIPTS)
    for _ in range(args.repeat):
        for nodes in (int(x) for x in args.nodes.split(",")):
            for peer in peers:
                emit(run(peer, nodes, args.window, args.limit), args.out)


if __name__ == "__main__":
    main()
