"""The command-line programs as a user runs them: scaler_scheduler, scaler_cluster, scaler_worker.

Every process is started here in its own session and killed (by its process group) if a test fails.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

import scaler
from scaler import Client
from scaler.io.addresses import default_monitor_address
from tests.e2e.cli_tasks import fibonacci, square, touch_and_sleep
from tests.helpers import free_address, free_port, kill_if_alive, session_members, wait_until

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
# workers import the functions of this module by name, as they would import a user's own modules
ENV = {
    **os.environ,
    "PYTHONUNBUFFERED": "1",
    "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
}
TIMEOUT = 20


def cli(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{name} is not installed next to {sys.executable}")
    return str(path)


class Program:
    """A CLI process whose output is collected by a thread, so that it never blocks on a full pipe."""

    def __init__(self, *args: str) -> None:
        self.args = args
        self.process = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env=ENV,
        )
        self._lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self._lines)

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_for_output(self, pattern: str, timeout: float = TIMEOUT) -> re.Match[str]:
        found: list[re.Match[str]] = []

        def seen() -> bool:
            match = re.search(pattern, self.output)
            if match:
                found.append(match)
            return bool(match) or self.process.poll() is not None

        wait_until(seen, timeout=timeout, what=f"{pattern!r} in the output of {self.args[0]}")
        assert found, f"{self.args[0]} exited ({self.process.returncode}) without printing {pattern!r}:\n{self.output}"
        return found[0]

    def tree(self) -> list[psutil.Process]:
        try:
            top = psutil.Process(self.pid)
            return [top, *top.children(recursive=True)]
        except psutil.Error:
            return []

    def wait(self, timeout: float = TIMEOUT) -> int:
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.args[0]} did not exit within {timeout}s:\n{self.output[-3000:]}")
        self._reader.join(5)
        return code

    def kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            pass


def run(*args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def session_ended(session: int) -> Callable[[], bool]:
    """Whether no process is left in the session `session` (its leader's pid)."""
    return lambda: not session_members(session)


def running(processes: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                out.append(process)
        except psutil.Error:
            continue
    return out


@pytest.fixture()
def programs() -> Iterator[list[Program]]:
    """Programs a test starts; whatever is left is killed at the end."""
    started: list[Program] = []
    yield started
    for program in started:
        program.kill()


def start(programs: list[Program], *args: str) -> Program:
    program = Program(*args)
    programs.append(program)
    return program


def wait_for_agents(cluster: Program, n: int) -> None:
    """Wait until the cluster process has n worker agents, each with a processor."""

    def ready() -> bool:
        try:
            agents = psutil.Process(cluster.pid).children()
            return len(agents) >= n and all(agent.children() for agent in agents)
        except psutil.Error:
            return False

    wait_until(ready, timeout=TIMEOUT, what=f"{n} workers with processors")


# ----------------------------------------------------------------------------------------------- -h
def option_blocks(help_text: str) -> dict[str, str]:
    """{'--flag': 'the text of its help entry'} from argparse's -h output."""
    blocks: dict[str, str] = {}
    current = None
    for line in help_text.splitlines():
        match = re.match(r"^  (-{1,2}[\w-]+)", line)
        if match:
            current = match.group(1)
            blocks[current] = line
            longest = re.findall(r"--[\w-]+", line)
            if longest:
                blocks[longest[0]] = blocks.pop(current)
                current = longest[0]
        elif current and line.startswith("    "):
            blocks[current] += " " + line.strip()
        else:
            current = None
    return blocks


SCHEDULER_OPTIONS = [
    "--monitor-address",
    "--protected",
    "--event-loop",
    "--worker-timeout-seconds",
    "--client-timeout-seconds",
    "--max-task-retries",
    "--cpu",
    "--logging-level",
    "--logging-paths",
]
UI_OPTIONS = ["--host", "--port", "--logging-level"]
CLUSTER_OPTIONS = [
    "--num-of-workers",
    "--heartbeat-interval-seconds",
    "--per-worker-queue-size",
    "--death-timeout-seconds",
    "--max-processors-per-worker",
    "--capability",
    "--event-loop",
    "--logging-level",
    "--logging-paths",
]


@pytest.mark.parametrize(
    "program, options",
    [
        ("scaler_scheduler", SCHEDULER_OPTIONS),
        ("scaler_cluster", CLUSTER_OPTIONS),
        ("scaler_worker", CLUSTER_OPTIONS),
        ("scaler_ui", UI_OPTIONS),
    ],
)
def test_help_lists_every_option_with_its_default(program: str, options: list[str]) -> None:
    result = run(cli(program), "-h")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: {program}"), result.stdout[:200]
    assert "address" in result.stdout
    blocks = option_blocks(result.stdout)
    for option in options:
        assert option in blocks, f"{program} -h does not list {option}:\n{result.stdout}"
    for option, text in blocks.items():
        if option in ("--help", "--version"):
            continue
        assert "default" in text, f"{program} -h: {option} does not show its default: {text!r}"


@pytest.mark.parametrize(
    "program", ["scaler_scheduler", "scaler_cluster", "scaler_worker", "scaler_top", "scaler_ui", "scaler_keygen"]
)
def test_every_command_tells_its_version(program: str) -> None:
    result = run(cli(program), "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{program} {scaler.__version__}\n"
    module = run(sys.executable, "-m", "scaler", "--version")
    assert module.returncode == 0 and module.stdout == f"python -m scaler {scaler.__version__}\n", module


def test_cluster_help_shows_the_cpu_count_as_default_workers() -> None:
    blocks = option_blocks(run(cli("scaler_cluster"), "-h").stdout)
    assert f"(default: {os.cpu_count()})" in blocks["--num-of-workers"]


def test_help_shows_each_default_once_and_never_none() -> None:
    for program in ("scaler_scheduler", "scaler_cluster"):
        for option, text in option_blocks(run(cli(program), "-h").stdout).items():
            assert text.count("(default:") <= 1, f"{program} {option}: {text}"
            assert "(default: None)" not in text, f"{program} {option}: {text}"


@pytest.mark.parametrize("program", ["scaled_scheduler", "scaled_cluster", "scaled_worker"])
def test_the_seed_003_command_names_exist(program: str) -> None:
    """The old "Scaled" README (seed 003) starts scaled_scheduler and scaled_worker."""
    if not (BIN / program).exists():
        pytest.xfail("scaled shim pending")
    result = run(str(BIN / program), "-h")
    assert result.returncode == 0, result.stderr
    assert "address" in result.stdout


# ----------------------------------------------------------------------------------------------- running
def test_scheduler_logs_its_monitor_address_at_start(programs: list[Program]) -> None:
    port = free_port()
    scheduler = start(programs, cli("scaler_scheduler"), f"tcp://127.0.0.1:{port}")
    monitor = default_monitor_address(f"tcp://127.0.0.1:{port}")  # in a folder of this user's only
    scheduler.wait_for_output(rf"Scheduler: monitor address is {re.escape(monitor)}\b")
    assert "logging to ('/dev/stdout',)" in scheduler.output
    with Client(address=f"tcp://127.0.0.1:{port}", timeout_seconds=TIMEOUT):
        pass  # it serves (and, serving, it handles signals)
    os.kill(scheduler.pid, signal.SIGTERM)
    assert scheduler.wait() == 0


def test_scheduler_monitor_address_option(programs: list[Program], tmp_path: Path) -> None:
    monitor = f"ipc://{tmp_path}/monitor"
    scheduler = start(programs, cli("scaler_scheduler"), free_address(), "--monitor-address", monitor)
    scheduler.wait_for_output(rf"monitor address is {re.escape(monitor)}\b")


def test_scheduler_and_cluster_from_the_cli_serve_a_client(programs: list[Program]) -> None:
    address = free_address()
    scheduler = start(programs, cli("scaler_scheduler"), address, "--worker-timeout-seconds", "3")
    scheduler.wait_for_output("monitor address is")
    cluster = start(programs, cli("scaler_cluster"), "-n", "2", "--heartbeat-interval-seconds", "0.5", address)
    cluster.wait_for_output(r"Worker\[1\] started")
    wait_for_agents(cluster, 2)
    with Client(address=address, timeout_seconds=TIMEOUT) as client:
        assert client.submit(square, 4).result(timeout=TIMEOUT) == 16
        assert client.map(square, [(i,) for i in range(200)]) == [i * i for i in range(200)]
        assert client.get({"a": 2, "b": (square, "a")}, keys=["b"]) == {"b": 4}
        assert client.submit(fibonacci, client, 7).result(timeout=TIMEOUT) == 13
    assert "starting 2 workers" in cluster.output


def test_scaler_worker_and_a_uvloop_scheduler_run_the_quickstart(programs: list[Program], tmp_path: Path) -> None:
    """Seed 002: scaler_scheduler tcp://127.0.0.1:8516, scaler_worker -n 10 ..., then the client snippet.
    Seed 004: scaler_scheduler --event-loop uvloop tcp://127.0.0.1:2345."""
    from tests.e2e.test_examples import CATALOG, check_output, run_example

    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    scheduler = start(programs, cli("scaler_scheduler"), "--event-loop", "uvloop", address)
    scheduler.wait_for_output("monitor address is")
    start(programs, cli("scaler_worker"), "-n", "2", address)
    name = "seed_002_quickstart_client.py"
    check_output(name, run_example(name, port, tmp_path, 30), CATALOG[name])


@pytest.mark.parametrize(
    "sig, to_group",
    [(signal.SIGTERM, False), (signal.SIGINT, False), (signal.SIGINT, True)],
    ids=["SIGTERM", "SIGINT", "ctrl-c"],
)
def test_signals_stop_cluster_and_scheduler_cleanly(
    programs: list[Program], tmp_path: Path, sig: int, to_group: bool
) -> None:
    """kill -TERM / kill -INT of the main process, or Ctrl-C (SIGINT to the whole process group)."""
    address = free_address()
    scheduler = start(programs, cli("scaler_scheduler"), address)
    scheduler.wait_for_output("monitor address is")
    cluster = start(programs, cli("scaler_cluster"), "-n", "2", "--heartbeat-interval-seconds", "0.5", address)
    wait_for_agents(cluster, 2)
    with Client(address=address, timeout_seconds=TIMEOUT) as client:
        assert client.submit(square, 3).result(timeout=TIMEOUT) == 9
        marker = tmp_path / "started"
        busy = client.submit(touch_and_sleep, str(marker), 60)  # a processor in the middle of a task must stop too
        wait_until(marker.exists, timeout=TIMEOUT, what="the long task to start")
        processes = cluster.tree() + scheduler.tree()
        assert len(processes) >= 6, processes  # scheduler, cluster, 2 agents, 2 processors

        for program in (cluster, scheduler):
            start_time = time.monotonic()
            if to_group:
                os.killpg(program.pid, sig)
            else:
                os.kill(program.pid, sig)
            code = program.wait(15)
            assert code == 0, f"{program.args[0]} exited with {code}:\n{program.output[-3000:]}"
            assert time.monotonic() - start_time < 10
        wait_until(lambda: not running(processes), timeout=10, what=f"no process left: {running(processes)}")
        assert "Traceback" not in cluster.output + scheduler.output, cluster.output + scheduler.output
        busy.cancel()


@pytest.mark.parametrize("delay", [0.0, 0.003, 0.01])
def test_a_cluster_stopped_while_its_workers_start_leaves_no_process(programs: list[Program], delay: float) -> None:
    """SIGTERM in the middle of the forks: every worker already forked must end too, none may be orphaned."""
    for _ in range(2):
        cluster = start(programs, cli("scaler_cluster"), "-n", "6", free_address())
        cluster.wait_for_output("starting 6 workers")
        time.sleep(delay)
        os.kill(cluster.pid, signal.SIGTERM)
        cluster.wait(15)
        session = cluster.pid
        try:
            wait_until(session_ended(session), timeout=10, what="the cluster's workers to end")
        finally:
            orphans = session_members(session)
            for orphan in orphans:
                kill_if_alive(orphan)
        assert not orphans


def test_scheduler_sigterm_tells_a_cluster_told_to_exit_with_it_and_everything_exits(programs: list[Program]) -> None:
    """(Without --exit-with-scheduler the workers stay for a scheduler that comes back: test_scheduler_restart.py.)"""
    address = free_address()
    scheduler = start(programs, cli("scaler_scheduler"), address)
    scheduler.wait_for_output("monitor address is")
    cluster = start(programs, cli("scaler_cluster"), "-n", "2", "--exit-with-scheduler", address)
    wait_for_agents(cluster, 2)
    # both must have a session: a worker whose hello is still in flight is not told, and waits for its
    # scheduler up to --death-timeout-seconds
    wait_until(lambda: cluster.output.count("connected to scheduler") >= 2, timeout=TIMEOUT, what="2 sessions")
    processes = cluster.tree()
    os.kill(scheduler.pid, signal.SIGTERM)
    assert scheduler.wait() == 0
    # the workers hear the scheduler stop and end; the cluster then ends on its own
    cluster.wait(15)
    wait_until(lambda: not running(processes), timeout=10, what="the workers to exit")


# ----------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("program", ["scaler_scheduler", "scaler_cluster", "scaler_worker"])
@pytest.mark.parametrize("address", ["notanaddress", "127.0.0.1:8516", "tcp://127.0.0.1:99999", "tcp://127.0.0.1"])
def test_a_malformed_address_is_a_usage_error(program: str, address: str) -> None:
    result = run(cli(program), address)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "address" in result.stderr and address in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "program, args, said",
    [
        ("scaler_scheduler", ["--worker-timeout-seconds", "0"], "must be a number more than 0, not 0.0"),
        ("scaler_scheduler", ["-wt", "soon"], "must be a number more than 0, not 'soon'"),
        ("scaler_scheduler", ["--event-loop", "nope"], "must be one of builtin, uvloop, not 'nope'"),
        ("scaler_scheduler", ["--cpu", "99999"], "CPU 99999 is not one this process may run on"),
        ("scaler_scheduler", ["--cpu", "fast"], "must be 'auto', 'none' or a CPU number"),
        ("scaler_scheduler", ["--max-task-retries", "-1"], "must be a whole number 0 or more, not -1"),
        ("scaler_scheduler", ["--max-payload-bytes", "lots"], "like 512M or 4G"),
        ("scaler_scheduler", ["--max-connections", "0"], "must be a whole number 1 or more, not 0"),
        ("scaler_scheduler", ["--monitor-task-data", "maybe"], "must be one of auto, on, off, not 'maybe'"),
        ("scaler_cluster", ["-n", "-1"], "must be a whole number 0 or more, not -1"),
        ("scaler_cluster", ["--heartbeat-interval-seconds", "-1"], "must be a number more than 0, not -1.0"),
        ("scaler_cluster", ["--max-processors-per-worker", "0"], "must be a whole number 1 or more, not 0"),
        ("scaler_cluster", ["--per-worker-queue-size", "1.5"], "must be a whole number 1 or more, not '1.5'"),
        ("scaler_cluster", ["--memory-limit", "lots"], "like 512M or 4G"),
        ("scaler_cluster", ["--capability", "payload=json"], "a Python worker runs Python payloads only"),
    ],
)
def test_bad_option_values_are_usage_errors_naming_the_flag(program: str, args: list[str], said: str) -> None:
    """Each flag is checked by the rule its setting declares (scaler.settings): exit code 2, one error line naming
    the flag and what it takes."""
    result = run(cli(program), *args, "tcp://127.0.0.1:8516")
    flag = (
        args[0] if args[0].startswith("--") else {"-wt": "--worker-timeout-seconds", "-n": "--num-of-workers"}[args[0]]
    )
    usage_error(result, flag, said)


def test_scheduler_on_a_port_in_use_exits_1_with_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"tcp://127.0.0.1:{taken.getsockname()[1]}"
        result = run(cli("scaler_scheduler"), address)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "Address already in use" in output and address in output, output
    assert "Traceback" not in output


def test_scheduler_on_an_unknown_host_exits_1() -> None:
    result = run(cli("scaler_scheduler"), "tcp://no-such-host.invalid:8516")
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "no-such-host.invalid" in output and "Traceback" not in output, output


def test_cluster_without_a_scheduler_gives_up_with_exit_code_1() -> None:
    result = run(cli("scaler_cluster"), "-n", "1", "--death-timeout-seconds", "1", free_address())
    assert "Worker[0] ended (exit code 1)" in result.stdout, result.stdout
    assert result.returncode == 1, result.stdout + result.stderr


# ----------------------------------------------------------------------------------------------- logging options
LOGGING_PROGRAMS = ["scaler_scheduler", "scaler_cluster", "scaler_worker"]


def usage_error(result: subprocess.CompletedProcess[str], *words: str) -> str:
    """The one error line of an argparse usage error (exit code 2, no traceback), holding every one of `words`."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, result.stderr
    for word in words:
        assert word in errors[0], errors[0]
    return errors[0]


@pytest.mark.parametrize("program", [*LOGGING_PROGRAMS, "scaler_ui"])
def test_an_unknown_logging_level_is_a_usage_error_naming_the_levels(program: str) -> None:
    result = run(cli(program), "--logging-level", "LOUD", "tcp://127.0.0.1:8516")
    usage_error(result, "--logging-level", "'LOUD'", "DEBUG", "INFO", "WARNING", "ERROR")


@pytest.mark.parametrize("program", LOGGING_PROGRAMS)
def test_a_lower_case_logging_level_is_accepted(program: str) -> None:
    result = run(cli(program), "--logging-level", "debug", "-h")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("program", LOGGING_PROGRAMS)
@pytest.mark.parametrize("where", ["missing folder", "a folder"])
def test_a_logging_path_that_cannot_be_written_is_a_usage_error(program: str, where: str, tmp_path: Path) -> None:
    path = tmp_path / "no-such-folder" / "x.log" if where == "missing folder" else tmp_path
    reason = "No such file or directory" if where == "missing folder" else "Is a directory"
    result = run(cli(program), "--logging-paths", str(path), free_address())
    usage_error(result, "--logging-paths", str(path), reason)


def test_logging_paths_leave_the_address_alone(programs: list[Program], tmp_path: Path) -> None:
    """`-lp FILE ADDRESS`: the address is not taken for a second file."""
    log = tmp_path / "scheduler.log"
    address = free_address()
    scheduler = start(programs, cli("scaler_scheduler"), "-lp", str(log), address)
    wait_until(
        lambda: (log.exists() and "monitor address is" in log.read_text()) or scheduler.process.poll() is not None,
        timeout=TIMEOUT,
        what="the scheduler to log to its file",
    )
    assert scheduler.process.poll() is None, scheduler.output
    assert f"listening on {address}" in log.read_text()
    os.kill(scheduler.pid, signal.SIGTERM)
    assert scheduler.wait() == 0


@pytest.mark.parametrize("form", ["1.9.9", "repeated"])
def test_several_logging_paths_before_the_address(programs: list[Program], tmp_path: Path, form: str) -> None:
    """scaler 1.9.9's `-lp A B ADDRESS`, and `-lp A -lp B ADDRESS`: both files get the logs, none else."""
    first, second = tmp_path / "a.log", tmp_path / "b.log"
    paths = ["-lp", str(first), str(second)] if form == "1.9.9" else ["-lp", str(first), "-lp", str(second)]
    address = free_address()
    cluster = start(programs, cli("scaler_cluster"), "-n", "1", "--death-timeout-seconds", "1", *paths, address)
    assert cluster.wait() == 1  # no scheduler there: its worker gives up
    for log in (first, second):
        assert "Worker[0] ended (exit code 1)" in log.read_text(), log.read_text()
    assert "Worker[0]" not in cluster.output  # not to stdout: the default is replaced, not added to


def test_an_address_given_twice_around_logging_paths_is_a_usage_error(tmp_path: Path) -> None:
    first, second = free_address(), free_address()
    result = run(cli("scaler_scheduler"), first, "-lp", str(tmp_path / "x.log"), second)
    usage_error(result, "unrecognized arguments", first)


# ----------------------------------------------------------------------------------------------- files left behind
def monitor_path(scheduler: Program) -> Path:
    match = scheduler.wait_for_output(r"monitor address is ipc://(\S+)")
    return Path(match.group(1))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stopped_scheduler_removes_its_monitor_socket(programs: list[Program], sig: int) -> None:
    scheduler = start(programs, cli("scaler_scheduler"), free_address())
    path = monitor_path(scheduler)
    assert path.is_socket()
    os.kill(scheduler.pid, sig)
    assert scheduler.wait() == 0
    assert not path.exists(), f"{path} is left behind"


def test_a_scheduler_on_ipc_removes_both_its_sockets(programs: list[Program], tmp_path: Path) -> None:
    address = f"ipc://{tmp_path}/scheduler"
    scheduler = start(programs, cli("scaler_scheduler"), address)
    path = monitor_path(scheduler)
    assert path.is_socket() and (tmp_path / "scheduler").is_socket()
    os.kill(scheduler.pid, signal.SIGTERM)
    assert scheduler.wait() == 0
    assert sorted(tmp_path.iterdir()) == []  # the folder the user chose stays


# ----------------------------------------------------------------------------------------------- CPUs
@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs or more"
)
def test_two_schedulers_with_default_options_do_not_share_a_cpu(programs: list[Program]) -> None:
    first = start(programs, cli("scaler_scheduler"), free_address())
    first.wait_for_output("monitor address is")
    second = start(programs, cli("scaler_scheduler"), free_address())
    second.wait_for_output("monitor address is")
    cpus = [os.sched_getaffinity(first.pid), os.sched_getaffinity(second.pid)]
    assert not (len(cpus[0]) == 1 and cpus[0] == cpus[1]), f"both schedulers on CPU {cpus[0]}"
