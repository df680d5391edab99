"""Helpers shared by the tests: free ports, waiting on conditions with a deadline, our own child processes."""

from __future__ import annotations

import io
import os
import pickle
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

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


def my_children() -> list[psutil.Process]:
    """The live direct children of this process (zombies waiting to be reaped do not count)."""
    try:
        children = psutil.Process().children()
    except psutil.Error:
        return []
    alive = []
    for child in children:
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child)
        except psutil.Error:
            continue
    return alive


def my_descendants() -> list[psutil.Process]:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def kill_if_alive(process: psutil.Process) -> bool:
    """kill -9 a process found a moment ago; False if it has ended since (a listing can go stale before the kill)."""
    try:
        process.kill()
    except psutil.NoSuchProcess:
        return False
    return True


def kill_tree(processes: list[psutil.Process]) -> None:
    for process in processes:
        try:
            kill_if_alive(process)
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


class RoundTrips:
    """A real client doing round trips (and, with `map_every`, a map of 20 tasks every that many) in a thread while
    something else goes on; every result is checked. `done` counts them; the first failure ends the thread and is
    kept in `errors`. Use as a context manager, or call stop()."""

    def __init__(self, address: str, keys: str | bool = False, map_every: int = 0) -> None:
        from scaler import Client

        self.client = Client(address, timeout_seconds=30, keys=keys)
        self.map_every = map_every
        self.done = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def __enter__(self) -> RoundTrips:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        self.client.disconnect()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            try:
                assert self.client.submit(pow, n, 2).result(timeout=30) == n * n
                if self.map_every and n % self.map_every == 0:
                    assert self.client.map(pow, [(i, 2) for i in range(20)], timeout=30) == [i * i for i in range(20)]
                self.done += 1
            except BaseException as exc:
                self.errors.append(exc)
                return


def stop_children_born_since(before: set[int], timeout: float) -> list[str]:
    """Children of this process not in `before` that are still running after `timeout` seconds: described, and
    killed with everything they started. [] when they all ended in time."""
    deadline = time.monotonic() + timeout
    while True:
        born = [p for p in my_children() if p.pid not in before]
        if not born or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    described = []
    for process in born:
        try:
            described.append(f"{process.pid} {' '.join(process.cmdline())[:120]}")
            tree = [*process.children(recursive=True), process]
        except psutil.Error:
            continue
        kill_tree(tree)
    return described


def modules_named(payload: bytes) -> set[str]:
    """The modules a pickle refers to (every class or function it loads by reference); it is loaded to find them."""
    named: set[str] = set()

    class Recording(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            named.add(module)
            return super().find_class(module, name)

    Recording(io.BytesIO(payload)).load()
    return named


def scheduler_command(address: str) -> list[str]:
    """A scheduler on `address`, its monitor on a short ipc path (unix socket paths are limited to ~100 bytes)."""
    monitor = f"ipc://{tempfile.gettempdir()}/scaler-kit-{os.getpid()}-{address.rsplit(':', 1)[1]}"
    command = [sys.executable, "-m", "scaler.entry_points.scheduler", address, "--logging-level", "ERROR"]
    return [*command, "--monitor-address", monitor]


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """Stop a process this test started (and remove the ipc socket files its arguments name, if any)."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
    for arg in process.args if isinstance(process.args, list) else []:
        if isinstance(arg, str) and arg.startswith("ipc://"):
            try:
                os.unlink(arg[len("ipc://") :])
            except OSError:
                pass
