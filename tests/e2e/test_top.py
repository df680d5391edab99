"""scaler_top end to end: --once without a scheduler, the full screen in a pseudo-terminal as the scheduler comes and
goes, the functions and stale worker rows from a published status, and a busy processor's cpu as scaler_top --once,
scaler_ui's /status.json and /metrics read it from a real cluster."""

from __future__ import annotations

import copy
import fcntl
import os
import pty
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import termios
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import zmq

from scaler import Client, SchedulerClusterCombo
from scaler.protocol.messages import FunctionStatus, Status, WorkerStatus
from scaler.scheduler.monitors import MonitorChannel, bind_monitor_router
from tests.e2e.dashboard_browser import browser
from tests.e2e.test_cli import ENV, Program, cli, run
from tests.e2e.test_ui import dashboard_page, metrics_of, start_ui, status_of
from tests.helpers import collect_output, free_address, wait_until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder for ipc sockets whose paths fit on the 120-column screen (pytest's tmp_path can be too long: under
    pytest-xdist it gains a popen-gwN level, and the screen cut the path the test looks for)."""
    folder = tempfile.mkdtemp(prefix="top_")
    yield Path(folder)
    shutil.rmtree(folder, ignore_errors=True)


def test_once_without_a_scheduler_says_what_it_waited_for_and_fails(tmp_path: Path) -> None:
    monitor = f"ipc://{tmp_path}/monitor"
    done = run(cli("scaler_top"), "--once", "--timeout", "1", monitor)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout == "", done.stdout
    assert f"waiting for the scheduler's status at {monitor}\u2026 (1s): none came" in done.stderr, done.stderr


def test_the_screen_without_a_terminal_says_to_use_once(tmp_path: Path) -> None:
    """scaler_top started with no terminal (from a script, a pipe, a service) said nothing useful: curses raised
    "cbreak() returned ERR" in a traceback. It says what it needs and what to run instead, and exits 2."""
    done = subprocess.run(
        [cli("scaler_top"), f"ipc://{tmp_path}/monitor"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        env={**ENV, "TERM": "xterm"},
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "needs a terminal" in done.stderr and "--once" in done.stderr, done.stderr


class Terminal:
    """A program in a pseudo-terminal, 120x40; what it writes is collected by a thread, escapes and all."""

    def __init__(self, *args: str) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        # curses believes LINES and COLUMNS before the window size, and pytest-xdist's workers have them (80x24)
        env = {**ENV, "TERM": "xterm", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "LINES": "40", "COLUMNS": "120"}
        self.process = subprocess.Popen(
            args, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True, close_fds=True
        )
        os.close(slave)
        self.master = master
        self._chunks: list[bytes] = []
        collect_output(master, self._chunks)

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
    started: list[Program | Terminal], short_dir: Path
) -> None:
    monitor = f"ipc://{short_dir}/monitor"
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


class Publisher:
    """A stand-in scheduler: publishes `status` on an ipc monitor address every 0.2 s, from a thread, until stopped."""

    def __init__(self, address: str, status: Status) -> None:
        self.address, self.status = address, status
        self._stop = threading.Event()
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        sock = bind_monitor_router(self.address, self._ctx, None)
        channel = MonitorChannel(sock, "fake", "", lambda fd: None)
        try:
            while not self._stop.wait(0.2):
                channel.on_readable(0.0)
                channel.publish(copy.deepcopy(self.status))
        finally:
            sock.close(linger=0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._ctx.term()


def published_status() -> Status:
    many = [
        FunctionStatus(f"batch_{i:02d}", submitted=i + 1, success=i + 1, duration_us=(i + 1) * 1000) for i in range(30)
    ]
    long_name = "pipeline.Stage.<locals>." + "step_" * 12 + "price"
    return Status(
        scheduler_name="fake",
        tasks_by_state={"assigned": 3},
        workers=[WorkerStatus("w-late", heartbeat_age_ms=17_000), WorkerStatus("w-fresh", heartbeat_age_ms=800)],
        functions=[
            *many,
            FunctionStatus(long_name, submitted=1_000, running=3, success=990, error=4, failed=1, duration_us=990_000),
        ],
    )


@pytest.fixture
def publisher(short_dir: Path) -> Iterator[Publisher]:
    feed = Publisher(f"ipc://{short_dir}/fake_monitor", published_status())
    yield feed
    feed.stop()


def test_once_prints_every_function_and_how_old_a_stale_worker_row_is(publisher: Publisher) -> None:
    done = run(cli("scaler_top"), "--once", "--timeout", "10", publisher.address)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("function ")))
    assert lines[header].split() == [
        "function",
        "submitted",
        "assigned",
        "success",
        "error",
        "failed",
        "canceled",
        "mean",
    ]
    first = lines[header + 1].split()
    assert first[0].startswith("pipeline.Stage.") and first[0].endswith("step_price") and "\u2026" in first[0]
    assert first[1:] == ["1,000", "3", "990", "4", "1", "0", "1.0ms"]  # assigned first; 990 ms over 994 with a result
    assert sum(line.startswith("batch_") for line in lines) == 30  # --once shows them all
    rows = {line.split()[0]: line for line in lines if line.lstrip().startswith("w-")}
    assert " 17s " in rows["w-late"] and " 17s " not in rows["w-fresh"]
    assert "hb_age[a]" in done.stdout


def test_the_screen_shows_the_first_functions_and_how_many_more(
    started: list[Program | Terminal], publisher: Publisher
) -> None:
    top = Terminal(cli("scaler_top"), publisher.address)
    started.append(top)
    top.wait_for(r"\u2026 and 21 more functions")  # 40 lines high: 10 functions shown, of 31
    top.wait_for(r"batch_29")  # the most submitted after the one running
    assert "batch_00" not in top.text
    os.write(top.master, b"aq")  # sort the workers by the age of their heartbeat (curses redraws only what changed, so
    # the new header is not on the screen's byte stream as one string), then quit
    top.process.wait(5)
    assert top.process.returncode == 0


def spin_until(stop_file: str, most_seconds: float) -> int:
    """Keep one processor busy until `stop_file` exists, for `most_seconds` at most; the number of rounds."""
    end = time.monotonic() + most_seconds
    rounds = 0
    while time.monotonic() < end and not (rounds % 100_000 == 0 and os.path.exists(stop_file)):
        rounds += 1
    return rounds


def top_processor_cpu(text: str) -> float:
    """The first worker's processor cpu in scaler_top --once's output, -1 without a worker row."""
    lines = text.splitlines()
    header = next((i for i, line in enumerate(lines) if line.endswith("ITL caps | client_manager")), None)
    if header is None or header + 1 >= len(lines):
        return -1.0
    titles = lines[header].split(" | ")[0].split()
    cells = lines[header + 1].split(" | ")[0].split()
    from_right = len(titles) - titles.index("cpu")  # a worker name may hold spaces: count from the right
    return float(cells[-from_right].rstrip("%"))


def test_a_busy_processor_reads_at_least_50_percent_in_top_status_json_metrics_and_the_page(tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    with SchedulerClusterCombo(
        address=free_address(), n_workers=1, heartbeat_interval_seconds=0.5, logging_level="WARNING"
    ) as combo:
        ui, url = start_ui(combo.monitor_address)
        try:
            with Client(combo.address, timeout_seconds=30) as client, browser() as chromium:
                page = dashboard_page(chromium, url)
                page.open("workers")
                future = client.submit(spin_until, str(stop), 45.0)

                def top() -> float:
                    done = run(cli("scaler_top"), "--once", "--timeout", "5", combo.monitor_address)
                    return top_processor_cpu(done.stdout) if done.returncode == 0 else -1.0

                def status_json() -> float:
                    workers = (status_of(url)["status"] or {}).get("workers") or [{}]
                    return float(workers[0].get("cpu_percent", -1.0))

                def metrics() -> float:
                    cpu = metrics_of(url).labelled("scaler_worker_processor_cpu_percent", "worker")
                    return max(cpu.values(), default=-1.0)

                def dashboard() -> float:  # the cpu cell of the worker's row on the Workers view, as shown
                    shown = page.js(
                        "() => document.querySelector('#workers tbody tr[data-worker] .value')?.textContent"
                    )
                    return float(shown.rstrip("%")) if shown else -1.0

                views: dict[str, Callable[[], float]] = {
                    "scaler_top --once": top,
                    "/status.json": status_json,
                    "/metrics": metrics,
                    "scaler_ui's Workers view": dashboard,
                }
                most = {name: -1.0 for name in views}
                deadline = time.monotonic() + 40
                while min(most.values()) < 50:
                    assert not future.done(), f"the task ended before every view read 50 %: {most}"
                    assert time.monotonic() < deadline, f"a spinning processor read at most {most}"
                    for name, read in views.items():
                        if most[name] < 50:
                            most[name] = max(most[name], read())
                    time.sleep(0.2)
                stop.touch()
                assert future.result(timeout=30) > 0
        finally:
            stop.touch()  # the task ends, whatever happened; the cluster stops with the block
            ui.kill()
