"""Client.cluster_resources on real processes: the scheduler tells its clients how many workers may take tasks (in
the welcome, then in the echo of every heartbeat), never through the monitor; refresh=True asks at once."""

from __future__ import annotations

import pytest

from scaler import Client, Cluster, SchedulerClusterCombo
from scaler.client.resources import ClusterResources
from scaler.errors import ClientClosedError
from tests.helpers import free_address, wait_until

pytestmark = pytest.mark.timeout(90)


def stop(cluster: Cluster) -> None:
    cluster.terminate()  # SIGTERM: its workers say goodbye to the scheduler
    cluster.join(15)
    if cluster.is_alive():
        cluster.kill()
        cluster.join(5)


def test_workers_joining_and_leaving_are_counted_with_their_queue_capacity() -> None:
    with (
        SchedulerClusterCombo(address=free_address(), n_workers=0, logging_level="WARNING") as combo,
        Client(combo.address, timeout_seconds=15, heartbeat_interval_seconds=0.5) as client,
    ):
        assert client.cluster_resources() == ClusterResources(workers=0, queue_capacity=0)  # said in the welcome
        cluster = Cluster(combo.address, n_workers=2, per_worker_queue_size=3, logging_level="WARNING")
        cluster.start()
        try:
            wait_until(lambda: client.cluster_resources(refresh=True) == ClusterResources(2, 6), timeout=30)
            with Client(combo.address, timeout_seconds=15) as later:  # a client connecting now: the welcome says
                assert later.cluster_resources() == ClusterResources(2, 6)
        finally:
            stop(cluster)
        # without asking: the answer to the client's own heartbeats (every 0.5 s here) says it too
        wait_until(lambda: client.cluster_resources() == ClusterResources(0, 0), timeout=30, what="no worker left")


def test_asking_needs_a_live_session_and_a_sensible_timeout(cluster: SchedulerClusterCombo) -> None:
    client = Client(cluster.address, timeout_seconds=15)
    assert client.cluster_resources(refresh=True, timeout=None).workers >= 0
    with pytest.raises(ValueError, match="timeout must be >= 0"):
        client.cluster_resources(refresh=True, timeout=-1)
    client.disconnect()
    with pytest.raises(ClientClosedError):
        client.cluster_resources()
