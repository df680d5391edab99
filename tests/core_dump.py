"""A canonical dump of a whole core: every field of every object reachable from it, so that two cores compare equal
only if they hold the same values in the same shape. Used to prove that a shortcut leaves the core exactly as the
normal path would (tests/property/test_scheduler_stateful.py, tests/simulation/sim.py), not a chosen projection.

Objects are numbered in the order a deterministic walk first meets them, so shared references and cycles (a task
and its client, a worker and its tasks) are part of the shape. Dict order counts (insertion order can change what a
core does next), except for collections.Counter, whose order never does.
"""

from __future__ import annotations

import enum
import operator
import types
from collections import Counter, deque
from typing import Any

_PLAIN = (int, float, str, bool, type(None))
_CALLABLES = (types.MethodType, types.FunctionType, types.BuiltinFunctionType, type(operator.attrgetter("x")))


def canonical(root: object) -> list[tuple[str, list[tuple[str, Any]]]]:
    walk = _Walk()
    walk.value(root)
    dump: list[tuple[str, list[tuple[str, Any]]]] = []
    while walk.pending:
        item = walk.pending.popleft()
        dump.append((type(item).__name__, [(name, walk.value(getattr(item, name))) for name in _fields(item)]))
    return dump


class _Walk:
    """Numbers objects in the order the walk meets them, and keeps them alive so that their ids stay unique."""

    def __init__(self) -> None:
        self.labels: dict[int, int] = {}
        self.keep: list[object] = []
        self.pending: deque[object] = deque()

    def value(self, item: object) -> Any:
        if isinstance(item, enum.Enum):
            return ("enum", type(item).__name__, item.value)
        if isinstance(item, _PLAIN):
            return item
        if isinstance(item, (bytes, bytearray, memoryview)):
            return ("bytes", bytes(item))
        if hasattr(item, "bytes") and type(item).__name__ == "Frame":  # a zmq.Frame: its bytes
            return ("bytes", item.bytes)
        if isinstance(item, _CALLABLES):  # bound methods are made anew at each access: named, not numbered
            return ("callable", getattr(item, "__qualname__", repr(item)))
        if isinstance(item, type):  # a class (the core's handler tables are keyed by message class): its name
            return ("type", item.__module__, item.__qualname__)
        if isinstance(item, (list, tuple, deque, dict, set, frozenset)):
            return self.collection(item)
        return self.label(item)

    def collection(
        self, item: list[Any] | tuple[Any, ...] | deque[Any] | dict[Any, Any] | set[Any] | frozenset[Any]
    ) -> Any:
        if isinstance(item, Counter):
            return ("Counter", sorted((repr(self.value(k)), self.value(v)) for k, v in item.items()))
        if isinstance(item, dict):
            return ("dict", [(self.value(k), self.value(v)) for k, v in item.items()])
        if isinstance(item, (set, frozenset)):
            return ("set", sorted((self.value(x) for x in item), key=repr))
        return (type(item).__name__, [self.value(x) for x in item])

    def label(self, item: object) -> tuple[str, int]:
        label = self.labels.get(id(item))
        if label is None:
            label = self.labels[id(item)] = len(self.labels)
            self.keep.append(item)
            self.pending.append(item)
        return ("object", label)


def _fields(item: object) -> list[str]:
    names: list[str] = []
    for cls in type(item).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        names.extend([slots] if isinstance(slots, str) else slots)
    names.extend(getattr(item, "__dict__", {}))
    return sorted(n for n in dict.fromkeys(names) if n not in ("__weakref__", "__dict__") and hasattr(item, n))


def first_difference(a: object, b: object) -> str:
    """Where two cores' canonical dumps first differ, in words (for assertion messages)."""
    left, right = canonical(a), canonical(b)
    for index, (x, y) in enumerate(zip(left, right, strict=False)):
        if x != y:
            if x[0] != y[0]:
                return f"object {index}: a {x[0]} here, a {y[0]} there"
            for (name, u), (_, v) in zip(x[1], y[1], strict=False):
                if u != v:
                    return f"object {index} ({x[0]}), field {name}: {u!r:.300} != {v!r:.300}"
            return f"object {index} ({x[0]}): {x!r:.300} != {y!r:.300}"
    if len(left) != len(right):
        return f"{len(left)} objects here, {len(right)} there"
    return "no difference"
