"""CPU time of each step of a single-task round trip, measured where it runs (in place, caches as cold as they are).

A round trip on this machine is a chain of threads that wake one another; what each one spends on the CPU when woken
is what the chain is made of. Measured inside a running cluster, that CPU time is several times what the same code
costs in a warm loop (benchmarks/core_throughput.py, timeit): the other processes ran in between. This wraps the
functions each process runs per message (the scheduler's and the agent's reader callbacks, the processor's
receive/run/send steps, the client's submit, hand-over and receive) so that each call adds its thread's CPU time
(time.thread_time_ns: time waiting or blocked is not counted) to a per-process tally, runs ROUND_TRIPS sequential
submit -> result round trips on a SchedulerClusterCombo with one worker, and prints, per step, its CPU time per call
and per round trip.

The wrapping (and a SIGUSR1 handler that writes the tallies out) is done in this process before the cluster
starts; the cluster's processes are forked from it and inherit both. It costs about a microsecond per call,
included in the figures. Compare steps with each other and with the same script run on another tree (--src), not
with round trips measured without it. The figures move by tens of percent from one run to the next on a shared
machine: alternate the trees you compare.

usage:
  python benchmarks/hop_cpu.py [--round-trips 5000] [--src DIR] [--cpus 0]
      [--profile "agent WorkerAgent._on_scheduler_readable"]

--cpus runs the whole tree on those CPUs only (for example 0: no thread ever wakes another CPU).
--profile runs that step (named as in the table) under cProfile and prints where its time goes, function by
function (tottime per round trip): cProfile slows every call, so compare functions with each other and with the same
profile of another tree, not with the table's figures.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import json
import os
import pstats
import signal
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (process, module, class, method): the steps a lone task goes through, none of them calling another
STEPS = [
    ("client", "scaler.client.client", "Client", "submit"),
    ("client", "scaler.client.connection", "Connection", "_forward"),
    ("client", "scaler.client.connection", "Connection", "_receive"),
    ("client", "scaler.client.future", "ScalerFuture", "result"),
    ("scheduler", "scaler.scheduler.server", "SchedulerServer", "_on_readable"),
    ("scheduler", "scaler.scheduler.server", "SchedulerServer", "_recheck"),
    ("agent", "scaler.worker.agent", "WorkerAgent", "_on_scheduler_readable"),
    ("agent", "scaler.worker.agent", "WorkerAgent", "_on_processor_messages"),
    ("processor", "scaler.worker.processor", "Processor", "_on_message"),
    ("processor", "scaler.worker.processor", "Processor", "_run"),
    ("processor", "scaler.worker.processor", "Processor", "_flush"),
]

_tally: dict[str, list[int]] = {}  # step -> [calls, CPU ns], in the process that runs it
_out_dir = ""
_profile: cProfile.Profile | None = None  # of the --profile step, in the process that runs it


def _dump() -> None:
    path = os.path.join(_out_dir, str(os.getpid()))
    with open(path + ".tmp", "w") as f:
        json.dump(_tally, f)
    os.replace(path + ".tmp", path)
    if _profile is not None and _profile.getstats():
        _profile.dump_stats(path + ".prof")


def _profiled(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` run under this process's profile (made at its first call, after the fork)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        global _profile
        if _profile is None:
            _profile = cProfile.Profile()
        _profile.enable()
        try:
            return fn(*args, **kwargs)
        finally:
            _profile.disable()

    return wrapper


def _wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    clock = time.thread_time_ns

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            entry = _tally.get(name)
            if entry is None:
                entry = _tally[name] = [0, 0]
            entry[0] += 1
            entry[1] += clock() - start

    return wrapper


def noop(x: int) -> int:
    return x


def main() -> None:
    global _out_dir
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--round-trips", type=int, default=5000)
    parser.add_argument("--src", default=os.path.join(ROOT, "src"), help="the tree whose scaler package runs")
    parser.add_argument("--cpus", default=None, help="CPUs for the whole tree, like 0 (default: all)")
    parser.add_argument(
        "--profile",
        default=None,
        help='a step to profile, as the table names it, e.g. "agent WorkerAgent._on_scheduler_readable"',
    )
    args = parser.parse_args()
    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    sys.path.insert(0, args.src)
    import importlib

    import psutil

    from scaler import Client, SchedulerClusterCombo

    for process, module, cls, method in STEPS:
        owner = getattr(importlib.import_module(module), cls)
        name = f"{process} {cls}.{method}"
        fn = getattr(owner, method)
        setattr(owner, method, _wrap(name, _profiled(fn) if name == args.profile else fn))
    signal.signal(signal.SIGUSR1, lambda *_: _dump())

    def snapshot() -> dict[str, list[int]]:
        """Every process's tallies as of now (each writes its own file when signalled)."""
        _dump()
        for child in psutil.Process().children(recursive=True):
            child.send_signal(signal.SIGUSR1)
        time.sleep(0.5)
        return _read(_out_dir)

    with tempfile.TemporaryDirectory() as out_dir:
        _out_dir = out_dir
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
        s.close()
        cluster = SchedulerClusterCombo(address=address, n_workers=1, logging_level="WARNING")
        try:
            with Client(address=address) as client:
                for i in range(500):
                    client.submit(noop, i).result(timeout=30)
                before = snapshot()
                for name in os.listdir(out_dir):  # the profile of the warm-up goes
                    if name.endswith(".prof"):
                        os.remove(os.path.join(out_dir, name))
                times = []
                for i in range(args.round_trips):
                    start = time.perf_counter()
                    client.submit(noop, i).result(timeout=30)
                    times.append(time.perf_counter() - start)
                after = snapshot()
                profiles = [os.path.join(out_dir, n) for n in os.listdir(out_dir) if n.endswith(".prof")]
                if args.profile:
                    _print_profile(profiles, args.round_trips)
        finally:
            cluster.shutdown()
    n = args.round_trips
    print(f"{n} round trips, median {statistics.median(times) * 1e6:,.0f} µs (with the wrapping)")
    print(f"{'step':52s} {'µs/call':>8s} {'calls/RT':>9s} {'µs/RT':>7s}")
    total = 0.0
    for process, _, cls, method in STEPS:
        name = f"{process} {cls}.{method}"
        calls = after.get(name, [0, 0])[0] - before.get(name, [0, 0])[0]
        ns = after.get(name, [0, 0])[1] - before.get(name, [0, 0])[1]
        if calls <= 0:
            print(f"{name:52s} {'-':>8s}")
            continue
        total += ns / n / 1000
        print(f"{name:52s} {ns / calls / 1000:8.1f} {calls / n:9.2f} {ns / n / 1000:7.1f}")
    print(f"{'all steps':52s} {'':8s} {'':9s} {total:7.1f}")


