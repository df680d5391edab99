"""Helpers shared by the tests: free ports, waiting on conditions with a deadline, our own child processes."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable

import psutil


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_address() -> str:
    return f"tcp://127.0.0.1:{free_port()}"


def wait_until(condition: Callable[[], object], timeout: float = 10.0, interval: float = 0.02, what: str = "") -> None:
    """Poll `condition` until it is true; fail the test (never hang) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(interval)


def my_descendants() -> list[psutil.Process]:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def kill_tree(processes: list[psutil.Process]) -> None:
    for process in processes:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(processes, timeout=5)


def session_members(session_id: int) -> list[psutil.Process]:
    """The live processes of a session (a program and everything it started; an orphan keeps its session)."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == session_id and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process)
        except (OSError, psutil.Error):
            continue
    return members
