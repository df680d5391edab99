"""Where a worker manager's units run: each type starts a unit under the name the scheduler chose, stops it, and says
which units ended. A unit runs `scaler_cluster -n WORKERS_PER_UNIT --unit NAME ADDRESS`, so its workers tell the
scheduler which unit they belong to.

- LocalUnits: a unit is a scaler_cluster process on this machine (dies with the manager);
- SlurmUnits (manager/slurm.py): a unit is a Slurm job.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Protocol

from scaler.errors import KeysError
from scaler.io.lifetime import signal_when_parent_dies
from scaler.security.keys import SCHEDULER_PUBLIC, SECRET_SUFFIX
from scaler.settings.manager import LocalManagerSettings, ManagerSettings

WORKER_SECRET = "worker" + SECRET_SUFFIX

logger = logging.getLogger(__name__)


class Units(Protocol):
    """What the manager's shell asks of a resource manager. None of these may wait long: the shell also heartbeats."""

    kind: str

    def start(self, unit: str) -> None: ...

    def stop(self, unit: str) -> None: ...

    def ended(self) -> list[tuple[str, str]]:
        """The units that ended since the last call, with why (exit code, job state)."""
        ...

    def running(self) -> list[str]: ...

    def close(self, timeout: float) -> None:
        """Stop every unit and wait for them, at most `timeout` seconds (then kill what is left, where it can)."""
        ...


def worker_command(
    settings: ManagerSettings, address: str, unit: str, keys: str | None, extra: str, python: str = ""
) -> list[str]:
    """The scaler_cluster command line one unit runs."""
    command = [python or sys.executable, "-m", "scaler.entry_points.cluster", "-n", str(settings.workers_per_unit)]
    command += ["--unit", unit, "--worker-name-prefix", unit, "--logging-level", str(settings.logging_level)]
    if keys is not None:
        command += ["--keys", keys]
    for capability in settings.capabilities:
        command += ["--capability", capability]
    command += shlex.split(extra)
    command.append(address)
    return command


class LocalUnits:
    """Units as scaler_cluster processes on this machine, in their own session (a Ctrl-C at the manager's terminal
    reaches the manager, which stops them in order), each sent SIGTERM when the manager dies, even by SIGKILL."""

    kind = "local"

    def __init__(self, settings: LocalManagerSettings, address: str, keys: str | None) -> None:
        self.settings = settings
        self.address = address
        self.keys = keys
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._ended: list[tuple[str, str]] = []

    def start(self, unit: str) -> None:
        if unit in self.processes:
            logger.warning("worker manager: unit %s runs already; not started twice", unit)
            return
        command = worker_command(self.settings, self.address, unit, self.keys, self.settings.worker_options)
        try:
            process = subprocess.Popen(
                command, start_new_session=True, preexec_fn=signal_when_parent_dies, stdin=subprocess.DEVNULL
            )
        except OSError as exc:
            logger.error("worker manager: could not start unit %s (%s): %s", unit, shlex.join(command), exc)
            self._ended.append((unit, f"could not start: {exc}"))
            return
        self.processes[unit] = process
        logger.info(
            "worker manager: started unit %s (pid %d, %d workers)", unit, process.pid, self.settings.workers_per_unit
        )

    def stop(self, unit: str) -> None:
        process = self.processes.get(unit)
        if process is None or process.returncode is not None:
            return
        logger.info("worker manager: stopping unit %s (pid %d)", unit, process.pid)
        process.send_signal(signal.SIGTERM)

    def ended(self) -> list[tuple[str, str]]:
        for unit, process in list(self.processes.items()):
            code = process.poll()
            if code is not None:
                del self.processes[unit]
                why = f"exit code {code}" if code >= 0 else f"killed by {signal.Signals(-code).name}"
                self._ended.append((unit, why))
        ended, self._ended = self._ended, []
        return ended

    def running(self) -> list[str]:
        return [unit for unit, process in self.processes.items() if process.returncode is None]

    def close(self, timeout: float) -> None:
        for unit in self.running():
            self.stop(unit)
        deadline = time.monotonic() + timeout
        for unit, process in self.processes.items():
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning("worker manager: unit %s did not stop within %gs: killed", unit, timeout)
                process.kill()
                process.wait(5)
        self.processes.clear()


def keys_for_units(keys: str | None, parent: str | None = None) -> str | None:
    """The keys folder the units' workers use: a private copy (mode 0700, in `parent` or the temporary folder) of
    scheduler.key and worker.key_secret from the manager's folder, so that the workers' tasks cannot read the
    manager's own key or any other secret kept beside them. None without keys."""
    if keys is None:
        return None
    missing = [name for name in (SCHEDULER_PUBLIC, WORKER_SECRET) if not os.path.isfile(os.path.join(keys, name))]
    if missing:
        raise KeysError(
            f"{keys} has no {' and no '.join(missing)}: the workers a manager starts need them (scaler_keygen makes "
            f"them; docs/security.md, the worker manager's machine)"
        )
    folder = tempfile.mkdtemp(prefix="scaler-unit-keys-", dir=parent)
    for name in (SCHEDULER_PUBLIC, WORKER_SECRET):
        shutil.copyfile(os.path.join(keys, name), os.path.join(folder, name))
        os.chmod(os.path.join(folder, name), 0o600)
    return folder
