"""The client API: Client, ScalerFuture, ObjectReference."""

from scaler.client.client import Client
from scaler.client.future import ProfilingInfo, ScalerFuture
from scaler.client.object_reference import ObjectReference

__all__ = ["Client", "ObjectReference", "ProfilingInfo", "ScalerFuture"]
