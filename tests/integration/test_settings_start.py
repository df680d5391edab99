"""A cluster started from settings objects (what a configuration file will give): SchedulerClusterCombo.from_settings
and Cluster.from_settings run real processes with the values the settings hold."""

from __future__ import annotations

import psutil

from scaler import Client, SchedulerClusterCombo
from scaler.cluster.cluster import Cluster
from scaler.settings.scheduler import SchedulerSettings
from scaler.settings.worker import ClusterSettings
from tests.helpers import combo_processes, wait_until

TIMEOUT = 20


def square(x: int) -> int:
    return x * x


def test_a_combo_from_settings_serves_with_their_values() -> None:
    scheduler = SchedulerSettings.from_mapping(
        {"max_task_retries": 1, "logging_level": "WARNING", "logging_paths": ["/dev/stderr"], "cpu": "none"}
    )
    workers = ClusterSettings.from_mapping(
        {"n_workers": 2, "heartbeat_interval_seconds": 0.5, "logging_level": "WARNING", "capabilities": ["gpu"]}
    )
    with SchedulerClusterCombo.from_settings(scheduler, workers) as combo:
        assert combo.address.startswith("tcp://127.0.0.1:")  # no address given: a free local port
        cluster = combo._cluster
        assert isinstance(cluster, Cluster) and cluster.settings.address == combo.address
        assert cluster._agent_config.offered == ("payload=python", "gpu")
        with Client(combo.address, timeout_seconds=TIMEOUT) as client:
            assert client.options(capabilities=["gpu"]).submit(square, 7).result(timeout=TIMEOUT) == 49
        processes = combo_processes(combo)
    wait_until(lambda: not any(_alive(p) for p in processes), timeout=TIMEOUT, what="every process to end")


def _alive(process: psutil.Process) -> bool:
    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False
