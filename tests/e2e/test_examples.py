"""Every file in examples/ runs, as a user would run it, and prints what the documents promise.

Self-contained examples start their own SchedulerClusterCombo; examples/seed_*.py are the documents' snippets
that expect a scheduler already running on tcp://127.0.0.1:2345 (or 8516): this module starts one and runs
them with its port substituted into the source (the only change the documents allow).
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest

from tests.helpers import combo_cluster, combo_processes, free_address, free_port, session_members, wait_until

if TYPE_CHECKING:
    from scaler import SchedulerClusterCombo

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PORT_PATTERN = re.compile(r"127\.0\.0\.1:(2345|8516)\b")
SQRT_SUM = "661.46"
LOG_RECORD = re.compile(r"\[(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\]\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\n]*\n")

try:
    import scaled  # noqa: F401

    HAVE_SCALED = True
except ImportError:
    HAVE_SCALED = False


@dataclasses.dataclass(frozen=True)
class Example:
    expected: tuple[str, ...] = ()  # substrings of stdout, in this order
    timeout: float = 45.0
    needs_cluster: bool = False  # a seed_* snippet: run against this module's cluster
    scaled: bool = False  # imports the `scaled` compatibility package
    stderr: tuple[str, ...] = ()  # substrings of stderr
    args: tuple[str, ...] = ()  # command-line arguments


CATALOG: dict[str, Example] = {
    # the files the documents literalinclude
    "map_client.py": Example((SQRT_SUM,)),
    "simple_client.py": Example(("1\n", SQRT_SUM)),
    "send_object_client.py": Example(("[1, 2, 3, 4, 5, 6]", "[0, 1, 2]")),
    "graphtask_client.py": Example(("{'e': 1}", "[3, 4, 1]")),
    "nested_client.py": Example(("21",)),
    "graphtask_nested_client.py": Example(("21",)),
    "disconnect_client.py": Example(
        ("45", "1024", "disconnected client:", "cluster stopped by client.shutdown()", "protected scheduler:"),
        timeout=30,
    ),
    # inline examples that start their own cluster
    "custom_serializer.py": Example(("3\n", "{'x': [2, 4, 6], 'y': [1.0, 3.0, 5.0]}")),
    "quickstart_things_to_avoid.py": Example(("[",)),
    "dask_collections.py": Example(("(np.int64(4950), 30)", "{1: 4, 2: 6}", "42\n", "50.5\n", "((1, 2),)")),
    "readme_combo.py": Example(),
    "task_options.py": Example(
        (
            "with timeout=2s retries=1 priority=0>",
            "timed out: task 0x",
            "succeeded on run 2",
            "[0.1, 0.2]",
            "over memory:",
        )
    ),
    "executor_asyncio_progress.py": Example(
        (
            "[32, 9]",
            "total: 2470",
            "awaited: [144, 0, 1, 4, 9, 16]",
            "done: 20 not done: 0",
            "map: [0, 1, 4, 9, 16, 25, 36, 49]",
        ),
        stderr=("squares", "map(slow_square)"),
    ),
    "task_output.py": Example(
        (
            "(square task 0x",
            ") squaring 3",
            "9\n",
            "[16, 25]",
            ") 3...",
            ") 1...",
            "lift-off\n",
            ") squaring 7",
            "49\n",
        ),
        stderr=(") 3 is odd\n", ") 7 is odd\n"),
    ),
    "secured_cluster.py": Example(("1024\n", "21\n", "without keys:", "authentication failed", "requires keys")),
    "readme_uvloop_combo.py": Example(),
    "scaled_readme_combo.py": Example(timeout=90, scaled=True),
    "demo.py": Example(
        (
            "monitor address:",
            SQRT_SUM,
            "20,000 results in order",
            "tasks/s",
            "{'e': 1}",
            "fibonacci(8) = 21",
            "stopped in",
            "demo finished",
        ),
        timeout=60,
        args=("--tasks", "20000"),  # scripts/demo runs 100,000: the same code, five times longer
    ),
    # inline examples that expect a running scheduler
    "seed_000_profiling.py": Example(needs_cluster=True),
    "seed_001_profiling.py": Example(needs_cluster=True),
    "seed_000_send_object.py": Example(needs_cluster=True, stderr=("DeprecationWarning",)),
    "seed_000_submit_graph.py": Example(("1\n",), needs_cluster=True),
    "seed_000_client_shutdown.py": Example(),  # special: see test_seed_client_shutdown_* below
    "seed_002_quickstart_client.py": Example(("100 results match",), needs_cluster=True),
    "seed_003_scaled_client.py": Example(("1\n",), needs_cluster=True, scaled=True),
    "seed_003_scaled_graph.py": Example(("1\n",), needs_cluster=True, scaled=True),
    "seed_004_readme_sqrt.py": Example((SQRT_SUM,), needs_cluster=True),
    "seed_004_square.py": Example(("16\n",), needs_cluster=True),
    "seed_004_graph_get.py": Example(("{'e': 1}",), needs_cluster=True),
    "seed_004_fibonacci.py": Example(("21\n",), needs_cluster=True),
}
SPECIAL = {"seed_000_client_shutdown.py"}


def all_examples() -> list[str]:
    return sorted(path.name for path in EXAMPLES.glob("*.py"))


@dataclasses.dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    def explain(self) -> str:
        return f"exit code {self.returncode}\n--- stdout:\n{self.stdout[-3000:]}\n--- stderr:\n{self.stderr[-3000:]}"


def run_example(name: str, port: int, workdir: Path, timeout: float, args: tuple[str, ...] = ()) -> Run:
    """Run a copy of examples/<name> whose port is `port`, in its own session; kill that session on timeout."""
    source = (EXAMPLES / name).read_text()
    copy = workdir / name
    copy.write_text(PORT_PATTERN.sub(f"127.0.0.1:{port}", source))
    process = subprocess.Popen(
        [sys.executable, str(copy), *args],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_session(process)
        stdout, stderr = process.communicate()
        pytest.fail(f"{name} did not finish within {timeout}s\n{Run(-1, stdout, stderr).explain()}")
    try:
        wait_until(lambda: not session_members(process.pid), timeout=10, interval=0.2, what="no process left")
    except AssertionError:
        left = session_members(process.pid)
        _kill_session(process)
        pytest.fail(f"{name} left processes running after it exited: {left}\n{Run(0, stdout, stderr).explain()}")
    return Run(process.returncode, stdout, stderr)


def _kill_session(process: subprocess.Popen[str]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                out.append(process)
        except psutil.Error:
            continue
    return out


def check_output(name: str, run: Run, example: Example) -> None:
    assert run.returncode == 0, f"{name} failed: {run.explain()}"
    # The cluster's log records share stdout with the example's prints. Each record is one write, but an unbuffered
    # print writes its text and its newline apart, so a record can land inside a printed line ("1[INFO]...\n\n"):
    # the records are taken out first. An expectation ending with a newline is a whole line, others may be part
    # of one; they must appear in this order.
    lines = LOG_RECORD.sub("", run.stdout).splitlines()
    line, column = 0, 0
    for text in example.expected:
        whole = text.endswith("\n")
        found = None
        for i in range(line, len(lines)):
            start = column if i == line else 0
            if whole:
                if start == 0 and lines[i] == text.strip():
                    found = (i + 1, 0)
            else:
                at = lines[i].find(text, start)
                if at >= 0:
                    found = (i, at + len(text))
            if found is not None:
                break
        assert found is not None, f"{name}: expected {text!r} in its output (in order)\n{run.explain()}"
        line, column = found
    for text in example.stderr:
        assert text in run.stderr, f"{name}: expected {text!r} on stderr\n{run.explain()}"
    assert "Traceback" not in run.stderr, f"{name} printed a traceback\n{run.explain()}"


@pytest.fixture(scope="module")
def seed_cluster() -> Iterator[SchedulerClusterCombo]:
    """The scheduler the seed_* snippets expect: 2 workers, protected (the default)."""
    from scaler import SchedulerClusterCombo

    combo = SchedulerClusterCombo(
        address=free_address(),
        n_workers=2,
        heartbeat_interval_seconds=0.5,
        worker_timeout_seconds=3,
        logging_level="WARNING",
    )
    try:
        yield combo
    finally:
        combo.shutdown()


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def test_every_example_is_catalogued() -> None:
    """A new example must say what it prints; a catalogued one must exist."""
    names = set(all_examples())
    assert names == set(CATALOG), (
        f"not catalogued: {sorted(names - set(CATALOG))}; missing files: {sorted(set(CATALOG) - names)}"
    )


def test_the_documents_literalincludes_exist() -> None:
    for name in (
        "map_client.py",
        "simple_client.py",
        "send_object_client.py",
        "graphtask_client.py",
        "nested_client.py",
        "graphtask_nested_client.py",
        "disconnect_client.py",
    ):
        assert (EXAMPLES / name).is_file(), name


def test_custom_serializer_example_carries_the_fix() -> None:
    source = (EXAMPLES / "custom_serializer.py").read_text()
    assert "ObjType(payload[0:1])" in source
    assert "FIX" in source


SELF_CONTAINED = [n for n in all_examples() if n in CATALOG and not CATALOG[n].needs_cluster and n not in SPECIAL]
AGAINST_CLUSTER = [n for n in all_examples() if n in CATALOG and CATALOG[n].needs_cluster]


def _xfail_without_scaled(example: Example) -> None:
    if example.scaled and not HAVE_SCALED:
        pytest.xfail("scaled shim pending")


@pytest.mark.parametrize("name", SELF_CONTAINED)
def test_self_contained_example(name: str, tmp_path: Path) -> None:
    example = CATALOG[name]
    _xfail_without_scaled(example)
    run = run_example(name, free_port(), tmp_path, example.timeout, example.args)
    check_output(name, run, example)


@pytest.mark.parametrize("name", AGAINST_CLUSTER)
def test_seed_snippet(name: str, seed_cluster: SchedulerClusterCombo, tmp_path: Path) -> None:
    example = CATALOG[name]
    _xfail_without_scaled(example)
    run = run_example(name, port_of(seed_cluster.address), tmp_path, example.timeout)
    check_output(name, run, example)


def test_seed_client_shutdown_refused_by_protected_scheduler(
    seed_cluster: SchedulerClusterCombo, tmp_path: Path
) -> None:
    """Seed 000: "By default, the Scheduler is running in protected mode": the snippet fails, the cluster lives."""
    run = run_example("seed_000_client_shutdown.py", port_of(seed_cluster.address), tmp_path, 30)
    assert run.returncode == 1, run.explain()
    assert "ProtectedModeError" in run.stderr, run.explain()
    assert seed_cluster._scheduler.is_alive()
    assert combo_cluster(seed_cluster).is_alive()


def test_seed_client_shutdown_stops_an_unprotected_cluster(tmp_path: Path) -> None:
    """Seed 000, "Client Shutdown": against a scheduler not in protected mode, the snippet stops everything."""
    from scaler import SchedulerClusterCombo

    combo = SchedulerClusterCombo(
        address=free_address(), n_workers=2, protected=False, heartbeat_interval_seconds=0.5, logging_level="WARNING"
    )
    try:
        # scheduler, cluster, 2 agents and their processors
        wait_until(lambda: len(combo_processes(combo)) >= 6, timeout=15, what="the workers to start")
        mine = combo_processes(combo)
        run = run_example("seed_000_client_shutdown.py", port_of(combo.address), tmp_path, 15)
        assert run.returncode == 0, run.explain()
        wait_until(lambda: not combo._scheduler.is_alive(), timeout=10, what="the scheduler to stop")
        wait_until(lambda: not combo_cluster(combo).is_alive(), timeout=10, what="the cluster to stop")
        wait_until(
            lambda: not alive(mine),
            timeout=10,
            what="workers and processors to exit",
        )
    finally:
        combo.shutdown()
