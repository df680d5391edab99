"""scaler_worker_manager local against a real scheduler (both started as commands, real processes and sockets): no
worker while there is no work; a burst of work brings workers within seconds; every task ends once, right; idle units
are drained and stopped; SIGINT ends the manager and all its units."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from scaler import Client
from tests.helpers import (
    free_address,
    kill_tree,
    mark_once,
    running_scheduler,
    scheduler_command,
    stop_process,
    wait_until,
)

pytestmark = pytest.mark.timeout(180)


def manager_command(address: str, log: Path, *options: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "scaler.entry_points.worker_manager",
        "local",
        *options,
        "--logging-paths",
        str(log),
        address,
    ]


def units_of(manager: subprocess.Popen[bytes]) -> list[psutil.Process]:
    """The manager's live units (scaler_cluster processes), each with its workers under it."""
    try:
        children = psutil.Process(manager.pid).children()
    except psutil.Error:
        return []
    return [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]


def with_workers(units: list[psutil.Process]) -> list[psutil.Process]:
    """The units and every process under them."""
    return [p for unit in units for p in [unit, *unit.children(recursive=True)]]


def workers_of(manager: subprocess.Popen[bytes]) -> int:
    count = 0
    for unit in units_of(manager):
        try:
            count += len(unit.children())
        except psutil.Error:
            continue
    return count


@pytest.fixture
def scheduler() -> Iterator[str]:
    with running_scheduler() as address:
        yield address


def start_manager(address: str, log: Path, *options: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(manager_command(address, log, *options))


def stop_manager(manager: subprocess.Popen[bytes]) -> None:
    left = with_workers(units_of(manager))
    stop_process(manager)
    kill_tree(left)  # (only if the test failed before they stopped)


def test_work_brings_workers_that_retire_when_idle(scheduler: str, tmp_path: Path) -> None:
    log = tmp_path / "manager.log"
    marks = tmp_path / "marks"
    marks.mkdir()
    manager = start_manager(scheduler, log, "--max-workers", "4", "--idle-seconds", "5")
    try:
        time.sleep(3)
        assert units_of(manager) == [], "a unit started while there was no work"
        with Client(scheduler, timeout_seconds=20) as client:
            start = time.monotonic()
            futures = [client.submit(mark_once, str(marks), i, 0.25) for i in range(400)]
            wait_until(lambda: workers_of(manager) >= 2, timeout=10, what="two workers within 10 s of the work")
            results = [f.result(timeout=60 - (time.monotonic() - start)) for f in futures]
            took = time.monotonic() - start
        assert results == [i * 2 for i in range(400)]
        assert sorted(int(name) for name in os.listdir(marks)) == list(range(400))  # each ran, none twice
        assert took < 60
        wait_until(lambda: units_of(manager) == [], timeout=30, what="every unit retired 30 s after the work")
        text = log.read_text()
        assert "stop local-1: drained: its workers hold no task" in text or "drained" in text
    finally:
        stop_manager(manager)


def test_sigint_stops_the_manager_and_every_unit_within_10_seconds(scheduler: str, tmp_path: Path) -> None:
    manager = start_manager(scheduler, tmp_path / "manager.log", "--min-workers", "2", "--max-workers", "2")
    try:
        wait_until(lambda: workers_of(manager) == 2, timeout=20, what="the two workers --min-workers keeps")
        units = units_of(manager)
        everything = with_workers(units)
        start = time.monotonic()
        manager.send_signal(signal.SIGINT)
        assert manager.wait(10) == 0
        _gone, alive = psutil.wait_procs(everything, timeout=max(0.1, 10 - (time.monotonic() - start)))
        assert alive == [], f"still running 10 s after SIGINT: {alive}"
    finally:
        stop_manager(manager)


def test_a_manager_killed_outright_takes_its_units_with_it(scheduler: str, tmp_path: Path) -> None:
    manager = start_manager(scheduler, tmp_path / "manager.log", "--min-workers", "1", "--max-workers", "1")
    try:
        wait_until(lambda: workers_of(manager) == 1, timeout=20, what="the worker --min-workers keeps")
        units = units_of(manager)
        everything = with_workers(units)
        manager.kill()
        manager.wait(5)
        _gone, alive = psutil.wait_procs(everything, timeout=10)
        assert alive == [], f"orphans of a killed manager: {alive}"
    finally:
        stop_manager(manager)


def test_bad_options_are_usage_errors_that_say_what_to_do(tmp_path: Path) -> None:
    for options, words in (
        (["--min-workers", "5", "--max-workers", "2"], "--min-workers 5 is more than --max-workers 2"),
        (["--max-workers", "0"], "--max-workers"),
        (["--idle-seconds", "-1"], "--idle-seconds"),
    ):
        done = subprocess.run(
            manager_command("tcp://127.0.0.1:1", tmp_path / "m.log", *options),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done
        assert words in done.stderr, done.stderr


def test_with_keys_the_units_workers_get_only_the_worker_key(tmp_path: Path) -> None:
    from scaler.security.keys import generate

    keys = tmp_path / "keys"
    generate(keys)
    address = free_address()
    scheduler = subprocess.Popen([*scheduler_command(address), "--keys", str(keys)])
    manager = start_manager(address, tmp_path / "manager.log", "--keys", str(keys), "--min-workers", "1")
    try:
        wait_until(lambda: workers_of(manager) == 1, timeout=20, what="the worker --min-workers keeps")
        [unit] = units_of(manager)
        folder = unit.cmdline()[unit.cmdline().index("--keys") + 1]
        assert sorted(os.listdir(folder)) == ["scheduler.key", "worker.key_secret"]  # not the manager's own key
        with Client(address, timeout_seconds=20, keys=str(keys)) as client:
            assert client.submit(pow, 2, 5).result(timeout=20) == 32
        manager.send_signal(signal.SIGINT)
        assert manager.wait(15) == 0
        assert not os.path.exists(folder)  # removed when the manager ends
    finally:
        stop_manager(manager)
        stop_process(scheduler)
