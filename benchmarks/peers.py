"""Scaler side by side with its peers, in one sitting, on this machine.

Runs ../shared/bench/peer_bench.py (one fresh process per run) for every peer and workload, interleaving the
peers so that drifting machine load hurts them alike, then prints the medians and each peer's ratio to ours.

usage:
  python benchmarks/peers.py [--peers ours,scaler19,scaler29,dask,ray,pool] [--workloads submit,map,latency,startup]
                             [--tasks 100000] [--repeat 3] [--n 2] [--out benchmarks/results/peers.jsonl]
                             [--cpu-sets all,0]

Each run's line also gives the host's steal over that run: of the time this machine's vCPUs had work to do, the
share the hypervisor gave to someone else (Linux /proc/stat). High steal marks a noisy sitting.

"ours" is this checkout, run with the interpreter running this script; the others come from the venvs made by
../shared/bench/setup_venvs.sh under $PEERS_DIR (default /tmp/peers). Results are JSON lines (one per run);
../shared/bench/summarize.py FILE prints the full tables.

--cpu-sets runs every peer once per CPU set in each round: "all" (the default: the machine's scheduler places every
process) or CPUs such as "0" or "0-1", given to the run's whole process tree (sched_setaffinity before it starts,
inherited by everything it starts, like `taskset`). Results are then labelled peer@cpus. "all,0" shows what waking
a thread on another CPU costs each peer: on a small VM where an idle vCPU must be woken through the hypervisor,
that cost, not the peer's own work, can be most of a round trip.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "bench", "peer_bench.py"))
PEERS_DIR = os.environ.get("PEERS_DIR", "/tmp/peers")

# peer name -> (interpreter, peer_bench.py PEER argument)
PEERS = {
    "ours": (sys.executable, "scaler"),
    "scaler19": (os.path.join(PEERS_DIR, "scaler19", "bin", "python"), "scaler"),
    "scaler29": (os.path.join(PEERS_DIR, "scaler29", "bin", "python"), "scaler"),
    "dask": (os.path.join(PEERS_DIR, "dask", "bin", "python"), "dask"),
    "ray": (os.path.join(PEERS_DIR, "ray", "bin", "python"), "ray"),
    "pool": (os.path.join(PEERS_DIR, "pool", "bin", "python"), "pool"),
}
METRIC = {
    "submit": ("tasks_per_s", True),
    "map": ("tasks_per_s", True),
    "latency": ("median_us", False),
    "startup": ("startup_to_first_result_s", False),
    "payload": ("MB_per_s", True),
    "payload_shared": ("effective_MB_per_s", True),
    "graph": ("nodes_per_s", True),
}
# The slow peers get fewer tasks (the figure is a rate); one run of 100,000 tasks on the anchor takes 10 minutes.
SLOW_TASKS = {"scaler19": 10_000, "scaler29": 10_000, "dask": 10_000}


def cpu_times() -> list[int] | None:
    """The machine's cumulative CPU time by kind (user, nice, system, idle, iowait, irq, softirq, steal, ...)."""
    try:
        with open("/proc/stat") as stat:
            return [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None


def steal_share(before: list[int] | None, after: list[int] | None) -> float | None:
    if before is None or after is None or len(before) < 8 or len(after) < 8:
        return None
    spent = [b - a for a, b in zip(before, after)]
    wanted = sum(spent[:8]) - spent[3] - spent[4]  # all but idle and iowait (guest time is inside user and nice)
    return spent[7] / wanted if wanted > 0 else None


def parse_cpus(text: str) -> set[int] | None:
    """None for "all", else the CPUs of "N" or "N-M" (on the command line a comma separates sets)."""
    if text == "all":
        return None
    first, _, last = text.partition("-")
    try:
        cpus = set(range(int(first), int(last or first) + 1))
    except ValueError:
        raise SystemExit(f'--cpu-sets: {text!r} is neither "all" nor CPUs like "0" or "0-1"') from None
    usable = os.sched_getaffinity(0)
    if not cpus <= usable:
        raise SystemExit(f"--cpu-sets: {text} names CPUs this process may not use (it may use {sorted(usable)})")
    return cpus


def run_one(
    peer: str,
    workload: str,
    tasks: int,
    n: int,
    out: str,
    timeout: float,
    cpus: set[int] | None = None,
    label: str | None = None,
) -> dict[str, object] | None:
    python, name = PEERS[peer]
    if not os.path.exists(python):
        print(f"skip {peer}: {python} missing (run ../shared/bench/setup_venvs.sh)", file=sys.stderr)
        return None
    if workload in ("submit", "map"):
        tasks = min(tasks, SLOW_TASKS.get(peer, tasks))
    command = [python, BENCH, name, workload, "--n", str(n), "--tasks", str(tasks), "--quiet-wait", "20"]
    command += ["--out", out, "--tag", label or peer]

    def confine() -> None:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)

    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, preexec_fn=confine)
    except subprocess.TimeoutExpired:
        print(f"{peer} {workload}: timed out after {timeout:g}s", file=sys.stderr)
        return None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        print(f"{peer} {workload}: no result (exit {done.returncode}): {done.stderr[-500:]}", file=sys.stderr)
        return None
    record: dict[str, object] = json.loads(lines[-1])
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peers", default="ours,scaler19,scaler29,dask,ray,pool")
    parser.add_argument("--workloads", default="submit,map,latency,startup,payload")
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--n", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds allowed per run")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "peers.jsonl"))
    parser.add_argument("--cpu-sets", default="all", help='comma-separated: "all" or CPUs like "0" or "0-1"')
    args = parser.parse_args()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    peers = args.peers.split(",")
    cpu_sets = [(text, parse_cpus(text)) for text in args.cpu_sets.split(",")]
    labelled = len(cpu_sets) > 1 or cpu_sets[0][1] is not None

    def label(peer: str, cpus_text: str) -> str:
        return f"{peer}@{cpus_text}" if labelled else peer

    results: dict[tuple[str, str], list[float]] = defaultdict(list)
    for _ in range(args.repeat):
        for workload in args.workloads.split(","):
            for cpus_text, cpus in cpu_sets:
                for peer in peers:
                    name = label(peer, cpus_text)
                    before = cpu_times()
                    record = run_one(peer, workload, args.tasks, args.n, args.out, args.timeout, cpus, name)
                    steal = steal_share(before, cpu_times())
                    if record is None or not record.get("ok"):
                        continue
                    key, _ = METRIC[workload]
                    value = record.get(key)
                    if isinstance(value, (int, float)):
                        results[(workload, name)].append(float(value))
                        noise = "" if steal is None else f"  (host steal {steal:.1%})"
                        print(f"{name:9s} {workload:8s} {key} = {value:,.1f}{noise}", flush=True)
    columns = [(label(peer, text), label("ours", text)) for text, _ in cpu_sets for peer in peers]
    print("\n| workload | metric | " + " | ".join(name for name, _ in columns) + " |")
    print("|---|---|" + "---|" * len(columns))
    for workload in args.workloads.split(","):
        key, higher_better = METRIC[workload]
        cells = []
        for peer, ours_name in columns:
            ours_values = results[(workload, ours_name)]
            ours = statistics.median(ours_values) if ours_values else None
            values = results[(workload, peer)]
            if not values:
                cells.append("n/a")
                continue
            median = statistics.median(values)
            cell = f"{median:,.0f}" if median >= 100 else f"{median:,.3g}"
            if ours and peer != ours_name:
                ratio = ours / median if higher_better else median / ours
                cell += f" (ours {ratio:,.1f}x)"
            cells.append(cell)
        print(f"| {workload} | {key} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
