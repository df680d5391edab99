"""Dask-style task graphs ({"c": (inc, "a"), "a": 2}) turned into a flat, ordered plan of literal values and
tasks whose arguments are either values or other keys. Pure; no I/O.

In a task tuple, an argument that is a key of the graph means that key's value; a tuple starting with a callable
is a task of its own; a list is a list of such arguments. Anything else is a plain value.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any


def build_list(*items: Any) -> list[Any]:
    """Runs on a worker: a list argument of a graph task whose items come from other keys."""
    return list(items)


def identity(value: Any) -> Any:
    """Runs on a worker: a key whose value is another key (an alias)."""
    return value


@dataclass(frozen=True)
class KeyArg:
    key: Hashable


@dataclass(frozen=True)
class ValueArg:
    value: Any


Arg = KeyArg | ValueArg


@dataclass
class TaskNode:
    key: Hashable
    function: Any
    args: list[Arg]


@dataclass
class GraphPlan:
    literals: dict[Hashable, Any] = field(default_factory=dict)
    tasks: list[TaskNode] = field(default_factory=list)  # every task after the tasks it needs


def is_task(value: Any) -> bool:
    return isinstance(value, tuple) and bool(value) and callable(value[0])


def plan_graph(graph: dict[Hashable, Any], keys: Iterable[Hashable]) -> GraphPlan:
    if not isinstance(graph, dict):
        raise TypeError(f"a graph is a dict of key -> value or task tuple, not {type(graph).__name__}")
    wanted = list(keys)
    missing = [k for k in wanted if not _is_key(graph, k)]
    if missing:
        raise KeyError(f"keys not in the graph: {', '.join(map(repr, missing))}")
    nodes: dict[Hashable, TaskNode] = {}
    literals: dict[Hashable, Any] = {}
    synthetic = 0

    def argument(value: Any) -> Arg:
        nonlocal synthetic
        if _is_key(graph, value):
            return KeyArg(value)
        if is_task(value) or (isinstance(value, list) and _mentions_keys(graph, value)):
            synthetic += 1
            key = ("__scaler_inline__", synthetic)
            add(key, value)
            return KeyArg(key)
        return ValueArg(value)

    def add(key: Hashable, value: Any) -> None:
        if is_task(value):
            nodes[key] = TaskNode(key, value[0], [argument(a) for a in value[1:]])
        elif isinstance(value, list) and _mentions_keys(graph, value):
            nodes[key] = TaskNode(key, build_list, [argument(a) for a in value])
        elif _is_key(graph, value) and value != key:
            nodes[key] = TaskNode(key, identity, [KeyArg(value)])
        else:
            literals[key] = value

    for key, value in graph.items():
        add(key, value)
    needed = _ancestors(nodes, wanted)  # like dask, run only what the keys asked for need
    nodes = {k: n for k, n in nodes.items() if k in needed}
    literals = {k: v for k, v in literals.items() if k in needed}
    return GraphPlan(literals, _topological(nodes, literals))


def _ancestors(nodes: dict[Hashable, TaskNode], wanted: list[Hashable]) -> set[Hashable]:
    seen: set[Hashable] = set()
    stack = list(wanted)
    while stack:
        key = stack.pop()
        if key in seen:
            continue
        seen.add(key)
        node = nodes.get(key)
        if node is not None:
            stack.extend(a.key for a in node.args if isinstance(a, KeyArg))
    return seen


def _is_key(graph: dict[Hashable, Any], value: Any) -> bool:
    try:
        return value in graph
    except TypeError:  # unhashable: a plain value
        return False


def _mentions_keys(graph: dict[Hashable, Any], items: list[Any]) -> bool:
    return any(_is_key(graph, i) or is_task(i) or (isinstance(i, list) and _mentions_keys(graph, i)) for i in items)


def _topological(nodes: dict[Hashable, TaskNode], literals: dict[Hashable, Any]) -> list[TaskNode]:
    needs = {key: {a.key for a in node.args if isinstance(a, KeyArg) and a.key in nodes} for key, node in nodes.items()}
    users: dict[Hashable, list[Hashable]] = {key: [] for key in nodes}
    for key, deps in needs.items():
        for dep in deps:
            users[dep].append(key)
    ready = [key for key, deps in needs.items() if not deps]
    order: list[TaskNode] = []
    while ready:
        key = ready.pop()
        order.append(nodes[key])
        for user in users[key]:
            needs[user].discard(key)
            if not needs[user]:
                ready.append(user)
    if len(order) != len(nodes):
        stuck = sorted((repr(k) for k, deps in needs.items() if deps))[:10]
        raise ValueError(f"the graph has a cycle among keys {', '.join(stuck)}")
    return order
