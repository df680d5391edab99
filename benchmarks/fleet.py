"""Fleet scale: the real scheduler driven by thousands of simulated workers and many clients (issue 17).

    .venv/bin/python benchmarks/fleet.py --workers 10,100,1000,5000 --clients 1
    .venv/bin/python benchmarks/fleet.py --workers 1000 --clients 1,10,100
    .venv/bin/python benchmarks/fleet.py --workers 1000 --cpu auto,none      # with and without CPU pinning
    .venv/bin/python benchmarks/fleet.py --workers 1000,5000 --py-spy /tmp/spy   # profile the scheduler
    .venv/bin/python benchmarks/fleet.py --workers 1000 --scheduler "/other/venv/bin/scaler_scheduler"  # A/B a build

For each point: starts `scaler_scheduler` (its own process, logging to a file), then the fake workers
(benchmarks/fleet_peers.py: one process per --per-process workers, each answering dispatchTasks at once), then
measures, in this order:
- idle: the scheduler's CPU (share of one core) over --idle seconds with every worker connected and heartbeating,
  and its RSS;
- status: one `status` from the monitor (a monitor connected only for the snapshot, so that the runs below see
  none): its size, and how long encoding it takes here (the scheduler builds and encodes one a second while
  a monitor subscribes, none otherwise);
- round trip: the median of --rtt lone `submit(...).result()` from one real Client;
- map: --tasks no-op tasks split over the clients (real `scaler.Client`s, one thread each), wall time, the
  scheduler's CPU and peak RSS meanwhile, and the messages it sent and received (from the status counters, a
  snapshot before and after) per kind.
Prints one JSON line per point (and appends it to --out). Every process it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import select
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import zmq

from scaler import Client
from scaler.io.sockets import connect_subscriber
from scaler.protocol.messages import Status, decode, encode

BIN = Path(sys.executable).parent
HERE = Path(__file__).resolve().parent


JOIN_SECONDS = 300  # every fake worker welcomed by then, or the point fails (it does not wait forever)


def noop(x: int) -> None:
    return None


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def snapshot(ctx: zmq.Context[Any], monitor: str, timeout: float = 5.0) -> tuple[Status, int]:
    """One status from the monitor, and its size in bytes; the monitor's socket is closed afterwards."""
    sub = connect_subscriber(monitor, ctx, name="fleet-snapshot")
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sub.poll(int(left * 1000)):
                raise RuntimeError(f"no status from {monitor} within {timeout}s")
            frames = sub.recv_multipart()
            message = decode(frames)
            if isinstance(message, Status):
                return message, sum(len(f) for f in frames)
    finally:
        sub.close(linger=0)


def encode_seconds(status: Status, repeat: int = 20) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        encode(status)
    return (time.perf_counter() - start) / repeat


