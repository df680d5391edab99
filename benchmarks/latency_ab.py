"""Single-task round trip of two versions of Scaler, alternated run by run on this machine.

On a shared 2-vCPU virtual machine the round trip drifts by tens of percent within minutes, so two versions
measured one after the other cannot be compared. This runs them in turns (A, B, A, B, ...), each run a fresh
cluster (SchedulerClusterCombo, 2 workers) and RTT_N sequential submit -> result round trips after a warm-up, and
reports each version's median over the runs and the median of the paired ratios B/A.

usage:
  python benchmarks/latency_ab.py REF_A REF_B [--rounds 12] [--round-trips 600] [--cpus-a 0,1] [--cpus-b 0]

REF is a git revision of this repository (exported to a temporary directory), or WORK for the working tree.
--cpus-a / --cpus-b run that side's whole process tree (client, scheduler, workers) on those CPUs only, for
example `HEAD HEAD --cpus-b 0` to see what crossing CPUs costs the round trip on this machine.
The interpreter running this script runs both versions (its site-packages provide pyzmq, pycapnp, ...).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ONE_RUN = r"""
import socket, statistics, sys, time
sys.path.insert(0, sys.argv[1])
from scaler import Client, SchedulerClusterCombo

def noop(x):
    return x

if __name__ == "__main__":
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    address = f"tcp://127.0.0.1:{port}"
    cluster = SchedulerClusterCombo(address=address, n_workers=2, logging_level="WARNING")
    try:
        with Client(address=address) as client:
            for i in range(200):
                client.submit(noop, i).result(timeout=30)
            times = []
            for i in range(int(sys.argv[2])):
                start = time.perf_counter_ns()
                client.submit(noop, i).result(timeout=30)
                times.append(time.perf_counter_ns() - start)
    finally:
        cluster.shutdown()
    print(statistics.median(times) / 1000)
"""


def export(ref: str, into: str) -> str:
    """A directory holding the `src` tree of `ref`."""
    target = os.path.join(into, ref.replace("/", "_"))
    os.makedirs(target)
    if ref == "WORK":
        shutil.copytree(os.path.join(ROOT, "src"), os.path.join(target, "src"))
    else:
        archive = subprocess.run(["git", "-C", ROOT, "archive", ref, "src"], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", target], input=archive.stdout, check=True)
    return os.path.join(target, "src")


def _cpus(text: str) -> set[int]:
    return {int(cpu) for cpu in text.split(",")}


def _restrict(cpus: set[int] | None) -> Callable[[], None] | None:
    if cpus is None:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ref_a")
    parser.add_argument("ref_b")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--round-trips", type=int, default=600)
    parser.add_argument("--cpus-a", type=_cpus, default=None, help="CPUs for side A, like 0,1 (default: all)")
    parser.add_argument("--cpus-b", type=_cpus, default=None, help="CPUs for side B, like 0 (default: all)")
    args = parser.parse_args()
    cpus = {"A": args.cpus_a, "B": args.cpus_b}
    with tempfile.TemporaryDirectory(prefix="scaler-ab-") as work:
        trees = {"A": export(args.ref_a, work)}
        trees["B"] = trees["A"] if args.ref_b == args.ref_a else export(args.ref_b, work)
        script = os.path.join(work, "one_run.py")
        with open(script, "w") as f:
            f.write(ONE_RUN)
        medians: dict[str, list[float]] = {"A": [], "B": []}
        for round_number in range(args.rounds):
            for name in ("A", "B"):
                out = subprocess.run(
                    [sys.executable, script, trees[name], str(args.round_trips)],
                    preexec_fn=_restrict(cpus[name]),
                    capture_output=True,
                    text=True,
                    timeout=300,
                    check=True,
                )
                medians[name].append(float(out.stdout.strip().splitlines()[-1]))
            print(f"round {round_number + 1}: A {medians['A'][-1]:,.0f} µs, B {medians['B'][-1]:,.0f} µs", flush=True)
    ratios = [b / a for a, b in zip(medians["A"], medians["B"])]
    print(f"A ({args.ref_a}{_on(cpus['A'])}): median {statistics.median(medians['A']):,.0f} µs")
    print(f"B ({args.ref_b}{_on(cpus['B'])}): median {statistics.median(medians['B']):,.0f} µs")
    print(f"B/A, median of the paired ratios: {statistics.median(ratios):.3f}")


def _on(cpus: set[int] | None) -> str:
    return "" if cpus is None else f" on CPUs {','.join(map(str, sorted(cpus)))}"


if __name__ == "__main__":
    main()
