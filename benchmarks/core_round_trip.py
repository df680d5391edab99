"""The scheduler's pure core alone, one task at a time: µs per single-task round trip in a warm loop, no sockets.

usage: python benchmarks/core_round_trip.py [--round-trips 20000] [--rounds 3] [--batch 1] [--profile]

Each round trip is what the scheduler's core does for a lone task: feed the client's submitTasks of one task
(arguments inline), flush (the dispatch to the one worker), feed the worker's taskResults, flush (the results to
the client). With --batch N, N tasks go in each submit and come back in each result (µs per task then). Prints one
JSON line per round (the best is the figure; the machine is shared), then, with --profile, where one more round's
time goes (cProfile, by own time). Compare trees by running it under each tree's PYTHONPATH, alternated:

    for t in /tmp/base /tmp/head; do PYTHONPATH=$t/src .venv/bin/python benchmarks/core_round_trip.py; done

benchmarks/core_throughput.py is the same core fed big batches by several workers.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import time

from scaler.core.scheduler import Received, SchedulerConfig, SchedulerCore
from scaler.protocol.messages import ID_PREFIX_SHIFT, Hello, PeerKind, PutObjects, SubmitTasks, TaskResults

CLIENT, WORKER = b"client", b"worker"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--round-trips", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1, help="tasks per submit and per result")
    parser.add_argument("--profile", action="store_true", help="profile one more round (cProfile, own time)")
    args = parser.parse_args()
    forever = 1e9  # no time passes: nobody times out
    core = SchedulerCore(SchedulerConfig(worker_timeout_seconds=forever, client_timeout_seconds=forever))
    core.handle(Received(0.0, CLIENT, Hello(PeerKind.CLIENT, "client")))
    core.handle(Received(0.0, WORKER, Hello(PeerKind.WORKER, "worker", queue_capacity=max(10, args.batch))))
    prefix = core.clients[CLIENT].prefix
    function = (prefix << ID_PREFIX_SHIFT) | 1
    core.handle(Received(0.0, CLIENT, PutObjects([function], [b"function"])))
    counter = 2
    n, batch = args.round_trips, args.batch

    def messages() -> list[tuple[SubmitTasks, TaskResults]]:
        nonlocal counter
        made = []
        for _ in range(n):
            ids = [(prefix << ID_PREFIX_SHIFT) | (counter + i) for i in range(batch)]
            counter += batch
            submit = SubmitTasks(ids, [function] * batch, bytes(batch), [1] * batch, [0] * batch, None, [b"x"] * batch)
            made.append((submit, TaskResults(ids, bytes(batch), [b"r"] * batch)))
        return made

    def run(made: list[tuple[SubmitTasks, TaskResults]]) -> float:
        feed, flush = core.feed, core.flush
        started = time.perf_counter()
        for submit, result in made:
            feed(Received(0.0, CLIENT, submit))
            flush()
            feed(Received(0.0, WORKER, result))
            flush()
        return time.perf_counter() - started

    run(messages())  # warm
    for _ in range(args.rounds):
        elapsed = run(messages())
        record = {"benchmark": "core_round_trip", "round_trips": n, "batch": batch}
        record["us_per_round_trip"] = round(elapsed / n * 1e6, 2)
        record["us_per_task"] = round(elapsed / n / batch * 1e6, 3)
        print(json.dumps(record))
    if args.profile:
        made = messages()
        profile = cProfile.Profile()
        profile.enable()
        run(made)
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
