"""The fleet harness (benchmarks/fleet_peers.py, issue 17) speaks the real protocol: 50 simulated workers in one
process serve a real scheduler process, and a real client's map of 2,000 tasks comes back complete and correct."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scaler import Client
from tests.helpers import free_address

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def noop(x: int) -> None:
    return None


def test_fifty_fake_workers_run_a_map_of_two_thousand(tmp_path: Path) -> None:
    address = free_address()
    command = [str(BIN / "scaler_scheduler"), address, "--monitor-address", f"ipc://{tmp_path}/monitor"]
    scheduler = subprocess.Popen([*command, "--cpu", "none", "-ll", "WARNING", "-lp", str(tmp_path / "scheduler.log")])
    fleet = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "fleet_peers.py"), address, "50"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert fleet.stdout is not None
        assert fleet.stdout.readline().strip() == "ready 50"
        with Client(address, timeout_seconds=30) as client:
            assert client.map(noop, [(i,) for i in range(2000)], timeout=30) == [None] * 2000
        fleet.terminate()
        out, _ = fleet.communicate(timeout=10)
        counts = json.loads(out.strip().splitlines()[-1])
        assert counts["tasks"] == 2000
        assert counts["Welcome"] == 50
        assert fleet.returncode == 0
    finally:
        for proc in (fleet, scheduler):
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


def test_fake_workers_say_hello_again_to_a_scheduler_that_lost_them(tmp_path: Path) -> None:
    """A fake worker answered notConnected (its session is gone: here the scheduler was restarted without a journal;
    in the 5,000-worker sitting of 2026-12-05, connections ended as silent) says hello again, as a real worker does:
    without it, fleet.py waited for its welcome forever."""
    address = free_address()
    command = [
        str(BIN / "scaler_scheduler"),
        address,
        "--monitor-address",
        f"ipc://{tmp_path}/monitor",
        "--cpu",
        "none",
    ]
    first = subprocess.Popen([*command, "-ll", "WARNING", "-lp", str(tmp_path / "first.log")])
    fleet = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "fleet_peers.py"), address, "5", "--heartbeat", "0.5"],
        stdout=subprocess.PIPE,
        text=True,
    )
    second = None
    try:
        assert fleet.stdout is not None
        assert fleet.stdout.readline().strip() == "ready 5"
        first.terminate()
        first.wait(timeout=20)
        second = subprocess.Popen([*command, "-ll", "WARNING", "-lp", str(tmp_path / "second.log")])
        with Client(address, timeout_seconds=30) as client:  # (only the fake workers can run it)
            assert client.map(noop, [(i,) for i in range(100)], timeout=30) == [None] * 100
        fleet.terminate()
        out, _ = fleet.communicate(timeout=10)
        counts = json.loads(out.strip().splitlines()[-1])
        # (the map needs one of them back; the others say hello again at their next heartbeat, maybe after it)
        assert counts["hellos again"] >= 1
        assert counts["Welcome"] >= 6
    finally:
        for proc in (fleet, first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
