"""The scheduler on PyPy with CPython workers and clients (issue 17), and a CPython scheduler on the same workload.

The PyPy scheduler is .venv-pypy/bin/scaler_scheduler, made by scripts/pypy-venv (Debian's pypy3: PyPy 7.3.11,
Python 3.9; no pycapnp there, and none needed: every process speaks through the one pure-Python codec,
scaler.protocol.codec, ADR 0019). Its workers are this venv's scaler_cluster and the client is this process, both
CPython: every message crosses between the two interpreters. Without .venv-pypy the PyPy tests skip, or fail when
SCALER_PYPY_TEST=required (scripts/test sets it); SCALER_PYPY_VENV points at another PyPy environment.

The CPython scheduler runs the same workload everywhere.
Every process is started in its own session and killed (by its process group) at the end.
"""

from __future__ import annotations

import operator
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scaler import Client
from scaler.security.keys import generate
from tests.e2e.cli_tasks import fibonacci, sleep_and_square, square, touch_and_sleep
from tests.e2e.test_cli import Program, cli, wait_for_agents
from tests.helpers import Graph, free_address, wait_until

ROOT = Path(__file__).resolve().parents[2]
PYPY_VENV = Path(os.environ.get("SCALER_PYPY_VENV") or ROOT / ".venv-pypy")
TIMEOUT = 30
MAP_TASKS = 100_000


def missing(why: str) -> None:
    if os.environ.get("SCALER_PYPY_TEST") == "required":
        pytest.fail(why)
    pytest.skip(why)


def pypy_bin(name: str) -> str:
    """A program of the PyPy environment, checked to be PyPy running this checkout's scaler."""
    python, program = PYPY_VENV / "bin" / "python", PYPY_VENV / "bin" / name
    if not program.exists():
        missing(f"no PyPy environment: {program} is missing (scripts/pypy-venv makes {PYPY_VENV})")
    probe = "import sys, scaler; print(sys.implementation.name, scaler.__file__)"
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    implementation, where = done.stdout.split()
    assert implementation == "pypy", f"{python} is {implementation}, not PyPy"
    assert Path(where).resolve().is_relative_to(ROOT / "src"), f"{PYPY_VENV} runs scaler from {where}, not {ROOT}"
    return str(program)


@pytest.fixture()
def started() -> Iterator[list[Program]]:
    """Programs a test starts; whatever is left is killed at the end."""
    programs: list[Program] = []
    yield programs
    for program in programs:
        program.kill()


def start_cluster(started: list[Program], scheduler: Program, address: str, *extra: str) -> Program:
    scheduler.wait_for_output(r"monitor address is")
    cluster = Program(cli("scaler_cluster"), "-n", "2", *extra, address)
    started.append(cluster)
    wait_for_agents(cluster, 2)
    return cluster


def start_scheduler(started: list[Program], command: str, address: str, *extra: str) -> Program:
    """`command` listening on `address`."""
    scheduler = Program(command, *extra, address)
    started.append(scheduler)
    return scheduler


def check_workload(address: str, map_tasks: int, tmp_path: Path) -> float:
    """What a user does with a cluster, checked: a map (returns its seconds), submit, a task's exception, a graph,
    a big argument and result, an object, nested clients, a cancel."""
    with Client(address, timeout_seconds=TIMEOUT) as client:
        started = time.monotonic()
        assert client.map(operator.neg, range(map_tasks), timeout=120) == [-i for i in range(map_tasks)]
        seconds = time.monotonic() - started
        assert client.submit(square, 12).result(timeout=TIMEOUT) == 144
        with pytest.raises(ZeroDivisionError):
            client.submit(operator.truediv, 1, 0).result(timeout=TIMEOUT)
        graph: Graph = {"a": 3, "b": (square, "a"), "c": (operator.add, "a", "b"), "d": (operator.mul, "c", 2)}
        assert client.get(graph, keys=["c", "d"], timeout=TIMEOUT) == {"c": 12, "d": 24}
        big = bytes(range(256)) * 8192  # 2 MiB: relayed by the scheduler without being read (copied there on PyPy)
        assert client.submit(operator.getitem, big, slice(None, None, -1)).result(timeout=TIMEOUT) == big[::-1]
        numbers = client.send_object(list(range(1000)), name="numbers")
        assert client.submit(sum, numbers).result(timeout=TIMEOUT) == 499500
        assert client.submit(fibonacci, client, 7).result(timeout=TIMEOUT) == 13  # clients in tasks
        marker = tmp_path / "started"
        busy = client.submit(touch_and_sleep, str(marker), 60)
        wait_until(marker.exists, timeout=TIMEOUT, what="the long task to start")
        assert busy.cancel()
        assert busy.cancelled()
        assert client.map(square, range(10)) == [i * i for i in range(10)]  # its processor serves again
    return seconds


