"""Every shell block of the documentation runs (tests/e2e/docs_blocks.py says how blocks are read and marked), as a
reader would type it, with only ports and paths changed:

- the documents' ports (2345 to 2348, 8516, 8517 for a monitor, 8081 for the dashboard) become free ports, the same
  for every block of one document; a block that starts no scheduler of its own talks to one started here instead (a
  scheduler with one worker), as the reader's would be running;
- `./scripts/...`, `.venv/...`, `.venv-pypy/...` and `ts/dist/...` are the checkout's, `~` is a fresh home folder,
  `SCHEDULER_HOST` is 127.0.0.1 (the "several machines" of the documents are one here), and the commands run in a
  fresh folder, where a TOML block of the same document that starts with `# NAME.toml` is written first;
- a program that keeps running (a scheduler, cluster, worker manager, dashboard, `scaler FILE.toml`, a TypeScript
  worker, `scaler_top` in a pseudo-terminal) is started in the background whether or not its line ends with `&`;
  every other command must end with status 0 within a minute, and runs once the programs started before it say they
  are ready (a scheduler listening, a worker connected, the dashboard serving), as a reader would wait to see;
- when the block started a scheduler and workers, a client (with the block's keys, if it made any) runs a task there;
- every program started must still be running a moment later, print no ERROR and no traceback, and stop when
  interrupted, as Ctrl-C would stop it;
- in a `console` block, the lines after a `$ command` are what it prints: each must begin a line of its output, in
  order, once numbers (times, pids, ports, versions) are set aside; `...` stands for lines not shown.

A block that cannot run here says why in a `<!-- docs-test: skip: REASON -->` marker (test_docs_code.py checks every
marker has a reason)."""

from __future__ import annotations

import os
import pty
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from scaler import Client, MissingCapabilityError, SchedulerClusterCombo
from tests.e2e.docs_blocks import ROOT, Block, blocks, documents
from tests.helpers import collect_output, free_port

pytestmark = pytest.mark.timeout(300)

SHELL = ("bash", "console", "sh", "shell")
BIN = Path(sys.executable).parent
PORTS = ("2345", "2346", "2347", "2348", "8516", "8517", "8081")
SCHEDULER_PORTS = ("2345", "2346", "2347", "2348", "8516")
PORT = re.compile(r"(?<!\d)(" + "|".join(PORTS) + r")(?!\d)")
CHECKOUT_PATH = re.compile(r"(?<![\w/.~-])(\./scripts|\.venv-pypy|\.venv|ts/dist)/")
SERVERS = {"scaler_scheduler", "scaler_cluster", "scaler_worker", "scaler_worker_manager", "scaler_ui", "scaler"}
WORKERS = {"scaler_cluster", "scaler_worker", "scaler_worker_manager"}
# What a program that keeps running prints once it is ready, as a reader waits to see it before the next command
# (a TypeScript client started before the TypeScript worker had joined saw its tasks fail: no worker offered them)
READY = {
    "scaler_scheduler": "listening on",
    "scaler_cluster": "connected to scheduler",
    "scaler_worker": "connected to scheduler",
    "node": "connected to scheduler",
    "scaler_ui": "dashboard at",
}
COMMAND_SECONDS = 60
SETTLE_SECONDS = 1.0


def shell_blocks() -> list[Block]:
    return [b for path in documents() for b in blocks(path) if b.language in SHELL and b.mark != "skip"]


@dataclass
class Command:
    line: str  # as the reader types it, continuations joined, without its comment and a trailing &
    shown: list[str] = field(default_factory=list)  # a console block's lines of its output

    @property
    def words(self) -> list[str]:
        words = shlex.split(self.line)
        while words and re.fullmatch(r"\w+=.*", words[0]):  # (VARIABLE=value before the program)
            words.pop(0)
        return words

    @property
    def program(self) -> str:
        return os.path.basename(self.words[0]) if self.words else ""

    @property
    def keeps_running(self) -> bool:
        words = self.words
        if self.program == "scaler_top":
            return "--once" not in words
        if self.program == "node":
            return any(word.endswith("worker.js") for word in words)
        return self.program in SERVERS

    @property
    def starts_a_scheduler(self) -> bool:
        return self.program == "scaler_scheduler" or (self.program == "scaler" and self.words[-1].endswith(".toml"))


