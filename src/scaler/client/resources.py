"""ClusterResources: what Client.cluster_resources() returns, the size of the cluster as the scheduler states it to
this client (docs/guide/tasks.md, "cluster_resources")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClusterResources:
    """The workers that may take this client's tasks now (connected to the scheduler and not held back), and the
    most tasks the scheduler hands them at once (their queue capacities added up). One worker runs one task at a
    time: `workers` is the cluster's parallelism, what Ray's cluster_resources()["CPU"] and the sum of Dask's
    client.nthreads() tell."""

    workers: int
    queue_capacity: int
