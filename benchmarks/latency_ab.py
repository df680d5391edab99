"""Single-task round trip of two versions of Scaler, alternated run by run on this machine.

On a shared 2-vCPU virtual machine the round trip drifts by tens of percent within minutes, so two versions
measured one after the other cannot be compared. This runs them in turns, each run a fresh cluster
(SchedulerClusterCombo, 2 workers) and RTT_N sequential submit -> result round trips after a warm-up, and reports
each version's median over the runs and the median of the paired ratios B/A. The order alternates (A B, B A,
A B, ...) so that neither side always runs second, right after the other warmed the machine.

With --interleave, both versions run at once instead, each its own cluster and client in its own process, and
take turns in blocks of --block round trips (A B, B A, ...): a drift of the machine that lasts longer than a
block (tens of milliseconds) then hits both alike. It reports the median over all round trips of each version and
the median of the paired per-block ratios. Use it to see differences of a few percent; the default mode also
covers what changes from one cluster start to the next.

usage:
  python benchmarks/latency_ab.py REF_A REF_B [--rounds 12] [--round-trips 600] [--cpus-a 0,1] [--cpus-b 0]
  python benchmarks/latency_ab.py REF_A REF_B --interleave [--blocks 60] [--block 50]
  (both: [--transport-a tcp|ipc] [--transport-b tcp|ipc] [--loop-a builtin|uvloop] [--loop-b builtin|uvloop]
         [--env-a NAME=VALUE ...] [--env-b NAME=VALUE ...])

REF is a git revision of this repository (exported to a temporary directory), WORK for the working tree, or
the path of a directory holding a `scaler` package (a tree prepared by hand, compiled modules and all).
--cpus-a / --cpus-b run that side's whole process tree (client, scheduler, workers) on those CPUs only, for
example `HEAD HEAD --cpus-b 0` to see what crossing CPUs costs the round trip on this machine.
--env-a / --env-b set environment variables for that side's whole process tree (repeatable), for example
`WORK WORK --env-b PYTHONHASHSEED=0` (the same tree, one setting changed).
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

DRIVER = r"""
import os, socket, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
from scaler import Client, SchedulerClusterCombo

def noop(x):
    return x

if __name__ == "__main__":
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    address = f"tcp://127.0.0.1:{port}"
    if sys.argv[2] == "ipc":
        address = f"ipc://{tempfile.gettempdir()}/scaler-latency-ab-{os.getpid()}.sock"
    cluster = SchedulerClusterCombo(address=address, n_workers=2, logging_level="WARNING", event_loop=sys.argv[3])
    try:
        with Client(address=address) as client:
            for i in range(200):
                client.submit(noop, i).result(timeout=30)
            print("ready", flush=True)
            for line in sys.stdin:
                count = int(line)
                if count == 0:
                    break
                times = []
                for i in range(count):
                    start = time.perf_counter_ns()
                    client.submit(noop, i).result(timeout=30)
                    times.append(time.perf_counter_ns() - start)
                print(" ".join(map(str, times)), flush=True)
    finally:
        cluster.shutdown()
