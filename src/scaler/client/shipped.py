"""The functions a Python client's tasks run on workers that are not the user's own: the graph helpers (build_list,
identity), grouping's run_block, dask's run_node and joblib's run_batch. They travel BY VALUE (scaler.payloads
registers this module with cloudpickle.register_pickle_by_value; the module itself stays pure, since the graph planner
imports it): their code, not a reference to this module, is in the payload, so a worker needs no `scaler` package to
run them (docs/protocol.md, "Python payloads").

Rules for this module, which the golden payloads (tests/protocol/golden/payloads/) check: the functions use nothing
but builtins and this module's integer constants (cloudpickle copies the globals a function uses into its payload),
import nothing at run time, and keep to Python 3.9 syntax (the scheduler imports graph.py, which imports this).
"""

from __future__ import annotations

from typing import Any

# How a node of a grouped block gets an argument: a (kind, a, b) triple (grouping.py builds them)
LOCAL = 0  # the value of the block's node at position a
FROM = 1  # item b of input a (the outputs of an earlier block)
WHOLE = 2  # input a itself (a literal of the graph, or the object an ObjectReference refers to)
VALUE = 3  # a itself, a plain value


def build_list(*items: Any) -> list[Any]:
    """A list argument of a graph task whose items come from other keys."""
    return list(items)


def identity(value: Any) -> Any:
    """A key whose value is another key (an alias)."""
    return value


def run_block(spec: dict[str, Any], *inputs: Any) -> tuple[Any, ...]:
    """A block of a grouped graph: its nodes in order; the tuple of its outputs. A node's exception is the block's.

    spec: {"steps": ((function, ((kind, a, b), ...)), ...), "outputs": (position, ...)}, builtins only (a dict:
    unhashable, so the graph planner passes it as a plain value); inputs: the values of the block's input keys."""
    values: list[Any] = []
    append = values.append
    for function, args in spec["steps"]:
        call = []
        for kind, a, b in args:
            if kind == LOCAL:
                call.append(values[a])
            elif kind == FROM:
                call.append(inputs[a][b])
            elif kind == WHOLE:
                call.append(inputs[a])
            else:
                call.append(a)
        append(function(*call))
    return tuple([values[i] for i in spec["outputs"]])


def run_node(task: dict[str, Any], *values: Any) -> Any:
    """A node of a dask task-spec graph (dask >= 2024.12; dask_graph.py), called the way dask calls it: with a dict
    of its dependencies' values. task: {"node": the dask node, "deps": the keys of `values`, in order}, a dict for the
    reasons of run_block's spec (the node itself needs dask on the worker, as any dask graph does)."""
    return task["node"](dict(zip(task["deps"], values)))


def run_batch(batch: Any) -> Any:
    """A task of the joblib backend (scaler.joblib): one of joblib's BatchedCalls, called (joblib itself must be on the
    worker, as for any joblib batch)."""
    return batch()
