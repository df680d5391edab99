"""Dask-style task graphs ({"c": (inc, "a"), "a": 2}) turned into a flat, ordered plan of literal values and
tasks whose arguments are either values or other keys. Pure; no I/O.

In a task tuple, an argument that is a key of the graph means that key's value; a tuple starting with a callable
is a task of its own; a list is a list of such arguments. Anything else is a plain value.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

# The helpers tasks run on workers: they travel by value (no reference to scaler in the payload).
from scaler.client.shipped import build_list as build_list
from scaler.client.shipped import identity as identity
from scaler.core.slotted import slotted
from scaler.errors import GraphCycleError as GraphCycleError


@slotted
class KeyArg:
    key: Hashable


@slotted
class ValueArg:
    value: Any


Arg = KeyArg | ValueArg


@slotted
class TaskNode:
    key: Hashable
    function: Any
    args: list[Arg]
    deps: tuple[Hashable, ...] = field(default=(), compare=False, repr=False)  # the keys of its KeyArgs


@dataclass
class GraphPlan:
    literals: dict[Hashable, Any] = field(default_factory=dict)
    tasks: list[TaskNode] = field(default_factory=list)  # every task after the tasks it needs


def is_task(value: Any) -> bool:
    return isinstance(value, tuple) and bool(value) and callable(value[0])


_VISITING, _PLANNED = 1, 2


def plan_graph(graph: dict[Hashable, Any], keys: Iterable[Hashable]) -> GraphPlan:
    """The literals and tasks the wanted `keys` need, tasks in an order where each comes after what it needs.

    One depth-first walk from the wanted keys, in their order: only what they need is looked at (like dask), each
    needed key is read once and each of its arguments once, and a task is placed as soon as its arguments are (a
    chain is planned whole before the next one starts). Time and memory are linear in the size of what is needed.
    """
    if not isinstance(graph, dict):
        raise TypeError(f"a graph is a dict of key -> value or task tuple, not {type(graph).__name__}")
    wanted = list(keys)
    missing = [k for k in wanted if not _is_key(graph, k)]
    if missing:
        raise KeyError(f"keys not in the graph: {', '.join(map(repr, missing))}")
    planner = _Planner(graph)
    for root in wanted:
        planner.walk(root)
    return GraphPlan(planner.literals, planner.order)


class _Planner:
    """The depth-first walk of plan_graph: a key's state is absent (not seen), _VISITING (on the current path) or
    _PLANNED (its task, if any, is in `order`)."""

    def __init__(self, graph: dict[Hashable, Any]) -> None:
        self.graph = graph
        self.literals: dict[Hashable, Any] = {}
        self.inline: dict[Hashable, Any] = {}  # synthetic key -> a task or list written inside another's arguments
        self.synthetic = 0
        self.state: dict[Hashable, int] = {}
        self.order: list[TaskNode] = []

    def walk(self, root: Hashable) -> None:
        state, order, node_of = self.state, self.order, self.node_of  # the hot loop: locals
        if root in state:
            return
        top = node_of(root)
        state[root] = _VISITING
        if top is None:
            state[root] = _PLANNED
            return
        stack: list[tuple[TaskNode, int]] = [(top, 0)]  # each task on the path, and how many deps it has looked at
        while stack:
            node, looked = stack[-1]
            deps = node.deps
            child = None
            while looked < len(deps):
                dep = deps[looked]
                looked += 1
                seen = state.get(dep)
                if seen is None:
                    state[dep] = _VISITING
                    child = node_of(dep)
                    if child is not None:
                        break
                    state[dep] = _PLANNED
                elif seen == _VISITING:
                    raise _cycle(stack, dep)
            if child is not None:
                stack[-1] = (node, looked)
                stack.append((child, 0))
                continue
            stack.pop()
            state[node.key] = _PLANNED
            order.append(node)

    def node_of(self, key: Hashable) -> TaskNode | None:
        """The task computing `key`, or None for a literal (then recorded in `literals`)."""
        graph, inline = self.graph, self.inline
        value = inline.pop(key) if inline and key in inline else graph[key]
        deps: list[Hashable] = []
        if isinstance(value, tuple) and value and callable(value[0]):
            return TaskNode(key, value[0], self.arguments(value[1:], deps), tuple(deps))
        if isinstance(value, list) and _mentions_keys(graph, value):
            return TaskNode(key, build_list, self.arguments(value, deps), tuple(deps))
        if _is_key(graph, value) and value != key:
            return TaskNode(key, identity, [KeyArg(value)], (value,))
        self.literals[key] = value
        return None

    def arguments(self, values: Iterable[Any], deps: list[Hashable]) -> list[Arg]:
        """Each value as an argument: a key of the graph, a task or list of its own (planned under a new key), or
        a plain value. The keys it needs go to `deps`. (The graph's hot loop: helpers inlined.)"""
        graph = self.graph
        args: list[Arg] = []
        for value in values:
            try:
                is_key = value in graph
            except TypeError:  # unhashable: a plain value
                is_key = False
            if is_key:
                args.append(KeyArg(value))
                deps.append(value)
            elif is_task(value) or (isinstance(value, list) and _mentions_keys(graph, value)):
                self.synthetic += 1
                key = ("__scaler_inline__", self.synthetic)
                self.inline[key] = value
                args.append(KeyArg(key))
                deps.append(key)
            else:
                args.append(ValueArg(value))
        return args


def _cycle(stack: list[tuple[TaskNode, int]], dep: Hashable) -> GraphCycleError:
    path = [n.key for n, _ in stack]
    cycle = path[path.index(dep) :]  # each key needs the next; the last needs the first
    message = f"the graph has a cycle among keys {', '.join(sorted(map(repr, cycle))[:10])}"
    return GraphCycleError(message, [*cycle[::-1], cycle[-1]])


def _is_key(graph: dict[Hashable, Any], value: Any) -> bool:
    try:
        return value in graph
    except TypeError:  # unhashable: a plain value
        return False


def _mentions_keys(graph: dict[Hashable, Any], items: list[Any]) -> bool:
    return any(_is_key(graph, i) or is_task(i) or (isinstance(i, list) and _mentions_keys(graph, i)) for i in items)
