"""The one-machine key layout of docs/security.md: workers get a folder holding only what a worker needs and, run as
another user, their tasks cannot read the scheduler's secret; a worker given the whole keys directory says at start
that its tasks can read every secret in it.

The layout test runs the workers as user nobody, so it needs root, and an interpreter nobody can run with this
checkout's packages: sys.executable by default, or $SCALER_TEST_NOBODY_PYTHON (say, a venv of a system Python 3.11
whose .pth adds this checkout's site-packages) where the venv's interpreter sits in a folder others cannot enter.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from scaler import Client
from scaler.entry_points.cluster import readable_secrets
from scaler.security.keys import generate
from tests.e2e.test_cli import ENV, cli
from tests.helpers import free_address, wait_until

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(120)
TIMEOUT = 20
NOBODY = 65534
WARNING = "the tasks these workers run can read them too"


class Proc:
    """A process in a session of its own (killed by its group), its output collected by a thread."""

    def __init__(self, args: list[str], env: dict[str, str], **popen: Any) -> None:
        self.args = args
        self.process = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, env=env, **popen
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

    def wait_for_output(self, pattern: str, timeout: float = TIMEOUT) -> re.Match[str]:
        def seen() -> bool:
            return re.search(pattern, self.output) is not None or self.process.poll() is not None

        wait_until(seen, timeout=timeout, what=f"{pattern!r} in the output of {self.args[0]}")
        match = re.search(pattern, self.output)
        assert match, f"{self.args[0]} exited ({self.process.returncode}) without printing {pattern!r}:\n{self.output}"
        return match

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            pass
        self._reader.join(5)


def started(procs: list[Proc], proc: Proc) -> Proc:
    procs.append(proc)
    return proc


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    procs: list[Proc] = []
    yield procs
    for proc in procs:
        proc.kill()


def scheduler_with_keys(procs: list[Proc], keys: Path) -> str:
    address = free_address()
    scheduler = started(procs, Proc([cli("scaler_scheduler"), "--keys", str(keys), address, "--cpu", "none"], ENV))
    scheduler.wait_for_output("monitor address is")
    return address


def test_a_worker_given_the_whole_keys_directory_warns_that_its_tasks_can_read_its_secrets(
    procs: list[Proc], tmp_path: Path
) -> None:
    keys = tmp_path / "keys"
    generate(keys, clients=["alice"], workers=["local-workers"])
    address = scheduler_with_keys(procs, keys)
    whole = started(procs, Proc([cli("scaler_worker"), "-n", "1", "--keys", str(keys), address], ENV))
    whole.wait_for_output(r"Worker\[0\] started")  # logged after the check of the keys directory
    [warning] = [line for line in whole.output.splitlines() if line.startswith("[WARNING]")]
    assert f"the keys directory {keys} holds secret keys other than worker.key_secret" in warning, warning
    for name in ("scheduler.key_secret", "client.key_secret", "alice/client.key_secret"):
        assert name in warning, warning
    assert WARNING in warning and f"scaler_keygen {keys} --worker NAME" in warning, warning
    own = started(procs, Proc([cli("scaler_cluster"), "-n", "1", "--keys", str(keys / "local-workers"), address], ENV))
    own.wait_for_output(r"Worker\[0\] started")
    assert "[WARNING]" not in own.output, own.output
    # A worker given its own folder, but run as the scheduler's user: its tasks still read the scheduler's secret.
    whole.kill()
    with Client(address, keys=keys / "alice", timeout_seconds=TIMEOUT) as client:
        future = client.submit(try_to_read, [str(keys / "scheduler.key_secret")])
        assert future.result(timeout=TIMEOUT) == (os.geteuid(), ["read"])


def test_readable_secrets_lists_every_secret_but_the_workers_own(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    generate(keys, clients=["alice"], workers=["local-workers"])
    found = readable_secrets(str(keys))
    expected = [
        "alice/client.key_secret",
        "client.key_secret",
        "local-workers/worker.key_secret",
        "scheduler.key_secret",
    ]
    assert found == sorted(found) and set(expected) <= set(found), found
    assert set(found) - set(expected) <= {"monitor.key_secret", "manager.key_secret"}, (
        found
    )  # (scaler_keygen makes them)
    assert readable_secrets(str(keys / "local-workers")) == []
    assert readable_secrets(str(tmp_path / "missing")) == []
    if os.geteuid() != 0:  # root reads whatever the mode says
        (keys / "scheduler.key_secret").chmod(0)
        assert "scheduler.key_secret" not in readable_secrets(str(keys))


def try_to_read(paths: list[str]) -> tuple[int, list[str]]:
    """A task: this process's user id, and for each path "read" or the exception that reading it raised."""
    outcomes = []
    for path in paths:
        try:
            with open(path) as file:
                file.read()
            outcomes.append("read")
        except Exception as exc:  # what the task meets is the answer
            outcomes.append(type(exc).__name__)
    return os.geteuid(), outcomes


