"""Scaler: an efficient, lightweight and reliable distributed computation engine.

from scaler import Client, SchedulerClusterCombo, Serializer
from scaler import Cluster, Scheduler  # scaler 1.9.9's process classes, kept for programs written for it

Names are loaded on first use: a program that only needs a Client never loads the scheduler's or the workers' code.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from scaler.about import __version__, require_python_310

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


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'scaler' has no attribute {name!r}")
    require_python_310("Scaler's clients and local clusters")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once loaded, a plain module attribute
    return value


def __dir__() -> list[str]:
    """The public names, and the submodules loaded so far (not the names this file imports for its own use)."""
    loaded = {name for name, value in globals().items() if isinstance(value, type(importlib)) and name != "importlib"}
    return sorted(set(__all__) | loaded)
