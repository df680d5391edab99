"""Chaos with real processes (issue 28): a --journal scheduler killed again and again under load (kill -9 three
times and one SIGTERM, a clean stop that must exit 0 and fail no future, at seeded random points, down 0.3 to 1.5 s
each), and a processor killed mid-task between
them, while one client's independent tasks, a graph, a keyed map (in a thread) and tasks submitted meanwhile are in
flight. Every future completes with its right value, none raises, `scaler_cluster -n 2` stays up with the same
agents, and what ran twice is bounded by what was in flight at the kills."""

from __future__ import annotations

import operator
import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from scaler import Client
from tests.helpers import stop_process, wait_until
from tests.integration.test_scheduler_journal_restart import journaled_cluster, marked

pytestmark = pytest.mark.timeout(240)

SEED = int(
    os.environ.get("SCALER_CHAOS_SEED", "7")
)  # another: SCALER_CHAOS_SEED=3 pytest tests/integration/test_scheduler_chaos.py


def add(a: int, b: int) -> int:
    return a + b


def graph_of(width: int) -> tuple[dict[str, Any], list[str], int]:
    """A diamond of `width` leaves summed pairwise down to one root: (graph, [root], the root's value)."""
    graph: dict[str, Any] = {f"leaf-{i}": (operator.mul, i, 2) for i in range(width)}
    level = [f"leaf-{i}" for i in range(width)]
    depth = 0
    while len(level) > 1:
        depth += 1
        pairs = [level[i : i + 2] for i in range(0, len(level), 2)]
        level = []
        for n, pair in enumerate(pairs):
            key = f"sum-{depth}-{n}"
            graph[key] = (add, pair[0], pair[1]) if len(pair) == 2 else (operator.pos, pair[0])
            level.append(key)
    return graph, level, sum(i * 2 for i in range(width))


def processors(cluster: subprocess.Popen[bytes]) -> list[psutil.Process]:
    """The processor processes of the cluster's agents (their children)."""
    return [child for agent in psutil.Process(cluster.pid).children() for child in agent.children()]


def test_a_journaled_scheduler_killed_again_and_again_under_load_loses_nothing(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    address, marks, command, scheduler, cluster = journaled_cluster(tmp_path)
    tasks, keyed = 400, 150
    kills = sorted(rng.sample(range(10, 85), 4))  # percent of the first tasks done at each kill
    sigterm = rng.randrange(4)  # which kill is a SIGTERM (a clean stop) instead of kill -9
    print(f"seed {SEED}: kills at {kills} % (SIGTERM at #{sigterm + 1})")
    keyed_marks = tmp_path / "keyed"
    keyed_marks.mkdir()
    try:
        with Client(address) as client:
            wait_until(lambda: len(psutil.Process(cluster.pid).children()) == 2, timeout=30, what="the two agents")
            agents = {p.pid for p in psutil.Process(cluster.pid).children()}
            futures = [client.submit(marked, str(marks), i) for i in range(tasks)]
            graph, root, total = graph_of(64)
            (graph_future,) = client.submit_graph(graph, root)
            mapped: dict[str, Any] = {}

            def keyed_map() -> None:
                try:
                    mapped["value"] = client.options(idempotency_key="chaos").map(
                        marked, [(str(keyed_marks), i) for i in range(keyed)]
                    )
                except BaseException as exc:  # (checked below)
                    mapped["error"] = exc

            mapper = threading.Thread(target=keyed_map, name="keyed map")
            mapper.start()
            later = []
            for number, percent in enumerate(kills):
                enough = tasks * percent / 100
                wait_until(lambda: sum(f.done() for f in futures) >= enough, timeout=120, what=f"{percent} %")  # noqa: B023
                if number == 1:  # a processor dies mid-task too (its task runs again on a new one)
                    victims = processors(cluster)
                    if victims:
                        victims[rng.randrange(len(victims))].kill()
                scheduler.send_signal(signal.SIGTERM if number == sigterm else signal.SIGKILL)
                code = scheduler.wait(15)
                assert code == (0 if number == sigterm else -signal.SIGKILL), code  # (a clean stop exits 0)
                later.append(client.submit(marked, str(marks), tasks + number))  # submitted while it is away
                time.sleep(rng.uniform(0.3, 1.5))
                # its clients wait for it: no future failed meanwhile (a SIGTERM, too, tells them it comes back)
                assert not any(f.done() and f.exception() is not None for f in futures + later)
                scheduler = subprocess.Popen(command)  # the same command again
            results = [f.result(timeout=120) for f in futures + later]  # none raises
            assert graph_future.result(timeout=120) == total
            mapper.join(120)
            assert not mapper.is_alive() and "error" not in mapped, mapped.get("error")
        assert results == [i * 3 for i in range(tasks + len(kills))]
        assert mapped["value"] == [i * 3 for i in range(keyed)]
        runs = len(os.listdir(marks)) + len(os.listdir(keyed_marks))
        print(f"{runs - tasks - len(kills) - keyed} runs again over {len(kills)} restarts")
        # at most what two workers (each a processor per core, and their queues) held at each kill, and the processor
        assert tasks + len(kills) + keyed <= runs <= tasks + len(kills) + keyed + 40 * len(kills), runs
        assert cluster.poll() is None and {p.pid for p in psutil.Process(cluster.pid).children()} == agents
    finally:
        stop_process(cluster)
        stop_process(scheduler)
