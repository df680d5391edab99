"""Nested recursion side by side: the README's fibonacci, each call a task that submits two tasks and waits.

fibonacci(n) makes fib(n+1)*2-1 tasks, and nearly every task that is not a leaf waits on its children at the peak
(232 at n=12, 986 at n=15). Each engine runs it the way its documents say, on 2 workers of one CPU each:

  ours, scaler19   SchedulerClusterCombo(n_workers=2); the task gets the Client and calls submit/result
  dask             LocalCluster(2 processes, 1 thread each); the task uses worker_client() (it secedes while it waits)
  ray              ray.init(num_cpus=2); the task calls fib.remote() and ray.get() (Ray lends the CPU of a
                   blocked task to a new worker process)

Each run is a fresh process with a time limit; a run past it is reported as "did not finish". One JSON line per run.

usage:
  python benchmarks/nested.py [--peers ours,scaler19,dask,ray] [--n 12,15] [--repeat 1] [--limit 120]
                              [--max-processors N] [--out FILE]
"""

from __future__ import annotations

import argparse
import time

from peer_runs import check_peers, emit, run_script

SCALER = """
import json, socket, sys, time
from scaler import Client, SchedulerClusterCombo

def fibonacci(clnt, n):
    if n <= 1:
        return n
    a = clnt.submit(fibonacci, clnt, n - 1)
    b = clnt.submit(fibonacci, clnt, n - 2)
    return a.result() + b.result()

if __name__ == "__main__":
    n, max_processors = int(sys.argv[1]), int(sys.argv[2])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    options = {"max_processors_per_worker": max_processors} if max_processors else {}
    cluster = SchedulerClusterCombo(address=address, n_workers=2, logging_level="ERROR", **options)
    with Client(address=address) as client:
        start = time.perf_counter()
        value = client.submit(fibonacci, client, n).result()
        print(json.dumps({"seconds": time.perf_counter() - start, "value": value}), flush=True)
    cluster.shutdown()
"""

DASK = """
import json, logging, sys, time
from distributed import Client, LocalCluster, worker_client

def fibonacci(n):
    if n <= 1:
        return n
    with worker_client() as clnt:
        a = clnt.submit(fibonacci, n - 1, pure=False)
        b = clnt.submit(fibonacci, n - 2, pure=False)
        return a.result() + b.result()

if __name__ == "__main__":
    n = int(sys.argv[1])
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                           silence_logs=logging.ERROR)
    with Client(cluster) as client:
        start = time.perf_counter()
        value = client.submit(fibonacci, n, pure=False).result()
        print(json.dumps({"seconds": time.perf_counter() - start, "value": value}), flush=True)
    cluster.close()
"""

RAY = """
import json, logging, sys, time
import ray

@ray.remote
def fibonacci(n):
    if n <= 1:
        return n
    return sum(ray.get([fibonacci.remote(n - 1), fibonacci.remote(n - 2)]))

if __name__ == "__main__":
    n = int(sys.argv[1])
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False,
             _node_ip_address="127.0.0.1")
    start = time.perf_counter()
    value = ray.get(fibonacci.remote(n))
    print(json.dumps({"seconds": time.perf_counter() - start, "value": value}), flush=True)
    ray.shutdown()
"""

SCRIPTS = {"ours": SCALER, "scaler19": SCALER, "dask": DASK, "ray": RAY}


def fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def run(peer: str, n: int, limit: float, max_processors: int) -> dict[str, object]:
    args = [str(n)]
    if peer in ("ours", "scaler19"):
        args.append(str(max_processors if peer == "ours" else 0))
    started = time.perf_counter()
    line: dict[str, object] = {"peer": peer, "n": n, "tasks": 2 * fib(n + 1) - 1}
    if peer == "ours" and max_processors:
        line["max_processors_per_worker"] = max_processors
    result, why_not = run_script(peer, SCRIPTS[peer], args, limit)
    if result is None:
        line.update(finished=False, seconds=None, note=why_not)
        return line
    correct = result["value"] == fib(n)
    wall = round(time.perf_counter() - started, 1)
    line.update(finished=correct, seconds=round(float(result["seconds"]), 3), wall=wall)
    if not correct:
        line["note"] = f"wrong value {result['value']!r}"
    return line


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--peers", default="ours,scaler19,dask,ray")
    p.add_argument("--n", default="12,15", help="fibonacci arguments, comma-separated")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--limit", type=float, default=120.0, help="seconds before a run counts as not finished")
    p.add_argument("--max-processors", type=int, default=0, help="ours only: max_processors_per_worker (0: default)")
    p.add_argument("--out", help="append the JSON lines to this file")
    args = p.parse_args()
    peers = args.peers.split(",")
    check_peers(p, peers, SCRIPTS)
    for _ in range(args.repeat):
        for n in (int(x) for x in args.n.split(",")):
            for peer in peers:
                emit(run(peer, n, args.limit, args.max_processors), args.out)


if __name__ == "__main__":
    main()
