"""Dask's scheduler protocol on a Scaler client: Dask arrays, bags, dataframes and delayed values computed by the
cluster with dask.compute(*collections, scheduler=client), scheduler=client.dask_get, or this module's get.

Dask calls its scheduler as get(graph, keys, **kwargs): the graph an expression, a HighLevelGraph or a dict (of task
tuples or task-spec nodes), the keys a key, a list of keys or nested lists of them; it wants the values in the shape
of the keys (a tuple for a list, nested as deep; the value alone for a key), as dask.local.get_sync answers. get
turns that into Scaler's own client.get(dict, flat keys) and shapes the answer. (A Client is callable as Dask's
scheduler: Dask takes a callable before it looks for a get method; see docs/client.md, "Dask collections".)

Imports dask only when given one of its objects: scaler runs without it. No private name of the client.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from scaler.client.dask_graph import as_task_tuples

__all__ = ["get"]


def get(client: Any, graph: Any, keys: Any, **kwargs: Any) -> Any:
    """Compute `keys` of Dask's `graph` with `client` (a Client, or client.options(...) for task options), answering
    as Dask's schedulers do: the values in the shape of `keys`. Keywords go to client.get (timeout=, progress=,
    group=); a key asked for twice is computed once."""
    plain = as_task_tuples(graph)
    if not isinstance(plain, dict):
        raise TypeError(f"a Dask graph is a dict, a HighLevelGraph or a Dask expression, not {type(graph).__name__}")
    values = client.get(plain, flat_keys(keys), **kwargs)
    return shaped(keys, values)


def flat_keys(keys: Any) -> list[Hashable]:
    """The keys in `keys` (a key, or lists of keys nested as deep as Dask likes), in order, each once."""
    if not isinstance(keys, list) and not _is_hashable(keys):
        raise TypeError(f"keys must be a graph key or a list of them, not {type(keys).__name__}")
    flat: list[Hashable] = []
    stack = [keys]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        elif not _is_hashable(item):
            raise TypeError(f"keys must be graph keys or lists of them, not {type(item).__name__}")
        else:
            flat.append(item)
    return list(dict.fromkeys(flat))


def shaped(keys: Any, values: Mapping[Hashable, Any]) -> Any:
    """The values of `keys` in their shape, as Dask's schedulers answer: a tuple for a list (nested as deep), the
    value alone for a key."""
    if isinstance(keys, list):
        return tuple(shaped(item, values) for item in keys)
    return values[keys]


def _is_hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True
