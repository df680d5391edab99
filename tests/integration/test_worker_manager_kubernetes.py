"""scaler_worker_manager kubernetes against the stand-in API server (tests/kube_standin.py: a real HTTP server whose
"kubelet" runs each pod's command as a local process), beside a real scheduler and real clients. The manager is the
real command with the official client; only the cluster is a stand-in (no Kubernetes can run on this machine): no
pod while idle; work brings pods whose workers do it, once each; idle pods are deleted; SIGINT deletes every pod; a
403 is logged with what to do and retried after the scheduler's back-off; odd manager names make valid pod names."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from scaler import Client
from tests.helpers import mark_once, running_scheduler, stop_process, wait_until
from tests.kube_standin import KubeStandIn

pytestmark = pytest.mark.timeout(180)
pytest.importorskip("kubernetes")


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[KubeStandIn]:
    folder = tmp_path / "cluster"
    folder.mkdir()
    with KubeStandIn(folder) as cluster:
        yield cluster


@pytest.fixture
def scheduler() -> Iterator[str]:
    with running_scheduler() as address:
        yield address


def manager_command(standin: KubeStandIn, address: str, log: Path, *options: str) -> list[str]:
    command = [sys.executable, "-m", "scaler.entry_points.worker_manager", "kubernetes", "--image", "x"]
    command += ["--python", sys.executable, "--kubeconfig", str(standin.kubeconfig), "--logging-paths", str(log)]
    return [*command, *options, address]


def start_manager(standin: KubeStandIn, address: str, log: Path, *options: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(manager_command(standin, address, log, *options))


def text_of(log: Path) -> str:
    return log.read_text() if log.exists() else ""


def workers(standin: KubeStandIn) -> int:
    """Scaler workers running in the stand-in's pods (each pod runs scaler_cluster, which starts its workers)."""
    count = 0
    for process in standin.processes():
        try:
            count += len(psutil.Process(process.pid).children())
        except psutil.Error:
            continue
    return count


