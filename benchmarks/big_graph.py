"""Large dask-style graphs side by side: how long the client takes to hand the graph over, and to get every result.

The graph is a random DAG like `../shared/bench/peer_bench.py`'s `graph` workload, built here: two literals, then
NODES tasks `add(a, b)`, a and b two distinct nodes drawn from the WINDOW nodes before (seeded, so every engine gets
the same graph). The keys asked for are the sinks (the nodes nothing uses), so every node runs. Each engine takes the
graph as a dict the way its documents say, on 2 workers of one CPU each:

  ours   SchedulerClusterCombo(n_workers=2); client.submit_graph(graph, keys) returns futures, then result()
  dask   LocalCluster(2 processes, 1 thread each); client.get(graph, keys, sync=False) returns futures, then gather

`submit_s` is the time until the call returns its futures (planning and sending the graph), `total_s` until every
result is back and checked. Each run is a fresh process with a time limit. One JSON line per run.

Ours also reports peak memory (VmHWM, MB): `client_peak_mb` of the client's process (which holds the graph dict it
was given: `client_graph_mb` is its RSS once the graph is built, before anything is submitted) and
`scheduler_peak_mb` of the scheduler's; and the CPU seconds each used (`*_cpu_s`: the client, building the graph
included; the scheduler; the workers with their processors). The cluster starts before the graph is built, so that
the forked scheduler and workers do not inherit the graph's pages. --src runs another tree of ours (for example a
copy of HEAD, to compare); --py-spy DIR samples the client, the scheduler and the workers (with their processors)
into DIR/{client,scheduler,workers}-NODES.txt (collapsed stacks). --group K (comma-separated, `none` for none)
submits ours with submit_graph(..., group=K): up to K consecutive nodes per task (docs/client.md).

usage:
  python benchmarks/big_graph.py [--peers ours,dask] [--nodes 100000] [--window 1000] [--limit 300] [--out FILE]
                                 [--src DIR] [--py-spy DIR] [--repeat N] [--group none,1000]
"""

from __future__ import annotations

import argparse
import os
import sys

from peer_runs import GRAPH_SOURCE, check_peers, emit, run_script

GRAPH = (
    """
import json, socket, sys, time
"""
    + GRAPH_SOURCE
    + """
def report(submit_s, total_s, results, expected, sinks, **more):
    line = {"submit_s": submit_s, "total_s": total_s, "sinks": len(sinks), "correct": results == expected}
    print(json.dumps({**line, **more}), flush=True)
"""
)

OURS = (
    GRAPH
    + """
import os, signal, subprocess
from scaler import Client, SchedulerClusterCombo

def memory_mb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return round(int(line.split()[1]) / 1024, 1)
    return None

def cpu_s(pid, tree=False):
    # user + system CPU seconds of a process (and, with tree, of its descendants alive now)
    import psutil
    process = psutil.Process(pid)
    total = sum(process.cpu_times()[:2])
    for child in process.children(recursive=True) if tree else ():
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            pass
    return round(total, 1)

def spy(directory, name, pid, subprocesses=False):
    if not directory:
        return None
    out = os.path.join(directory, f"{name}-{sys.argv[1]}.txt")
    command = [os.path.join(os.path.dirname(sys.executable), "py-spy"), "record", "-p", str(pid), "-f", "raw",
               "-r", "100", "-o", out, *(["--subprocesses"] if subprocesses else [])]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    cluster = SchedulerClusterCombo(address=address, n_workers=2, logging_level="ERROR")
    scheduler_pid = cluster._scheduler.pid
    graph, sinks, expected = make_graph(int(sys.argv[1]), int(sys.argv[2]))
    graph_mb = memory_mb(os.getpid(), "VmRSS")
    spies = [spy(sys.argv[3], "client", os.getpid()), spy(sys.argv[3], "scheduler", scheduler_pid),
             spy(sys.argv[3], "workers", cluster._cluster.pid, True)]
    if sys.argv[3]:
        time.sleep(1)  # attached
    with Client(address=address) as client:
        start = time.perf_counter()
        group = {"group": int(sys.argv[4])} if sys.argv[4] else {}
        futures = client.submit_graph(graph, keys=sinks, **group)
        submitted = time.perf_counter() - start
        results = [future.result() for future in futures]
        total = time.perf_counter() - start
        for p in spies:
            if p is not None:
                p.send_signal(signal.SIGINT)  # py-spy writes what it has on SIGINT
                p.wait(60)
        cpu = {"client_cpu_s": cpu_s(os.getpid()), "scheduler_cpu_s": cpu_s(scheduler_pid),
               "workers_cpu_s": cpu_s(cluster._cluster.pid, tree=True)}
        report(submitted, total, results, expected, sinks, client_graph_mb=graph_mb,
               client_peak_mb=memory_mb(os.getpid(), "VmHWM"), scheduler_peak_mb=memory_mb(scheduler_pid, "VmHWM"),
               **cpu)
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


def run(
    peer: str,
    nodes: int,
    window: int,
    limit: float,
    src: str | None = None,
    py_spy: str | None = None,
    group: int | None = None,
) -> dict[str, object]:
    line: dict[str, object] = {"peer": peer, "nodes": nodes, "window": window}
    if src:
        line["src"] = src
    if group is not None and peer == "ours":
        line["group"] = group
    args = [str(nodes), str(window)] + ([py_spy or "", str(group or "")] if peer == "ours" else [])
    result, why_not = run_script(peer, SCRIPTS[peer], args, limit, src)
    if result is None:
        line.update(finished=False, note=why_not)
        return line
    line.update(
        finished=bool(result["correct"]),
        submit_s=round(float(result["submit_s"]), 3),
        total_s=round(float(result["total_s"]), 3),
        sinks=result["sinks"],
    )
    line.update({k: v for k, v in result.items() if k.endswith(("_mb", "_cpu_s"))})
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
    p.add_argument("--src", help="ours: run this tree's scaler (a src directory) instead of this checkout's")
    p.add_argument("--py-spy", metavar="DIR", help="ours: sample client, scheduler and workers with py-spy into DIR")
    p.add_argument("--group", default="none", help="ours: nodes per task (submit_graph group=), comma-separated; none")
    args = p.parse_args()
    if args.src and not os.path.isfile(os.path.join(args.src, "scaler", "__init__.py")):
        p.error(f"--src {args.src}: no scaler package there (give a src directory, e.g. /tmp/base/src)")
    if args.py_spy:
        if not os.path.exists(os.path.join(os.path.dirname(sys.executable), "py-spy")):
            p.error(f"--py-spy: no py-spy beside {sys.executable} (pip install py-spy)")
        os.makedirs(args.py_spy, exist_ok=True)
    peers = args.peers.split(",")
    check_peers(p, peers, SCRIPTS)
    groups = [None if g == "none" else int(g) for g in args.group.split(",")]
    for _ in range(args.repeat):
        for nodes in (int(x) for x in args.nodes.split(",")):
            for group in groups:
                for peer in peers if group is None else [x for x in peers if x == "ours"]:
                    emit(run(peer, nodes, args.window, args.limit, args.src, args.py_spy, group), args.out)


if __name__ == "__main__":
    main()
