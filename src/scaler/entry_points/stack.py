"""scaler FILE.toml: start a whole stack from one file and stop it with Ctrl-C.

The file's tables are the commands' own settings (keys: their long option names with `_`):

    [scheduler]                 # scaler_scheduler
    address = "tcp://127.0.0.1:8516"
    monitor_address = "tcp://127.0.0.1:8517"

    [cluster]                   # scaler_cluster: fixed workers
    num_of_workers = 4

    [[worker_manager]]          # scaler_worker_manager TYPE: workers as the work needs them (one table each)
    type = "local"
    max_workers = 2

    [ui]                        # scaler_ui: the dashboard
    port = 8081

Every table is checked before anything starts (a key that does not exist is an error naming it). Each is then run as
its own command (`python -m scaler.entry_points.X --config FILE.toml --config-section NAME`), the scheduler first;
the others take its address, monitor address and keys unless their table gives its own. Ctrl-C (SIGINT) or SIGTERM
stops the workers, managers and dashboard, then the scheduler, within 10 s (what is left then is killed). When the
scheduler ends, the stack ends; another command ending is logged and the rest keep running.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

import psutil

from scaler.entry_points.help import HelpFormatter, add_version
from scaler.io.addresses import parse_address
from scaler.io.lifetime import signal_when_parent_dies
from scaler.io.logs import setup_logging
from scaler.settings.config_file import (
    SECTION_FLAG,
    STACK_TABLES,
    ConfigError,
    checked,
    read_document,
    table_of,
)

logger = logging.getLogger("scaler")

STOP_SECONDS = 10.0  # Ctrl-C to the last process gone
SCHEDULER_START_SECONDS = 15.0  # the scheduler's address accepting connections


@dataclass
class Part:
    """One command of the stack."""

    section: str  # the table: scheduler, cluster, worker_manager.2, ui
    module: str
    words: list[str]  # before --config (a worker manager's TYPE)
    listens_on: str | None = None  # the scheduler: its address, which the others wait for
    process: subprocess.Popen[bytes] | None = None

    def command(self, path: str) -> list[str]:
        return [sys.executable, "-m", self.module, *self.words, "--config", path, SECTION_FLAG, self.section]


def parts_of(document: dict[str, Any], path: str) -> list[Part]:
    """The commands a stack's file starts, the scheduler first, each table checked by that command's own parser
    (ConfigError naming the file, the table and the key)."""
    from scaler.entry_points import cluster, scheduler, worker_manager
    from scaler.monitor import ui

    if not any(name in document for name in STACK_TABLES):
        raise ConfigError(
            f"{path} has none of the tables scaler starts: [scheduler], [cluster], [[worker_manager]], [ui] "
            f"(a file of one command's settings goes to that command's --config)"
        )
    parts: list[Part] = []
    if "scheduler" in document:
        _check(scheduler.parser(), document, "scheduler", path)
        address = table_of(document, "scheduler", path)["address"]
        parts.append(Part("scheduler", "scaler.entry_points.scheduler", [], address))
    if "cluster" in document:
        parts.append(Part("cluster", "scaler.entry_points.cluster", []))
        _check(cluster.parser(), document, "cluster", path)
    managers = document.get("worker_manager", [])
    for number, table in enumerate(managers if isinstance(managers, list) else [managers], start=1):
        section = f"worker_manager.{number}"
        kind = table.get("type") if isinstance(table, dict) else None
        if kind not in worker_manager.TYPES:
            types = ", ".join(repr(t) for t in worker_manager.TYPES)
            raise ConfigError(f"{path}: [[worker_manager]] number {number} needs type = one of {types}, not {kind!r}")
        _, subs = worker_manager.parser()
        fields = table_of(document, section, path)
        fields.pop("type")
        checked(subs[kind], fields, f"{path}: {section}")
        parts.append(Part(section, "scaler.entry_points.worker_manager", [kind]))
    if "ui" in document:
        parts.append(Part("ui", "scaler.monitor.ui", []))
        _check(ui.parser(), document, "ui", path)
    return parts


def _check(parser: argparse.ArgumentParser, document: dict[str, Any], section: str, path: str) -> None:
    fields = table_of(document, section, path)
    positional = [a.dest for a in parser._actions if not a.option_strings and a.dest != "help"]
    missing = [name for name in positional if name not in fields]
    if missing:
        raise ConfigError(f"{path}: [{section}] needs {' and '.join(missing)}")
    checked(parser, fields, f"{path}: {section}")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scaler",
        description="Start a whole Scaler stack from one TOML file: [scheduler], [cluster], [[worker_manager]] "
        "tables (each with its type) and [ui], whose keys are those commands' long option names with _. Ctrl-C stops "
        "everything it started.",
        epilog='Example file: [scheduler] address = "tcp://127.0.0.1:8516"; [[worker_manager]] type = "local", '
        "max_workers = 4. See docs/deploying/config.md.",
        formatter_class=HelpFormatter,
    )
    add_version(p)
    p.add_argument("config", metavar="FILE.toml", help="the stack's configuration file")
    return p


def main(argv: Sequence[str] | None = None) -> None:
    p = parser()
    args = p.parse_args(argv)
    try:
        parts = parts_of(read_document(args.config), args.config)
    except ConfigError as exc:
        p.error(str(exc))
    setup_logging("INFO", ("/dev/stdout",))
    sys.exit(Stack(args.config, parts).run())


class Stack:
    def __init__(self, path: str, parts: list[Part]) -> None:
        self.path = path
        self.parts = parts
        self.stopping = ""

    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            return self._run()
        finally:
            self._stop_all()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.stopping = signal.Signals(signum).name

    def _run(self) -> int:
        for part in self.parts:
            if self.stopping:
                break
            self._start(part)
            if part.listens_on is not None and not self._wait_for_scheduler(part, part.listens_on):
                return 1
        while not self.stopping:
            for part in self.parts:
                process = part.process
                if process is None or process.poll() is None:
                    continue
                code = process.returncode
                part.process = None
                if part.section == "scheduler":
                    logger.error("scaler: the scheduler ended (exit code %s): stopping the stack", code)
                    return 1 if code == 0 else code
                logger.error("scaler: %s ended (exit code %s); the rest keep running", part.section, code)
            time.sleep(0.1)
        logger.info("scaler: %s: stopping everything it started", self.stopping)
        return 0

    def _start(self, part: Part) -> None:
        command = part.command(self.path)
        part.process = subprocess.Popen(
            command, start_new_session=True, preexec_fn=signal_when_parent_dies, stdin=subprocess.DEVNULL
        )
        logger.info("scaler: started %s (pid %d): %s", part.section, part.process.pid, " ".join(command[1:]))

    def _wait_for_scheduler(self, part: Part, address: str) -> bool:
        """Whether the scheduler came up: its tcp port takes connections (an ipc address: its socket file exists)."""
        scheme, rest = parse_address(address)
        deadline = time.monotonic() + SCHEDULER_START_SECONDS
        while not self.stopping and time.monotonic() < deadline:
            assert part.process is not None
            if part.process.poll() is not None:
                logger.error("scaler: the scheduler could not start (exit code %s)", part.process.returncode)
                return False
            if _listening(part.process.pid, scheme, rest):
                return True
            time.sleep(0.05)
        if not self.stopping:
            logger.error("scaler: the scheduler did not listen on %s within %gs", address, SCHEDULER_START_SECONDS)
        return bool(self.stopping)

    def _stop_all(self) -> None:
        """The workers, managers and dashboard first (SIGTERM, then wait), the scheduler last; whatever is still
        running when STOP_SECONDS have passed is killed with everything it started."""
        deadline = time.monotonic() + STOP_SECONDS
        rest = [p for p in self.parts if p.section != "scheduler"]
        schedulers = [p for p in self.parts if p.section == "scheduler"]
        for group, share in ((rest, 0.6), (schedulers, 1.0)):
            for part in group:
                if part.process is not None and part.process.poll() is None:
                    part.process.terminate()
            until = time.monotonic() + (deadline - time.monotonic()) * share
            for part in group:
                process = part.process
                if process is None:
                    continue
                try:
                    process.wait(max(0.0, until - time.monotonic()))
                except subprocess.TimeoutExpired:
                    logger.warning("scaler: %s (pid %d) did not stop in time: killed", part.section, process.pid)
                    _kill_group(process)
                part.process = None


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """Kill a command of the stack and what it started (its own session: start_new_session)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        process.kill()
    try:
        process.wait(2)
    except subprocess.TimeoutExpired:
        pass


def _listening(pid: int, scheme: str, rest: str) -> bool:
    """Whether the scheduler (process `pid` or one it started) listens on its address: a tcp port in LISTEN, an ipc
    socket file. Looked up, not connected to (a probe would be a failed handshake in the scheduler's log)."""
    if scheme == "ipc":
        return os.path.exists(rest)
    if scheme != "tcp":
        return True
    port = int(rest.rpartition(":")[2])
    try:
        root = psutil.Process(pid)
        for process in (root, *root.children(recursive=True)):
            for connection in process.net_connections(kind="tcp"):
                if connection.status == psutil.CONN_LISTEN and connection.laddr and connection.laddr.port == port:
                    return True
    except psutil.Error:
        return False
    return False


if __name__ == "__main__":
    main()
