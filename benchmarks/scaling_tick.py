"""What one scaling tick costs the scheduler's core (core/scheduler/managers.py WorkerManagers.tick) with many tasks
queued: it runs every 0.25 s while a worker manager is connected, so it must not walk the queued tasks.

The core alone (no sockets): a manager connected, QUEUED tasks of one function queued (in the batches a client's map
sends) whose run time is known (a first task measured), WORKERS workers each holding their queue's worth. Prints one
JSON line: the median and the worst of REPEAT ticks, in µs.

    .venv/bin/python benchmarks/scaling_tick.py [QUEUED] [WORKERS]
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from scaler.core.scheduler import Received, SchedulerConfig, SchedulerCore, Tick
from scaler.protocol.messages import Hello, ManagerReport, PeerKind, PutObjects, SubmitTasks, TaskResults, TaskStatus

PREFIX_SHIFT = 40
REPEAT = 200
BATCH = 1_000


def main(queued: int, workers: int) -> None:
    core = SchedulerCore(SchedulerConfig())
    now = 0.0

    def feed(peer: bytes, message: object) -> None:
        core.handle(Received(now, peer, message))  # type: ignore[arg-type]

    feed(b"c", Hello(PeerKind.CLIENT, "c"))
    core.flush()
    prefix = next(iter(core.clients.values())).prefix
    function = (prefix << PREFIX_SHIFT) | 1
    feed(b"c", PutObjects([function], [b"f"], ["f"]))
    feed(b"m", Hello(PeerKind.MANAGER, "local", capabilities=["payload=python"]))
    feed(b"m", ManagerReport(max_units=workers, idle_ms=60_000, start_timeout_ms=600_000))
    for n in range(workers):
        feed(b"w%d" % n, Hello(PeerKind.WORKER, f"w{n}", queue_capacity=4, capabilities=["payload=python"]))
    counter = 2
    for start in range(0, queued + workers * 4, BATCH):
        count = min(BATCH, queued + workers * 4 - start)
        ids = [(prefix << PREFIX_SHIFT) | (counter + k) for k in range(count)]
        counter += count
        feed(b"c", SubmitTasks(ids, [function] * count, bytes(count), [1] * count, [0] * count, None, [b"x"] * count))
        core.flush()
    first = next(iter(core.workers.values()))
    done = next(iter(first.assigned))
    now = 0.001
    feed(first.identity, TaskResults([done], bytes([TaskStatus.SUCCESS]), [b"r"]))
    core.flush()
    core.handle(Tick(now))
    samples = []
    for _ in range(REPEAT):
        now += 0.25
        core.now = now
        for session in core.managers.sessions.values():
            session.last_seen = now  # (its heartbeats)
        began = time.perf_counter()
        core.managers.tick()
        samples.append((time.perf_counter() - began) * 1e6)
    assert core.managers.policy.managers, "the manager was lost: the ticks measured nothing"
    queued_now = sum(need.queued for need in core.needs.by_caps.values())
    expected = getattr(core.function_stats(function), "expected_us", -1.0)  # (-1: a core before run-time sizing)
    row = {
        "queued": queued_now,
        "workers": workers,
        "expected_us": round(expected, 1),
        "tick_median_us": round(statistics.median(samples), 1),
        "tick_max_us": round(max(samples), 1),
    }
    print(json.dumps(row))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000, int(sys.argv[2]) if len(sys.argv) > 2 else 100)
