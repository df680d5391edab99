"""What a worker manager (scaler_worker_manager) is started with: the settings every type shares, then each type's
own (docs/deploying.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from scaler.settings.common import KEYS_HELP, KEYS_RULE, OPTIONAL_ADDRESS_RULE, ProcessSettings
from scaler.settings.model import Rule, any_text, number, setting, whole
from scaler.settings.worker import _capabilities


@dataclass(frozen=True)
class ManagerSettings(ProcessSettings):
    """The settings of every worker manager type."""

    address: str | None = setting(
        None, positional=True, help="the scheduler's address, e.g. tcp://127.0.0.1:8516", rule=OPTIONAL_ADDRESS_RULE
    )
    name: str = setting(
        "",
        metavar="NAME",
        help="the manager's name, unique per scheduler; its units are named NAME-<n> (default: the type, as local)",
        rule=any_text(),
    )
    min_workers: int = setting(0, help="workers kept running even when there is no work", rule=whole(0))
    max_workers: int = setting(4, help="most workers this manager runs at once", rule=whole(1))
    workers_per_unit: int = setting(
        1,
        help="workers one unit brings (a Slurm job, a pod, a local process group); units start and stop whole",
        rule=whole(1),
    )
    idle_seconds: float = setting(
        60.0, help="a unit whose workers held no task this long is drained, then stopped", rule=number(at_least=0)
    )
    start_timeout_seconds: float = setting(
        600.0,
        help="a unit whose workers have not connected this long after it was asked for is given up (stopped)",
        rule=number(above=0),
    )
    tier: int = setting(
        0, help="managers of lower tiers are filled first and retired last (e.g. local 0, cloud 1)", rule=whole(0)
    )
    keys: str | bool | None = setting(
        None,
        flags=("--keys", "-k"),
        metavar="DIR",
        help=KEYS_HELP
        + "; the manager reads scheduler.key and manager.key_secret there, its workers worker.key_secret",
        rule=KEYS_RULE,
    )
    capabilities: tuple[str, ...] = setting(
        (),
        flags=("--capability",),
        metavar="CAPABILITY",
        help="a capability its workers offer (as scaler_cluster --capability); repeat for several. The scheduler asks "
        "a manager whose workers offer capabilities only for tasks that require one of them",
        rule=Rule("a list of capabilities", (tuple, str), None, _capabilities, many="append"),
    )
    heartbeat_interval_seconds: float = setting(
        1.0,
        flags=("--heartbeat-interval-seconds", "-hi"),
        help="how often it reports to the scheduler",
        rule=number(above=0),
    )

    @property
    def min_units(self) -> int:
        return math.ceil(self.min_workers / self.workers_per_unit)

    @property
    def max_units(self) -> int:
        return max(1, self.max_workers // self.workers_per_unit)

    def problem(self) -> str | None:
        if self.min_workers > self.max_workers:
            return f"--min-workers {self.min_workers} is more than --max-workers {self.max_workers}"
        if self.workers_per_unit > self.max_workers:
            return f"--workers-per-unit {self.workers_per_unit} is more than --max-workers {self.max_workers}"
        return None


@dataclass(frozen=True)
class LocalManagerSettings(ManagerSettings):
    """scaler_worker_manager local: each unit is a scaler_cluster process on this machine."""

    worker_options: str = setting(
        "",
        metavar="OPTIONS",
        help='more scaler_cluster options for each unit, in one word, e.g. "--per-worker-queue-size 4"',
        rule=any_text(),
    )


@dataclass(frozen=True)
class SlurmManagerSettings(ManagerSettings):
    """scaler_worker_manager slurm: each unit is a Slurm job (sbatch) running scaler_cluster."""

    partition: str = setting("", metavar="NAME", help="sbatch --partition (default: Slurm's default)", rule=any_text())
    account: str = setting("", metavar="NAME", help="sbatch --account", rule=any_text())
    time_limit: str = setting(
        "", metavar="TIME", help="sbatch --time, e.g. 1:00:00 (default: the partition's)", rule=any_text()
    )
    sbatch_options: str = setting(
        "", metavar="OPTIONS", help='more sbatch options, in one word, e.g. "--mem=8G --qos=low"', rule=any_text()
    )
    worker_options: str = setting(
        "", metavar="OPTIONS", help="more scaler_cluster options for each job's workers, in one word", rule=any_text()
    )
    python: str = setting(
        "",
        metavar="PATH",
        help="the Python that runs scaler_cluster on the compute nodes (default: this one, which must be on them)",
        rule=any_text(),
    )
    log_directory: str = setting(
        "", metavar="DIR", help="where each job writes its output, as slurm-<unit>.out (default: /tmp)", rule=any_text()
    )
