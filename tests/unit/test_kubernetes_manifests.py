"""deploy/kubernetes/ and the pods scaler_worker_manager kubernetes makes, checked without a cluster: every manifest
and pod deserializes into the official client's models and back unchanged (a misspelt or misplaced field is lost on
the way, a wrong type refused); every command line parses with our own CLIs' parsers; the Secrets the manifests mount
are the ones 00-namespace.yaml tells the user to make, with the files they mount; kubectl's client-side dry run
accepts the files (against the stand-in API server's discovery: kubectl needs a server for it)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from scaler.entry_points.logging_options import take_address_out_of_paths
from scaler.manager.kubernetes import (
    KEYS_MOUNT,
    advice,
    label_value,
    pod_ended,
    pod_manifest,
    pod_name,
    pod_pending,
    selector,
)
from scaler.settings.cli import settings_from
from scaler.settings.manager import KubernetesManagerSettings
from tests.kube_standin import KubeStandIn

pytestmark = pytest.mark.timeout(120)

kubernetes_client = pytest.importorskip("kubernetes.client")

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


def documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document is not None:
                found.append((path.name, document))
    return found


def round_trip(kind: str, data: dict[str, Any]) -> Any:
    """`data` as the client's model of `kind` (V1Deployment...); the model serialized again must equal `data`."""
    model = getattr(kubernetes_client, f"V1{kind}").from_dict(data)
    again = kubernetes_client.ApiClient().sanitize_for_serialization(model)
    assert again == data, f"{kind} {data.get('metadata', {}).get('name')}: lost or changed on the way: {again}"
    return model


def containers() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{name}: {doc['metadata']['name']}", container)
        for name, doc in documents()
        if doc["kind"] == "Deployment"
        for container in doc["spec"]["template"]["spec"]["containers"]
    ]


def test_every_manifest_is_a_valid_object_of_the_client_s_models() -> None:
    kinds = [doc["kind"] for _name, doc in documents()]
    assert sorted(kinds) == sorted(
        ["Namespace", "ServiceAccount", "Role", "RoleBinding", *["Deployment"] * 3, *["Service"] * 2]
    )
    for _name, doc in documents():
        assert doc["apiVersion"] in ("v1", "apps/v1", "rbac.authorization.k8s.io/v1")
        round_trip(doc["kind"], doc)
    for path in DEPLOY.iterdir():
        assert path.read_text().startswith("#"), f"{path.name} does not say what it is at the top"


def parse(command: list[str]) -> Any:
    """The settings (or arguments) our own CLI makes of a manifest's command line; a usage error fails the test."""
    program, words = command[0], command[1:]
    try:
        if program == "scaler_scheduler":
            from scaler.entry_points.scheduler import parser as scheduler_parser
            from scaler.settings.scheduler import SchedulerSettings

            p = scheduler_parser()
            return settings_from(p, SchedulerSettings, p.parse_args(take_address_out_of_paths(words)))
        if program == "scaler_ui":
            from scaler.monitor.access import checked_allowed
            from scaler.monitor.ui import parser as ui_parser

            p = ui_parser()
            args = p.parse_args(words)
            checked_allowed(p, args.allow_host or [])
            return args
        if program == "scaler_worker_manager":
            from scaler.entry_points.worker_manager import TYPES
            from scaler.entry_points.worker_manager import parser as manager_parser

            p, subs = manager_parser()
            args = p.parse_args([words[0], *take_address_out_of_paths(words[1:])])
            values = {k: v for k, v in vars(args).items() if k != "type"}
            import argparse

            settings = settings_from(subs[args.type], TYPES[args.type][0], argparse.Namespace(**values))
            assert settings.problem() is None, settings.problem()
            return settings
        if command[1:3] == ["-m", "scaler.entry_points.cluster"]:
            from scaler.entry_points.cluster import parser as cluster_parser
            from scaler.settings.worker import ClusterSettings

            p = cluster_parser()
            return settings_from(p, ClusterSettings, p.parse_args(take_address_out_of_paths(command[3:])))
    except SystemExit as exc:
        raise AssertionError(f"{shlex.join(command)}: a usage error (exit {exc.code})") from None
    raise AssertionError(f"no parser for {command[0]}")


