"""A private one-node Slurm cluster for the tests: Debian's munge and slurm-wlm (scripts/slurm-setup installs them),
started from a folder of its own with its own munge key and socket, its own slurm.conf on free ports, and stopped
again. Nothing of the machine's own Slurm or munge configuration is read or changed: commands find this cluster only
through SLURM_CONF, as every Slurm command finds its cluster.

    with one_node_slurm() as slurm:
        subprocess.run(["sbatch", ...], env=slurm.env)

The daemons run in the foreground (munged -F, slurmctld -D, slurmd -D) as children of the test process, so they are
stopped by pid. Jobs run under slurmstepd, which detaches from slurmd: on the way out every job is cancelled and
waited for first, and what `scontrol listpids` still lists is killed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import psutil

from tests.helpers import free_port

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scancel", "sinfo", "scontrol")
NODE = "scalernode"
PARTITION = "scaler"
NODE_CPUS = 4  # more than this machine may have (SlurmdParameters=config_overrides): four one-CPU jobs at once


def missing() -> list[str]:
    """The Slurm and munge programs this machine lacks (scripts/slurm-setup installs them)."""
    found = [shutil.which(name) or (shutil.which(name, path="/usr/sbin:/sbin") or "") for name in (*DAEMONS, *CLIENTS)]
    return [name for name, path in zip((*DAEMONS, *CLIENTS), found) if not path]


def _program(name: str) -> str:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin") or name


@dataclass
class Slurm:
    folder: str
    env: dict[str, str]
    daemons: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def run(self, *command: str, timeout: float = 30) -> str:
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=timeout, check=True)
        return done.stdout

    def jobs(self) -> list[tuple[str, str, str]]:
        """(job id, name, state) of every job the cluster still lists."""
        out = self.run("squeue", "--noheader", "--format=%i|%j|%T")
        return [tuple(line.split("|", 2)) for line in out.splitlines() if line.strip()]  # type: ignore[misc]

    def log(self, name: str) -> str:
        try:
            with open(os.path.join(self.folder, "log", f"{name}.log"), encoding="utf-8", errors="replace") as file:
                return file.read()
        except OSError:
            return ""


def _config(folder: str, host: str) -> str:
    run, log = os.path.join(folder, "run"), os.path.join(folder, "log")
    return "\n".join(
        [
            f"ClusterName=scaler{os.getpid()}",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            "SlurmUser=root" if os.getuid() == 0 else f"SlurmUser={psutil.Process().username()}",
            "AuthType=auth/munge",
            f"AuthInfo=socket={run}/munge.sock",
            "CredType=cred/munge",
            f"StateSaveLocation={folder}/state",
            f"SlurmdSpoolDir={folder}/spool",
            f"SlurmctldPidFile={run}/slurmctld.pid",
            f"SlurmdPidFile={run}/slurmd.pid",
            f"SlurmctldLogFile={log}/slurmctld.log",
            f"SlurmdLogFile={log}/slurmd.log",
            "SlurmdParameters=config_overrides",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "ReturnToService=2",
            "InactiveLimit=0",
            "KillWait=5",
            "MinJobAge=5",
            f"NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={NODE_CPUS} State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


def _wait_for(slurm: Slurm, ready: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        for name, process in slurm.daemons.items():
            if process.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with code {process.returncode} while starting the test's Slurm cluster:\n"
                    f"{slurm.log(name)[-3000:]}"
                )
        try:
            if ready():
                return
        except (subprocess.SubprocessError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the test's Slurm cluster: no {what} within {timeout}s\n"
                f"slurmctld: {slurm.log('slurmctld')[-2000:]}\nslurmd: {slurm.log('slurmd')[-2000:]}"
            )
        time.sleep(0.1)


@contextmanager
def one_node_slurm(timeout: float = 30) -> Iterator[Slurm]:
    # munged wants its socket's folder and every folder above it open to all (o+x): not pytest's private tmp_path
    folder = tempfile.mkdtemp(prefix="scaler-slurm-test-")
    os.chmod(folder, 0o755)
    for sub, mode in (("munge", 0o700), ("run", 0o755), ("log", 0o755), ("state", 0o700), ("spool", 0o755)):
        os.mkdir(os.path.join(folder, sub), mode)
    host = socket.gethostname().split(".")[0]
    conf = os.path.join(folder, "slurm.conf")
    with open(conf, "w", encoding="utf-8") as file:
        file.write(_config(folder, host))
    # (a test run inside a Slurm job must not reach that job's cluster)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SQUEUE_"))}
    env["SLURM_CONF"] = conf
    slurm = Slurm(folder, env)
    munge = os.path.join(folder, "munge")
    try:
        subprocess.run([_program("mungekey"), "-c", "-k", f"{munge}/munge.key"], check=True, capture_output=True)
        slurm.daemons["munged"] = subprocess.Popen(
            [
                _program("munged"),
                "-F",
                f"--key-file={munge}/munge.key",
                f"--socket={folder}/run/munge.sock",
                f"--pid-file={folder}/run/munged.pid",
                f"--log-file={folder}/log/munged.log",
                f"--seed-file={munge}/seed",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_for(slurm, lambda: os.path.exists(f"{folder}/run/munge.sock"), "munge socket", timeout)
        with open(os.path.join(folder, "log", "daemons.out"), "wb") as log:  # (the children keep their copy)
            slurm.daemons["slurmctld"] = subprocess.Popen(
                [_program("slurmctld"), "-D", "-c", "-f", conf], env=env, stdout=log, stderr=log
            )
            slurm.daemons["slurmd"] = subprocess.Popen(
                [_program("slurmd"), "-D", "-N", NODE, "-f", conf], env=env, stdout=log, stderr=log
            )
        _wait_for(
            slurm, lambda: slurm.run("sinfo", "--noheader", "--format=%T").strip() == "idle", "idle node", timeout
        )
        yield slurm
    finally:
        _stop(slurm)
        shutil.rmtree(folder, ignore_errors=True)


def _stop(slurm: Slurm) -> None:
    """Cancel every job and wait for it, kill what is left of the jobs, then stop the daemons (slurmd, slurmctld,
    munged) by pid."""
    alive = {name: p for name, p in slurm.daemons.items() if p.poll() is None}
    if "slurmctld" in alive and "slurmd" in alive:
        try:
            slurm.run("scancel", f"--partition={PARTITION}")
            deadline = time.monotonic() + 20
            while slurm.jobs() and time.monotonic() < deadline:
                time.sleep(0.2)
        except (subprocess.SubprocessError, OSError):
            pass
    if "slurmd" in alive:
        try:
            out = slurm.run("scontrol", "listpids", timeout=10)
            pids = [int(line.split()[0]) for line in out.splitlines()[1:] if line.split() and line.split()[0].isdigit()]
        except (subprocess.SubprocessError, OSError):
            pids = []
        for pid in pids:
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass
    for name in ("slurmd", "slurmctld", "munged"):
        process = slurm.daemons.get(name)
        if process is None or process.poll() is not None:
            continue
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