class Sampler:
    """Peak RSS of a process, sampled every 50 ms on a thread."""

    def __init__(self, proc: psutil.Process) -> None:
        self.proc, self.peak, self._stop = proc, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def cpu_seconds(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


def start_fleet(
    address: str, workers: int, per_process: int, log_dir: str, heartbeat: float, keys: str | None = None
) -> list[subprocess.Popen[str]]:
    fleets = []
    for k in range(math.ceil(workers / per_process)):
        count = min(per_process, workers - k * per_process)
        command = [sys.executable, str(HERE / "fleet_peers.py"), address, str(count), "--name", f"fleet{k}"]
        fleets.append(
            subprocess.Popen(
                [*command, "--heartbeat", str(heartbeat), *(["--keys", keys] if keys else [])],
                stdout=subprocess.PIPE,
                stderr=open(os.path.join(log_dir, f"fleet{k}.err"), "w"),
                text=True,
            )
        )
    deadline = time.monotonic() + JOIN_SECONDS
    for k, fleet in enumerate(fleets):
        assert fleet.stdout is not None
        ready, _, _ = select.select([fleet.stdout], [], [], max(0.0, deadline - time.monotonic()))
        line = fleet.stdout.readline() if ready else ""
        if not line.startswith("ready"):
            for each in fleets:
                each.kill()
            why = repr(line) if ready else f"not all welcomed within {JOIN_SECONDS}s"
            raise RuntimeError(f"fake workers of fleet{k} did not start: {why} (see {log_dir}/fleet{k}.err)")
    return fleets


def stop_fleet(fleets: list[subprocess.Popen[str]]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for fleet in fleets:
        fleet.terminate()
    for fleet in fleets:
        out, _ = fleet.communicate(timeout=30)
        for line in out.splitlines():
            if line.startswith("{"):
                for key, value in json.loads(line).items():
                    totals[key] = totals.get(key, 0) + value
    return totals


def run_map(address: str, clients: int, tasks: int) -> float:
    """Wall seconds for `tasks` no-op tasks split over `clients` Clients, one thread each (connected beforehand)."""
    conns = [Client(address, timeout_seconds=120) for _ in range(clients)]
    try:
        for c in conns:  # warm: the function object reaches the scheduler, one round trip each
            c.submit(noop, 0).result(timeout=60)
        share = tasks // clients
        errors: list[BaseException] = []
        barrier = threading.Barrier(clients + 1)

        def one(c: Client) -> None:
            barrier.wait()
            try:
                result = c.map(noop, [(i,) for i in range(share)], timeout=600)
                assert len(result) == share and all(r is None for r in result)
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(c,)) for c in conns]
        for t in threads:
            t.start()
        barrier.wait()
        start = time.perf_counter()
        for t in threads:
            t.join()
        wall = time.perf_counter() - start
        if errors:
            raise errors[0]
        return wall
    finally:
        for c in conns:
            c.disconnect()


