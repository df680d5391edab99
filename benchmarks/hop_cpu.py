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
      [--profile "agent WorkerAgent._on_scheduler_readable"] [--timeline [--wrap "process module function" ...]]

--cpus runs the whole tree on those CPUs only (for example 0: no thread ever wakes another CPU).
--timeline prints, instead of CPU time, when each step starts and ends on the wall clock (CLOCK_MONOTONIC, the same
in every process), as the median offset from the start of the client's submit over the round trips: where the round
trip's time is spent, waits for a thread to wake included. With --timeline, more functions may be wrapped with
--wrap "process module function" (a module-level function, replaced in that module: for example
--wrap "scheduler scaler.scheduler.server decode").

--profile runs that step (named as in the table) under cProfile and prints where its time goes, function by
function (tottime per round trip): cProfile slows every call, so compare functions with each other and with the same
profile of another tree, not with the table's figures.
"""

from __future__ import annotations

import argparse
import bisect
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
_spans: list[tuple[str, int, int]] = []  # with --timeline: (step, wall start ns, wall end ns) of every call
_out_dir = ""
_profile: cProfile.Profile | None = None  # of the --profile step, in the process that runs it


def _dump() -> None:
    path = os.path.join(_out_dir, str(os.getpid()))
    with open(path + ".tmp", "w") as f:
        json.dump({"tally": _tally, "spans": _spans}, f)
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


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    clock = time.perf_counter_ns  # CLOCK_MONOTONIC: comparable between the processes

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            _spans.append((name, start, clock()))

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
    parser.add_argument("--timeline", action="store_true", help="wall-clock start and end of each step instead")
    parser.add_argument(
        "--wrap",
        action="append",
        default=[],
        help='with --timeline, one more function to time, as "process module function"',
    )
    args = parser.parse_args()
    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    sys.path.insert(0, args.src)
    import psutil

    from scaler import Client, SchedulerClusterCombo

    _install(args.timeline, args.profile, args.wrap)
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
                _spans.clear()
                times = []
                windows: list[tuple[int, int]] = []
                for i in range(args.round_trips):
                    start_ns = time.perf_counter_ns()
                    client.submit(noop, i).result(timeout=30)
                    end_ns = time.perf_counter_ns()
                    times.append((end_ns - start_ns) / 1e9)
                    windows.append((start_ns, end_ns))
                after = snapshot()
                if args.timeline:
                    spans = _read_spans(out_dir, windows[0][0])
                profiles = [os.path.join(out_dir, n) for n in os.listdir(out_dir) if n.endswith(".prof")]
                if args.profile:
                    _print_profile(profiles, args.round_trips)
        finally:
            cluster.shutdown()
    n = args.round_trips
    if args.timeline:
        _print_timeline(spans, windows)
        return
    _print_table(before, after, n, times)


def _install(timeline: bool, profile: str | None, wraps: list[str]) -> None:
    """Wrap the steps (CPU tallies, or wall-clock spans with `timeline`) and, with `timeline`, the --wrap functions."""
    import importlib

    for process, module, cls, method in STEPS:
        owner = getattr(importlib.import_module(module), cls)
        name = f"{process} {cls}.{method}"
        fn = getattr(owner, method)
        if timeline:
            setattr(owner, method, _timed(name, fn))
        else:
            setattr(owner, method, _wrap(name, _profiled(fn) if name == profile else fn))
    for extra in wraps:
        process, module_name, function = extra.split()
        where = importlib.import_module(module_name)
        setattr(where, function, _timed(f"{process} {function}", getattr(where, function)))


def _print_table(before: dict[str, list[int]], after: dict[str, list[int]], n: int, times: list[float]) -> None:
    """Each step's CPU time per call and per round trip, between the two snapshots."""
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


def _read_spans(out_dir: str, since_ns: int) -> list[tuple[str, int, int]]:
    """Every process's timed calls since `since_ns`, by start."""
    spans: list[tuple[str, int, int]] = []
    for name in os.listdir(out_dir):
        if name.endswith((".tmp", ".prof")):
            continue
        try:
            with open(os.path.join(out_dir, name)) as f:
                spans += [(step, start, end) for step, start, end in json.load(f)["spans"] if start >= since_ns]
        except (OSError, ValueError):
            continue
    spans.sort(key=lambda span: span[1])
    return spans


def _print_timeline(spans: list[tuple[str, int, int]], windows: list[tuple[int, int]]) -> None:
    """Per step (and per call of it within a round trip: #0, #1...), the median start and end as offsets from the
    submit's start, for the calls seen in at least half of the round trips, in order of start."""
    starts = [span[1] for span in spans]
    offsets: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for begin, end in windows:
        seen: dict[str, int] = {}
        for step, start, stop in spans[bisect.bisect_left(starts, begin) : bisect.bisect_right(starts, end)]:
            k = seen[step] = seen.get(step, -1) + 1
            offsets.setdefault((step, k), []).append((start - begin, stop - begin))
    n = len(windows)
    print(f"{n} round trips, median {statistics.median(e - b for b, e in windows) / 1000:,.0f} µs (with the wrapping)")
    print(f"{'step (call in the round trip)':52s} {'start µs':>9s} {'end µs':>8s} {'wall µs':>8s}")
    rows: list[tuple[float, float, str]] = []
    for (step, k), pairs in offsets.items():
        if len(pairs) * 2 >= n:
            first = statistics.median(p[0] for p in pairs) / 1000
            rows.append((first, statistics.median(p[1] for p in pairs) / 1000, f"{step} #{k}"))
    for first, last, label in sorted(rows):
        print(f"{label:52s} {first:9.1f} {last:8.1f} {last - first:8.1f}")


def _read(out_dir: str) -> dict[str, list[int]]:
    """The tallies of every process, added up by step (each step runs in one process)."""
    merged: dict[str, list[int]] = {}
    for name in os.listdir(out_dir):
        if name.endswith(".tmp"):
            continue
        try:
            with open(os.path.join(out_dir, name)) as f:
                tally = json.load(f)["tally"]
        except (OSError, ValueError):
            continue
        for step, (calls, ns) in tally.items():
            entry = merged.setdefault(step, [0, 0])
            entry[0] += calls
            entry[1] += ns
    return merged


if __name__ == "__main__":
    main()
