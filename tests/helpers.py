"""Helpers shared by the tests: free ports, waiting on conditions with a deadline, our own child processes."""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, SupportsBytes, TypeVar

import psutil

if TYPE_CHECKING:
    from scaler import Client, Cluster, SchedulerClusterCombo
    from scaler.protocol.messages import Message
    from scaler.protocol.records import Payload

# A dask-style graph as Client.get, Client.submit_graph and plan_graph take it. Their parameter is a dict[Hashable, Any]
# (dict is invariant in its key type): a graph written as a literal with str keys needs this annotation.
Graph = dict[Hashable, Any]
T = TypeVar("T")


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


def collect_output(fd: int, chunks: list[bytes]) -> threading.Thread:
    """A daemon thread appending what is read from `fd` (a pipe or a pseudo-terminal's master) to `chunks` until it
    ends or is closed; started and returned."""

    def read() -> None:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            chunks.append(chunk)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


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
        descendants: list[psutil.Process] = psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
    return descendants


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


@contextmanager
def running_scheduler(*options: str, client_keys: str | None = None) -> Iterator[str]:
    """A scheduler command on a free address, up and serving (a client, with `client_keys` if given, connected once);
    stopped on the way out."""
    from scaler import Client  # (here: the helpers' other users need not import scaler)

    address = free_address()
    process = subprocess.Popen([*scheduler_command(address), *options])
    try:
        with Client(address, timeout_seconds=20, keys=client_keys):
            pass
        yield address
    finally:
        stop_process(process)


def mark_once(folder: str, i: int, seconds: float) -> int:
    """A task that leaves a mark it would find if it ran twice (FileExistsError), sleeps, and returns i * 2."""
    import os
    import time

    fd = os.open(os.path.join(folder, str(i)), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    os.close(fd)
    time.sleep(seconds)
    return i * 2


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


def encoded(message: Message) -> list[bytes]:
    """A message's frames as bytes, as a socket delivers them (scaler.protocol.messages.encode gives payload frames
    as they were given: memoryviews or zmq.Frames too)."""
    from scaler.protocol.messages import encode

    return [payload_bytes(frame) for frame in encode(message)]


def payload_bytes(payload: Payload) -> bytes:
    """A message's payload as bytes: a frame (bytes, a memoryview, a zmq.Frame) or a payload in several frames
    (scaler.protocol.frames.Pieces)."""
    import zmq

    if isinstance(payload, zmq.Frame):
        return payload.bytes
    assert isinstance(payload, (bytes, bytearray, memoryview, SupportsBytes)), f"not a payload: {payload!r}"
    return bytes(payload)


def combo_cluster(combo: SchedulerClusterCombo) -> Cluster:
    """The process of a SchedulerClusterCombo's workers (a scaler.Cluster; the combo starts it in its constructor)."""
    assert combo._cluster is not None, "the combo has no cluster: it was not started"
    return combo._cluster


def combo_processes(combo: SchedulerClusterCombo) -> list[psutil.Process]:
    """The scheduler and cluster processes of a combo and everything under them (agents, processors); [] for ended
    ones."""
    processes: list[psutil.Process] = []
    for child in (combo._scheduler, combo._cluster):
        if child is None or child.pid is None:
            continue
        try:
            top = psutil.Process(child.pid)
            processes += [top, *top.children(recursive=True)]
        except psutil.Error:
            continue
    return processes


def fibonacci(client: Client, n: int) -> int:
    """The README's nested task: a task given the client submits tasks with it (2**n tasks wait on each other)."""
    if n < 2:
        return n
    a = client.submit(fibonacci, client, n - 1)
    b = client.submit(fibonacci, client, n - 2)
    return int(a.result() + b.result())


def sleep_and_return(seconds: float, value: T) -> T:
    """A task that takes `seconds`, then returns `value`."""
    time.sleep(seconds)
    return value


def digest(data: bytes) -> str:
    """A payload's fingerprint, to compare big payloads without printing them."""
    return hashlib.sha256(data).hexdigest()


def make_fifo(path: Path) -> None:
    os.mkfifo(path, 0o600)


def make_char_device(path: Path) -> None:
    """A /dev/null-like character device (1, 3); only root may make one."""
    import pytest

    try:
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a character device needs root (CAP_MKNOD)")
