"""scaler_top end to end: --once without a scheduler, and the full screen in a pseudo-terminal as the scheduler
comes and goes."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import signal
import struct
import subprocess
import termios
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_cli import ENV, Program, cli, run
from tests.helpers import free_address, wait_until


def test_once_without_a_scheduler_says_what_it_waited_for_and_fails(tmp_path: Path) -> None:
    monitor = f"ipc://{tmp_path}/monitor"
    done = run(cli("scaler_top"), "--once", "--timeout", "1", monitor)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout == "", done.stdout
    assert f"waiting for the scheduler's status at {monitor}\u2026 (1s): none came" in done.stderr, done.stderr


class Terminal:
    """A program in a pseudo-terminal, 120x40; what it writes is collected by a thread, escapes and all."""

    def __init__(self, *args: str) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        env = {**ENV, "TERM": "xterm", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
        self.process = subprocess.Popen(
            args, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True, close_fds=True
        )
        os.close(slave)
        self.master = master
        self._chunks: list[bytes] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return
            if not chunk:
                return
            self._chunks.append(chunk)

    @property
    def text(self) -> str:
        return b"".join(self._chunks).decode("utf-8", "replace")

    def wait_for(self, pattern: str, timeout: float = 20) -> None:
        wait_until(lambda: re.search(pattern, self.text), timeout=timeout, what=f"{pattern!r} on the screen")

    def stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait(5)
        os.close(self.master)


@pytest.fixture
def started() -> Iterator[list[Program | Terminal]]:
    things: list[Program | Terminal] = []
    yield things
    for thing in things:
        thing.kill() if isinstance(thing, Program) else thing.stop()


def test_the_screen_waits_shows_the_status_then_a_banner_when_the_scheduler_stops(
    started: list[Program | Terminal], tmp_path: Path
) -> None:
    monitor = f"ipc://{tmp_path}/monitor"
    top = Terminal(cli("scaler_top"), monitor)
    started.append(top)
    top.wait_for(re.escape(f"waiting for the scheduler's status at {monitor}\u2026"))
    scheduler = Program(cli("scaler_scheduler"), free_address(), "--monitor-address", monitor)
    started.append(scheduler)
    top.wait_for(r"task_manager")
    assert "no status for" not in top.text
    os.kill(scheduler.pid, signal.SIGTERM)
    assert scheduler.wait() == 0, scheduler.output
    top.wait_for(r"no status for \d+s: the scheduler may have stopped \(last at \d\d:\d\d:\d\d\)", timeout=10)
    os.write(top.master, b"q")
    top.process.wait(5)
    assert top.process.returncode == 0
