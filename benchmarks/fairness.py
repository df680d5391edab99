"""One client's tasks while another client's backlog fills the cluster.

Starts a SchedulerClusterCombo with 2 workers and a client B in this process, which first measures its idle round
trip (a no-op, 100 times). Then a client A in another process submits TASKS tasks of `time.sleep(SLEEP)`, far more
work than the workers can do at once, and B keeps running one no-op round trip every 5 ms for SECONDS seconds.
Prints B's median, 90th percentile and longest round trip while A's backlog waits: how long one client's task
waits behind another client's queue.

With --burst (issue 25's case), A submits BURST_LONG tasks of `time.sleep(1)` instead (40: they all fit in the
workers' queues), and half a second later B submits BURST_SHORT no-ops at once and waits for them all; this is
done twice (each then waits for A's tasks to end: about 20 s). Prints how long B's tasks took: about one of A's
tasks (B waits for the ones running), not A's queue.

usage:
  python benchmarks/fairness.py [--tasks 20000] [--sleep 0.001] [--seconds 4]
  python benchmarks/fairness.py --burst [--burst-long 40] [--burst-short 200]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import time

from scaler import Client, SchedulerClusterCombo

BACKLOG = r"""
import sys, time
from scaler import Client

with Client(address=sys.argv[1]) as client:
    futures = [client.submit(time.sleep, float(sys.argv[3])) for _ in range(int(sys.argv[2]))]
    print("submitted", flush=True)
    for future in futures:
        future.result(timeout=600)
"""


def noop(x: int) -> int:
    return x


def burst(address: str, long_tasks: int, short_tasks: int) -> None:
    """Issue 25: B's many tiny tasks, submitted while A's long ones fill the workers' queues."""
    with Client(address=address) as client:
        client.submit(noop, 0).result(timeout=30)
        for attempt in range(2):
            command = [sys.executable, "-c", BACKLOG, address, str(long_tasks), "1.0"]
            backlog = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
            try:
                assert backlog.stdout is not None
                backlog.stdout.readline()
                time.sleep(0.5)  # A's tasks are on the workers, the first ones running
                start = time.perf_counter()
                client.map(noop, range(short_tasks), timeout=600)
                waited = time.perf_counter() - start
                print(
                    f"burst {attempt + 1}: {short_tasks} no-ops of client B, submitted while client A's {long_tasks} "
                    f"tasks of 1 s fill 2 workers: all done in {waited:.2f} s",
                    flush=True,
                )
                backlog.wait(600)  # A's tasks all ended: the next burst starts from empty workers
            finally:
                backlog.kill()
                backlog.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--sleep", type=float, default=0.001)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--burst", action="store_true", help="issue 25's case: tiny tasks behind long ones")
    parser.add_argument("--burst-long", type=int, default=40)
    parser.add_argument("--burst-short", type=int, default=200)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    cluster = SchedulerClusterCombo(address=address, n_workers=2, logging_level="WARNING")
    backlog: subprocess.Popen[str] | None = None
    try:
        if args.burst:
            burst(address, args.burst_long, args.burst_short)
            return
        with Client(address=address) as client:
            client.submit(noop, 0).result(timeout=30)
            idle = []
            for i in range(100):
                start = time.perf_counter()
                client.submit(noop, i).result(timeout=30)
                idle.append(time.perf_counter() - start)
                time.sleep(0.005)
            command = [sys.executable, "-c", BACKLOG, address, str(args.tasks), str(args.sleep)]
            backlog = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
            assert backlog.stdout is not None
            backlog.stdout.readline()  # every task of the backlog is submitted
            busy = []
            deadline = time.monotonic() + args.seconds
            while time.monotonic() < deadline:
                start = time.perf_counter()
                client.submit(noop, 1).result(timeout=600)
                busy.append(time.perf_counter() - start)
                time.sleep(0.005)
            busy.sort()
            print(
                f"idle: median {statistics.median(idle) * 1000:.2f} ms; behind {args.tasks:,} tasks of "
                f"{args.sleep * 1000:g} ms from another client: {len(busy)} round trips, median "
                f"{statistics.median(busy) * 1000:.2f} ms, 90th percentile {busy[len(busy) * 9 // 10] * 1000:.1f} ms, "
                f"longest {busy[-1] * 1000:.0f} ms",
                flush=True,
            )
    finally:
        if backlog is not None:
            backlog.kill()
            backlog.wait(10)
        cluster.shutdown()


if __name__ == "__main__":
    main()
