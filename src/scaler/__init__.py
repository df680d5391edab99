"""Scaler: an efficient, lightweight and reliable distributed computation engine.

from scaler import Client, SchedulerClusterCombo, Serializer
"""

from scaler.about import __version__
from scaler.client.client import Client
from scaler.client.future import ProfilingInfo, ScalerFuture
from scaler.client.object_reference import ObjectReference
from scaler.cluster.combo import SchedulerClusterCombo
from scaler.serializer import Serializer

__all__ = [
    "Client",
    "ObjectReference",
    "ProfilingInfo",
    "ScalerFuture",
    "SchedulerClusterCombo",
    "Serializer",
    "__version__",
]