def test_work_brings_pods_that_are_deleted_when_idle(standin: KubeStandIn, scheduler: str, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    log = tmp_path / "manager.log"
    manager = start_manager(standin, scheduler, log, "--max-workers", "4", "--idle-seconds", "5")
    try:
        time.sleep(3)
        assert standin.created == [], "a pod was created while there was no work"
        with Client(scheduler, timeout_seconds=20) as client:
            start = time.monotonic()
            futures = [client.submit(mark_once, str(marks), i, 0.25) for i in range(400)]
            wait_until(lambda: workers(standin) >= 2, timeout=10, interval=0.1, what="two workers within 10 s")
            results = [f.result(timeout=max(1, 60 - (time.monotonic() - start))) for f in futures]
            took = time.monotonic() - start
        assert results == [i * 2 for i in range(400)]
        assert sorted(int(name) for name in os.listdir(marks)) == list(range(400))  # each ran, none twice
        assert took < 60
        ended = time.monotonic()
        wait_until(lambda: standin.pod_names() == [], timeout=30, interval=0.2, what="every pod deleted within 30 s")
        print(
            f"400 tasks in {took:.1f}s on {len(standin.created)} pods; none left {time.monotonic() - ended:.1f}s later"
        )
        text = log.read_text()
        assert "is pod scaler-kubernetes-" in text and "deleting unit" in text, text
        assert ("DELETE", f"/api/v1/namespaces/{standin.namespace}/pods/{standin.created[0]}") in standin.requests
        assert manager.poll() is None
    finally:
        stop_process(manager)


def test_sigint_deletes_every_pod(standin: KubeStandIn, scheduler: str, tmp_path: Path) -> None:
    log = tmp_path / "manager.log"
    manager = start_manager(standin, scheduler, log, "--min-workers", "2", "--max-workers", "2")
    try:
        wait_until(lambda: workers(standin) == 2, timeout=30, interval=0.1, what="the two workers kept")
        assert len(standin.pod_names()) == 2
        processes = standin.processes()
        manager.send_signal(signal.SIGINT)
        assert manager.wait(15) == 0
        assert standin.pod_names() == []
        assert all(process.poll() is not None for process in processes)
        assert "stopping its 2 units" in log.read_text()
    finally:
        stop_process(manager)


def test_a_forbidden_api_is_logged_with_what_to_do_and_retried_after_a_back_off(
    standin: KubeStandIn, scheduler: str, tmp_path: Path
) -> None:
    """The API answers 403 (no RBAC for pods): the manager logs what Role it needs and keeps serving; the scheduler
    counts the unit as a failed start and asks again after 5 s, 10 s..., not at every tick; once allowed, work runs."""
    standin.refuse = 403
    log = tmp_path / "manager.log"
    manager = start_manager(standin, scheduler, log, "--max-workers", "2")
    try:
        with Client(scheduler, timeout_seconds=20) as client:
            future = client.submit(pow, 2, 10)
            time.sleep(8)
            text = log.read_text()
            attempts = text.count("could not create pod")
            assert 1 <= attempts <= 3, text  # at 0 s and 5 s (one more on a slow machine), not ~30
            assert "forbidden" in text and "needs a Role that allows create, list and delete on pods" in text, text
            assert "RoleBinding" in text and "deploy/kubernetes/worker-manager.yaml" in text, text
            assert manager.poll() is None
            assert not future.done()
            standin.refuse = None
            assert future.result(timeout=60) == 1024
    finally:
        stop_process(manager)
    assert standin.created


def test_pods_that_cannot_start_are_given_up_and_said_why(standin: KubeStandIn, scheduler: str, tmp_path: Path) -> None:
    standin.waiting_reason = "ImagePullBackOff"
    log = tmp_path / "manager.log"
    manager = start_manager(standin, scheduler, log, "--max-workers", "1")
    try:
        with Client(scheduler, timeout_seconds=20) as client:
            future = client.submit(pow, 2, 10)
            wait_until(lambda: "cannot start: ImagePullBackOff" in text_of(log), timeout=20, what="the reason")
            wait_until(lambda: standin.pod_names() == [], timeout=10, what="the pod deleted")
            future.cancel()
        assert manager.poll() is None
    finally:
        stop_process(manager)


def test_an_odd_manager_name_makes_valid_pod_names(standin: KubeStandIn, scheduler: str, tmp_path: Path) -> None:
    log = tmp_path / "manager.log"
    name = "GPU_Pool.East/2"
    manager = start_manager(standin, scheduler, log, "--name", name, "--min-workers", "1", "--max-workers", "1")
    try:
        wait_until(lambda: workers(standin) == 1, timeout=30, interval=0.1, what="the worker kept")
        [pod] = standin.pod_names()
        assert re.fullmatch(r"scaler-gpu-pool-east-2-1-[0-9a-f]{8}", pod), pod
        [body] = [p.body for p in standin.running()]
        assert body["metadata"]["annotations"]["scaler.io/unit"] == f"{name}-1"
        assert body["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "scaler-worker-manager"
        manager.send_signal(signal.SIGINT)
        assert manager.wait(15) == 0
        assert standin.pod_names() == []
    finally:
        stop_process(manager)


def test_usage_errors_say_what_to_do(standin: KubeStandIn, tmp_path: Path) -> None:
    from scaler.security.keys import generate

    keys = tmp_path / "keys"
    generate(keys)
    for command, words in (
        ([sys.executable, "-m", "scaler.entry_points.worker_manager", "kubernetes", "tcp://127.0.0.1:1"], "--image"),
        (manager_command(standin, "tcp://127.0.0.1:1", tmp_path / "m.log", "--keys", str(keys)), "--keys-secret"),
        (manager_command(standin, "tcp://127.0.0.1:1", tmp_path / "m.log", "--cpu", "four"), "--cpu"),
        (
            manager_command(standin, "tcp://127.0.0.1:1", tmp_path / "m.log", "--kubeconfig", "/nonexistent"),
            "--kubeconfig",
        ),
    ):
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done
        assert words in done.stderr, done.stderr
    assert standin.created == []