def round_trip(address: str, n: int) -> float:
    with Client(address, timeout_seconds=60) as c:
        for _ in range(20):
            c.submit(noop, 0).result(timeout=60)
        times = []
        for _ in range(n):
            start = time.perf_counter()
            c.submit(noop, 0).result(timeout=60)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def profile(args: argparse.Namespace, pid: int, name: str, seconds: float) -> subprocess.Popen[bytes] | None:
    """py-spy sampling the scheduler into --py-spy DIR/NAME.txt (collapsed stacks), if asked."""
    if not args.py_spy:
        return None
    out = os.path.join(args.py_spy, f"{name}.txt")
    command = [str(BIN / "py-spy"), "record", "-p", str(pid), "-d", str(int(seconds) + 1), "-f", "raw", "-o", out]
    spy = subprocess.Popen([*command, "-r", "200"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # attached
    return spy


def finish(spy: subprocess.Popen[bytes] | None) -> None:
    if spy is not None:
        spy.send_signal(signal.SIGINT)  # py-spy writes what it has on SIGINT
        try:
            spy.wait(timeout=30)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait()


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def run_point(args: argparse.Namespace, workers: int, clients: int, cpu: str) -> dict[str, Any]:
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    log_dir = tempfile.mkdtemp(prefix="fleet-")
    monitor = f"ipc://{log_dir}/monitor"
    log = os.path.join(log_dir, "scheduler.log")
    launcher = shlex.split(args.scheduler) if args.scheduler else [str(BIN / "scaler_scheduler")]
    command = [*launcher, address, "--monitor-address", monitor, "--cpu", cpu]
    scheduler = subprocess.Popen([*command, "-ll", "WARNING", "-lp", log])
    fleets: list[subprocess.Popen[str]] = []
    ctx: zmq.Context[Any] = zmq.Context()
    row: dict[str, Any] = {"workers": workers, "clients": clients, "cpu": cpu, "tasks": args.tasks}
    row["heartbeat_s"] = args.heartbeat
    if args.scheduler:
        row["scheduler"] = args.scheduler
    try:
        proc = psutil.Process(scheduler.pid)
        start = time.perf_counter()
        fleets = start_fleet(address, workers, args.per_process, log_dir, args.heartbeat)
        row["connect_s"] = round(time.perf_counter() - start, 2)
        time.sleep(args.settle)
        fakes = [psutil.Process(f.pid) for f in fleets]
        spy = profile(args, scheduler.pid, f"idle-{workers}w-{cpu}", args.idle)
        cpu0, t0, fleet0 = cpu_seconds(proc), time.perf_counter(), sum(cpu_seconds(f) for f in fakes)
        time.sleep(args.idle)
        seconds = time.perf_counter() - t0
        row["idle_cpu_pct"] = round(100 * (cpu_seconds(proc) - cpu0) / seconds, 2)
        row["fleet_idle_cpu_pct"] = round(100 * (sum(cpu_seconds(f) for f in fakes) - fleet0) / seconds, 2)
        finish(spy)
        row["idle_rss_mb"] = round(proc.memory_info().rss / 1e6, 1)
        if not args.no_status:
            status, size = snapshot(ctx, monitor)
            row["status_bytes"] = size
            row["status_encode_ms"] = round(1000 * encode_seconds(status), 3)
            row["status_workers"] = len(status.workers)
        row["rtt_ms"] = round(1000 * round_trip(address, args.rtt), 3)
        before = None if args.no_status else snapshot(ctx, monitor)[0]
        sampler = Sampler(proc)
        cpu0 = cpu_seconds(proc)
        spy = profile(args, scheduler.pid, f"map-{workers}w-{clients}c-{cpu}", 600)
        wall = run_map(address, clients, args.tasks)
        finish(spy)
        row["map_cpu_s"] = round(cpu_seconds(proc) - cpu0, 2)
        row["peak_rss_mb"] = round(sampler.stop() / 1e6, 1)
        row["map_s"] = round(wall, 3)
        row["map_tasks_per_s"] = round(args.tasks // clients * clients / wall)
        if before is not None:
            after, _ = snapshot(ctx, monitor)
            row["sent"] = delta(after.sent, before.sent)
            row["received"] = delta(after.received, before.received)
    finally:
        if fleets:
            row["fleet"] = stop_fleet(fleets)
        scheduler.terminate()
        try:
            scheduler.wait(timeout=20)
        except subprocess.TimeoutExpired:
            scheduler.kill()
            scheduler.wait()
        ctx.destroy(linger=0)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", default="10,100,1000", help="comma-separated numbers of fake workers")
    p.add_argument("--clients", default="1", help="comma-separated numbers of clients")
    p.add_argument("--cpu", default="auto", help="comma-separated scheduler --cpu values (auto, none, a number)")
    p.add_argument("--tasks", type=int, default=50_000, help="no-op tasks per map, split over the clients")
    p.add_argument("--idle", type=float, default=10.0, help="seconds of idle CPU measurement")
    p.add_argument("--settle", type=float, default=3.0, help="seconds after the fleet connects before measuring")
    p.add_argument("--rtt", type=int, default=200, help="lone round trips (median)")
    p.add_argument(
        "--scheduler",
        default=None,
        help="command starting the scheduler instead of this venv's scaler_scheduler (another build, to compare)",
    )
    p.add_argument("--heartbeat", type=float, default=2.0, help="the fake workers' heartbeat interval (s)")
    p.add_argument("--per-process", type=int, default=500, help="fake workers per process")
    p.add_argument("--py-spy", default=None, metavar="DIR", help="profile the scheduler (idle, map) into DIR")
    p.add_argument("--out", default=None, help="append each point's JSON line here")
    p.add_argument(
        "--no-status",
        action="store_true",
        help="read no status from the monitor (no status size, no message counts): for a build whose monitor this "
        "harness cannot read, such as bafba30's",
    )
    args = p.parse_args()
    for cpu in args.cpu.split(","):
        for workers in [int(w) for w in args.workers.split(",")]:
            for clients in [int(c) for c in args.clients.split(",")]:
                row = run_point(args, workers, clients, cpu)
                line = json.dumps(row)
                print(line, flush=True)
                if args.out:
                    with open(args.out, "a") as f:
                        f.write(line + "\n")


if __name__ == "__main__":
    main()
