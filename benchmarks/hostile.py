"""Hostile peers against a real scheduler: what they cost it, and whether it keeps serving.

    .venv/bin/python benchmarks/hostile.py                      # the bars: 15 s of garbage, 60 s of hello
    .venv/bin/python benchmarks/hostile.py --flood 3 --hellos 3  # a quick look
    .venv/bin/python benchmarks/hostile.py --keys                # the same from an authenticated (client key) socket
    .venv/bin/python benchmarks/hostile.py --unauthenticated     # connections without keys against a keyed scheduler

Starts `scaler_scheduler` (logging to a file) and one worker, then (default):
1. garbage: one DEALER sends 10-byte garbage as fast as it can for --flood seconds and never reads; the scheduler's
   RSS is sampled every 0.25 s during the flood and for 5 s after, and its log's growth is measured;
2. hello storm: one DEALER says hello as fast as it can for --hellos seconds (never reading);
3. after each, a new Client connects and runs a task (within 10 s).
Prints one JSON line of figures (RSS in MB: before, peak during, peak after; log growth in bytes; messages sent).

With --unauthenticated, against a scheduler with keys whose file descriptor limit is 1,024 (soft and hard, as on
many machines), attacks by peers that hold no key (benchmarks/hostile_phases.py), each measured as scheduler RSS and
open descriptors before, at peak during, and after, and a legitimate client's round trips during and after:
4. stalled: --stalled TCP connections (1,100) that send nothing, held --hold seconds;
5. preauth: two connections greet as CurveZMQ clients and each starts a 300 MB frame instead of its handshake;
6. subscriptions: an XSUB sends distinct 512-byte subscriptions to the monitor address as fast as it is let for
   --hold seconds, and a DEALER says hello (as a monitor) in a loop.
Prints one JSON line per attack.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import zmq

from scaler import Client
from scaler.io.curve import make_client
from scaler.protocol.messages import Hello, PeerKind, encode
from scaler.security.keys import generate, load_peer_keys

BIN = Path(sys.executable).parent


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def attacker(ctx: zmq.Context[Any], address: str, keys_dir: str | None) -> zmq.Socket[Any]:
    sock: zmq.Socket[Any] = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    if keys_dir is not None:
        make_client(sock, load_peer_keys(keys_dir, "client"))
    sock.connect(address)
    return sock


def flood(sock: zmq.Socket[Any], frames: list[bytes], seconds: float, proc: psutil.Process) -> tuple[int, float]:
    """Send `frames` in a loop for `seconds` without reading; returns (messages sent, peak RSS in MB meanwhile)."""
    sent = 0
    peak = 0.0
    end = time.monotonic() + seconds
    next_sample = 0.0
    while (now := time.monotonic()) < end:
        for _ in range(200):
            try:
                sock.send_multipart(frames, zmq.NOBLOCK)
                sent += 1
            except zmq.Again:  # held back: the scheduler's queue for us is full, and so is ours
                time.sleep(0.001)
                break
        if now >= next_sample:
            peak = max(peak, proc.memory_info().rss / 1e6)
            next_sample = now + 0.25
    return sent, peak


def settle(proc: psutil.Process, seconds: float) -> float:
    peak = 0.0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        peak = max(peak, proc.memory_info().rss / 1e6)
        time.sleep(0.25)
    return peak


def still_serves(address: str, keys_dir: str | None) -> float:
    started = time.monotonic()
    with Client(address, timeout_seconds=10, keys=keys_dir if keys_dir else False) as client:
        assert client.submit(pow, 2, 10).result(timeout=10) == 1024
    return time.monotonic() - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--flood", type=float, default=15.0, help="seconds of garbage")
    p.add_argument("--hellos", type=float, default=60.0, help="seconds of hello storm")
    p.add_argument("--keys", action="store_true", help="run the scheduler with keys; attack with a client key")
    p.add_argument("--unauthenticated", action="store_true", help="attacks 4-6 instead of 1-3 (see above)")
    p.add_argument("--stalled", type=int, default=1100, help="stalled connections (attack 4)")
    p.add_argument("--hold", type=float, default=10.0, help="seconds each of attacks 4-6 lasts")
    args = p.parse_args()
    if args.unauthenticated:
        from hostile_phases import run_unauthenticated

        run_unauthenticated(args.stalled, args.hold)
        return
    work = Path(tempfile.mkdtemp(prefix="scaler-hostile-"))
    keys_dir = None
    if args.keys:
        keys_dir = str(work / "keys")
        generate(keys_dir)
    address = f"tcp://127.0.0.1:{free_port()}"
    log = work / "scheduler.log"
    keys_args = ["--keys", keys_dir] if keys_dir else []
    monitor = f"ipc://{work}/monitor"
    scheduler = subprocess.Popen(
        [str(BIN / "scaler_scheduler"), address, *keys_args, "--monitor-address", monitor, "-lp", str(log)],
        start_new_session=True,
    )
    cluster = subprocess.Popen(
        [str(BIN / "scaler_cluster"), address, *keys_args, "-n", "1", "-lp", str(work / "cluster.log")],
        start_new_session=True,
    )
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        proc = psutil.Process(scheduler.pid)
        still_serves(address, keys_dir)  # up and serving
        before = proc.memory_info().rss / 1e6
        log_before = log.stat().st_size
        sock = attacker(ctx, address, keys_dir)
        garbage_sent, during = flood(sock, [b"0123456789"], args.flood, proc)
        after = settle(proc, 5.0)
        sock.close(linger=0)
        log_growth = log.stat().st_size - log_before
        connect_after_flood = still_serves(address, keys_dir)
        hello = encode(Hello(PeerKind.CLIENT, "storm"))
        sock = attacker(ctx, address, keys_dir)
        log_before = log.stat().st_size
        # encode's frames are bytes or buffers, Payload in its type (flood takes bytes)
        hellos_sent, hello_peak = flood(sock, hello, args.hellos, proc)  # type: ignore[arg-type]
        sock.close(linger=0)
        connect_after_hellos = still_serves(address, keys_dir)
        figures = {
            "keys": bool(keys_dir),
            "flood_seconds": args.flood,
            "garbage_sent": garbage_sent,
            "rss_before_mb": round(before, 1),
            "rss_peak_during_flood_mb": round(during, 1),
            "rss_peak_5s_after_mb": round(after, 1),
            "log_growth_bytes_flood": log_growth,
            "client_after_flood_s": round(connect_after_flood, 3),
            "hello_seconds": args.hellos,
            "hellos_sent": hellos_sent,
            "rss_peak_during_hellos_mb": round(hello_peak, 1),
            "log_growth_bytes_hellos": log.stat().st_size - log_before,
            "client_after_hellos_s": round(connect_after_hellos, 3),
        }
        print(json.dumps(figures))
    finally:
        ctx.destroy(linger=0)
        for process in (cluster, scheduler):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in (cluster, scheduler):
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