def _print_profile(paths: list[str], round_trips: int) -> None:
    """The profiled step's functions, by their own time per round trip (cProfile's figures: inflated)."""
    if not paths:
        print("no profile was written (is the step's name right? see the table)")
        return
    stats = pstats.Stats(*paths)
    rows = []
    # pstats.Stats.stats: the profile's table, read directly (not in typeshed)
    for (file, line, function), (_, calls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append((tottime, calls, cumtime, f"{os.path.basename(file)}:{line}({function})"))
    rows.sort(reverse=True)
    print(f"{'function':70s} {'calls/RT':>9s} {'own µs/RT':>10s} {'cum µs/RT':>10s}")
    for tottime, calls, cumtime, where in rows[:40]:
        n = round_trips
        print(f"{where[-70:]:70s} {calls / n:9.2f} {tottime / n * 1e6:10.2f} {cumtime / n * 1e6:10.2f}")
    print()


def _read(out_dir: str) -> dict[str, list[int]]:
    """The tallies of every process, added up by step (each step runs in one process)."""
    merged: dict[str, list[int]] = {}
    for name in os.listdir(out_dir):
        if name.endswith(".tmp"):
            continue
        try:
            with open(os.path.join(out_dir, name)) as f:
                tally = json.load(f)
        except (OSError, ValueError):
            continue
        for step, (calls, ns) in tally.items():
            entry = merged.setdefault(step, [0, 0])
            entry[0] += calls
            entry[1] += ns
    return merged


if __name__ == "__main__":
    main()