def test_every_command_line_parses_with_our_own_parsers() -> None:
    programs = {}
    for where, container in containers():
        command = [*container["command"], *container.get("args", [])]
        programs[command[0]] = parse(command)
        assert container["image"] == "scaler:latest", where  # (the one name the docs say to replace)
    assert sorted(programs) == ["scaler_scheduler", "scaler_ui", "scaler_worker_manager"]
    scheduler, ui, manager = programs["scaler_scheduler"], programs["scaler_ui"], programs["scaler_worker_manager"]
    assert scheduler.address == "tcp://0.0.0.0:8516" and scheduler.monitor_address == "tcp://0.0.0.0:8517"
    assert ui.monitor_address == "tcp://scaler-scheduler:8517"
    assert isinstance(manager, KubernetesManagerSettings)
    assert manager.address == "tcp://scaler-scheduler:8516" and manager.keys_secret == "scaler-worker-keys"


def test_the_services_serve_the_ports_the_commands_use() -> None:
    services = {doc["metadata"]["name"]: doc for _name, doc in documents() if doc["kind"] == "Service"}
    ports = {name: {p["port"]: p["targetPort"] for p in doc["spec"]["ports"]} for name, doc in services.items()}
    assert ports == {"scaler-scheduler": {8516: "scheduler", 8517: "monitor"}, "scaler-ui": {8081: "http"}}
    named = {
        port["name"]: port["containerPort"] for _where, c in containers() for port in c.get("ports", [])
    }  # (one container per Service here)
    assert named == {"scheduler": 8516, "monitor": 8517, "http": 8081}


def documented_secrets() -> dict[str, set[str]]:
    """The Secrets 00-namespace.yaml tells the user to make: name -> the keys in it."""
    text = (DEPLOY / "00-namespace.yaml").read_text()
    lines = " ".join(line.lstrip("# ").rstrip("\\ ") for line in text.splitlines() if line.startswith("#"))
    secrets = {}
    for name, options in re.findall(r"create secret generic (\S+) ((?:--from-file=\S+\s*)+)", lines):
        keys = set()
        for source in re.findall(r"--from-file=(\S+)", options):
            keys.add(source.split("=")[0] if "=" in source else source.rsplit("/", 1)[-1])
        secrets[name] = keys
    return secrets


def test_the_keys_mounted_are_in_the_secrets_the_user_is_told_to_make() -> None:
    secrets = documented_secrets()
    assert set(secrets) == {"scaler-scheduler-keys", "scaler-manager-keys", "scaler-worker-keys", "scaler-monitor-keys"}
    assert secrets["scaler-worker-keys"] == {"scheduler.key", "worker.key_secret"}
    assert secrets["scaler-manager-keys"] == {"scheduler.key", "manager.key_secret"}  # no worker's secret
    for _name, doc in documents():
        if doc["kind"] != "Deployment":
            continue
        spec = doc["spec"]["template"]["spec"]
        volumes = {v["name"]: v["secret"]["secretName"] for v in spec.get("volumes", [])}
        for container in spec["containers"]:
            command = container["command"]
            keys = command[command.index("--keys") + 1]
            for mount in container.get("volumeMounts", []):
                assert mount["readOnly"] is True
                assert mount["subPath"] in secrets[volumes[mount["name"]]], mount
                assert mount["mountPath"].startswith(keys + "/") and mount["mountPath"].endswith(mount["subPath"])
    # the Role allows what the manager does to pods (kubernetes.VERBS), nothing more
    [role] = [doc for _name, doc in documents() if doc["kind"] == "Role"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "list", "delete"]}]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl here")
