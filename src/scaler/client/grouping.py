"""Grouping of a graph's nodes (get / submit_graph with group=K): the planner's order (each node after what it needs)
cut into blocks of at most K consecutive nodes, each block one task that runs its nodes in order in one processor.
The result is an ordinary graph of block tasks, planned and submitted the ordinary way; the scheduler sees blocks.

A block task is (run_block, spec, *inputs): run_block (scaler.client.shipped) travels by value and the spec is builtins
only, {"steps": ((function, ((kind, a, b), ...)), ...), "outputs": (position, ...)}, so a worker needs no `scaler`
package to run it. Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from scaler.client.graph import GraphPlan, KeyArg
from scaler.client.object_reference import ObjectReference

# run on workers, by value; the kinds of a node's argument in a spec: see shipped.run_block
from scaler.client.shipped import FROM, LOCAL, VALUE, WHOLE
from scaler.client.shipped import run_block as run_block
from scaler.core.slotted import slotted

BlockSpec = dict[str, Any]
"""What a block task runs: {"steps": its nodes in order, each (function, its arguments as (kind, a, b)), "outputs":
the positions of the nodes whose values it returns (the ones later blocks need and the keys asked for)}. A dict:
unhashable, so the planner passes it as a plain argument; builtins only, so it unpickles without scaler."""


class BlockKey:
    """The key of a block task in the grouped graph: equal to nothing but itself (so to no key of the user's graph),
    and hashed as fast as an object can be (the grouping's hot loop looks blocks up by key)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<block {self.index}>"


@slotted(frozen=True)
class ReferenceKey:
    """The key, in the grouped graph, of an ObjectReference written as a task's argument (a block input)."""

    index: int

    def __repr__(self) -> str:
        return f"<reference {self.index}>"


@dataclass
class GroupedGraph:
    """The grouped graph (the literals, under their own keys, and the block tasks), the keys to ask it for (the
    blocks holding a key asked for, and the literals asked for), and where each key asked for is: (its block's key,
    its index in the block's outputs), or (the literal's key, -1)."""

    graph: dict[Hashable, Any] = field(default_factory=dict)
    keys: list[Hashable] = field(default_factory=list)
    where: dict[Hashable, tuple[Hashable, int]] = field(default_factory=dict)
    blocks: int = 0


def check_group(group: object) -> int:
    """group as a number of nodes per task; ValueError for anything but an int >= 1."""
    if isinstance(group, bool) or not isinstance(group, int) or group < 1:
        raise ValueError(f"group must be a whole number of graph nodes per task, at least 1 (or None), not {group!r}")
    return group


def group_plan(plan: GraphPlan, keys: list[Hashable], group: int) -> GroupedGraph:
    """The plan's tasks cut into blocks of at most `group` consecutive tasks (see the module's docstring). One pass
    over the tasks' arguments (the hot loop: a block's outputs get their indexes as later blocks ask for them)."""
    size = check_group(group)
    tasks = plan.tasks
    position = {node.key: i for i, node in enumerate(tasks)}
    blocks = [BlockKey(b) for b in range(-(-len(tasks) // size))]
    outputs: list[dict[int, int]] = [{} for _ in blocks]  # position in the block -> index in its outputs
    grouped = GroupedGraph(dict(plan.literals), blocks=len(blocks))
    graph = grouped.graph
    references: dict[int, ReferenceKey] = {}  # id of an ObjectReference argument -> its key
    specs: list[BlockSpec] = []
    where, key_arg = position.get, KeyArg  # the hot loop: locals
    for b, block_key in enumerate(blocks):
        first = b * size
        inputs: dict[Hashable, int] = {}  # the block's input keys, in order -> their index
        steps = []
        for node in tasks[first : first + size]:
            args = []
            for arg in node.args:
                if type(arg) is key_arg:
                    i = where(arg.key)
                    if i is None:  # a literal
                        args.append((WHOLE, inputs.setdefault(arg.key, len(inputs)), 0))
                    elif i >= first:  # an earlier node of this block
                        args.append((LOCAL, i - first, 0))
                    else:
                        source = i // size
                        out = outputs[source]
                        index = out.setdefault(i - source * size, len(out))
                        args.append((FROM, inputs.setdefault(blocks[source], len(inputs)), index))
                else:
                    args.append(_value(arg, graph, references, inputs))
            steps.append((node.function, tuple(args)))
        specs.append({"steps": tuple(steps), "outputs": ()})
        graph[block_key] = (run_block, specs[-1], *inputs)
    for key in keys:
        i = position.get(key)
        if i is None:
            grouped.where[key] = (key, -1)
            continue
        out = outputs[i // size]
        grouped.where[key] = (blocks[i // size], out.setdefault(i % size, len(out)))
    for spec, out in zip(specs, outputs):
        spec["outputs"] = tuple(out)
    grouped.keys = list(dict.fromkeys(source for source, _ in grouped.where.values()))
    return grouped


def _value(
    arg: Any, graph: dict[Hashable, Any], references: dict[int, ReferenceKey], inputs: dict[Hashable, int]
) -> tuple[int, Any, int]:
    """A plain value as an argument of a block's node: as it is, but an ObjectReference as an input of the block
    (a literal of the grouped graph, so that the task receives the object it refers to, as without grouping)."""
    value = arg.value
    if not isinstance(value, ObjectReference):
        return (VALUE, value, 0)
    ref = references.get(id(value))
    if ref is None:
        ref = references[id(value)] = ReferenceKey(len(references))
        graph[ref] = value
    return (WHOLE, inputs.setdefault(ref, len(inputs)), 0)
