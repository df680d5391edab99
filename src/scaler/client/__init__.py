"""The client API: Client, ScalerFuture, ObjectReference (loaded on first use: the pure graph planner,
scaler.client.graph, imports without ZeroMQ or Cap'n Proto)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from scaler.about import require_python_310

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


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'scaler.client' has no attribute {name!r}")
    require_python_310("Scaler's clients")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
