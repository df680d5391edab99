"""benchmarks/hop_cpu.py --timeline (the wall-clock timeline of a lone round trip) runs on a real cluster and puts the
steps in the order a round trip takes them: the client's submit, the scheduler's read of it, the agent's, the
processor's run, the scheduler's read of the result."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]


def test_timeline_orders_the_steps_of_a_round_trip() -> None:
    command = [sys.executable, str(ROOT / "benchmarks" / "hop_cpu.py"), "--round-trips", "40", "--timeline"]
    command += ["--wrap", "scheduler scaler.scheduler.server send_frames"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr
    starts: dict[str, float] = {}
    for line in done.stdout.splitlines():
        if "#" in line:
            label, rest = line.rsplit("#", 1)
            fields = rest.split()
            starts[f"{label.strip()} #{fields[0]}"] = float(fields[1])
    order = [
        "client Client.submit #0",
        "scheduler SchedulerServer._on_readable #0",
        "scheduler send_frames #0",
        "agent WorkerAgent._on_scheduler_readable #0",
        "processor Processor._run #0",
        "agent WorkerAgent._on_processor_messages #0",
        "scheduler SchedulerServer._on_readable #1",
        "scheduler send_frames #1",
    ]
    assert all(step in starts for step in order), done.stdout
    assert [starts[step] for step in order] == sorted(starts[step] for step in order), done.stdout