def commands(block: Block) -> list[Command]:
    text = re.sub(r"\\\n\s*", " ", block.code)
    found: list[Command] = []
    for raw in text.splitlines():
        if block.language == "console":
            if not raw.startswith("$ "):
                if found and raw.strip():
                    found[-1].shown.append(raw.rstrip())
                continue
            raw = raw[2:]
        line = re.split(r"\s#", raw, maxsplit=1)[0].strip()
        if line.startswith("#") or not line:
            continue
        found.append(Command(line.removesuffix("&").strip()))
    return found


def starts_a_scheduler(block: Block) -> bool:
    return any(command.starts_a_scheduler for command in commands(block))


def rewrite(text: str, ports: dict[str, int]) -> str:
    text = PORT.sub(lambda m: str(ports[m.group(1)]), text)
    text = CHECKOUT_PATH.sub(lambda m: f"{ROOT / m.group(1)}/", text)
    return text.replace("SCHEDULER_HOST", "127.0.0.1")


def masked(line: str) -> str:
    """A line with its numbers set aside (times, pids, ports, versions), and its log level prefix kept."""
    return re.sub(r"\d+", "#", line).rstrip()


class Started:
    """A program that keeps running, in its own session; what it prints is collected (through a pseudo-terminal
    for scaler_top's full-screen view)."""

    def __init__(self, command: Command, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.command = command
        self.chunks: list[bytes] = []
        tty = command.program == "scaler_top"
        if tty:
            master, slave = pty.openpty()
            stdin = slave
            env = {**env, "TERM": "xterm", "LINES": "40", "COLUMNS": "120"}
        else:
            master, slave = os.pipe()
            stdin = subprocess.DEVNULL
        self.process = subprocess.Popen(
            argv, cwd=cwd, env=env, start_new_session=True, close_fds=True, stdin=stdin, stdout=slave, stderr=slave
        )
        os.close(slave)
        self.master = master
        self.reader = collect_output(master, self.chunks)

    @property
    def output(self) -> str:
        return b"".join(self.chunks).decode("utf-8", "replace")

    def stop(self) -> int | None:
        """Interrupt it as Ctrl-C would; its exit status, or None if it had to be killed."""
        status: int | None = None
        try:
            os.killpg(self.process.pid, signal.SIGINT)
            status = self.process.wait(15)
        except subprocess.TimeoutExpired:
            pass
        except ProcessLookupError:
            status = self.process.wait(5)
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # (what it started and left behind)
        except (ProcessLookupError, PermissionError):
            pass
        if status is None:
            self.process.wait(5)
        self.reader.join(5)
        os.close(self.master)
        return status


@pytest.fixture(scope="module")
def reader_cluster() -> Iterator[SchedulerClusterCombo]:
    """The scheduler a block that starts none talks to, as the reader's own would be running."""
    with SchedulerClusterCombo(f"tcp://127.0.0.1:{free_port()}", n_workers=1, logging_level="WARNING") as combo:
        yield combo


_document_ports: dict[str, dict[str, int]] = {}


def document_ports(document: str) -> dict[str, int]:
    """The free ports standing for the documents' ports, the same for every block of one document."""
    if document not in _document_ports:
        _document_ports[document] = {port: free_port() for port in PORTS}
    return _document_ports[document]


def write_named_files(document: str, ports: dict[str, int], folder: Path) -> None:
    """The document's TOML blocks that begin with `# NAME.toml`, as NAME.toml in `folder`."""
    for block in blocks(ROOT / document):
        first = block.code.split("\n", 1)[0].strip()
        name = re.fullmatch(r"#\s*([\w.-]+\.toml)", first)
        if block.language == "toml" and name:
            (folder / name.group(1)).write_text(rewrite(block.code, ports))


def probe(command: Command, folder: Path) -> None:
    """A task through the scheduler `command` started, with the keys it was given."""
    words = command.words
    if command.program == "scaler":
        tomllib = pytest.importorskip("tomllib")  # (Python 3.11)
        address = tomllib.loads((folder / words[-1]).read_text())["scheduler"]["address"]
    else:
        address = next(word for word in words if word.startswith("tcp://"))
    address = address.replace("0.0.0.0", "127.0.0.1")
    keys = words[words.index("--keys") + 1].replace("~", str(folder / "home"), 1) if "--keys" in words else None
    deadline = time.monotonic() + 60
    with Client(address, keys=(folder / keys) if keys else None, timeout_seconds=60) as client:
        while True:  # (until a Python worker has joined: a TypeScript one may be first)
            try:
                assert client.submit(pow, 2, 10).result(timeout=60) == 1024
                return
            except MissingCapabilityError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def expect_shown(started: Started, shown: list[str]) -> None:
    """Each shown line begins a line of the output, in order, numbers aside; `...` lines are skipped."""
    wanted = [masked(line).removesuffix("...").rstrip() for line in shown if line.strip() != "..."]
    deadline = time.monotonic() + 20
    while True:
        lines = [masked(line) for line in started.output.splitlines()]
        position, missing = 0, None
        for want in wanted:
            while position < len(lines) and not lines[position].startswith(want):
                position += 1
            if position == len(lines):
                missing = want
                break
            position += 1
        if missing is None:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"{started.command.line!r} printed no line beginning {missing!r}:\n{started.output[-3000:]}")
        time.sleep(0.2)


