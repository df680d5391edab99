"""Python bytecodes and calls per single-task round trip, per process (scheduler, worker agent, processor).

Wall-clock round trips on a shared 2-vCPU machine drift by tens of percent; bytecode counts do not. This starts a
scheduler and a one-worker cluster whose processes count the bytecodes each Python function executes (a
sys.settrace opcode tracer, switched on by SIGUSR1 and off by SIGUSR2 once the cluster is warm), runs ROUND_TRIPS
sequential submit -> result round trips, and prints each process's bytecodes and calls per round trip with its
top functions. The tracer slows the processes down a lot: use the counts, never the times.

usage:
  python benchmarks/opcodes.py [--round-trips 500] [--top 15] [--src DIR]

--src runs another tree (for example one exported with `git archive REV src | tar -x -C DIR`, then DIR/src).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TRACER = r"""
import collections, os, signal, sys
_counts = collections.Counter()
_calls = collections.Counter()
def _local(frame, event, arg):
    if event == "opcode":
        _counts[frame.f_code] += 1
    return _local
def _global(frame, event, arg):
    frame.f_trace_opcodes = True
    _calls[frame.f_code] += 1
    return _local
def _start(*_):
    _counts.clear(); _calls.clear(); sys.settrace(_global)
def _stop(*_):
    sys.settrace(None)
    with open(os.path.join(os.environ["OPCODES_DIR"], str(os.getpid())), "w") as f:
        for code, n in _counts.most_common():
            name = code.co_filename.split("/src/")[-1]
            if "/lib/python" in name:
                name = name.split("/lib/python")[-1].split("/", 1)[-1]
            f.write(f"{n}\t{_calls[code]}\t{name}:{code.co_firstlineno}:{code.co_name}\n")
signal.signal(signal.SIGUSR1, _start)
signal.signal(signal.SIGUSR2, _stop)
"""


def noop(x: int) -> int:
    return x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--round-trips", type=int, default=500)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--src", default=os.path.join(ROOT, "src"), help="the source tree to measure")
    args = parser.parse_args()
    src = os.path.abspath(args.src)
    sys.path.insert(0, src)
    import psutil

    from scaler import Client

    with tempfile.TemporaryDirectory(prefix="scaler-opcodes-") as work:
        with open(os.path.join(work, "opcode_tracer.py"), "w") as f:
            f.write(TRACER)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, work]), OPCODES_DIR=work)
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
        probe.close()

        def start(module: str, *argv: str) -> subprocess.Popen[bytes]:
            code = f"import opcode_tracer; from scaler.entry_points.{module} import main; main()"
            return subprocess.Popen([sys.executable, "-c", code, *argv, "--logging-level", "WARNING"], env=env)

        scheduler = start("scheduler", address)
        cluster = start("cluster", "-n", "1", address)
        try:
            with Client(address=address, timeout_seconds=30) as client:
                for i in range(200):
                    client.submit(noop, i).result(timeout=30)
                agent = next(p for p in psutil.Process(cluster.pid).children() if p.children())
                roles = {"scheduler": scheduler.pid, "agent": agent.pid, "processor": agent.children()[0].pid}
                for pid in roles.values():
                    os.kill(pid, 10)  # SIGUSR1: count from now
                time.sleep(0.5)
                for i in range(args.round_trips):
                    client.submit(noop, i).result(timeout=30)
                for pid in roles.values():
                    os.kill(pid, 12)  # SIGUSR2: stop and write the counts
                time.sleep(1.0)
        finally:
            for process in (cluster, scheduler):
                process.terminate()
            for process in (cluster, scheduler):
                process.wait(30)
        n = args.round_trips
        for role, pid in roles.items():
            rows = [line.split("\t") for line in open(os.path.join(work, str(pid))).read().splitlines()]
            opcodes = sum(int(row[0]) for row in rows) / n
            calls = sum(int(row[1]) for row in rows) / n
            print(f"{role}: {opcodes:,.0f} bytecodes and {calls:,.0f} Python calls per round trip")
            for row in rows[: args.top]:
                print(f"  {int(row[0]) / n:8.1f} {int(row[1]) / n:6.2f}  {row[2]}")


if __name__ == "__main__":
    main()
