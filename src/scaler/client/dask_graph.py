"""Dask's graphs as the client plans them: the graphs Dask hands a scheduler (expressions, HighLevelGraphs, dicts
of its task-spec nodes) turned into the task-tuple graphs of graph.py, for every graph the client takes (get,
submit_graph, and Dask's scheduler protocol in scaler.integrations.dask).

Imports dask only when given one of its objects: scaler runs without it. Pure; no I/O.
"""

from __future__ import annotations

import sys
from collections.abc import Hashable, Mapping
from typing import Any

from scaler.client.shipped import run_node as run_node  # runs on workers: travels by value

_KEY_TYPES = (str, bytes, int, float, tuple)  # what a dask key is made of (dask.core.iskey)
DASK_GET_MOVED = (
    "client.get called the way Dask calls a scheduler is deprecated: pass the client itself as Dask's scheduler, "
    "dask.compute(..., scheduler=client), or scheduler=client.dask_get (client.get will answer {key: value} only)"
)


def dask_node(node: Any, deps: tuple[Hashable, ...]) -> dict[str, Any]:
    """The first argument of run_node for a dask task-spec node (Task, List, Dict, DataNode...): the node and the keys
    of the values it needs, in the order run_node receives them. A dict: unhashable, so the planner passes it as a
    plain argument; and no scaler class, so a worker needs no scaler package to unpickle it (run_node goes by value)."""
    return {"node": node, "deps": deps}


def dask_form(graph: Any, keys: Any) -> bool:
    """Whether get(graph, keys) has a shape only Dask's scheduler protocol gives (deprecated in Client.get, which
    then warns and answers as client.dask_get): a graph that is not a dict (a Dask expression or HighLevelGraph) with
    keys or a key, keys nested in lists, or a single key (a str, bytes, int or float, or a tuple that is a key of
    the graph; a tuple of keys that is not itself a key is Scaler's form). Decided by the arguments alone."""
    if not isinstance(graph, dict):
        return isinstance(keys, (list, *_KEY_TYPES))
    if isinstance(keys, list):
        return any(isinstance(key, list) for key in keys)
    if isinstance(keys, tuple):
        return _is_key(graph, keys)
    return isinstance(keys, _KEY_TYPES)


def as_task_tuples(graph: Any) -> Any:
    """The graph as a dict in the planner's format (graph.py); anything that is not a graph as it is (the planner
    refuses it). A HighLevelGraph or a Dask expression is materialized first. Task-spec nodes (dask >= 2024.12) are
    converted; a graph of task tuples only (scaler's own, Dask's before) goes to the planner unchanged."""
    plain = graph if isinstance(graph, dict) else _materialized(graph)
    if plain is None:
        return graph
    spec = sys.modules.get("dask._task_spec")  # not imported: no task-spec node can exist
    if spec is None or not any(isinstance(value, spec.GraphNode) for value in plain.values()):
        return plain
    return _converted(plain, spec)


def _materialized(graph: Any) -> dict[Hashable, Any] | None:
    """A HighLevelGraph (a Mapping) or a Dask expression (with __dask_graph__) as a dict; None for anything else."""
    if isinstance(graph, Mapping):
        to_dict = getattr(graph, "to_dict", None)  # a HighLevelGraph's, faster than key by key
        return dict(to_dict() if callable(to_dict) else graph)
    dask_graph = getattr(graph, "__dask_graph__", None)
    if callable(dask_graph):
        inner = dask_graph()
        return inner if isinstance(inner, dict) else _materialized(inner)
    return None


def _converted(graph: dict[Hashable, Any], spec: Any) -> dict[Hashable, Any]:
    """Every entry read as dask reads it (its convert_legacy_graph: task tuples in a graph of nodes become nodes
    too), then as the planner's value. Only what every dask since 2024.12 has is used: GraphNode, Alias, DataNode,
    a node's dependencies and calling it with their values."""
    nodes: dict[Hashable, Any] = spec.convert_legacy_graph(graph)
    return {key: _entry(key, node, nodes, spec) for key, node in nodes.items()}


def _entry(key: Hashable, node: Any, nodes: dict[Hashable, Any], spec: Any) -> Any:
    """One node as the planner's value: an Alias is its target key (an identity task), a DataNode its value (or a
    task returning it where the planner would read the value as a task, a list of keys or a key), and any other
    node a task calling it with the values of its dependencies."""
    if not isinstance(node, spec.GraphNode):
        node = spec.DataNode(key, node)
    deps = tuple(node.dependencies)
    for dep in deps:
        if dep not in nodes:
            raise KeyError(f"key {key!r} of the dask graph needs {dep!r}, which is not in the graph")
    if isinstance(node, spec.Alias) and len(deps) == 1 and deps[0] != key:
        return deps[0]
    if isinstance(node, spec.DataNode) and not deps:
        value = node.value
        if not isinstance(value, (tuple, list)) and not _is_key(nodes, value):
            return value
    return (run_node, dask_node(node, deps), *deps)


def _is_key(graph: Mapping[Hashable, Any], value: Any) -> bool:
    try:
        return value in graph
    except TypeError:  # unhashable: not a key
        return False
