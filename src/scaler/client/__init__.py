"""The client API: Client, ScalerFuture, ObjectReference (loaded on first use: the pure graph planner,
scaler.client.graph, imports without ZeroMQ or Cap'n Proto)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scaler.lazy import lazy_names

if TYPE_CHECKING:
    from scaler.client.client import Client
    from scaler.client.future import ProfilingInfo, ScalerFuture
    from scaler.client.object_reference import ObjectReference

_WHERE = {
    "Client": "scaler.client.client",
    "ObjectReference": "scaler.client.object_reference",
    "ProfilingInfo": "scaler.client.future",
    "ScalerFuture": "scaler.client.future",
}
__all__ = ["Client", "ObjectReference", "ProfilingInfo", "ScalerFuture"]


__getattr__, __dir__ = lazy_names(globals(), _WHERE, __all__, "Scaler's clients")