def stop(scheduler: Program, *others: Program) -> str:
    for program in others:
        program.process.terminate()
        assert program.wait(TIMEOUT) == 0, program.output[-3000:]
    scheduler.process.terminate()
    assert scheduler.wait(TIMEOUT) == 0, scheduler.output[-3000:]
    output = scheduler.output + "".join(program.output for program in others)
    assert "Traceback" not in output and "dropped a message" not in output, output[-5000:]
    return scheduler.output


def test_a_pypy_scheduler_serves_cpython_workers_and_clients(started: list[Program], tmp_path: Path) -> None:
    address = free_address()
    scheduler = start_scheduler(started, pypy_bin("scaler_scheduler"), address)
    cluster = start_cluster(started, scheduler, address)
    assert re.search(r"Scheduler: PyPy 3\.9\.\d+, pure-Python codec", scheduler.output), scheduler.output
    seconds = check_workload(address, MAP_TASKS, tmp_path)
    print(f"PyPy scheduler: a map of {MAP_TASKS:,} no-op tasks in {seconds:.1f} s (cold)")
    stop(scheduler, cluster)


def test_a_pypy_scheduler_with_keys(started: list[Program], tmp_path: Path) -> None:
    """CurveZMQ under pyzmq's CFFI backend: keys accepted, a client without them refused."""
    keys = tmp_path / "keys"
    generate(keys)
    address = free_address()
    scheduler = start_scheduler(started, pypy_bin("scaler_scheduler"), address, "--keys", str(keys))
    cluster = start_cluster(started, scheduler, address, "--keys", str(keys))
    assert f"listening on {address} (CurveZMQ keys required)" in scheduler.output, scheduler.output
    with Client(address, keys=keys, timeout_seconds=TIMEOUT) as client:
        assert client.map(square, range(1000)) == [i * i for i in range(1000)]
        assert client.submit(fibonacci, client, 5).result(timeout=TIMEOUT) == 5  # nested clients carry the keys
    from scaler.errors import AuthenticationError

    with pytest.raises(AuthenticationError, match="requires keys"):
        Client(address, keys=False, timeout_seconds=10)
    stop(scheduler, cluster)


def test_a_cpython_scheduler_on_the_same_codec(started: list[Program], tmp_path: Path) -> None:
    """The codec the PyPy scheduler uses, in the CPython scheduler: the one codec (ADR 0019)."""
    address = free_address()
    scheduler = start_scheduler(started, cli("scaler_scheduler"), address)
    cluster = start_cluster(started, scheduler, address)
    assert re.search(r"Scheduler: CPython 3\.\d+\.\d+, pure-Python codec", scheduler.output), scheduler.output
    check_workload(address, 20_000, tmp_path)
    stop(scheduler, cluster)


@pytest.mark.parametrize("program", ["scaler_cluster", "scaler_top"])
def test_workers_and_monitors_refuse_python_39_clearly(program: str) -> None:
    done = subprocess.run([pypy_bin(program), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0, done.stdout
    assert "need Python 3.10 or newer" in done.stderr, done.stderr
    assert "only the scheduler (scaler_scheduler) runs" in done.stderr, done.stderr


def test_a_pypy_scheduler_with_a_journal_killed_and_started_again_finishes_the_work(
    started: list[Program], tmp_path: Path
) -> None:
    """The journal's code (scheduler/journal.py, journaling.py, core/scheduler/recovery.py) on PyPy 3.9: kill -9
    mid-map, the same command again, every result right, the client never told of it."""
    address = free_address()
    command = [pypy_bin("scaler_scheduler"), "--journal", str(tmp_path / "journal")]
    scheduler = start_scheduler(started, command[0], address, *command[1:])
    cluster = start_cluster(started, scheduler, address)
    with Client(address, timeout_seconds=TIMEOUT) as client:
        futures = [client.submit(sleep_and_square, i) for i in range(300)]
        wait_until(lambda: sum(f.done() for f in futures) >= 60, timeout=TIMEOUT, what="a fifth done")
        scheduler.kill()
        scheduler = start_scheduler(started, command[0], address, *command[1:])
        assert [f.result(timeout=120) for f in futures] == [i * i for i in range(300)]
    assert re.search(r"client session restored, with \d+ tasks", scheduler.output), scheduler.output[-3000:]
    stop(scheduler, cluster)
