"""Units as Kubernetes pods: one pod (restartPolicy Never) per unit, running scaler_cluster, made, listed and deleted
through the Kubernetes API with the official client (`pip install 'scaler[kubernetes]'`, imported here only).

The pod's manifest and the reading of a listed pod are plain functions of plain JSON data (`pod_manifest`,
`pod_ended`); the client's models are never used, so that its versions do not matter. Nothing here copies a secret
into a pod: with keys, the pods mount a Secret the user made (--keys-secret). An API error is logged with what to do
and reported as an ended unit; it never ends the manager.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import re
import time
from collections.abc import Callable
from typing import Any

from scaler.manager.units import WORKER_SECRET, worker_command
from scaler.security.keys import SCHEDULER_PUBLIC
from scaler.settings.manager import KubernetesManagerSettings

logger = logging.getLogger(__name__)

POLL_SECONDS = 2.0  # the pods are listed at most this often
REQUEST_TIMEOUT_SECONDS = 10.0  # one API call at most (the shell heartbeats between calls)
STOP_GRACE_SECONDS = 30  # a stopped pod's workers have this long after SIGTERM (Kubernetes' default)
KEYS_MOUNT = "/etc/scaler/keys"  # where a unit's workers find scheduler.key and worker.key_secret
KEYS_FS_GROUP = 10001  # the group the mounted key files are readable by (deploy/kubernetes/Dockerfile's user)
MANAGED_BY = "scaler-worker-manager"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
VERBS = "create, list and delete"  # what the manager does to pods (deploy/kubernetes/worker-manager.yaml's Role)
# a container waiting for one of these will not start by itself: the pod is given up at once
_HOPELESS = {"ErrImageNeverPull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError"}
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class KubernetesError(RuntimeError):
    """The cluster cannot be reached as configured (no kubeconfig, a context that does not exist...)."""


class ApiError(RuntimeError):
    """An API call that failed: `status` (0 when the API was not reached) and what to do, in `str()`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# ------------------------------------------------------------------------------------------------ names
def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def pod_name(unit: str) -> str:
    """`scaler-<unit>` as a DNS-1123 label (what a pod name must be for most tools): lowercase letters, digits and
    '-', at most 63 characters. A unit name that had to change gets a digest of itself, so two stay distinct."""
    name = f"scaler-{unit}"
    if _DNS_LABEL.fullmatch(name):
        return name
    safe = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:54].rstrip("-")
    return f"{safe}-{_digest(unit)}"


def label_value(text: str) -> str:
    """`text` as a label value (at most 63 of A-Z a-z 0-9 - _ ., alphanumeric at both ends); the exact text goes in
    an annotation. Changed text gets a digest of itself, so two stay distinct."""
    if _LABEL_VALUE.fullmatch(text):
        return text
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_.")[:54].strip("-_.")
    return f"{safe}-{_digest(text)}" if safe else _digest(text)


def selector(manager: str) -> str:
    """The label selector of one manager's pods."""
    return f"app.kubernetes.io/managed-by={MANAGED_BY},scaler.io/manager={label_value(manager)}"


