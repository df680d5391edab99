"""The scheduler on PyPy beside the scheduler on CPython (issue 17): the same CPython workers and client, only the
scheduler's interpreter differs.

    flock /tmp/bench.lock .venv/bin/python benchmarks/pypy_scheduler.py --rounds 4
    .venv/bin/python benchmarks/pypy_scheduler.py --schedulers "cpython=.venv/bin/scaler_scheduler --cpu none" \
        "pypy=.venv-pypy/bin/scaler_scheduler --cpu none"           # any commands, NAME=COMMAND

Each round starts every scheduler in turn (A, B in odd rounds, B, A in even ones), each fresh, with a fresh
`scaler_cluster -n 2` (this venv's CPython) and one client (this process). Against each scheduler: --maps maps of
--tasks no-op tasks one after the other (the first is cold: PyPy's JIT has not compiled the scheduler yet; the later
ones warm), the wall time and the scheduler's CPU seconds of each; then --rtt lone round trips
(submit(...).result(), after 100 warm-up ones) in blocks of 1,000: the median, 90th percentile and scheduler CPU per
round trip of the first block and of the last; the scheduler's idle CPU (its workers and client connected) over
--idle seconds; and its peak RSS (VmHWM).
Prints one JSON line per (round, scheduler), appended to --out if given, then medians over the rounds.
The PyPy scheduler is .venv-pypy's (scripts/pypy-venv). Every process started here is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from scaler import Client

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]
WARM_UP_ROUND_TRIPS = 100
RTT_BLOCK = 1000


def noop(x: int) -> int:
    return x


def free_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def workers_ready(cluster: subprocess.Popen[bytes], n: int) -> bool:
    try:
        agents = psutil.Process(cluster.pid).children()
        return len(agents) >= n and all(agent.children() for agent in agents)
    except psutil.Error:
        return False


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def measure(name: str, command: str, args: argparse.Namespace, log_dir: str) -> dict[str, Any]:
    address = free_address()
    log = os.path.join(log_dir, f"{name}.log")
    with open(log, "w") as out:
        scheduler = subprocess.Popen([*shlex.split(command), address, "-ll", "INFO"], stdout=out, stderr=out)
    cluster: subprocess.Popen[bytes] | None = None
    row: dict[str, Any] = {"scheduler": name, "command": command, "tasks": args.tasks}
    try:
        wait_for(lambda: "listening on" in Path(log).read_text(), 30, f"{name} to listen ({log})")
        row["interpreter"] = next(
            (line.split("Scheduler: ", 1)[1].strip() for line in open(log) if "codec" in line), "?"
        )
        cluster = subprocess.Popen(
            [str(BIN / "scaler_cluster"), "-n", str(args.workers), "-ll", "WARNING", address],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        wait_for(lambda: workers_ready(cluster, args.workers), 60, f"{args.workers} workers")
        proc = psutil.Process(scheduler.pid)
        with Client(address, timeout_seconds=60) as client:
            client.map(noop, range(2 * args.workers), timeout=60)  # the function reaches the scheduler
            maps = []
            for _ in range(args.maps):
                cpu0, start = cpu_seconds(proc), time.perf_counter()
                results = client.map(noop, range(args.tasks), timeout=600)
                wall = time.perf_counter() - start
                if results != list(range(args.tasks)):
                    raise RuntimeError(f"{name}: wrong results")
                maps.append({"s": round(wall, 3), "cpu_s": round(cpu_seconds(proc) - cpu0, 3)})
            row["maps"] = maps
            for _ in range(WARM_UP_ROUND_TRIPS):
                client.submit(noop, 1).result()
            blocks = []
            for _ in range(max(1, args.rtt // RTT_BLOCK)):
                trips = []
                cpu0 = cpu_seconds(proc)
                for i in range(RTT_BLOCK):
                    start = time.perf_counter()
                    if client.submit(noop, i).result() != i:
                        raise RuntimeError(f"{name}: wrong result")
                    trips.append(time.perf_counter() - start)
                blocks.append(
                    (statistics.median(trips), statistics.quantiles(trips, n=10)[-1], cpu_seconds(proc) - cpu0)
                )
            # the first block after the warm-up, and the last one (PyPy's JIT compiles the lone path over thousands)
            for label, (median, p90, cpu) in (("rtt_first", blocks[0]), ("rtt", blocks[-1])):
                row[f"{label}_us"] = round(1e6 * median)
                row[f"{label}_p90_us"] = round(1e6 * p90)
                row[f"{label}_cpu_us"] = round(1e6 * cpu / RTT_BLOCK)
            cpu0 = cpu_seconds(proc)
            time.sleep(args.idle)
            row["idle_cpu_pct"] = round(100 * (cpu_seconds(proc) - cpu0) / args.idle, 1)
        row["peak_rss_mb"] = peak_rss_mb(scheduler.pid)
    finally:
        if cluster is not None:
            stop(cluster)
        stop(scheduler)
    return row


def summary(rows: list[dict[str, Any]], names: list[str]) -> None:
    print("\nmedians over the rounds (cold = first map of a fresh scheduler; warm = the later maps):")
    header = (
        "scheduler | cold map tasks/s | warm map tasks/s | cold CPU s/map | warm CPU s/map | "
        "RTT µs first / last block (p90) | CPU µs per round trip first / last | idle CPU % | RSS MB"
    )
    print(header)
    for name in names:
        mine = [r for r in rows if r["scheduler"] == name]
        if not mine:
            continue
        tasks = mine[0]["tasks"]
        cold = [tasks / r["maps"][0]["s"] for r in mine]
        warm = [tasks / m["s"] for r in mine for m in r["maps"][1:]]
        cold_cpu = [r["maps"][0]["cpu_s"] for r in mine]
        warm_cpu = [m["cpu_s"] for r in mine for m in r["maps"][1:]]

        def spread(values: list[float], digits: int = 0) -> str:
            if not values:
                return "-"
            low, mid, high = min(values), statistics.median(values), max(values)
            return f"{mid:,.{digits}f} ({low:,.{digits}f}-{high:,.{digits}f})"

        print(
            f"{name} | {spread(cold)} | {spread(warm)} | {spread(cold_cpu, 2)} | {spread(warm_cpu, 2)} | "
            f"{median(mine, 'rtt_first_us')} / {median(mine, 'rtt_us')} ({median(mine, 'rtt_p90_us')}) | "
            f"{median(mine, 'rtt_first_cpu_us')} / {median(mine, 'rtt_cpu_us')} | {median(mine, 'idle_cpu_pct', 1)} | "
            f"{median(mine, 'peak_rss_mb')}"
        )


def median(rows: list[dict[str, Any]], key: str, digits: int = 0) -> str:
    return f"{statistics.median(r[key] for r in rows):,.{digits}f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--schedulers",
        nargs="+",
        default=[f"cpython={BIN / 'scaler_scheduler'}", f"pypy={ROOT / '.venv-pypy' / 'bin' / 'scaler_scheduler'}"],
        help="NAME=COMMAND of each scheduler to compare (the address and logging options are appended)",
    )
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--tasks", type=int, default=100_000)
    p.add_argument("--maps", type=int, default=4, help="maps per scheduler: the first cold, the others warm")
    p.add_argument(
        "--rtt", type=int, default=5000, help="lone round trips measured (after 100 warm-up ones), in blocks of 1,000"
    )
    p.add_argument(
        "--idle", type=float, default=3.0, help="seconds the scheduler's idle CPU is measured over, at the end"
    )
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", default=None, help="append the JSON lines to this file")
    args = p.parse_args()
    schedulers = [tuple(spec.split("=", 1)) for spec in args.schedulers]
    if any(len(spec) != 2 for spec in schedulers):
        p.error("--schedulers takes NAME=COMMAND items")
    rows = []
    log_dir = tempfile.mkdtemp(prefix="pypy-scheduler-")
    print(f"scheduler logs in {log_dir}", file=sys.stderr)
    for round_number in range(args.rounds):
        order = schedulers if round_number % 2 == 0 else schedulers[::-1]
        for name, command in order:
            row = {"round": round_number, **measure(name, command, args, log_dir)}
            rows.append(row)
            line = json.dumps(row)
            print(line, flush=True)
            if args.out:
                with open(args.out, "a") as out:
                    out.write(line + "\n")
    summary(rows, [name for name, _ in schedulers])


if __name__ == "__main__":
    main()
