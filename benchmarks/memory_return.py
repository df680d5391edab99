"""Whether the scheduler gives its memory back after a burst: its RSS before, at the peak of and after each burst.

usage: python benchmarks/memory_return.py [--variants big,small] [--big-tasks 5000] [--big-bytes 100000]
                                          [--small-tasks 200000] [--settle 10] [--workers 2] [--out FILE]
                                          [--scheduler-env NAME=VALUE ...] [--log-level DEBUG] [--label TEXT]

Each variant gets a fresh scaler_scheduler and scaler_cluster (WORKERS workers), subprocesses of this interpreter
(to measure another tree, set PYTHONPATH=TREE/src), one Client, one task of each kind and 3 s of quiet: the baseline.
Then the burst:
  big    BIG_TASKS submits, each with a distinct argument of BIG_BYTES bytes, of a task that sleeps TASK_MS (so that
         most of the burst waits in the scheduler), every result waited for, the futures released;
  small  map() of SMALL_TASKS no-op tasks.
The scheduler's RSS (psutil, by pid) is sampled every 20 ms during the burst (its peak), then read 1, 3 and SETTLE
seconds after the last result. Prints a table (one row per variant); --out appends a JSON line per variant.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psutil

from scaler import Client

MIB = 2**20
CHECKPOINTS = (1.0, 3.0)  # seconds after the burst, besides --settle
BASELINE_QUIET_S = 3.0


def sleepy_length(data: bytes, seconds: float) -> int:
    time.sleep(seconds)
    return len(data)


def noop(x: object) -> object:
    return x


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PeakSampler:
    """The highest RSS of a process, sampled every `interval` seconds from a thread, inside a `with` block."""

    def __init__(self, process: psutil.Process, interval: float = 0.02) -> None:
        self.process = process
        self.interval = interval
        self.peak = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            self._done.wait(self.interval)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)


def big_burst(client: Client, tasks: int, size: int, seconds: float) -> None:
    base = bytearray(os.urandom(size))
    futures = []
    for i in range(tasks):
        base[:8] = i.to_bytes(8, "little")  # distinct arguments: nothing can be shared
        futures.append(client.submit(sleepy_length, bytes(base), seconds))
    if any(f.result() != size for f in futures):
        raise RuntimeError("a task returned the wrong length")


def small_burst(client: Client, tasks: int) -> None:
    if client.map(noop, [(i,) for i in range(tasks)]) != list(range(tasks)):
        raise RuntimeError("map returned the wrong results")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def cluster(workers: int, log_level: str, scheduler_env: dict[str, str]) -> Iterator[tuple[Client, psutil.Process]]:
    """A fresh scheduler and workers (subprocesses), a connected client, and the scheduler's process."""
    port = free_port()
    address, monitor = f"tcp://127.0.0.1:{port}", f"ipc:///tmp/scaler_bench_{port}_monitor"
    entry = [sys.executable, "-m"]
    scheduler = subprocess.Popen(
        [*entry, "scaler.entry_points.scheduler", address, "-ma", monitor, "-ll", log_level],
        env={**os.environ, **scheduler_env},
    )
    workers_process = subprocess.Popen(
        [*entry, "scaler.entry_points.cluster", address, "-n", str(workers), "--logging-level", "WARNING"]
    )
    try:
        client = Client(address, timeout_seconds=30)
        try:
            yield client, psutil.Process(scheduler.pid)
        finally:
            client.disconnect()
    finally:
        stop(workers_process)
        stop(scheduler)
        try:
            os.unlink(monitor.removeprefix("ipc://"))
        except OSError:
            pass


def measure(client: Client, process: psutil.Process, burst: Callable[[Client], None], settle: float) -> dict[str, Any]:
    client.submit(sleepy_length, b"x", 0.0).result()  # every function and session the burst needs, before the baseline
    client.map(noop, [(0,)])
    time.sleep(BASELINE_QUIET_S)
    baseline = process.memory_info().rss
    started = time.perf_counter()
    with PeakSampler(process) as sampler:
        burst(client)
    elapsed = time.perf_counter() - started
    gc.collect()  # the futures and arguments are gone on this side too
    ended = time.monotonic()
    after = {}
    for mark in (*[c for c in CHECKPOINTS if c < settle], settle):
        time.sleep(max(0.0, ended + mark - time.monotonic()))
        after[mark] = process.memory_info().rss
    return {
        "benchmark": "memory_return",
        "burst_s": round(elapsed, 2),
        "rss_baseline_mib": round(baseline / MIB, 1),
        "rss_peak_mib": round(sampler.peak / MIB, 1),
        **{f"rss_after_{mark:g}s_mib": round(rss / MIB, 1) for mark, rss in after.items()},
    }


def print_table(rows: list[dict[str, Any]], settle: float) -> None:
    marks = [c for c in CHECKPOINTS if c < settle] + [settle]
    head = ["variant", "burst", "baseline", "peak", *[f"+{m:g} s" for m in marks], "kept of the growth"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        base, peak, last = row["rss_baseline_mib"], row["rss_peak_mib"], row[f"rss_after_{settle:g}s_mib"]
        kept = (last - base) / (peak - base) if peak > base else 0.0
        cells = [
            row["variant"],
            f"{row['burst_s']:.1f} s",
            f"{base:.1f} MiB",
            f"{peak:.1f} MiB",
            *[f"{row[f'rss_after_{m:g}s_mib']:.1f} MiB" for m in marks],
            f"{kept:.0%}",
        ]
        print("| " + " | ".join(cells) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default="big,small")
    parser.add_argument("--big-tasks", type=int, default=5000)
    parser.add_argument("--big-bytes", type=int, default=100_000)
    parser.add_argument("--task-ms", type=float, default=2.0, help="how long each big task sleeps")
    parser.add_argument("--small-tasks", type=int, default=200_000)
    parser.add_argument("--settle", type=float, default=10.0, help="seconds after a burst of the last RSS reading")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--log-level", default="WARNING", help="the scheduler's (DEBUG shows its trims)")
    parser.add_argument(
        "--scheduler-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set in the scheduler's environment only, e.g. GLIBC_TUNABLES=glibc.malloc.mmap_threshold=65536",
    )
    parser.add_argument("--out", default=None, help="append a JSON line per variant to this file")
    parser.add_argument("--label", default="", help="a label for this sitting's JSON lines (e.g. before, after)")
    args = parser.parse_args()
    scheduler_env = dict(item.split("=", 1) for item in args.scheduler_env)
    bursts: dict[str, tuple[str, Callable[[Client], None]]] = {
        "big": (
            f"{args.big_tasks:,} x {args.big_bytes:,} B",
            lambda client: big_burst(client, args.big_tasks, args.big_bytes, args.task_ms / 1000),
        ),
        "small": (f"{args.small_tasks:,} no-op", lambda client: small_burst(client, args.small_tasks)),
    }
    rows = []
    for variant in args.variants.split(","):
        name, burst = bursts[variant]
        with cluster(args.workers, args.log_level, scheduler_env) as (client, process):
            row = {"variant": name, **measure(client, process, burst, args.settle)}
        row["scheduler_env"] = scheduler_env
        row["label"] = args.label
        rows.append(row)
        if args.out:
            with open(args.out, "a") as out:
                out.write(json.dumps(row) + "\n")
    print_table(rows, args.settle)


if __name__ == "__main__":
    main()
