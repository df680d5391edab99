"""The test helpers that other tests lean on to clean up after real processes."""

from __future__ import annotations

import subprocess
import sys

import psutil

from tests.helpers import kill_if_alive


def test_kill_if_alive_kills_a_live_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert kill_if_alive(psutil.Process(child.pid))
        assert child.wait(10) == -9
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(5)


def test_kill_if_alive_tolerates_a_process_that_ended_after_it_was_listed() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    listed = psutil.Process(child.pid)  # found while alive, as a listing of children finds it
    child.wait(10)  # ends and is reaped before the kill
    assert not kill_if_alive(listed)
