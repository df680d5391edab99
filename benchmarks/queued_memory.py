"""Scheduler memory with many queued tasks and no worker: RSS of the scheduler process, in total and per task.

usage: python benchmarks/queued_memory.py [--tasks 1000000]

Starts scaler_scheduler (no workers), submits TASKS no-op tasks from one client in batches of 5,000 (no futures
are kept on the client side), waits until the monitor socket reports them all queued, and prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time

import psutil

from scaler import Client
from scaler.core.client.session import NewTask
from scaler.io.sockets import connect_subscriber, recv_message
from scaler.protocol.messages import Status


def noop(x: object) -> object:
    return x


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=1_000_000)
    args = parser.parse_args()
    port = free_port()
    address, monitor = f"tcp://127.0.0.1:{port}", f"ipc:///tmp/scaler_bench_{port}_monitor"
    command = [sys.executable, "-m", "scaler.entry_points.scheduler", address, "-ma", monitor, "-ll", "WARNING"]
    scheduler = subprocess.Popen(command)
    try:
        client = Client(address, timeout_seconds=30)
        process = psutil.Process(scheduler.pid)
        baseline = process.memory_info().rss
        subscriber = connect_subscriber(monitor)
        connection = client._connection
        function_id = client._function_object(noop)  # hands the function to the connection first
        started = time.perf_counter()
        for start in range(0, args.tasks, 5000):
            count = min(5000, args.tasks - start)
            ids = connection.mint(count)
            batch = [NewTask(i, function_id, 0, (0,), None, (client._serializer.serialize(i & 0xFFFFFF),)) for i in ids]
            connection.submit(batch)
        queued = 0
        deadline = time.monotonic() + 600
        while queued < args.tasks and time.monotonic() < deadline:
            if subscriber.poll(2000):
                status = recv_message(subscriber)
                if isinstance(status, Status):
                    queued = status.tasks_by_state.get("queued", 0)
        elapsed = time.perf_counter() - started
        rss = process.memory_info().rss
        record = {
            "benchmark": "queued_memory",
            "tasks": args.tasks,
            "queued_seen": queued,
            "submit_to_all_queued_s": round(elapsed, 2),
            "scheduler_rss_mib": round(rss / 2**20, 1),
            "scheduler_rss_before_mib": round(baseline / 2**20, 1),
            "bytes_per_queued_task": round((rss - baseline) / max(1, queued)),
        }
        print(json.dumps(record))
        client.disconnect()
    finally:
        scheduler.send_signal(signal.SIGTERM)
        try:
            scheduler.wait(10)
        except subprocess.TimeoutExpired:
            scheduler.kill()
        try:
            os.unlink(monitor.removeprefix("ipc://"))
        except OSError:
            pass


if __name__ == "__main__":
    main()
