"""A fake scheduler for scaler_ui's tests: a real monitor socket (the scheduler's own: scheduler/monitors.py) sending
real encoded Status messages to the monitors that say hello, about a simulated
cluster (workers with processors running tasks of several functions, some failing, some printing, a worker lost),
so that the dashboard can be driven at any size (1,000 workers) without starting one.

Seeded: the same arguments give the same cluster. `python -m tests.e2e.dashboard_fake ADDRESS` runs one by hand.
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from scaler.io.sockets import context
from scaler.protocol.messages import (
    ClientStatus,
    DepartedWorker,
    FunctionStatus,
    ManagerStatus,
    OutputRecord,
    Status,
    TaskEvents,
    TaskFailure,
    TaskStatus,
    WaitingTasks,
    WorkerStatus,
)
from scaler.scheduler.monitors import MonitorChannel, bind_monitor_router

# name, mean run time in seconds, one task in how many fails, one in how many prints
FUNCTIONS = (
    ("load_chunk", 0.8, 0, 7),
    ("fit_model", 2.5, 40, 0),
    ("score", 0.4, 0, 0),
    ("simulate_path", 1.5, 12, 5),
    ("reduce_results", 0.2, 0, 0),
)
LOST_AT_STEP = 8  # the status in which the sixth worker is lost
TRACEBACK = """Traceback (most recent call last):
  File "/home/user/pipeline.py", line 42, in {function}
    raise ValueError(f"bad input in chunk {{chunk}}")