# ------------------------------------------------------------------------------------------------ pods as data
def pod_manifest(
    settings: KubernetesManagerSettings,
    address: str,
    unit: str,
    manager: str,
    keyed: bool,
    owner: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The pod of one unit, as the API takes it (JSON data)."""
    s = settings
    keys = KEYS_MOUNT if keyed else None
    command = worker_command(s, address, unit, keys, s.worker_options, s.python)
    resources: dict[str, dict[str, str]] = {"requests": {"cpu": s.cpu or str(s.workers_per_unit)}}
    if s.cpu:
        resources["limits"] = {"cpu": s.cpu}
    if s.memory:
        resources["requests"]["memory"] = s.memory
        resources.setdefault("limits", {})["memory"] = s.memory
    container: dict[str, Any] = {
        "name": "workers",
        "image": s.image,
        "command": command,
        "resources": resources,
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
    }
    if s.image_pull_policy:
        container["imagePullPolicy"] = s.image_pull_policy
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": STOP_GRACE_SECONDS,
        "containers": [container],
    }
    if s.service_account:
        spec["serviceAccountName"] = s.service_account
    else:
        spec["automountServiceAccountToken"] = False
    if keyed:
        _mount_keys(spec, container, s.keys_secret)
    spec.update(json.loads(s.pod_spec) if s.pod_spec else {})
    metadata: dict[str, Any] = {
        "name": pod_name(unit),
        "labels": {
            "app.kubernetes.io/name": "scaler-worker",
            "app.kubernetes.io/managed-by": MANAGED_BY,
            "scaler.io/manager": label_value(manager),
            "scaler.io/unit": label_value(unit),
        },
        "annotations": {"scaler.io/manager": manager, "scaler.io/unit": unit, "scaler.io/scheduler": address},
    }
    if owner is not None:
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", **owner}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _mount_keys(spec: dict[str, Any], container: dict[str, Any], secret: str) -> None:
    """The Secret's two files, each mounted by itself (subPath) in KEYS_MOUNT: a Secret volume's own folder is
    writable by all (tmpfs, mode 1777 on common kubelets), which Scaler's key checks rightly refuse."""
    files = (SCHEDULER_PUBLIC, WORKER_SECRET)
    spec["volumes"] = [
        {
            "name": "scaler-keys",
            "secret": {
                "secretName": secret,
                "defaultMode": 0o440,
                "items": [{"key": name, "path": name} for name in files],
            },
        }
    ]
    spec["securityContext"] = {"fsGroup": KEYS_FS_GROUP}
    container["volumeMounts"] = [
        {"name": "scaler-keys", "mountPath": f"{KEYS_MOUNT}/{name}", "subPath": name, "readOnly": True}
        for name in files
    ]


def pod_ended(pod: dict[str, Any]) -> tuple[str, bool] | None:
    """Why a listed pod is over, and whether it is still there to delete (a container that cannot start); None while
    it runs or may still start."""
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    containers = status.get("containerStatuses") or []
    if phase in ("Succeeded", "Failed"):
        why = [f"pod {phase.lower()}"]
        if status.get("reason"):
            why.append(f"{status['reason']}: {status.get('message', '')}".rstrip(": "))
        for container in containers:
            done = (container.get("state") or {}).get("terminated")
            if done:
                why.append(f"exit code {done.get('exitCode')} ({done.get('reason') or 'no reason given'})")
        return ", ".join(why), False
    for container in containers:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in _HOPELESS:
            return f"its container cannot start: {waiting['reason']}: {waiting.get('message', '')}".rstrip(": "), True
    return None


def pod_pending(pod: dict[str, Any]) -> str:
    """Why a pod does not run yet, in a few words ("" when it does or nothing is said): Unschedulable, a pull..."""
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"{condition.get('reason', 'not scheduled')}: {condition.get('message', '')}".rstrip(": ")
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") not in (None, "ContainerCreating"):
            return f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(": ")
    return ""


def advice(status: int, doing: str, namespace: str, message: str) -> str:
    """What an API error means and what to do about it."""
    if status == 401:
        return f"{doing}: the Kubernetes API did not accept the manager's credentials ({message}): check --kubeconfig"
    if status == 403:
        return (
            f"{doing}: forbidden ({message}). The manager needs a Role that allows {VERBS} on pods in namespace "
            f"{namespace}, bound to its service account by a RoleBinding (deploy/kubernetes/worker-manager.yaml)"
        )
    if status == 404:
        return f"{doing}: not found ({message}): does namespace {namespace} exist? (--namespace)"
    if status == 409:
        return (
            f"{doing}: a pod of that name exists already ({message}): another manager of the same --name in namespace "
            f"{namespace}? Names must be unique per namespace"
        )
    if status == 422:
        return f"{doing}: the API refused the pod ({message}): check --image, --cpu, --memory and --pod-spec"
    return f"{doing}: HTTP {status}: {message}"


# ------------------------------------------------------------------------------------------------ the API
def _kubernetes() -> tuple[Any, Any]:
    """The client's `client` and `config` modules, untyped (some versions say they are typed, and are not)."""
    return importlib.import_module("kubernetes.client"), importlib.import_module("kubernetes.config")


class PodApi:
    """The few pod calls the manager makes, on plain JSON data; every failure is an ApiError saying what to do."""

    def __init__(self, settings: KubernetesManagerSettings) -> None:
        try:
            client, config = _kubernetes()
        except ImportError:
            raise KubernetesError(
                "the kubernetes type needs the Kubernetes client: pip install 'scaler[kubernetes]'"
            ) from None
        configuration = client.Configuration()
        in_cluster = not settings.kubeconfig and "KUBERNETES_SERVICE_HOST" in os.environ
        try:
            if in_cluster:
                config.load_incluster_config(client_configuration=configuration)
            else:
                config.load_kube_config(config_file=settings.kubeconfig or None, client_configuration=configuration)
        except (config.ConfigException, OSError, ValueError) as exc:
            where = settings.kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
            raise KubernetesError(f"cannot reach a Kubernetes cluster: {where}: {exc} (--kubeconfig)") from None
        self.host: str = configuration.host
        self.in_cluster = in_cluster
        self.namespace = settings.namespace or self._own_namespace(settings.kubeconfig)
        self._api: Any = client.CoreV1Api(client.ApiClient(configuration))
        self._exception: type[Exception] = client.exceptions.ApiException

    def _own_namespace(self, kubeconfig: str) -> str:
        if self.in_cluster:
            try:
                with open(os.path.join(SERVICE_ACCOUNT_DIR, "namespace"), encoding="utf-8") as file:
                    return file.read().strip() or "default"
            except OSError:
                return "default"
        _client, config = _kubernetes()
        try:
            _contexts, active = config.list_kube_config_contexts(kubeconfig or None)
        except (config.ConfigException, OSError, ValueError):
            return "default"
        return str((active or {}).get("context", {}).get("namespace") or "default")

    def _call(self, doing: str, call: Callable[..., Any], *args: Any, **options: Any) -> Any:
        try:
            response = call(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_SECONDS, **options)
            return json.loads(response.data or b"{}")
        except self._exception as exc:
            status = int(getattr(exc, "status", 0) or 0)
            raise ApiError(status, advice(status, doing, self.namespace, _api_message(exc))) from None
        except Exception as exc:  # (urllib3's, socket's: the API was not reached; the client wraps them variously)
            raise ApiError(
                0,
                f"{doing}: the Kubernetes API at {self.host} cannot be reached ({type(exc).__name__}: {exc}): is the "
                "cluster up, and --kubeconfig (or, in a pod, its service account) right?",
            ) from None

    def create(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        self._call(f"could not create pod {name}", self._api.create_namespaced_pod, self.namespace, pod)

    def list(self, label_selector: str) -> list[dict[str, Any]]:
        found = self._call(
            "could not list the manager's pods",
            self._api.list_namespaced_pod,
            self.namespace,
            **{"label_selector": label_selector},
        )
        return list(found.get("items") or [])

    def delete(self, name: str, grace_seconds: int) -> None:
        try:
            self._call(
                f"could not delete pod {name}",
                self._api.delete_namespaced_pod,
                name,
                self.namespace,
                grace_period_seconds=grace_seconds,
            )
        except ApiError as exc:
            if exc.status != 404:  # (gone already: what was wanted)
                raise


def _api_message(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    try:
        message = json.loads(body).get("message") if body else None
    except (ValueError, AttributeError):
        message = None
    return str(message or getattr(exc, "reason", "") or exc)


def _owner() -> dict[str, str] | None:
    """The manager's own pod, when the Deployment says it (downward API): its units' pods then go when it goes."""
    name, uid = os.environ.get("SCALER_MANAGER_POD_NAME"), os.environ.get("SCALER_MANAGER_POD_UID")
    return {"name": name, "uid": uid} if name and uid else None


# ------------------------------------------------------------------------------------------------ the units
class KubernetesUnits:
    kind = "kubernetes"

    def __init__(
        self, settings: KubernetesManagerSettings, address: str, keys: str | None, api: PodApi | None = None
    ) -> None:
        if keys is not None and not settings.keys_secret:
            raise KubernetesError(
                "with --keys, the pods' workers need keys too: give --keys-secret NAME, a Secret holding "
                f"{SCHEDULER_PUBLIC} and {WORKER_SECRET} (docs/deploying/kubernetes.md)"
            )
        if keys is None and settings.keys_secret:
            raise KubernetesError("--keys-secret without --keys: the scheduler has keys, or it has not (give both)")
        self.settings = settings
        self.address = address
        self.keyed = keys is not None
        self.manager = settings.name or self.kind
        self.api = api or PodApi(settings)
        self.selector = selector(self.manager)
        self.owner = _owner() if self.api.in_cluster else None
        self.pods: dict[str, str] = {}  # unit -> pod name
        self.stopping: set[str] = set()
        self.notes: dict[str, str] = {}  # unit -> why its pod does not run yet
        self._ended: list[tuple[str, str]] = []
        self._last_poll = 0.0
        self._last_warning = ""
        logger.info(
            "worker manager %s: pods in namespace %s of %s, image %s",
            self.manager,
            self.api.namespace,
            self.api.host,
            settings.image,
        )
        self._delete_leftovers()

    def _delete_leftovers(self) -> None:
        """Pods a previous run of this manager left (it was killed outright): their units are not the scheduler's."""
        try:
            left = [pod["metadata"]["name"] for pod in self.api.list(self.selector)]
            for name in left:
                self.api.delete(name, 0)
        except ApiError as exc:
            logger.error("worker manager %s: %s", self.manager, exc)
            return
        if left:
            logger.warning("worker manager %s: deleted %d pods a previous run left: %s", self.manager, len(left), left)

    def start(self, unit: str) -> None:
        if unit in self.pods:
            logger.warning("worker manager: unit %s is pod %s already; not started twice", unit, self.pods[unit])
            return
        pod = pod_manifest(self.settings, self.address, unit, self.manager, self.keyed, self.owner)
        try:
            self.api.create(pod)
        except ApiError as exc:
            logger.error("worker manager %s: %s", self.manager, exc)
            self._ended.append((unit, str(exc)))
            return
        self.pods[unit] = pod["metadata"]["name"]
        logger.info("worker manager: unit %s is pod %s", unit, self.pods[unit])

    def stop(self, unit: str, grace_seconds: int = STOP_GRACE_SECONDS) -> None:
        name = self.pods.get(unit)
        if name is None:
            return
        logger.info("worker manager: deleting unit %s (pod %s)", unit, name)
        try:
            self.api.delete(name, grace_seconds)
        except ApiError as exc:
            logger.error("worker manager %s: %s", self.manager, exc)
            return
        self.stopping.add(unit)

    def ended(self) -> list[tuple[str, str]]:
        now = time.monotonic()
        if self.pods and now - self._last_poll >= POLL_SECONDS:
            self._last_poll = now
            self._poll()
        ended, self._ended = self._ended, []
        return ended

    def _poll(self) -> None:
        try:
            listed = {pod["metadata"]["name"]: pod for pod in self.api.list(self.selector)}
        except ApiError as exc:
            if str(exc) != self._last_warning:  # (once, not every 2 s)
                logger.error("worker manager %s: %s", self.manager, exc)
            self._last_warning = str(exc)
            return
        self._last_warning = ""
        for unit, name in list(self.pods.items()):
            pod = listed.get(name)
            if pod is None:
                note = f" ({self.notes[unit]})" if unit in self.notes else ""
                self._end(unit, f"pod {name} {'deleted' if unit in self.stopping else 'is gone'}{note}")
                continue
            over = pod_ended(pod)
            if over is not None:
                why, delete = over
                if delete or why.startswith("pod succeeded"):  # (a failed pod stays, for kubectl logs / describe)
                    self._quietly_delete(name)
                self._end(unit, f"pod {name}: {why}")
                continue
            note = pod_pending(pod)
            if note and self.notes.get(unit) != note:
                logger.warning("worker manager: unit %s (pod %s) does not run yet: %s", unit, name, note)
            if note:
                self.notes[unit] = note

    def _end(self, unit: str, why: str) -> None:
        level = logging.INFO if unit in self.stopping else logging.WARNING
        logger.log(level, "worker manager: unit %s ended: %s", unit, why)
        del self.pods[unit]
        self.stopping.discard(unit)
        self.notes.pop(unit, None)
        self._ended.append((unit, why))

    def _quietly_delete(self, name: str) -> None:
        try:
            self.api.delete(name, 0)
        except ApiError as exc:
            logger.warning("worker manager %s: %s", self.manager, exc)

    def running(self) -> list[str]:
        return list(self.pods)

    def close(self, timeout: float) -> None:
        grace = max(1, int(timeout) - 1)
        for unit in list(self.pods):
            self.stop(unit, grace)
        deadline = time.monotonic() + timeout
        while self.pods and time.monotonic() < deadline:
            self._last_poll = 0.0
            self.ended()
            if self.pods:
                time.sleep(0.5)
        if self.pods:
            logger.warning(
                "worker manager: pods %s still listed after %gs: deleted at once", sorted(self.pods.values()), timeout
            )
            for name in self.pods.values():
                self._quietly_delete(name)
