"""The single-task round trip against its floor: the same processes, threads and sockets with no work in them.

The floor is a chain built like ours and doing nothing else: a client whose calling thread hands each message to
an I/O thread (a pipe to wake it, a condition to wake the caller back), a ZeroMQ DEALER to a ROUTER process that
forwards between the client and the worker, a worker agent process with a DEALER that passes each message through
a pipe to its processor process, which writes it straight back. It has the same 16 thread wake-ups per round trip
as ours (benchmarks/rtt_budget.py) and runs a few dozen bytecodes where ours runs about 10,000
(benchmarks/opcodes.py).

Each round starts a fresh floor chain and a fresh SchedulerClusterCombo with one worker and runs ROUND_TRIPS
sequential round trips on each, in alternating order. For each it prints the median round trip and the CPU time
(user + system, all threads) that every process spends per round trip. The difference between the two is what our
Python costs on this machine, wake-ups excluded.

usage:
  python benchmarks/rtt_floor.py [--rounds 3] [--round-trips 2000]
"""

from __future__ import annotations

import argparse
import os
import select
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import psutil
import zmq

WARM_UP = 200


def free_address() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"tcp://127.0.0.1:{port}"


# ------------------------------------------------------------------------------------------------ the floor chain
def floor_scheduler(address: str) -> None:
    """Forward the client's messages to the worker and the worker's to the client."""
    router = zmq.Context().socket(zmq.ROUTER)
    router.bind(address)
    worker = client = b""
    while True:
        peer, message = router.recv_multipart()
        if message == b"worker":
            worker = peer
        elif peer == worker:
            router.send_multipart([client, message])
        else:
            client = peer
            router.send_multipart([worker, message])


def floor_worker(address: str) -> None:
    """An agent that passes each message through a pipe to a processor, which writes it back."""
    dealer = zmq.Context().socket(zmq.DEALER)
    dealer.connect(address)
    dealer.send(b"worker")
    to_processor, from_agent = os.pipe()
    from_processor, to_agent = os.pipe()
    if os.fork() == 0:  # the processor
        while True:
            os.write(to_agent, os.read(to_processor, 65536))
    poller = zmq.Poller()
    poller.register(dealer, zmq.POLLIN)
    poller.register(from_processor, zmq.POLLIN)
    while True:
        for source, _ in poller.poll():
            if source is dealer:
                os.write(from_agent, dealer.recv())
            else:
                dealer.send(os.read(from_processor, 65536))


class FloorClient:
    """The calling thread queues a message and wakes the I/O thread, which sends it and hands the answer back."""

    def __init__(self, address: str) -> None:
        self.dealer = zmq.Context().socket(zmq.DEALER)
        self.dealer.connect(address)
        self.outbox: list[bytes] = []
        self.answer: bytes | None = None
        self.answered = threading.Condition()
        self.wake_read, self.wake_write = os.pipe()
        threading.Thread(target=self._io, daemon=True).start()

    def _io(self) -> None:
        poller = select.poll()
        poller.register(int(self.dealer.getsockopt(zmq.FD)), select.POLLIN)
        poller.register(self.wake_read, select.POLLIN)
        while True:
            for fd, _ in poller.poll(100):
                if fd == self.wake_read:
                    os.read(self.wake_read, 64)
                    while self.outbox:
                        self.dealer.send(self.outbox.pop())
                while int(self.dealer.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
                    answer = self.dealer.recv()
                    with self.answered:
                        self.answer = answer
                        self.answered.notify()

    def round_trip(self, message: bytes) -> bytes:
        self.outbox.append(message)
        os.write(self.wake_write, b"x")
        with self.answered:
            while self.answer is None:
                if not self.answered.wait(10):
                    raise TimeoutError("the floor chain did not answer within 10 s")
            answer, self.answer = self.answer, None
        return answer


def _spawn(target: str, address: str) -> subprocess.Popen[bytes]:
    code = f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
    code += f"import rtt_floor; rtt_floor.{target}({address!r})"
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


# ------------------------------------------------------------------------------------------------ measuring
def cpu_seconds(processes: list[psutil.Process]) -> list[float]:
    out = []
    for process in processes:
        times = process.cpu_times()
        out.append(times.user + times.system)
    return out


def measure(
    label: str, one: Callable[[int], object], processes: dict[str, psutil.Process], round_trips: int
) -> tuple[float, dict[str, float]]:
    for i in range(WARM_UP):
        one(i)
    names = list(processes)
    before = cpu_seconds(list(processes.values()))
    times = []
    for i in range(round_trips):
        start = time.perf_counter_ns()
        one(i)
        times.append(time.perf_counter_ns() - start)
    after = cpu_seconds(list(processes.values()))
    cpu = {name: (b - a) / round_trips * 1e6 for name, a, b in zip(names, before, after)}
    median = statistics.median(times) / 1000
    shares = ", ".join(f"{name} {value:.0f}" for name, value in cpu.items())
    print(f"  {label:6s} round trip median {median:6.0f} µs; CPU µs per round trip: {shares}", flush=True)
    return median, cpu


def run_floor(round_trips: int) -> tuple[float, dict[str, float]]:
    address = free_address()
    started = [_spawn("floor_scheduler", address), _spawn("floor_worker", address)]
    try:
        time.sleep(0.5)
        client = FloorClient(address)
        worker = psutil.Process(started[1].pid)
        deadline = time.monotonic() + 10
        while not worker.children() and time.monotonic() < deadline:
            time.sleep(0.05)
        processes = {
            "client": psutil.Process(),
            "scheduler": psutil.Process(started[0].pid),
            "agent": worker,
            "processor": worker.children()[0],
        }
        return measure("floor", lambda i: client.round_trip(b"x" * 64), processes, round_trips)
    finally:
        for process in started:
            try:
                os.killpg(process.pid, 9)
            except ProcessLookupError:
                pass
            process.wait(10)


def noop(x: int) -> int:
    return x


def run_ours(round_trips: int) -> tuple[float, dict[str, float]]:
    from scaler import Client, SchedulerClusterCombo

    address = free_address()
    cluster = SchedulerClusterCombo(address=address, n_workers=1, logging_level="WARNING")
    try:
        with Client(address=address) as client:
            client.submit(noop, 0).result(timeout=30)
            me = psutil.Process()
            scheduler = next(p for p in me.children() if not p.children())
            agent = next(p for p in me.children(recursive=True) if p.children() and p.parent().pid != me.pid)
            processes = {"client": me, "scheduler": scheduler, "agent": agent, "processor": agent.children()[0]}
            return measure("ours", lambda i: client.submit(noop, i).result(timeout=30), processes, round_trips)
    finally:
        cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--round-trips", type=int, default=2000)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, dict[str, float]]]] = {"floor": [], "ours": []}
    for index in range(args.rounds):
        print(f"round {index + 1}", flush=True)
        order = ("floor", "ours") if index % 2 == 0 else ("ours", "floor")
        for side in order:
            results[side].append((run_floor if side == "floor" else run_ours)(args.round_trips))
    print("median over rounds:")
    for side, runs in results.items():
        cpu = {name: statistics.median(run[1][name] for run in runs) for name in runs[0][1]}
        shares = ", ".join(f"{name} {value:.0f}" for name, value in cpu.items())
        print(f"  {side:6s} round trip {statistics.median(run[0] for run in runs):6.0f} µs; CPU µs: {shares}")


if __name__ == "__main__":
    main()
