"""Dask's scheduler protocol on a Scaler client: Dask arrays, bags, dataframes and delayed values computed by the
cluster with dask.compute(*collections, scheduler=client), scheduler=client.dask_get, or this module's get.

Dask calls its scheduler as get(graph, keys, **kwargs): the graph an expression, a HighLevelGraph or a dict (of task
tuples or task-spec nodes), the keys a key, a list of keys or nested lists of them; it wants the values in the shape
of the keys (a tuple for a list, nested as deep; the value alone for a key), as dask.local.get_sync answers. get
turns that into Scaler's own client.get(dict, flat keys) and shapes the answer. (A Client is callable as Dask's
scheduler: Dask takes a callable before it looks for a get method; see docs/guide/graphs.md, "Dask collections".)

Imports dask only when given one of its objects: scaler runs without it. No private name of the client.
"""

from __future__ import annotations

import threading
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
    callbacks = _active_callbacks()
    if not callbacks:
        return shaped(keys, client.get(plain, flat_keys(keys), **kwargs))
    return shaped(keys, _get_with_callbacks(client, plain, flat_keys(keys), callbacks, **kwargs))


def _active_callbacks() -> list[Any]:
    """Dask's callbacks active now (dask.callbacks.Callback: ProgressBar, Profiler, ...), or none."""
    try:
        from dask.callbacks import Callback
    except ImportError:
        return []
    return list(Callback.active)


def _get_with_callbacks(
    client: Any,
    graph: dict[Hashable, Any],
    keys: list[Hashable],
    callbacks: list[Any],
    timeout: float | None = None,
    progress: bool = False,
    group: int | None = None,
) -> dict[Hashable, Any]:
    """client.get, calling Dask's callbacks as its local schedulers do (start, start_state, pretask, posttask,
    finish) with a `state` whose "waiting" and "finished" sets follow the tasks as they end: dask.diagnostics'
    ProgressBar draws every task of the graph."""
    from dask.callbacks import unpack_callbacks

    starts, start_states, pretasks, posttasks, finishes = unpack_callbacks(callbacks)
    tasks = [key for key, value in graph.items() if _is_task(value)]
    state: dict[str, Any] = {
        "cache": {},
        "ready": [],
        "running": set(),
        "waiting": set(tasks),
        "finished": set(),
        "released": set(),
        "dependencies": {},
        "dependents": {},
        "waiting_data": {},
    }
    lock = threading.Lock()

    def ended(key: Hashable) -> None:
        with lock:
            if key not in state["waiting"]:
                return
            state["waiting"].discard(key)
            state["finished"].add(key)
        for posttask in posttasks:
            posttask(key, None, graph, state, 0)

    for start in starts:
        start(graph)
    for start_state in start_states:
        start_state(graph, state)
    for key in tasks:  # all of them go to the scheduler now
        for pretask in pretasks:
            pretask(key, graph, state)
    errored = True
    try:
        if group is not None:  # (its tasks are blocks of nodes: no end of a node is told)
            values: dict[Hashable, Any] = client.get(graph, keys, timeout=timeout, progress=progress, group=group)
        else:
            values = client.get(graph, keys, timeout=timeout, progress=progress, on_task_end=ended)
        errored = False
        return values
    finally:
        for finish in finishes:
            finish(graph, state, errored)


def _is_task(value: Any) -> bool:
    return isinstance(value, tuple) and bool(value) and callable(value[0])


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
