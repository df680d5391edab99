"""Placement arithmetic: how many ready tasks each worker gets, and which busy workers give some back.

Pure functions over numbers; the core applies their answers.
"""

from __future__ import annotations


def water_fill(loads: list[int], capacities: list[int], count: int) -> list[int]:
    """How many of `count` new tasks to give each worker so loads rise evenly, least loaded first.

    Worker i holds loads[i] tasks and may hold capacities[i]. The answer never exceeds a capacity, and sums to
    min(count, total spare room). Workers are levelled: nobody gets a task while another has two fewer.
    """
    n = len(loads)
    rooms = [max(0, c - load) for c, load in zip(capacities, loads)]
    room = sum(rooms)
    if count >= room:  # everyone fills up: nothing to level
        return rooms
    if n == 1:
        return [count]

    def filled(level: int) -> int:
        total = 0
        for capacity, load in zip(capacities, loads):
            if level > load:
                total += (capacity if capacity < level else level) - load if capacity > load else 0
        return total

    low, high = min(loads), max(capacities)  # the smallest level that takes `count` tasks
    while low < high:
        mid = (low + high) // 2
        if filled(mid) >= count:
            high = mid
        else:
            low = mid + 1
    give = [max(0, min(capacities[i], low - 1) - loads[i]) for i in range(n)]
    remaining = count - sum(give)
    for i in sorted(range(n), key=lambda i: loads[i]):
        if remaining == 0:
            break
        if loads[i] + give[i] < min(capacities[i], low):
            give[i] += 1
            remaining -= 1
    return give


def plan_balance(loads: list[int], pending: list[bool]) -> dict[int, int]:
    """Which workers should give back how many queued tasks so that idle workers get some.

    Only worth doing when some worker is idle (load 0) and another holds at least two tasks. A worker with a
    request still unanswered (pending) is left alone. Returns {worker index: tasks to ask back}.
    """
    n = len(loads)
    if n < 2 or min(loads) > 0:
        return {}
    mean = sum(loads) / n
    plan: dict[int, int] = {}
    for i in range(n):
        if pending[i] or loads[i] < 2:
            continue
        surplus = loads[i] - max(1, int(mean + 0.5))
        if surplus > 0:
            plan[i] = surplus
    return plan
