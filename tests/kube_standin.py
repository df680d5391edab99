"""A stand-in for a Kubernetes API server, for tests on a machine with no cluster: a real HTTP server (stdlib, a
thread, 127.0.0.1 on a free port) with a kubeconfig file pointing at it, serving the pod endpoints the worker manager
uses (create, list by label selector, get, delete, in a namespace) and the discovery endpoints kubectl reads before a
client-side dry run. Its "kubelet" really runs each created pod's container command as a local process (nothing
substituted: a test passes commands runnable here) and reports the pod's phase from it; delete sends SIGTERM to it,
then SIGKILL to what is left of its process group after the grace period, as a kubelet and a container runtime do.

To test the error paths: `refuse = 403` answers every pod request with that status (a Status body as the API's);
`waiting_reason = "ImagePullBackOff"` leaves new pods pending with their container waiting for that reason.
Only processes it started are ever signalled; close() kills what is left of them.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

_POD = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?$")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_GROUPS = {  # group/version -> (kind, plural name, namespaced) of what deploy/kubernetes/ holds
    "v1": [
        ("Pod", "pods", True),
        ("Service", "services", True),
        ("ServiceAccount", "serviceaccounts", True),
        ("Secret", "secrets", True),
        ("Namespace", "namespaces", False),
    ],
    "apps/v1": [("Deployment", "deployments", True)],
    "rbac.authorization.k8s.io/v1": [("Role", "roles", True), ("RoleBinding", "rolebindings", True)],
}


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Pod:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.process: subprocess.Popen[bytes] | None = None
        self.start_error = ""
        self.deleting = False
        self.kill_at: float | None = None
        self.exit_code: int | None = None

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    def status(self, waiting_reason: str | None) -> dict[str, Any]:
        container = self.body["spec"]["containers"][0]["name"]
        if self.start_error:
            state: dict[str, Any] = {
                "terminated": {"exitCode": 128, "reason": "StartError", "message": self.start_error}
            }
            return {"phase": "Failed", "containerStatuses": [{"name": container, "state": state}]}
        if self.process is None:
            waiting = {"reason": waiting_reason or "ContainerCreating", "message": "(the stand-in's kubelet)"}
            return {"phase": "Pending", "containerStatuses": [{"name": container, "state": {"waiting": waiting}}]}
        if self.exit_code is None:
            return {"phase": "Running", "containerStatuses": [{"name": container, "state": {"running": {}}}]}
        code = self.exit_code if self.exit_code >= 0 else 128 - self.exit_code  # (killed by a signal: 128 + it)
        terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}
        phase = "Succeeded" if code == 0 else "Failed"
        return {"phase": phase, "containerStatuses": [{"name": container, "state": {"terminated": terminated}}]}


class KubeStandIn:
    """Use as a context manager; `kubeconfig` is the file to give the manager (its context's namespace: `namespace`)."""

    def __init__(self, folder: Path, namespace: str = "scaler-test") -> None:
        self.folder = folder
        self.namespace = namespace
        self.pods: dict[tuple[str, str], Pod] = {}
        self.lock = threading.Lock()
        self.refuse: int | None = None
        self.waiting_reason: str | None = None
        self.requests: list[tuple[str, str]] = []
        self.created: list[str] = []  # every pod name ever created, in order
        self._stop = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.kubeconfig = folder / "kubeconfig"
        self.kubeconfig.write_text(
            json.dumps(  # (JSON is YAML)
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "standin", "cluster": {"server": self.url}}],
                    "users": [{"name": "standin", "user": {"token": "stand-in"}}],
                    "contexts": [
                        {
                            "name": "standin",
                            "context": {"cluster": "standin", "user": "standin", "namespace": namespace},
                        }
                    ],
                    "current-context": "standin",
                }
            )
        )
        self._threads = [
            threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True),
            threading.Thread(target=self._kubelet, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def __enter__(self) -> KubeStandIn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --------------------------------------------------------------------------------------------- what tests read
    def pod_names(self) -> list[str]:
        with self.lock:
            return sorted(name for _ns, name in self.pods)

    def running(self) -> list[Pod]:
        with self.lock:
            return [pod for pod in self.pods.values() if pod.process is not None and pod.exit_code is None]

    def processes(self) -> list[subprocess.Popen[bytes]]:
        with self.lock:
            return [pod.process for pod in self.pods.values() if pod.process is not None]

    # --------------------------------------------------------------------------------------------- the kubelet
    def _run(self, pod: Pod) -> None:
        container = pod.body["spec"]["containers"][0]
        command = [*container.get("command", []), *container.get("args", [])]
        env = dict(os.environ)
        env.update({item["name"]: item.get("value", "") for item in container.get("env", [])})
        log = open(self.folder / f"{pod.name}.log", "ab")
        try:
            pod.process = subprocess.Popen(
                command, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )
        except OSError as exc:
            pod.start_error = str(exc)
        finally:
            log.close()

    def _kubelet(self) -> None:
        while not self._stop.wait(0.05):
            with self.lock:
                for key, pod in list(self.pods.items()):
                    self._tend(key, pod)

    def _tend(self, key: tuple[str, str], pod: Pod) -> None:
        if pod.process is not None and pod.exit_code is None:
            code = pod.process.poll()
            if code is None:
                if pod.kill_at is not None and time.monotonic() >= pod.kill_at:
                    _kill_group(pod.process.pid, signal.SIGKILL)
                return
            pod.exit_code = code
            _kill_group(pod.process.pid, signal.SIGKILL)  # the container's other processes end with its first one
        if pod.deleting:
            del self.pods[key]

    def _delete(self, pod: Pod, grace: int) -> None:
        pod.deleting = True
        pod.body["metadata"]["deletionTimestamp"] = _now()
        pod.body["metadata"]["deletionGracePeriodSeconds"] = grace
        if pod.process is not None and pod.exit_code is None:
            if grace <= 0:
                _kill_group(pod.process.pid, signal.SIGKILL)
            else:
                pod.process.send_signal(signal.SIGTERM)
                pod.kill_at = min(pod.kill_at or float("inf"), time.monotonic() + grace)

    def close(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()
        with self.lock:
            processes = [pod.process for pod in self.pods.values() if pod.process is not None]
            self.pods.clear()
        for process in processes:
            if process.poll() is None:
                _kill_group(process.pid, signal.SIGKILL)
            process.wait(10)

    # --------------------------------------------------------------------------------------------- the API
    def serve(self, method: str, url: str, body: bytes) -> tuple[int, dict[str, Any]]:
        parsed = urlparse(url)
        query = {key: values[-1] for key, values in parse_qs(parsed.query).items()}
        path = parsed.path.rstrip("/")
        with self.lock:
            self.requests.append((method, path))
        discovery = _discovery(path)
        if discovery is not None and method == "GET":
            return 200, discovery
        match = _POD.match(path)
        if match is None:
            return _status(404, "NotFound", f"the stand-in serves no {path}")
        if self.refuse is not None:
            verb = {"GET": "list" if match.group(2) is None else "get", "POST": "create", "DELETE": "delete"}[method]
            return _status(
                self.refuse,
                "Forbidden",
                f'pods is forbidden: User "system:serviceaccount:{match.group(1)}:default" cannot {verb} resource '
                f'"pods" in API group "" in the namespace "{match.group(1)}"',
            )
        namespace, name = match.groups()
        with self.lock:
            if name is None and method == "GET":
                return 200, self._list(namespace, query.get("labelSelector", ""))
            if name is None and method == "POST":
                return self._create(namespace, json.loads(body or b"{}"))
            pod = self.pods.get((namespace, name or ""))
            if pod is None:
                return _status(404, "NotFound", f'pods "{name}" not found')
            if method == "DELETE":
                options = json.loads(body or b"{}")
                default = pod.body["spec"].get("terminationGracePeriodSeconds", 30)
                grace = int(query.get("gracePeriodSeconds", options.get("gracePeriodSeconds", default)))
                self._delete(pod, grace)
            return 200, self._view(pod)

    def _view(self, pod: Pod) -> dict[str, Any]:
        return {**pod.body, "status": pod.status(self.waiting_reason)}

    def _list(self, namespace: str, label_selector: str) -> dict[str, Any]:
        wanted = dict(term.split("=", 1) for term in label_selector.split(",") if term)
        items = []
        for (ns, _name), pod in sorted(self.pods.items()):
            labels = pod.body["metadata"].get("labels") or {}
            if ns == namespace and all(labels.get(key) == value for key, value in wanted.items()):
                items.append(self._view(pod))
        return {"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": items}

    def _create(self, namespace: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        metadata = body.get("metadata") or {}
        name = str(metadata.get("name", ""))
        problems = [] if _SUBDOMAIN.fullmatch(name) else [f"metadata.name: Invalid value: {name!r}"]
        for key, value in (metadata.get("labels") or {}).items():
            if not _LABEL_VALUE.fullmatch(str(value)):
                problems.append(f"metadata.labels: Invalid value: {value!r} (label {key})")
        containers = (body.get("spec") or {}).get("containers") or []
        if not containers or not all(c.get("image") and c.get("name") for c in containers):
            problems.append("spec.containers: Required value: a name and an image each")
        if problems:
            return _status(422, "Invalid", f'Pod "{name}" is invalid: {"; ".join(problems)}')
        if (namespace, name) in self.pods:
            return _status(409, "AlreadyExists", f'pods "{name}" already exists')
        metadata.update(namespace=namespace, uid=f"uid-{len(self.created)}", creationTimestamp=_now())
        pod = Pod(body)
        self.pods[(namespace, name)] = pod
        self.created.append(name)
        if self.waiting_reason is None:
            self._run(pod)
        return 201, self._view(pod)


def _kill_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _status(code: int, reason: str, message: str) -> tuple[int, dict[str, Any]]:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message}
    return code, {**body, "reason": reason, "code": code}


def _discovery(path: str) -> dict[str, Any] | None:
    """What kubectl asks before it maps a manifest's kinds to URLs (the legacy, unaggregated discovery documents)."""
    if path == "/version":
        return {"major": "1", "minor": "32", "gitVersion": "v1.32.0-standin"}
    if path == "/api":
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    if path == "/apis":
        groups = []
        for group_version in _GROUPS:
            if "/" in group_version:
                group, version = group_version.split("/")
                entry = {"groupVersion": group_version, "version": version}
                groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
    group_version = path.removeprefix("/api/").removeprefix("/apis/")
    if path.startswith(("/api/", "/apis/")) and group_version in _GROUPS:
        resources = [
            {"name": plural, "singularName": kind.lower(), "namespaced": namespaced, "kind": kind, "verbs": _VERBS}
            for kind, plural, namespaced in _GROUPS[group_version]
        ]
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}
    return None


_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


def _handler(standin: KubeStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            code, answer = standin.serve(self.command, self.path, body)
            data = json.dumps(answer).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _answer

        def log_message(self, format: str, *args: Any) -> None:  # (quiet: the requests are kept in `requests`)
            pass

    return Handler
