"""The scheduler's pure core alone: tasks per second through submit -> dispatch -> result, no sockets.

usage: python benchmarks/core_throughput.py [--tasks 200000] [--batch 2000] [--workers 2]

Feeds SchedulerCore batches of one-argument tasks from one client, answers every dispatch at once from the
simulated workers, and prints one JSON line: core tasks/s and microseconds of core time per task. Compare with
the end-to-end figures of benchmarks/peers.py: the difference is what I/O, encoding and the other processes cost.
"""

from __future__ import annotations

import argparse
import json
import pickle
import time

from scaler.core.scheduler import Received, SchedulerCore, Send
from scaler.protocol.messages import (
    DispatchTasks,
    Hello,
    PeerKind,
    PutObjects,
    SubmitTasks,
    TaskResults,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    core = SchedulerCore()
    core.handle(Received(0.0, b"client", Hello(PeerKind.CLIENT, "client")))
    workers = [f"w{i}".encode() for i in range(args.workers)]
    for worker in workers:
        core.handle(Received(0.0, worker, Hello(PeerKind.WORKER, worker.decode(), queue_capacity=1000)))
    base = 1 << 40
    function = base | 1
    core.handle(Received(0.0, b"client", PutObjects([function], [b"function"])))
    payload = pickle.dumps(12345)
    next_id = 2
    done = 0
    started = time.perf_counter()
    while done < args.tasks:
        count = min(args.batch, args.tasks - next_id + 2)
        if count > 0:
            ids = list(range(base | next_id, base | (next_id + count)))
            next_id += count
            batch = SubmitTasks(
                ids, [function] * count, bytes(count), [1] * count, [0] * count, None, [payload] * count
            )
            pending = core.handle(Received(0.0, b"client", batch))
        else:
            pending = core.flush()
        while pending:
            follow = []
            for command in pending:
                if isinstance(command, Send) and isinstance(command.message, DispatchTasks):
                    ids = command.message.task_ids
                    results = TaskResults(ids, bytes(len(ids)), [payload] * len(ids))
                    follow += core.handle(Received(0.0, command.peer, results))
                elif isinstance(command, Send) and isinstance(command.message, TaskResults):
                    done += len(command.message.task_ids)
            pending = follow
    elapsed = time.perf_counter() - started
    record = {
        "benchmark": "core_throughput",
        "tasks": args.tasks,
        "batch": args.batch,
        "workers": args.workers,
        "tasks_per_s": round(args.tasks / elapsed),
        "core_us_per_task": round(elapsed / args.tasks * 1e6, 2),
    }
    print(json.dumps(record))


if __name__ == "__main__":
    main()
