"""`scaler FILE.toml` starts a whole stack from one file (real commands, processes and sockets) and Ctrl-C stops all
of it; a file it cannot use starts nothing; the stack's processes die with it even when it is killed outright."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from scaler import Client
from tests.helpers import free_address, free_port, kill_tree, wait_until

pytestmark = pytest.mark.timeout(120)


def stack_command(path: Path) -> list[str]:
    return [sys.executable, "-m", "scaler.entry_points.stack", str(path)]


def everything_under(process: subprocess.Popen[bytes]) -> list[psutil.Process]:
    try:
        children: list[psutil.Process] = psutil.Process(process.pid).children(recursive=True)
    except psutil.Error:
        return []
    return children


def kill_stack(stack: subprocess.Popen[bytes], seen: list[psutil.Process]) -> None:
    """What a failed test leaves: the stack, what runs under it now and what ran under it before."""
    left = everything_under(stack)
    stack.kill()
    stack.wait(5)
    kill_tree(left + seen)


def workers_under(process: subprocess.Popen[bytes]) -> int:
    """Worker processes: those whose parent is a scaler_cluster (fixed, or a manager's unit)."""
    count = 0
    for child in everything_under(process):
        try:
            if "scaler.entry_points.cluster" in " ".join(child.parent().cmdline()):
                count += 1
        except (psutil.Error, AttributeError):
            continue
    return count


def test_scaler_cluster_toml_serves_a_client_and_sigint_ends_everything_within_10_seconds(tmp_path: Path) -> None:
    address, monitor = free_address(), free_address()
    path = tmp_path / "cluster.toml"
    path.write_text(
        f'[scheduler]\naddress = "{address}"\nmonitor_address = "{monitor}"\n\n'
        f'[[worker_manager]]\ntype = "local"\nmax_workers = 2\n'
    )
    stack = subprocess.Popen(stack_command(path))
    seen: list[psutil.Process] = []
    try:
        with Client(address, timeout_seconds=30) as client:
            assert client.map(pow, [(i, 2) for i in range(50)]) == [i * i for i in range(50)]
            wait_until(lambda: workers_under(stack) >= 1, timeout=20, what="a worker the manager started")
            seen = everything_under(stack)  # the scheduler, the manager, its units and their workers
        assert len(seen) >= 4, seen
        start = time.monotonic()
        stack.send_signal(signal.SIGINT)
        assert stack.wait(10) == 0
        _gone, alive = psutil.wait_procs(seen, timeout=max(0.1, 10 - (time.monotonic() - start)))
        assert alive == [], f"still running 10 s after SIGINT: {alive}"
    finally:
        kill_stack(stack, seen)


def test_a_stack_with_fixed_workers_and_a_dashboard(tmp_path: Path) -> None:
    address, port = free_address(), free_port()
    path = tmp_path / "stack.toml"
    path.write_text(
        f'[scheduler]\naddress = "{address}"\nmonitor_address = "{free_address()}"\n\n'
        f"[cluster]\nnum_of_workers = 2\n\n[ui]\nport = {port}\n"
    )
    token = "t" * 32
    stack = subprocess.Popen(stack_command(path), env={**os.environ, "SCALER_UI_TOKEN": token})
    try:
        with Client(address, timeout_seconds=30) as client:
            assert client.submit(pow, 3, 4).result(timeout=30) == 81

        def dashboard_answers() -> bool:
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {token}"}
            )
            try:
                with urllib.request.urlopen(request, timeout=2) as answer:
                    return b"scaler_" in answer.read()
            except OSError:
                return False

        wait_until(dashboard_answers, timeout=20, interval=0.2, what="the dashboard of the [ui] table")
        stack.send_signal(signal.SIGTERM)
        assert stack.wait(10) == 0
    finally:
        kill_stack(stack, [])


def test_a_file_it_cannot_use_starts_nothing(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        f'[scheduler]\naddress = "{free_address()}"\n\n[[worker_manager]]\ntype = "local"\nmax_worker = 2\n'
    )
    done = subprocess.run(stack_command(path), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "worker_manager.1 has no setting 'max_worker': did you mean max_workers" in done.stderr, done.stderr
    assert "started" not in done.stdout


def test_a_scheduler_that_cannot_start_ends_the_stack(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"tcp://127.0.0.1:{taken.getsockname()[1]}"
        path = tmp_path / "stack.toml"
        path.write_text(f'[scheduler]\naddress = "{address}"\n\n[cluster]\nnum_of_workers = 1\n')
        done = subprocess.run(stack_command(path), capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "the scheduler could not start" in done.stdout + done.stderr


def test_a_stack_killed_outright_takes_its_processes_with_it(tmp_path: Path) -> None:
    address = free_address()
    path = tmp_path / "stack.toml"
    path.write_text(
        f'[scheduler]\naddress = "{address}"\nmonitor_address = "{free_address()}"\n\n[cluster]\nnum_of_workers = 1\n'
    )
    stack = subprocess.Popen(stack_command(path))
    seen: list[psutil.Process] = []
    try:
        with Client(address, timeout_seconds=30) as client:
            assert client.submit(pow, 2, 3).result(timeout=30) == 8
        seen = everything_under(stack)
        stack.kill()
        stack.wait(5)
        _gone, alive = psutil.wait_procs(seen, timeout=15)
        assert alive == [], f"orphans of a killed stack: {alive}"
    finally:
        kill_tree(seen)
