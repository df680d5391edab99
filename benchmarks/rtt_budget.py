"""Where a single-task round trip spends its time, hop by hop, from the kernel's scheduler trace.

Starts a scheduler and one worker (SchedulerClusterCombo), warms up, then records `perf sched` while running
ROUND_TRIPS sequential submit -> result round trips, and prints, for every thread on the path, how long it takes
from being woken until it wakes the next thread (its share of the round trip: waking up, running Python, making
the system call that wakes the next one), plus each thread's median scheduling delay and run time per wake-up.
The chain's segments add up to about one round trip. perf's tracing slows everything down (the round trip it
reports is longer than without it): compare the segments with each other, not with other measurements.

Needs `perf` and the right to trace the scheduler (root, or kernel.perf_event_paranoid <= 1).

usage:
  python benchmarks/rtt_budget.py [--round-trips 1000] [--src DIR]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WAKE = re.compile(r"\s*([\d.]+)\s+\[\d+\]\s+(\S+)\s+awakened: (\S+)")
SWITCH = re.compile(r"\s*[\d.]+\s+\[\d+\]\s+(\S+)\s+[\d.]+\s+([\d.]+)\s+([\d.]+)\s*$")
TID = re.compile(r"\[(\d+)(?:/\d+)?\]$")


def noop(x: int) -> int:
    return x


def roles(client_pid: int) -> dict[int, str]:
    """Thread id -> 'process.thread' for every thread of the client and the processes it started."""
    import psutil

    me = psutil.Process(client_pid)
    names = {client_pid: "client"}
    for child in me.children():
        if child.children():  # the cluster: its children are agents, theirs are processors
            names[child.pid] = "cluster"
            for agent in child.children():
                names[agent.pid] = "agent"
                for processor in agent.children():
                    names[processor.pid] = "processor"
        else:
            names[child.pid] = "scheduler"
    ours = {t.native_id: t.name for t in threading.enumerate()}  # this process is the client: name its threads
    out = {}
    for pid, name in names.items():
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
            if int(tid) == pid:
                thread = "main"
            elif comm.startswith("ZMQbg/IO"):
                thread = "zmq-io"
            elif comm.startswith("ZMQbg"):
                thread = "zmq-reaper"
            elif pid == client_pid and ours.get(int(tid), "").startswith("scaler-client-io"):
                thread = "io-thread"
            else:
                thread = f"thread-{tid}"
            out[int(tid)] = f"{name}.{thread}"
    return out


def tid_of(field: str) -> int | None:
    m = TID.search(field)
    return int(m.group(1)) if m else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--round-trips", type=int, default=1000)
    parser.add_argument("--src", default=os.path.join(ROOT, "src"), help="the source tree to measure")
    args = parser.parse_args()
    sys.path.insert(0, os.path.abspath(args.src))
    from scaler import Client, SchedulerClusterCombo

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    address = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    probe.close()
    with tempfile.TemporaryDirectory(prefix="scaler-rtt-budget-") as work:
        data = os.path.join(work, "sched.data")
        cluster = SchedulerClusterCombo(address=address, n_workers=1, logging_level="WARNING")
        try:
            with Client(address=address) as client:
                for i in range(300):
                    client.submit(noop, i).result(timeout=30)
                names = roles(os.getpid())
                perf = subprocess.Popen(
                    ["perf", "sched", "record", "-o", data], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
                time.sleep(1.0)
                times = []
                for i in range(args.round_trips):
                    start = time.perf_counter_ns()
                    client.submit(noop, i).result(timeout=30)
                    times.append(time.perf_counter_ns() - start)
                perf.send_signal(2)
                perf.wait(60)
        finally:
            cluster.shutdown()
        timeline = subprocess.run(
            ["perf", "sched", "timehist", "-w", "-i", data], capture_output=True, text=True, check=True
        ).stdout
    segments: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    delays: dict[str, list[float]] = collections.defaultdict(list)
    runs: dict[str, list[float]] = collections.defaultdict(list)
    woken_at: dict[int, float] = {}
    for line in timeline.splitlines():
        wake = WAKE.match(line)
        if wake:
            at, waker, wakee = float(wake.group(1)), tid_of(wake.group(2)), tid_of(wake.group(3))
            if waker in names and wakee in names:
                if waker in woken_at:
                    segments[(names[waker], names[wakee])].append((at - woken_at.pop(waker)) * 1e6)
                woken_at[wakee] = at
            continue
        switch = SWITCH.match(line)
        switched = tid_of(switch.group(1)) if switch else None
        if switch and switched is not None and switched in names:
            name = names[switched]
            delays[name].append(float(switch.group(2)) * 1000)
            runs[name].append(float(switch.group(3)) * 1000)
    print(f"round trip under perf: median {statistics.median(times) / 1000:,.0f} µs over {args.round_trips}")
    print("\nfrom being woken until waking the next thread (median µs, and how often it happened):")
    common = [(k, v) for k, v in segments.items() if len(v) >= args.round_trips // 3]
    total = 0.0
    for (thread, next_thread), values in sorted(common, key=lambda kv: -len(kv[1])):
        median = statistics.median(values)
        total += median * len(values) / args.round_trips
        print(f"  {median:7.0f}  x{len(values) / args.round_trips:4.2f}  {thread:22s} -> {next_thread}")
    print(f"  {total:7.0f}  in all, per round trip")
    print("\nper wake-up (median µs): scheduling delay, time on the CPU")
    for name in sorted(runs, key=lambda n: -len(runs[n])):
        if len(runs[name]) >= args.round_trips // 3:
            print(f"  {name:22s} {statistics.median(delays[name]):6.1f} {statistics.median(runs[name]):8.1f}")


if __name__ == "__main__":
    main()
