"""What a worker reports of its processors is what the machine sees (issue 16: the processor cpu column read 0.0 %
for a processor `top` showed at 87 to 93 %)."""

from __future__ import annotations

import time

import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.io.sockets import connect_subscriber
from scaler.monitor.top import next_status
from tests.helpers import free_address

pytestmark = pytest.mark.timeout(60)


def spin(seconds: float) -> int:
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    return n


def test_a_busy_processor_shows_its_cpu_in_the_status() -> None:
    with (
        SchedulerClusterCombo(
            address=free_address(), n_workers=1, heartbeat_interval_seconds=0.5, logging_level="ERROR"
        ) as combo,
        Client(combo.address) as client,
    ):
        sock = connect_subscriber(combo.monitor_address)
        try:
            future = client.submit(spin, 6.0)
            most = 0.0
            deadline = time.monotonic() + 5.5
            while time.monotonic() < deadline:
                status = next_status(sock, 500)
                if status is not None and status.workers:
                    most = max(most, status.workers[0].cpu_percent)
            assert future.result(timeout=30) > 0
        finally:
            sock.close(linger=0)
    assert most > 30, f"a processor spinning for 6 s showed at most {most:.1f}% CPU"
