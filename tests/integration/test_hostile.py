"""Hostile peers against a live scheduler (real processes and sockets): a socket flooding garbage without reading,
and a socket saying hello in a loop. The scheduler must stay small, log little, and keep serving a real client.

The figures of the issue's longer runs (15 s of garbage, 60 s of hellos) come from benchmarks/hostile.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import zmq

from scaler import Client, SchedulerClusterCombo
from scaler.protocol.messages import Hello, PeerKind
from tests.helpers import RoundTrips, encoded, free_address, wait_until

FLOOD_SECONDS = 3.0


@pytest.fixture(scope="module")
def combo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SchedulerClusterCombo, Path]]:
    log = tmp_path_factory.mktemp("hostile") / "cluster.log"
    cluster = SchedulerClusterCombo(
        address=free_address(),
        n_workers=1,
        heartbeat_interval_seconds=0.5,
        worker_timeout_seconds=3,
        logging_paths=(str(log),),
    )
    try:
        yield cluster, log
    finally:
        cluster.shutdown()


def scheduler_process(cluster: SchedulerClusterCombo) -> psutil.Process:
    return psutil.Process(cluster._scheduler.pid)


def flood(address: str, frames: list[bytes], seconds: float, sample: psutil.Process) -> tuple[int, float]:
    """Send `frames` over one socket for `seconds`, never reading; (messages sent, peak scheduler RSS in MB)."""
    ctx: zmq.Context[Any] = zmq.Context()
    sock: zmq.Socket[Any] = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    sent, peak = 0, 0.0
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            for _ in range(500):
                try:
                    sock.send_multipart(frames, zmq.NOBLOCK)
                    sent += 1
                except zmq.Again:  # held back: both queues are full
                    time.sleep(0.001)
                    break
            peak = max(peak, sample.memory_info().rss / 1e6)
    finally:
        ctx.destroy(linger=0)
    return sent, peak


def test_a_garbage_flood_costs_little_memory_and_log_and_the_scheduler_keeps_serving(
    combo: tuple[SchedulerClusterCombo, Path],
) -> None:
    cluster, log = combo
    process = scheduler_process(cluster)
    before = process.memory_info().rss / 1e6
    log_before = log.stat().st_size
    with RoundTrips(cluster.address) as client:
        sent, peak = flood(cluster.address, [b"0123456789"], FLOOD_SECONDS, process)
        served_during = client.done
        wait_until(lambda: client.done > served_during or bool(client.errors), what="a round trip after the flood")
    assert not client.errors and served_during > 0 and client.done > served_during
    assert sent > 10_000  # it was a flood
    assert peak - before < 50, f"scheduler RSS grew from {before:.0f} MB to {peak:.0f} MB"
    growth = log.stat().st_size - log_before
    assert growth < 100_000, f"the log grew by {growth:,} bytes"
    with Client(cluster.address, timeout_seconds=10) as fresh:
        assert fresh.submit(pow, 3, 3).result(timeout=10) == 27


def test_a_hello_storm_from_one_socket_does_not_keep_others_out(combo: tuple[SchedulerClusterCombo, Path]) -> None:
    cluster, log = combo
    process = scheduler_process(cluster)
    before = process.memory_info().rss / 1e6
    log_before = log.stat().st_size
    hello = encoded(Hello(PeerKind.CLIENT, "storm"))
    sent, peak = flood(cluster.address, hello, FLOOD_SECONDS, process)
    assert sent > 1_000
    assert peak - before < 50, f"scheduler RSS grew from {before:.0f} MB to {peak:.0f} MB"
    assert log.stat().st_size - log_before < 100_000
    started = time.monotonic()
    with Client(cluster.address, timeout_seconds=10) as fresh:
        assert fresh.submit(pow, 2, 5).result(timeout=10) == 32
    assert time.monotonic() - started < 5