def test_kubectl_client_side_dry_run_accepts_every_file(tmp_path: Path) -> None:
    """kubectl needs a server even for --dry-run=client (API discovery, to map kinds to resources): the stand-in
    serves it. Its schema validation needs the server's OpenAPI document, which the stand-in does not have
    (--validate=false): the client's models above check the schema instead."""
    with KubeStandIn(tmp_path) as standin:
        command = ["kubectl", "--kubeconfig", str(standin.kubeconfig), "apply", "--dry-run=client", "--validate=false"]
        done = subprocess.run(
            [*command, "-f", str(DEPLOY)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    created = sorted(line.split(" ")[0] for line in done.stdout.splitlines())
    assert len(created) == len(documents()), done.stdout
    assert all(line.endswith("created (dry run)") for line in done.stdout.splitlines()), done.stdout
    assert "role.rbac.authorization.k8s.io/scaler-worker-manager" in created


# ---------------------------------------------------------------------------------------------- the units' pods
def settings(**values: Any) -> KubernetesManagerSettings:
    return KubernetesManagerSettings(address="tcp://scaler-scheduler:8516", image="registry/scaler:1", **values)


def test_a_unit_s_pod_is_a_valid_pod_running_the_unit_s_workers() -> None:
    pod = pod_manifest(settings(workers_per_unit=4, memory="8Gi"), "tcp://s:8516", "kubernetes-3", "kubernetes", False)
    model = round_trip("Pod", pod)
    assert model.spec.restart_policy == "Never"
    [container] = pod["spec"]["containers"]
    assert container["image"] == "registry/scaler:1"
    assert container["command"][:3] == ["python", "-m", "scaler.entry_points.cluster"]
    cluster = parse(container["command"])
    assert cluster.n_workers == 4
    assert cluster.unit == "kubernetes-3" and cluster.address == "tcp://s:8516"
    assert container["resources"] == {"requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"memory": "8Gi"}}
    assert pod["spec"]["automountServiceAccountToken"] is False  # (the workers need no API access)
    assert pod["metadata"]["labels"]["scaler.io/unit"] == "kubernetes-3"
    assert "volumes" not in pod["spec"]


def test_with_keys_a_pod_mounts_the_secret_and_its_workers_use_it() -> None:
    pod = pod_manifest(settings(keys_secret="scaler-worker-keys", cpu="2"), "tcp://s:8516", "k-1", "k", True)
    round_trip("Pod", pod)
    [container] = pod["spec"]["containers"]
    command = container["command"]
    assert command[command.index("--keys") + 1] == KEYS_MOUNT
    assert pod["spec"]["volumes"][0]["secret"]["secretName"] == "scaler-worker-keys"
    assert {m["subPath"] for m in container["volumeMounts"]} == {"scheduler.key", "worker.key_secret"}
    assert all(m["readOnly"] for m in container["volumeMounts"])
    assert container["resources"] == {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}


def test_pod_spec_options_and_owner() -> None:
    s = settings(pod_spec='{"nodeSelector": {"pool": "cpu"}}', service_account="sa", image_pull_policy="Always")
    pod = pod_manifest(s, "tcp://s:8516", "k-1", "k", False, {"name": "manager-abc", "uid": "u-1"})
    round_trip("Pod", pod)
    assert pod["spec"]["nodeSelector"] == {"pool": "cpu"} and pod["spec"]["serviceAccountName"] == "sa"
    assert pod["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "manager-abc", "uid": "u-1"}
    ]
    with pytest.raises(ValueError, match="JSON object"):
        settings(pod_spec="[1]")
    with pytest.raises(ValueError, match="quantity"):
        settings(cpu="four")


def test_pod_names_and_labels_are_what_kubernetes_takes_and_stay_distinct() -> None:
    assert pod_name("kubernetes-1") == "scaler-kubernetes-1"
    assert label_value("kubernetes-1") == "kubernetes-1"
    odd = ["GPU_Pool.East/2-1", "gpu-pool-east-2-1", "Gpu Pool East 2-1", "x" * 80 + "-1", "x" * 80 + "-2", "é-1"]
    names = [pod_name(unit) for unit in odd]
    labels = [label_value(unit) for unit in odd]
    assert all(DNS_LABEL.fullmatch(name) for name in names), names
    assert all(LABEL_VALUE.fullmatch(label) for label in labels), labels
    assert len(set(names)) == len(odd) and len(set(labels)) == len(odd)
    assert all(LABEL_VALUE.fullmatch(part.split("=")[1]) for part in selector("GPU_Pool.East/2").split(","))


def test_an_ended_pod_says_why() -> None:
    failed = {
        "status": {
            "phase": "Failed",
            "reason": "Evicted",
            "message": "low on memory",
            "containerStatuses": [{"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}],
        }
    }
    assert pod_ended(failed) == ("pod failed, Evicted: low on memory, exit code 137 (OOMKilled)", False)
    pulling = {
        "status": {"phase": "Pending", "containerStatuses": [{"state": {"waiting": {"reason": "ImagePullBackOff"}}}]}
    }
    assert pod_ended(pulling) == ("its container cannot start: ImagePullBackOff", True)
    assert pod_ended({"status": {"phase": "Running"}}) is None
    unschedulable = {
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes: cpu"}
            ],
        }
    }
    assert pod_ended(unschedulable) is None  # (a cluster autoscaler may yet add a node: --start-timeout-seconds)
    assert pod_pending(unschedulable) == "Unschedulable: 0/3 nodes: cpu"


def test_api_errors_say_what_to_do() -> None:
    text = advice(403, "could not create pod scaler-k-1", "scaler", "pods is forbidden")
    assert "Role" in text and "create, list and delete" in text and "RoleBinding" in text and "scaler" in text
    assert "--namespace" in advice(404, "could not create pod x", "nope", "namespaces not found")
    assert "unique" in advice(409, "could not create pod x", "ns", "exists")


def test_kubernetes_is_imported_only_by_the_kubernetes_type() -> None:
    code = (
        "import sys, scaler.entry_points.worker_manager, scaler.manager.kubernetes; print('kubernetes' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"
