"""Scaler: an efficient, lightweight and reliable distributed computation engine.

from scaler import Client, SchedulerClusterCombo, Serializer
from scaler import Cluster, Scheduler  # scaler 1.9.9's process classes, kept for programs written for it

Names are loaded on first use: a program that only needs a Client never loads the scheduler's or the workers' code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scaler.about import __version__
from scaler.lazy import lazy_names

if TYPE_CHECKING:
    from scaler.client.client import Client
    from scaler.client.future import ProfilingInfo, ScalerFuture
    from scaler.client.object_reference import ObjectReference
    from scaler.client.progress import progress
    from scaler.cluster.cluster import Cluster
    from scaler.cluster.combo import SchedulerClusterCombo
    from scaler.cluster.scheduler import Scheduler
    from scaler.errors import MissingCapabilityError
    from scaler.serializer import Serializer

_WHERE = {
    "Client": "scaler.client.client",
    "Cluster": "scaler.cluster.cluster",
    "MissingCapabilityError": "scaler.errors",
    "ObjectReference": "scaler.client.object_reference",
    "ProfilingInfo": "scaler.client.future",
    "ScalerFuture": "scaler.client.future",
    "Scheduler": "scaler.cluster.scheduler",
    "SchedulerClusterCombo": "scaler.cluster.combo",
    "Serializer": "scaler.serializer",
    "progress": "scaler.client.progress",
}

__all__ = [
    "Client",
    "Cluster",
    "MissingCapabilityError",
    "ObjectReference",
    "ProfilingInfo",
    "ScalerFuture",
    "Scheduler",
    "SchedulerClusterCombo",
    "Serializer",
    "__version__",
    "progress",
]


__getattr__, __dir__ = lazy_names(globals(), _WHERE, __all__, "Scaler's clients and local clusters")
