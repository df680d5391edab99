"""What a subscribed monitor costs: a map of no-op tasks on 2 workers with no monitor attached and with one attached,
alternated run by run in one sitting.

    .venv/bin/python benchmarks/monitor_overhead.py [--repeat 6] [--tasks 100000] [--out FILE.jsonl]

Each run is a fresh process: SchedulerClusterCombo with 2 workers and a Client (as ../shared/bench/peer_bench.py
starts them), a warm-up map, then, attached, a subscriber process (what scaler_top or scaler_ui is) that decodes every
status the scheduler publishes; the run waits until the scheduler records for it (its second status: the scheduler
reads subscriptions once a second), and the same time unattached. The timed region is client.map(noop, ...) of
--tasks tasks. Prints each run (tasks/s, the scheduler's CPU seconds over the map, statuses and events the subscriber
decoded), each side's median and the median of the paired ratios attached/unattached (the bar: at least 0.9). The
order alternates (unattached first, then attached first, ...) so that neither side always runs second.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.abspath(__file__)


def noop(x: int) -> int:
    return x


def free_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{sock.getsockname()[1]}"


def busy_fraction(seconds: float = 1.0) -> float:
    def busy() -> float:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:9]]
        return (sum(fields[:3]) + sum(fields[5:8])) / os.sysconf("SC_CLK_TCK")

    before = busy()
    time.sleep(seconds)
    return (busy() - before) / (os.cpu_count() or 1)


def wait_quiet(limit: float) -> None:
    """Wait (up to `limit` seconds) for one second in which the machine is at most a quarter busy."""
    deadline = time.monotonic() + limit
    while busy_fraction() > 0.25 and time.monotonic() < deadline:
        pass


# ----------------------------------------------------------------------------------------------- one run (child)
def subscribe(address: str) -> None:
    """The attached monitor: decode every status until SIGTERM; print one line per status received (flushed), then
    the totals."""
    from scaler.io.sockets import connect_subscriber, recv_message
    from scaler.protocol.messages import ACCEPTED_BY_MONITOR, Status

    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    sock = connect_subscriber(address)
    statuses = events = dropped = 0
    while not stopping:
        if not sock.poll(100):
            continue
        status = recv_message(sock, accept=ACCEPTED_BY_MONITOR)
        if not isinstance(status, Status):
            continue  # the welcome
        statuses += 1
        events += len(status.events.task_ids)
        dropped += status.events.dropped
        print("status", flush=True)
    print(json.dumps({"statuses": statuses, "events": events, "dropped": dropped}), flush=True)


def one_run(tasks: int, attached: bool) -> dict[str, Any]:
    import psutil

    from scaler import Client, SchedulerClusterCombo

    address = free_address()
    combo = SchedulerClusterCombo(address=address, n_workers=2, logging_level="WARNING")
    client = Client(address=address)
    monitor: subprocess.Popen[str] | None = None
    try:
        client.map(noop, [(x,) for x in range(2000)])  # warm: both workers hold the function
        if attached:
            command = [sys.executable, HERE, "--subscribe", combo.monitor_address]
            monitor = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
            assert monitor.stdout is not None
            for _ in range(2):  # the second status: the scheduler has read the subscription and records
                assert monitor.stdout.readline().startswith("status"), "the subscriber got no status"
        else:
            time.sleep(2.0)
        scheduler = psutil.Process(combo._scheduler.pid)
        cpu_before = sum(scheduler.cpu_times()[:2])
        arguments = [(x,) for x in range(tasks)]
        started = time.perf_counter()
        results = client.map(noop, arguments)
        seconds = time.perf_counter() - started
        cpu = sum(scheduler.cpu_times()[:2]) - cpu_before
        assert results == list(range(tasks))
        seen: dict[str, Any] = {}
        if monitor is not None:
            time.sleep(1.2)  # the status with the last events
            monitor.send_signal(signal.SIGTERM)
            out, _ = monitor.communicate(timeout=30)
            seen = json.loads(out.strip().splitlines()[-1])
        return {
            "benchmark": "monitor_overhead",
            "attached": attached,
            "tasks": tasks,
            "seconds": round(seconds, 4),
            "tasks_per_s": round(tasks / seconds),
            "scheduler_cpu_s": round(cpu, 3),
            **seen,
        }
    finally:
        if monitor is not None and monitor.poll() is None:
            monitor.kill()
            monitor.wait()
        client.disconnect()
        combo.shutdown()


# ----------------------------------------------------------------------------------------------- the sitting
def run(tasks: int, attached: bool, quiet: float) -> dict[str, Any]:
    wait_quiet(quiet)
    command = [sys.executable, HERE, "--child", "attached" if attached else "unattached", "--tasks", str(tasks)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            result: dict[str, Any] = json.loads(line)
            return result
    raise RuntimeError(f"a run printed no result:\n{done.stdout}\n{done.stderr}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=6, help="pairs of runs")
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--quiet-wait", type=float, default=20.0, help="seconds to wait for a quiet machine per run")
    parser.add_argument("--out", default=None, help="append every run as a JSON line to this file")
    parser.add_argument("--child", choices=["attached", "unattached"], help=argparse.SUPPRESS)
    parser.add_argument("--subscribe", metavar="ADDRESS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.subscribe:
        subscribe(args.subscribe)
        return
    if args.child:
        print(json.dumps(one_run(args.tasks, args.child == "attached")), flush=True)
        return
    rates: dict[bool, list[float]] = {False: [], True: []}
    cpus: dict[bool, list[float]] = {False: [], True: []}
    ratios = []
    for round_ in range(args.repeat):
        pair = {}
        for attached in (False, True) if round_ % 2 == 0 else (True, False):
            result = run(args.tasks, attached, args.quiet_wait)
            rates[attached].append(result["tasks_per_s"])
            cpus[attached].append(result["scheduler_cpu_s"])
            pair[attached] = result["tasks_per_s"]
            print(json.dumps(result), flush=True)
            if args.out:
                with open(args.out, "a") as out:
                    out.write(json.dumps(result) + "\n")
        ratios.append(pair[True] / pair[False])
    print(
        f"== map of {args.tasks:,}: unattached {statistics.median(rates[False]):,.0f} tasks/s (scheduler CPU "
        f"{statistics.median(cpus[False]):.2f} s), attached {statistics.median(rates[True]):,.0f} tasks/s "
        f"({statistics.median(cpus[True]):.2f} s), medians of {args.repeat}; paired attached/unattached ratios "
        f"{', '.join(f'{r:.3f}' for r in ratios)}, median {statistics.median(ratios):.3f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
