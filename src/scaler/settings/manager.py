"""What a worker manager (scaler_worker_manager) is started with: the settings every type shares, then each type's
own (docs/deploying/autoscaling.md)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from scaler.settings.common import KEYS_HELP, KEYS_RULE, OPTIONAL_ADDRESS_RULE, ProcessSettings
from scaler.settings.model import Rule, any_text, number, setting, text, whole
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


_QUANTITY = re.compile(r"(\d+(\.\d+)?|\.\d+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")
_PULL_POLICIES = ("Always", "IfNotPresent", "Never")


def _quantity(value: str) -> bool:
    return value == "" or _QUANTITY.fullmatch(value) is not None


def _pod_spec(value: str, label: str) -> str:
    if value:
        try:
            spec = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"{label or 'the pod spec'}: not JSON ({exc})") from None
        if not isinstance(spec, dict):
            raise ValueError(f"{label or 'the pod spec'}: must be a JSON object, like '{{\"nodeSelector\": {{}}}}'")
    return value


@dataclass(frozen=True)
class KubernetesManagerSettings(ManagerSettings):
    """scaler_worker_manager kubernetes: each unit is a pod (restartPolicy Never) running scaler_cluster, made through
    the Kubernetes API (pip install 'scaler[kubernetes]')."""

    image: str = setting(
        "",
        metavar="IMAGE",
        help="the container image of the units' pods, with Scaler installed (required; deploy/kubernetes/Dockerfile)",
        rule=any_text(),
    )
    python: str = setting(
        "python", metavar="PATH", help="the Python in the image that runs scaler_cluster", rule=text()
    )
    namespace: str = setting(
        "",
        metavar="NAME",
        help="where the pods go (default: the manager's own namespace when it runs in a pod, else the kubeconfig "
        "context's, else default)",
        rule=any_text(),
    )
    kubeconfig: str = setting(
        "",
        metavar="PATH",
        help="the kubeconfig file to reach the cluster with (default: in a pod, its service account; else as kubectl: "
        "$KUBECONFIG or ~/.kube/config)",
        rule=any_text(),
    )
    image_pull_policy: str = setting(
        "",
        metavar="POLICY",
        help="the pods' imagePullPolicy: Always, IfNotPresent or Never (default: Kubernetes' own)",
        rule=Rule("Always, IfNotPresent or Never", (str,), lambda v: v in ("", *_PULL_POLICIES)),
    )
    service_account: str = setting(
        "",
        metavar="NAME",
        help="the pods' service account (default: none mounted: the workers need no access to the Kubernetes API)",
        rule=any_text(),
    )
    cpu: str = setting(
        "",
        metavar="QUANTITY",
        help="the CPU each pod requests and is limited to, e.g. 4 or 3500m (default: a request of one CPU per worker, "
        "no limit)",
        rule=Rule("a Kubernetes quantity such as 2 or 500m", (str,), _quantity),
    )
    memory: str = setting(
        "",
        metavar="QUANTITY",
        help="the memory each pod requests and is limited to, e.g. 8Gi (default: none asked for)",
        rule=Rule("a Kubernetes quantity such as 8Gi or 512Mi", (str,), _quantity),
    )
    keys_secret: str = setting(
        "",
        metavar="NAME",
        help="with --keys: the Secret in the namespace that holds scheduler.key and worker.key_secret, mounted "
        "read-only in each pod for its workers (docs/deploying/kubernetes.md)",
        rule=any_text(),
    )
    pod_spec: str = setting(
        "",
        metavar="JSON",
        help='more fields of each pod\'s spec, as a JSON object, e.g. \'{"nodeSelector": {"pool": "cpu"}}\' '
        "(they replace the manager's own fields of the same name)",
        rule=Rule("a JSON object", (str,), None, _pod_spec),
    )
    worker_options: str = setting(
        "", metavar="OPTIONS", help="more scaler_cluster options for each pod's workers, in one word", rule=any_text()
    )

    def problem(self) -> str | None:
        if not self.image:
            return "the kubernetes type needs --image: a container image with Scaler installed (deploy/kubernetes/)"
        return super().problem()