"""


def export(ref: str, into: str) -> str:
    """A directory holding the `src` tree of `ref`."""
    if os.path.isdir(os.path.join(ref, "scaler")):
        return os.path.abspath(ref)
    target = os.path.join(into, ref.replace("/", "_").replace("~", "_").replace("^", "_"))
    os.makedirs(target)
    if ref == "WORK":
        shutil.copytree(os.path.join(ROOT, "src"), os.path.join(target, "src"))
    else:
        archive = subprocess.run(["git", "-C", ROOT, "archive", ref, "src"], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", target], input=archive.stdout, check=True)
    return os.path.join(target, "src")


def _cpus(text: str) -> set[int]:
    return {int(cpu) for cpu in text.split(",")}


def _assignment(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=VALUE")
    return name, value


def _environment(assignments: list[tuple[str, str]]) -> dict[str, str]:
    return {**os.environ, **dict(assignments)}


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
    parser.add_argument("--transport-a", choices=("tcp", "ipc"), default="tcp", help="side A's addresses")
    parser.add_argument("--transport-b", choices=("tcp", "ipc"), default="tcp", help="side B's addresses")
    parser.add_argument("--loop-a", choices=("builtin", "uvloop"), default="builtin", help="side A's event loop")
    parser.add_argument("--loop-b", choices=("builtin", "uvloop"), default="builtin", help="side B's event loop")
    parser.add_argument("--env-a", type=_assignment, action="append", default=[], help="NAME=VALUE for side A")
    parser.add_argument("--env-b", type=_assignment, action="append", default=[], help="NAME=VALUE for side B")
    parser.add_argument("--interleave", action="store_true", help="run both at once, in turns of --block")
    parser.add_argument("--blocks", type=int, default=60, help="with --interleave: blocks per version")
    parser.add_argument("--block", type=int, default=50, help="with --interleave: round trips per block")
    args = parser.parse_args()
    cpus = {"A": args.cpus_a, "B": args.cpus_b}
    setup = {"A": (args.transport_a, args.loop_a), "B": (args.transport_b, args.loop_b)}
    environments = {"A": _environment(args.env_a), "B": _environment(args.env_b)}
    shown = {"A": _env_text(args.env_a), "B": _env_text(args.env_b)}
    with tempfile.TemporaryDirectory(prefix="scaler-ab-") as work:
        trees = {"A": export(args.ref_a, work)}
        trees["B"] = trees["A"] if args.ref_b == args.ref_a else export(args.ref_b, work)
        if args.interleave:
            interleave(args, trees, cpus, setup, environments, shown, work)
            return
        script = os.path.join(work, "driver.py")
        with open(script, "w") as f:
            f.write(DRIVER)
        medians: dict[str, list[float]] = {"A": [], "B": []}
        for round_number in range(args.rounds):
            for name in ("A", "B") if round_number % 2 == 0 else ("B", "A"):
                out = subprocess.run(
                    [sys.executable, script, trees[name], *setup[name]],
                    preexec_fn=_restrict(cpus[name]),
                    env=environments[name],
                    input=f"{args.round_trips}\n0\n",
                    capture_output=True,
                    text=True,
                    timeout=300,
                    check=True,
                )
                times = [int(t) for t in out.stdout.strip().splitlines()[-1].split()]
                medians[name].append(statistics.median(times) / 1000)
            print(f"round {round_number + 1}: A {medians['A'][-1]:,.0f} µs, B {medians['B'][-1]:,.0f} µs", flush=True)
    ratios = [b / a for a, b in zip(medians["A"], medians["B"])]
    for name, ref in (("A", args.ref_a), ("B", args.ref_b)):
        median = statistics.median(medians[name])
        print(f"{name} ({ref}{_on(cpus[name])}{_with(setup[name])}{shown[name]}): median {median:,.0f} µs")
    print(f"B/A, median of the paired ratios: {statistics.median(ratios):.3f}")


def interleave(
    args: argparse.Namespace,
    trees: dict[str, str],
    cpus: dict[str, set[int] | None],
    setup: dict[str, tuple[str, str]],
    environments: dict[str, dict[str, str]],
    shown: dict[str, str],
    work: str,
) -> None:
    script = os.path.join(work, "driver.py")
    with open(script, "w") as f:
        f.write(DRIVER)
    drivers: dict[str, subprocess.Popen[str]] = {}
    try:
        for name in ("A", "B"):
            drivers[name] = subprocess.Popen(
                [sys.executable, script, trees[name], *setup[name]],
                preexec_fn=_restrict(cpus[name]),
                env=environments[name],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        for name, driver in drivers.items():
            assert driver.stdout is not None
            if driver.stdout.readline().strip() != "ready":
                raise SystemExit(f"side {name} did not start")
        samples: dict[str, list[int]] = {"A": [], "B": []}
        ratios = []
        for block in range(args.blocks):
            medians = {}
            for name in ("A", "B") if block % 2 == 0 else ("B", "A"):
                driver = drivers[name]
                assert driver.stdin is not None and driver.stdout is not None
                driver.stdin.write(f"{args.block}\n")
                driver.stdin.flush()
                times = [int(t) for t in driver.stdout.readline().split()]
                if len(times) != args.block:
                    raise SystemExit(f"side {name} failed during block {block + 1}")
                samples[name] += times
                medians[name] = statistics.median(times)
            ratios.append(medians["B"] / medians["A"])
            if (block + 1) % 10 == 0:
                print(f"{block + 1} blocks: B/A so far {statistics.median(ratios):.3f}", flush=True)
    finally:
        for driver in drivers.values():
            try:
                if driver.stdin is not None:
                    driver.stdin.write("0\n")
                    driver.stdin.close()
                driver.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                driver.kill()
    for name, ref in (("A", args.ref_a), ("B", args.ref_b)):
        median = statistics.median(samples[name]) / 1000
        print(f"{name} ({ref}{_on(cpus[name])}{_with(setup[name])}{shown[name]}): median {median:,.0f} µs")
    print(f"B/A, median of the paired per-block ratios: {statistics.median(ratios):.3f} over {args.blocks} blocks")


def _with(setup: tuple[str, str]) -> str:
    transport, loop = setup
    return "".join(f", {word}" for word in (transport, loop) if word not in ("tcp", "builtin"))


def _env_text(assignments: list[tuple[str, str]]) -> str:
    return "".join(f", {name}={value}" for name, value in assignments)


def _on(cpus: set[int] | None) -> str:
    return "" if cpus is None else f" on CPUs {','.join(map(str, sorted(cpus)))}"


if __name__ == "__main__":
    main()
