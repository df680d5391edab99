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
