"""Units as Slurm jobs: sbatch starts one (a batch script that runs scaler_cluster), squeue says which still run,
scancel stops one. Slurm is found as its own commands find it (PATH, SLURM_CONF)."""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import tempfile
import time

from scaler.manager.units import worker_command
from scaler.settings.manager import SlurmManagerSettings

logger = logging.getLogger(__name__)

COMMAND_TIMEOUT_SECONDS = 30.0
POLL_SECONDS = 2.0  # squeue at most this often
_DONE = {
    "BOOT_FAIL",
    "CANCELLED",
    "COMPLETED",
    "DEADLINE",
    "FAILED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "TIMEOUT",
}


class SlurmError(RuntimeError):
    pass


def _run(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmError(f"{shlex.join(command)}: {exc}") from None
    if done.returncode != 0:
        raise SlurmError(f"{shlex.join(command)}: exit code {done.returncode}: {done.stderr.strip()}")
    return done.stdout


class SlurmUnits:
    kind = "slurm"

    def __init__(self, settings: SlurmManagerSettings, address: str, keys: str | None) -> None:
        self.settings = settings
        self.address = address
        self.keys = keys
        self.jobs: dict[str, str] = {}  # unit -> Slurm job id
        self._ended: list[tuple[str, str]] = []
        self._last_poll = 0.0
        self.folder = tempfile.mkdtemp(prefix="scaler-slurm-")
        self.log_directory = settings.log_directory or tempfile.gettempdir()

    def script(self, unit: str) -> str:
        command = worker_command(
            self.settings, self.address, unit, self.keys, self.settings.worker_options, self.settings.python
        )
        return f"#!/bin/sh\n# scaler_worker_manager slurm: unit {unit}\nexec {shlex.join(command)}\n"

    def sbatch_command(self, unit: str, script: str) -> list[str]:
        s = self.settings
        command = ["sbatch", "--parsable", f"--job-name=scaler-{unit}", "--nodes=1", "--ntasks=1"]
        command += [
            f"--cpus-per-task={s.workers_per_unit}",
            f"--output={os.path.join(self.log_directory, f'slurm-{unit}.out')}",
        ]
        for flag, value in (("--partition", s.partition), ("--account", s.account), ("--time", s.time_limit)):
            if value:
                command.append(f"{flag}={value}")
        command += shlex.split(s.sbatch_options)
        command.append(script)
        return command

    def start(self, unit: str) -> None:
        if unit in self.jobs:
            logger.warning("worker manager: unit %s is job %s already; not started twice", unit, self.jobs[unit])
            return
        path = os.path.join(self.folder, f"{unit}.sh")
        with open(path, "w", encoding="utf-8") as file:
            file.write(self.script(unit))
        os.chmod(path, 0o700)
        try:
            job = _run(self.sbatch_command(unit, path)).strip().split(";")[0]
        except SlurmError as exc:
            logger.error("worker manager: could not submit unit %s: %s", unit, exc)
            self._ended.append((unit, f"sbatch failed: {exc}"))
            return
        self.jobs[unit] = job
        logger.info("worker manager: unit %s is Slurm job %s", unit, job)

    def stop(self, unit: str) -> None:
        job = self.jobs.get(unit)
        if job is None:
            return
        logger.info("worker manager: cancelling unit %s (Slurm job %s)", unit, job)
        try:
            _run(["scancel", "--signal=TERM", "--full", job])
        except SlurmError as exc:
            logger.warning("worker manager: %s", exc)

    def states(self) -> dict[str, str]:
        """Job id -> state, of our jobs squeue still lists."""
        if not self.jobs:
            return {}
        out = _run(["squeue", "--noheader", "--format=%i|%T", f"--jobs={','.join(self.jobs.values())}"])
        states = {}
        for line in out.splitlines():
            job, _, state = line.strip().partition("|")
            if job:
                states[job] = state
        return states

    def ended(self) -> list[tuple[str, str]]:
        now = time.monotonic()
        if self.jobs and now - self._last_poll >= POLL_SECONDS:
            self._last_poll = now
            try:
                states = self.states()
            except SlurmError as exc:
                if "Invalid job id" not in str(exc):  # (all of them gone: squeue says so, as an error)
                    logger.warning("worker manager: %s", exc)
                    states = None
                else:
                    states = {}
            if states is not None:
                for unit, job in list(self.jobs.items()):
                    state = states.get(job)
                    if state is None or state in _DONE:
                        del self.jobs[unit]
                        self._ended.append((unit, f"Slurm job {job} {state.lower() if state else 'left the queue'}"))
        ended, self._ended = self._ended, []
        return ended

    def running(self) -> list[str]:
        return list(self.jobs)

    def close(self, timeout: float) -> None:
        for unit in list(self.jobs):
            self.stop(unit)
        deadline = time.monotonic() + timeout
        while self.jobs and time.monotonic() < deadline:
            self._last_poll = 0.0
            self.ended()
            if self.jobs:
                time.sleep(0.5)
        if self.jobs:
            logger.warning("worker manager: Slurm jobs %s still listed after %gs", sorted(self.jobs.values()), timeout)
        shutil.rmtree(self.folder, ignore_errors=True)  # the batch scripts (a job reads its own when it starts)
