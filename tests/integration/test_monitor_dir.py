"""A real scaler_scheduler puts its default monitor socket in a folder private to its user, also when another user
(or a symlink, or an open mode) holds /tmp/scaler-<uid> first; scaler_top reads the address it logs, and (once
scaler_top calls find_monitor) the documents' ipc:///tmp/<host>_<port>_monitor as well.

Each test gives the programs a $TMPDIR of its own (and $XDG_RUNTIME_DIR when it tests that), so the real
/tmp/scaler-<uid> of the machine is never touched."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from scaler import SchedulerClusterCombo
from tests.e2e.test_cli import ENV, cli
from tests.helpers import free_address, free_port
from tests.integration.test_one_machine_layout import Proc, started
from tests.unit.test_monitor_dir import NOBODY, UID, as_root, assert_private, fresh_dirs, squat

pytestmark = pytest.mark.timeout(120)
TIMEOUT = 20


@pytest.fixture
def tmp() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="mdir"))  # short: socket paths must fit in 107 bytes
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def env_with(tmp: Path, xdg: Path | None = None) -> dict[str, str]:
    env = {key: value for key, value in ENV.items() if key != "XDG_RUNTIME_DIR"}
    env["TMPDIR"] = str(tmp)
    if xdg is not None:
        env["XDG_RUNTIME_DIR"] = str(xdg)
    return env


def start_scheduler(procs: list[Proc], env: dict[str, str]) -> tuple[Proc, int, str]:
    """A scaler_scheduler on a free port, once it logged its monitor address; returns it, its port and that address."""
    port = free_port()
    scheduler = started(procs, Proc([cli("scaler_scheduler"), f"tcp://127.0.0.1:{port}", "--cpu", "none"], env=env))
    logged = scheduler.wait_for_output(r"Scheduler: monitor address is (\S+)\n").group(1)
    return scheduler, port, logged


def top_once(env: dict[str, str], address: str, timeout: float = 10) -> subprocess.CompletedProcess[str]:
    args = [cli("scaler_top"), "--once", "--timeout", str(timeout), address]
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout + TIMEOUT)


def assert_prints_a_status(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stdout + done.stderr
    assert "task_manager" in done.stdout, done.stdout


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    procs: list[Proc] = []
    yield procs
    for proc in procs:
        proc.kill()


def test_the_scheduler_binds_its_default_monitor_in_a_folder_of_its_user(procs: list[Proc], tmp: Path) -> None:
    env = env_with(tmp)
    scheduler, port, logged = start_scheduler(procs, env)
    assert logged == f"ipc://{tmp}/scaler-{UID}/127.0.0.1_{port}_monitor"
    assert_private(tmp / f"scaler-{UID}")
    info = os.lstat(logged.removeprefix("ipc://"))
    assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    assert_prints_a_status(top_once(env, logged))
    assert "[WARNING]" not in scheduler.output, scheduler.output


def test_the_scheduler_prefers_a_private_xdg_runtime_dir(procs: list[Proc], tmp: Path) -> None:
    xdg = tmp / "run"
    xdg.mkdir(mode=0o700)
    env = env_with(tmp, xdg)
    _, port, logged = start_scheduler(procs, env)
    assert logged == f"ipc://{xdg}/scaler/127.0.0.1_{port}_monitor"
    assert_private(xdg / "scaler")
    assert_prints_a_status(top_once(env, logged))


@pytest.mark.parametrize("how", ["symlink", "mode 0777", pytest.param("nobody", marks=as_root)])
def test_a_squatted_tmp_folder_is_left_alone_and_the_scheduler_still_starts(
    procs: list[Proc], tmp: Path, how: str
) -> None:
    expected = tmp / f"scaler-{UID}"
    reason = squat(expected, how)
    before = os.lstat(expected)
    env = env_with(tmp)
    scheduler, port, logged = start_scheduler(procs, env)
    [fresh] = fresh_dirs(tmp)
    assert logged == f"ipc://{fresh}/127.0.0.1_{port}_monitor"
    assert_private(fresh)
    warning = re.search(r"\[WARNING\].*", scheduler.output)
    assert warning is not None, scheduler.output
    assert f"{expected} {reason}" in warning.group(0) and f"the monitor address is {logged}" in warning.group(0)
    assert os.lstat(expected).st_ino == before.st_ino and os.lstat(expected).st_mode == before.st_mode
    assert not os.path.lexists(expected / f"127.0.0.1_{port}_monitor")
    assert_prints_a_status(top_once(env, logged))
    if how == "nobody":
        assert os.lstat(expected).st_uid == NOBODY


def test_the_combo_follows_the_private_folder(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    address = free_address()
    with SchedulerClusterCombo(address=address, n_workers=0, logging_level="WARNING") as combo:
        port = address.rpartition(":")[2]
        assert combo.monitor_address == f"ipc://{tmp}/scaler-{UID}/127.0.0.1_{port}_monitor"
        assert stat.S_ISSOCK(os.lstat(combo.monitor_address.removeprefix("ipc://")).st_mode)
        assert_prints_a_status(top_once(env_with(tmp), combo.monitor_address))


@pytest.mark.parametrize("where", ["tmp", "xdg", "squatted"])
def test_scaler_top_reads_the_documented_address(procs: list[Proc], tmp: Path, where: str) -> None:
    """Seed 004: `scaler_top ipc:///tmp/127.0.0.1_2345_monitor`, whichever private folder the scheduler chose."""
    xdg = None
    if where == "xdg":
        xdg = tmp / "run"
        xdg.mkdir(mode=0o700)
    elif where == "squatted":
        squat(tmp / f"scaler-{UID}", "mode 0777")
    env = env_with(tmp, xdg)
    _, port, logged = start_scheduler(procs, env)
    assert not logged.startswith("ipc:///tmp/127.0.0.1_")
    assert_prints_a_status(top_once(env, f"ipc:///tmp/127.0.0.1_{port}_monitor", timeout=5))
