"""A flood of subscriptions and hellos against a real scheduler's monitor address: its memory stays bounded, the
monitors past the limit are refused, and a real monitor keeps getting statuses (real processes and sockets)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import zmq

from scaler import SchedulerClusterCombo
from scaler.monitor.top import Subscription
from scaler.protocol.messages import Hello, PeerKind, encode
from scaler.scheduler.monitors import MAX_MONITORS
from tests.helpers import free_address

pytestmark = pytest.mark.timeout(120)
FLOOD_SECONDS = 3.0
GROWTH_MB = 60  # what the scheduler's memory may grow by while flooded (its status history, sockets, buffers)


@pytest.fixture(scope="module")
def combo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SchedulerClusterCombo, Path]]:
    folder = tmp_path_factory.mktemp("monitor-flood")
    cluster = SchedulerClusterCombo(
        address=free_address(),
        n_workers=1,
        monitor_address=f"ipc://{folder}/monitor",
        logging_paths=(str(folder / "cluster.log"),),
    )
    try:
        yield cluster, folder / "cluster.log"
    finally:
        cluster.shutdown()


def scheduler_rss_mb(cluster: SchedulerClusterCombo) -> float:
    return float(psutil.Process(cluster._scheduler.pid).memory_info().rss) / 1e6


def peak_growth(cluster: SchedulerClusterCombo, before: float, seconds: float) -> float:
    peak = before
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        peak = max(peak, scheduler_rss_mb(cluster))
        time.sleep(0.1)
    return peak - before


def still_served(address: str, seconds: float = 30.0) -> bool:
    """Whether a new monitor gets a snapshot within `seconds`. It subscribes again every 5 s: on a loaded machine the
    scheduler may still be reading the flood's backlog, or the crowd's goodbyes, when the first hello comes (a
    monitor refused while the crowd held every place is not served later)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        feed = Subscription(address, None, name="legit")
        try:
            if feed.next(5_000) is not None:
                return True
        finally:
            feed.close()
    return False


def test_subscriptions_from_a_sub_socket_are_not_kept(combo: tuple[SchedulerClusterCombo, Path]) -> None:
    """What took an XPUB-based monitor to gigabytes: distinct 512-byte subscriptions from one socket, sent as fast
    as the scheduler takes them (an XSUB sends each as a message; a SUB would drop what its queue cannot hold)."""
    cluster, _ = combo
    before = scheduler_rss_mb(cluster)
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        sub = ctx.socket(zmq.XSUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SNDTIMEO, 100)
        sub.connect(cluster.monitor_address)
        sent = 0
        end = time.monotonic() + FLOOD_SECONDS
        while time.monotonic() < end:
            try:
                sub.send(b"\x01" + sent.to_bytes(8, "little") + os.urandom(503))
                sent += 1
            except zmq.Again:  # held back (or, against a ROUTER, never connected: the socket types do not match)
                continue
        grown = peak_growth(cluster, before, 5.0)  # what was sent arrives, and the scheduler reads it
        assert grown < GROWTH_MB, f"{sent:,} subscriptions grew the scheduler by {grown:.0f} MB"
    finally:
        ctx.destroy(linger=0)
    assert still_served(cluster.monitor_address)


def test_hellos_in_a_loop_and_too_many_monitors_are_bounded(combo: tuple[SchedulerClusterCombo, Path]) -> None:
    cluster, log = combo
    before = scheduler_rss_mb(cluster)
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        loud = ctx.socket(zmq.DEALER)
        loud.setsockopt(zmq.LINGER, 0)
        loud.connect(cluster.monitor_address)
        sent = 0
        end = time.monotonic() + FLOOD_SECONDS
        while time.monotonic() < end:
            try:
                loud.send_multipart(list(encode(Hello(PeerKind.MONITOR, f"loud-{sent}"))), zmq.NOBLOCK)
                sent += 1
            except zmq.Again:  # held back: the scheduler reads a few at a time from one connection
                time.sleep(0.001)
        crowd = []
        for index in range(MAX_MONITORS + 20):
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(cluster.monitor_address)
            sock.send_multipart(list(encode(Hello(PeerKind.MONITOR, f"crowd-{index}"))))
            crowd.append(sock)
        deadline = time.monotonic() + 10
        while "monitors are subscribed already" not in log.read_text():
            assert time.monotonic() < deadline, "no monitor was refused past the limit"
            time.sleep(0.05)
        grown = scheduler_rss_mb(cluster) - before
        assert grown < GROWTH_MB, f"{sent:,} hellos and {len(crowd)} monitors grew the scheduler by {grown:.0f} MB"
    finally:
        ctx.destroy(linger=0)
    assert still_served(cluster.monitor_address)  # the crowd left: there is room again
