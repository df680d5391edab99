"""What the scheduler's journal costs (issue 28's bars; ADR 0022, 0023), and how long a recovery takes.

cost      two clusters at once (SchedulerClusterCombo, 2 workers each), one without a journal and one with
          (--journal-sync interval, the default, or --sync), taking turns: blocks of --block single-task round trips
          (A B, B A, ...), then maps of --tasks no-op tasks (A B, B A, ...). Reports each side's median round trip and
          map throughput and the median of the paired ratios (with / without), and the journal's size after.
recovery  a scheduler with a journal and no worker; a raw client (a DEALER speaking the protocol) submits --queued
          tasks in batches of 10,000 (a 100-byte argument each); kill -9; the same command again: the journal's size,
          and the time from start to the log line that says what was restored (and what that line says).

usage:
  .venv/bin/python benchmarks/journal_cost.py cost [--blocks 16] [--block 50] [--maps 4] [--tasks 100000]
                                                   [--sync interval|always|none]
  .venv/bin/python benchmarks/journal_cost.py recovery [--queued 1000000]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, cast

import zmq

from scaler import Client, SchedulerClusterCombo
from scaler.protocol.messages import (
    ACCEPTED_BY_CLIENT,
    ExplainTasks,
    Hello,
    PeerKind,
    PutObjects,
    SubmitTasks,
    TaskExplanations,
    Welcome,
    decode,
    encode,
)


def noop(x: Any) -> Any:
    return x


def free_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def send(sock: zmq.Socket[Any], message: Any) -> None:
    sock.send_multipart([bytes(cast(Any, frame)) for frame in encode(message)])


def round_trips(client: Client, n: int) -> list[float]:
    times = []
    for i in range(n):
        start = time.perf_counter()
        client.submit(noop, i).result(timeout=60)
        times.append(time.perf_counter() - start)
    return times


def one_map(client: Client, tasks: int) -> float:
    start = time.perf_counter()
    results = client.map(noop, [(x,) for x in range(tasks)])
    took = time.perf_counter() - start
    assert results[-1] == tasks - 1
    return tasks / took


def cost(args: argparse.Namespace) -> None:
    folder = tempfile.mkdtemp(prefix="scaler-journal-cost-")
    journal = os.path.join(folder, "journal")
    combos = {
        "without": SchedulerClusterCombo(address=free_address(), n_workers=2, logging_level="WARNING"),
        "with": SchedulerClusterCombo(
            address=free_address(), n_workers=2, logging_level="WARNING", journal=journal, journal_sync=args.sync
        ),
    }
    try:
        clients = {name: Client(address=combo.address) for name, combo in combos.items()}
        for client in clients.values():
            round_trips(client, 200)  # warm-up
            one_map(client, 10_000)
        rtt: dict[str, list[float]] = {"without": [], "with": []}
        rtt_ratios = []
        order = ["without", "with"]
        for block in range(args.blocks):
            medians = {}
            for name in order if block % 2 == 0 else order[::-1]:
                times = round_trips(clients[name], args.block)
                rtt[name] += times
                medians[name] = statistics.median(times)
            rtt_ratios.append(medians["with"] / medians["without"])
        rates: dict[str, list[float]] = {"without": [], "with": []}
        map_ratios = []
        for round_ in range(args.maps):
            got = {}
            for name in order if round_ % 2 == 0 else order[::-1]:
                got[name] = one_map(clients[name], args.tasks)
                rates[name].append(got[name])
            map_ratios.append(got["with"] / got["without"])
        for client in clients.values():
            client.disconnect()
        size = os.path.getsize(journal)
    finally:
        for combo in combos.values():
            combo.shutdown()
    print(f"journal --journal-sync {args.sync}; {args.blocks} blocks of {args.block} round trips, {args.maps} maps")
    for name in order:
        print(
            f"  {name:8} round trip median {statistics.median(rtt[name]) * 1e6:7.0f} us   "
            f"map of {args.tasks:,}: {', '.join(f'{r:,.0f}' for r in rates[name])} tasks/s"
        )
    print(f"  with/without: round trip x{statistics.median(rtt_ratios):.3f} (median of paired blocks)")
    if map_ratios:
        print(f"  with/without: map x{statistics.median(map_ratios):.3f} (median of paired maps: {map_ratios})")
    print(f"  journal at the end: {size:,} bytes (compacted at start only)")


def recovery(args: argparse.Namespace) -> None:
    folder = tempfile.mkdtemp(prefix="scaler-journal-recovery-")
    journal, log = os.path.join(folder, "journal"), os.path.join(folder, "scheduler.log")
    address = free_address()
    command = [sys.executable, "-m", "scaler.entry_points.scheduler", address, "--journal", journal]
    command += ["--monitor-address", f"ipc://{folder}/monitor", "--logging-paths", log]

    def start() -> tuple[subprocess.Popen[bytes], float]:
        begun = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        return process, begun

    def wait_restored(offset: int) -> tuple[str, float]:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if not os.path.exists(log):
                time.sleep(0.01)
                continue
            with open(log, errors="replace") as file:
                file.seek(offset)
                match = re.search(r"client sessions? restored.*", file.read())
            if match:
                return match.group(0), time.perf_counter()
            time.sleep(0.01)
        raise TimeoutError("the scheduler did not say what it restored within 600 s")

    process, _ = start()
    wait_restored(0)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    send(sock, Hello(PeerKind.CLIENT, "journal-cost"))
    welcome = decode(sock.recv_multipart(), ACCEPTED_BY_CLIENT)
    assert isinstance(welcome, Welcome)
    prefix = welcome.id_prefix << 40
    function = prefix | 1
    send(sock, PutObjects([function], [b"a function"]))
    batch, sent = 10_000, 0
    started = time.perf_counter()
    while sent < args.queued:
        ids = [prefix | (16 + sent + k) for k in range(min(batch, args.queued - sent))]
        n = len(ids)
        payloads: list[Any] = [b"x" * 100] * n
        send(sock, SubmitTasks(ids, [function] * n, bytes(n), [1] * n, [0] * n, None, payloads))
        sent += len(ids)
    send(sock, ExplainTasks([prefix | (16 + args.queued - 1)]))
    answer = decode(sock.recv_multipart(), ACCEPTED_BY_CLIENT)
    while not isinstance(answer, TaskExplanations):
        answer = decode(sock.recv_multipart(), ACCEPTED_BY_CLIENT)
    took = time.perf_counter() - started
    time.sleep(0.2)  # (the background sync: 50 ms)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    size = os.path.getsize(journal)
    offset = os.path.getsize(log)
    process, begun = start()
    line, restored = wait_restored(offset)
    try:
        print(f"{args.queued:,} queued tasks submitted and journaled in {took:.1f} s: {answer.texts[0]}")
        print(f"journal after kill -9: {size:,} bytes ({size / args.queued:.0f} bytes per task)")
        print(f"recovery: {restored - begun:.2f} s from start to: {line}")
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        sock.close(0)
        ctx.term()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    one = sub.add_parser("cost")
    one.add_argument("--blocks", type=int, default=16)
    one.add_argument("--block", type=int, default=50)
    one.add_argument("--maps", type=int, default=4)
    one.add_argument("--tasks", type=int, default=100_000)
    one.add_argument("--sync", default="interval", choices=["interval", "always", "none"])
    two = sub.add_parser("recovery")
    two.add_argument("--queued", type=int, default=1_000_000)
    args = parser.parse_args()
    cost(args) if args.what == "cost" else recovery(args)


if __name__ == "__main__":
    main()