ValueError: bad input in chunk {chunk}
"""


@dataclass
class Slot:
    task_id: int = 0
    function: int = 0
    start_us: int = 0
    end_us: int = 0


@dataclass
class FakeWorker:
    name: str
    slots: list[Slot]
    completed: int = 0
    rss: int = 0
    held_back_ms: int = 0
    stale: bool = False


@dataclass
class Counts:
    submitted: int = 0
    success: int = 0
    error: int = 0
    running: int = 0
    duration_us: int = 0


@dataclass
class Pending:
    events: TaskEvents = field(default_factory=TaskEvents)
    failures: list[TaskFailure] = field(default_factory=list)
    outputs: list[OutputRecord] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)

    def name(self, text: str) -> int:
        if text not in self.index:
            self.index[text] = len(self.events.names)
            self.events.names.append(text)
        return self.index[text]


class FakeCluster:
    """The simulated cluster: step(now) advances it and answers the status a scheduler would publish."""

    def __init__(self, n_workers: int = 8, processors: int = 4, seed: int = 0, speed: float = 1.0) -> None:
        self.started_us = int(time.time() * 1e6)  # set it again (and `recovered`) to show a restart
        self.recovered = ""
        self.random = random.Random(seed)
        self.speed = speed  # run times are divided by this
        self.workers = [
            FakeWorker(
                f"{'node' if n_workers < 100 else 'n'}{i // 8:03d}-w{i % 8}", [Slot() for _ in range(processors)]
            )
            for i in range(n_workers)
        ]
        if n_workers > 3:
            self.workers[2].held_back_ms = 45_000
            self.workers[3].stale = True
        self.counts = [Counts() for _ in FUNCTIONS]
        self.next_id = (7 << 40) + 1
        self.backlog = 5000
        self.departed: list[DepartedWorker] = []
        self.clock0 = 0
        self.steps = 0
        self.extra_clients: list[ClientStatus] = []  # listed after the two clients of every status
        self.managers: list[ManagerStatus] = []  # as they are, in every status
        self.waiting: list[WaitingTasks] = []

    def _start(self, slot: Slot, worker: FakeWorker, now_us: int, pending: Pending) -> None:
        f = self.random.randrange(len(FUNCTIONS))
        mean = FUNCTIONS[f][1] / self.speed
        slot.task_id, slot.function = self.next_id, f
        self.next_id += 1
        slot.start_us = now_us
        slot.end_us = now_us + int(self.random.uniform(0.3, 1.7) * mean * 1e6)
        self.counts[f].submitted += 1
        self._event(pending, slot, worker, 0, 0, now_us, 0)

    def _event(self, p: Pending, slot: Slot, worker: FakeWorker, kind: int, status: int, t: int, dur: int) -> None:
        e = p.events
        e.task_ids.append(slot.task_id)
        e.kinds += bytes([kind])
        e.statuses += bytes([status])
        e.functions.append(p.name(FUNCTIONS[slot.function][0]))
        e.workers.append(p.name(worker.name))
        e.times_us.append(t)
        e.durations_us.append(dur)
        e.peak_memory.append(self.random.randrange(20, 900) << 20 if kind else 0)

    def _end(self, slot: Slot, worker: FakeWorker, pending: Pending) -> None:
        name, _, fail_every, print_every = FUNCTIONS[slot.function]
        failed = fail_every and slot.task_id % fail_every == 0
        dur = slot.end_us - slot.start_us
        status = TaskStatus.ERROR if failed else TaskStatus.SUCCESS
        self._event(pending, slot, worker, 1, status, slot.end_us + 300, dur)
        counts = self.counts[slot.function]
        counts.duration_us += dur
        worker.completed += 1
        if failed:
            counts.error += 1
            text = TRACEBACK.format(function=name, chunk=slot.task_id & 0xFFFF)
            pending.failures.append(TaskFailure(slot.task_id, name, worker.name, status, text, slot.end_us + 300))
        else:
            counts.success += 1
        if print_every and slot.task_id % print_every == 0:
            text = f"{name}: chunk {slot.task_id & 0xFFFF} has {self.random.randrange(1000, 99999)} rows\n"
            pending.outputs.append(OutputRecord(slot.task_id, name, worker.name, 1, text, slot.start_us + dur // 2))

    def step(self, clock_us: int, time_us: int) -> Status:
        """The cluster at `clock_us` on the fake scheduler's clock (wall time `time_us`)."""
        self.steps += 1
        pending = Pending()
        for worker in self.workers:
            for slot in worker.slots:
                if slot.task_id == 0:
                    self._start(slot, worker, clock_us - self.random.randrange(0, 500_000), pending)
                while slot.end_us <= clock_us:
                    self._end(slot, worker, pending)
                    self._start(slot, worker, slot.end_us + 1000, pending)
        if self.steps == LOST_AT_STEP and len(self.workers) > 6:  # a worker is lost: its tasks run again elsewhere
            lost = self.workers.pop(5)
            self.departed.append(DepartedWorker(lost.name, "no heartbeat for 60 s", True, clock_us - 1000))
            for slot in lost.slots:
                self.counts[slot.function].submitted -= 1  # they run again elsewhere (as new tasks here)
        for c in self.counts:
            c.running = 0
        for worker in self.workers:
            for slot in worker.slots:
                self.counts[slot.function].running += 1
        self.backlog = max(0, self.backlog - len(pending.events.task_ids) // 2 + self.random.randrange(0, 40))
        pending.events.dropped = 3  # as a scheduler past its per-period bound would say
        status = self._status(clock_us, time_us, pending)
        self.departed = []
        return status

    def _worker_status(self, w: FakeWorker) -> WorkerStatus:
        r = self.random
        running = len(w.slots)
        return WorkerStatus(
            name=w.name,
            agent_cpu_percent=r.uniform(0.5, 4),
            agent_rss_bytes=60 << 20,
            cpu_percent=running * r.uniform(70, 99),
            rss_bytes=running * ((150 + r.randrange(0, 300)) << 20),
            free=0,
            sent=running + 2,
            queued=r.randrange(0, 4),
            lag_us=r.randrange(300, 4000),
            processors=running,
            running=running,
            completed=w.completed,
            held_back_ms=w.held_back_ms,
            heartbeat_age_ms=12_000 if w.stale else r.randrange(0, 2000),
            capabilities=["payload=python", "gpu"] if w.name.startswith("node001") else ["payload=python"],
        )

    def _status(self, clock_us: int, time_us: int, pending: Pending) -> Status:
        running = sum(len(w.slots) for w in self.workers)
        success = sum(c.success for c in self.counts)
        error = sum(c.error for c in self.counts)
        done = success + error
        return Status(
            scheduler_name="fake-scheduler",
            time_us=time_us,
            cpu_percent=self.random.uniform(20, 60),
            rss_bytes=180 << 20,
            tasks_by_state={
                "waiting": 40,
                "queued": self.backlog,
                "assigned": running + 100,
                "canceling": 0,
                "success": success,
                "error": error,
                "canceled": 3,
                "failed": 1,
            },
            sent={"dispatchTasks": done // 10, "status": self.steps},
            received={"taskResults": done // 10, "submitTasks": 50},
            workers=[self._worker_status(w) for w in self.workers],
            clients=[
                ClientStatus("client-analytics", self.backlog // 2 + 120, 3, done * 2 // 3, assigned=120),
                ClientStatus("client-batch", self.backlog // 2, 1, done // 3, assigned=min(40, self.backlog // 2)),
                *self.extra_clients,
            ],
            protected=True,
            clock_us=clock_us,
            functions=[
                FunctionStatus(name, c.submitted + 800, c.running, c.success, c.error, 0, 0, c.duration_us)
                for (name, *_), c in zip(FUNCTIONS, self.counts)
            ],
            events=pending.events,
            managers=self.managers,
            waiting=self.waiting,
            units_started=len(self.managers) * 3,
            started_us=self.started_us,
            recovered=self.recovered,
            failures=pending.failures,
            outputs=pending.outputs,
            departed=list(self.departed),
        )


class FakeScheduler:
    """A thread publishing the FakeCluster's status on `address` every `interval` seconds; stop() ends it."""

    def __init__(self, address: str, interval: float = 1.0, **cluster: Any) -> None:
        self.address = address
        self.interval = interval
        self.cluster = FakeCluster(**cluster)  # FakeCluster's keywords
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-scheduler", daemon=True)
        self.paused = threading.Event()  # set: publish nothing (a scheduler that stopped)

    def __enter__(self) -> FakeScheduler:
        self._sock = bind_monitor_router(self.address, context(), None)
        self._channel = MonitorChannel(self._sock, "fake-scheduler", "", lambda fd: None)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._sock.close()

    def _run(self) -> None:
        start = next_status = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            self._channel.on_readable(now)  # monitors' hellos, as the real scheduler's monitor socket answers them
            if now >= next_status:
                next_status = now + self.interval
                if not self.paused.is_set():
                    clock_us = int((now - start) * 1e6) + 10_000_000
                    self._channel.publish(self.cluster.step(clock_us, int(time.time() * 1e6)))
                    self.sent += 1
            self._stop.wait(min(0.05, max(0.0, next_status - time.monotonic())))


def main() -> None:
    p = argparse.ArgumentParser(description="Publish a fake cluster's statuses on a monitor address.")
    p.add_argument("address", help="e.g. ipc:///tmp/fake_monitor")
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--processors", type=int, default=4)
    args = p.parse_args()
    with FakeScheduler(args.address, n_workers=args.workers, processors=args.processors):
        print(f"publishing a fake cluster of {args.workers} workers on {args.address}; Ctrl-C stops", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