@pytest.mark.parametrize("block", shell_blocks(), ids=lambda b: b.name)
def test_the_shell_block_runs(block: Block, reader_cluster: SchedulerClusterCombo, tmp_path: Path) -> None:
    ports = dict(document_ports(block.path))
    if not starts_a_scheduler(block):
        own = reader_cluster.address.rsplit(":", 1)[1]
        ports.update({port: int(own) for port in SCHEDULER_PORTS})
    write_named_files(block.path, ports, tmp_path)
    (tmp_path / "home").mkdir()
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "HOME": str(tmp_path / "home")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    started: list[Started] = []
    try:
        scheduler: Command | None = None
        workers = False
        for command in commands(block):
            line = rewrite(command.line, ports)
            argv = ["bash", "-c", line]
            if command.keeps_running:
                started.append(Started(command, argv, tmp_path, env))
                if command.starts_a_scheduler:
                    scheduler = Command(line)
                    wait_for_line(started[-1], "listening on")
                elif command.program in READY:
                    wait_for_line(started[-1], READY[command.program])
                workers = workers or command.program in WORKERS or command.program == "scaler"
                workers = workers or (command.program == "node" and "worker.js" in line)
            else:
                done = subprocess.run(
                    argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=COMMAND_SECONDS, check=False
                )
                assert done.returncode == 0, f"{block.name}: {line!r} ended with {done.returncode}:\n{done.stderr}"
        time.sleep(SETTLE_SECONDS)
        still_running(block, started)
        if scheduler is not None and workers:
            probe(scheduler, tmp_path)
        for each in started:
            if each.command.shown:
                expect_shown(each, each.command.shown)
        still_running(block, started)
    finally:
        statuses = [(each, each.stop()) for each in started]
    for each, status in statuses:
        output = each.output
        assert status is not None, f"{block.name}: {each.command.line!r} did not stop when interrupted:\n{output}"
        for bad in ("Traceback", "[ERROR]"):
            assert bad not in output, f"{block.name}: {each.command.line!r} printed {bad}:\n{output[-3000:]}"


def still_running(block: Block, started: list[Started]) -> None:
    for each in started:
        assert each.process.poll() is None, f"{block.name}: {each.command.line!r} ended:\n{each.output[-3000:]}"


def wait_for_line(started: Started, text: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while text not in started.output:
        if started.process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{started.command.line!r} never printed {text!r}:\n{started.output[-3000:]}")
        time.sleep(0.05)
