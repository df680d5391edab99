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
    labels: dict[int, int] = {}
    keep: list[object] = []  # keeps walked objects alive, so that their ids stay unique while we walk
    pending: deque[object] = deque()

    def value(item: object) -> Any:
        if isinstance(item, enum.Enum):
            return ("enum", type(item).__name__, item.value)
        if isinstance(item, _PLAIN):
            return item
        if isinstance(item, (bytes, bytearray, memoryview)):
            return ("bytes", bytes(item))
        if hasattr(item, "bytes") and type(item).__name__ == "Frame":  # a zmq.Frame: its bytes
            return ("bytes", item.bytes)  # type: ignore[attr-defined]
        if isinstance(item, (list, tuple, deque)):
            return (type(item).__name__, [value(x) for x in item])
        if isinstance(item, Counter):
            return ("Counter", sorted((repr(value(k)), value(v)) for k, v in item.items()))
        if isinstance(item, dict):
            return ("dict", [(value(k), value(v)) for k, v in item.items()])
        if isinstance(item, (set, frozenset)):
            return ("set", sorted((value(x) for x in item), key=repr))
        if isinstance(item, _CALLABLES):  # bound methods are made anew at each access: named, not numbered
            return ("callable", getattr(item, "__qualname__", repr(item)))
        if isinstance(item, type):  # a class (the core's handler tables are keyed by message class): its name
            return ("type", item.__module__, item.__qualname__)
        label = labels.get(id(item))
        if label is None:
            label = labels[id(item)] = len(labels)
            keep.append(item)
            pending.append(item)
        return ("object", label)

    value(root)
    dump: list[tuple[str, list[tuple[str, Any]]]] = []
    while pending:
        item = pending.popleft()
        dump.append((type(item).__name__, [(name, value(getattr(item, name))) for name in _fields(item)]))
    return dump


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