def nobody_python() -> str:
    """An interpreter user nobody can run with this checkout's scaler: $SCALER_TEST_NOBODY_PYTHON, this one, or a
    venv made here from the system's Python of the same version whose .pth adds this venv's packages (this one can
    sit in a folder others cannot enter, such as pyenv's under /root); skips the test when there is none."""
    given = os.environ.get("SCALER_TEST_NOBODY_PYTHON")
    candidates = [given] if given else [sys.executable, *bridged_python()]
    problems = []
    for python in candidates:
        try:
            probe = as_nobody([python, "-c", "import scaler.entry_points.cluster"], capture_output=True, timeout=60)
        except OSError as exc:
            problems.append(f"{python}: {exc}")
            continue
        if probe.returncode == 0:
            return python
        why = (probe.stderr or probe.stdout).strip().splitlines()[-1:] or [f"exit status {probe.returncode}"]
        problems.append(f"{python}: {why[0]}")
    pytest.skip(
        f"user nobody cannot run this checkout's scaler ({'; '.join(problems)}): the interpreter, the venv and the "
        "source checkout must be readable (and the interpreter executable) by others"
    )


def bridged_python() -> list[str]:
    """A venv, in a new folder others can read, of /usr/bin/python3.X (this interpreter's version) seeing this
    interpreter's site-packages; [] if there is no such Python."""
    system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not os.access(system, os.X_OK) or os.path.realpath(system) == os.path.realpath(sys.executable):
        return []
    folder = Path(tempfile.mkdtemp(prefix="scaler-nobody-python-"))
    atexit.register(shutil.rmtree, folder, True)
    folder.chmod(0o755)
    made = subprocess.run(
        [system, "-m", "venv", "--without-pip", str(folder / "venv")], capture_output=True, timeout=120
    )
    if made.returncode != 0:
        return []
    packages = [p for p in site.getsitepackages() if os.path.isdir(p)]
    target = next(iter((folder / "venv" / "lib").glob("python*/site-packages")), None)
    if target is None:
        return []
    (target / "scaler-checkout.pth").write_text("\n".join([*packages, str(ROOT / "src")]) + "\n")
    return [str(folder / "venv" / "bin" / "python")]


def nobody_env() -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/nonexistent",
        "PYTHONUNBUFFERED": "1",
        "SCALER_DEBUG": os.environ.get("SCALER_DEBUG", ""),
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),  # where a run from another checkout finds its scaler
    }


def as_nobody(args: list[str], **run: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, user=NOBODY, group=NOBODY, extra_groups=[], cwd="/", env=nobody_env(), text=True, **run)


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the workers as user nobody: needs root")
def test_the_one_machine_layout_keeps_the_schedulers_secret_from_tasks(procs: list[Proc]) -> None:
    python = nobody_python()
    keys = Path(tempfile.mkdtemp(prefix="scaler-keys-"))  # root's, 0700: the scheduler's user only
    copy = Path(tempfile.mkdtemp(prefix="scaler-nobody-"))
    try:
        generate(keys, clients=["alice"], workers=["local-workers"])
        for source in (keys / "local-workers").iterdir():  # what `cp -a` would do: modes kept, nobody's files
            shutil.copy2(source, copy / source.name)
            os.chown(copy / source.name, NOBODY, NOBODY)
        os.chown(copy, NOBODY, NOBODY)
        assert sorted(p.name for p in copy.iterdir()) == ["scheduler.key", "worker.key_secret"]
        address = scheduler_with_keys(procs, keys)
        worker_args = [python, cli("scaler_cluster"), "-n", "1", "--keys", str(copy), address]
        worker = started(procs, Proc(worker_args, nobody_env(), user=NOBODY, group=NOBODY, extra_groups=[], cwd="/"))
        worker.wait_for_output(r"Worker\[0\] started")
        secrets = [str(keys / "scheduler.key_secret"), str(keys / "alice" / "client.key_secret")]
        cloudpickle.register_pickle_by_value(sys.modules[__name__])  # nobody's worker cannot import this module
        try:
            with Client(address, keys=keys / "alice", timeout_seconds=TIMEOUT) as client:
                result = client.submit(try_to_read, secrets).result(timeout=TIMEOUT)
        finally:
            cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        assert result == (NOBODY, ["PermissionError", "PermissionError"]), worker.output
        assert "[WARNING]" not in worker.output, worker.output
    finally:
        shutil.rmtree(keys, ignore_errors=True)
        shutil.rmtree(copy, ignore_errors=True)
