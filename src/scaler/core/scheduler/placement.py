"""Placement arithmetic: how many ready tasks each worker gets, and which busy workers give some back.

Pure functions over numbers; the core applies their answers.
"""

from __future__ import annotations


def water_fill(loads: list[int], capacities: list[int], count: int, grain: int = 1) -> list[int]:
    """How many of `count` new tasks to give each worker: to the least-loaded ones, levelling their loads.

    Worker i holds loads[i] tasks and may hold capacities[i]. Only the max(grain, ceil(count / grain)) least-loaded
    workers with room take part (ties in worker order), more if those cannot hold `count`: with thousands of
    workers a big batch goes out about `grain` tasks per worker instead of a few to each, while a fleet of at most
    `grain` workers is filled exactly as if all took part. Among those taking part the loads rise evenly: nobody
    gets a task while another has two fewer. The answer never exceeds a capacity, and sums to min(count, total
    spare room).
    """
    n = len(loads)
    rooms = [max(0, c - load) for c, load in zip(capacities, loads)]
    wanted = max(grain, -(-count // grain))
    chosen: list[int] = []
    room = 0
    for i in sorted(range(n), key=loads.__getitem__):  # stable: ties keep worker order
        if len(chosen) >= wanted and room >= count:
            break
        if rooms[i]:
            chosen.append(i)
            room += rooms[i]
    give = [0] * n
    for i, share in zip(chosen, _level([loads[i] for i in chosen], [capacities[i] for i in chosen], count)):
        give[i] = share
    return give


def _level(loads: list[int], capacities: list[int], count: int) -> list[int]:
    """Shares of `count` tasks that raise these workers' loads evenly, least loaded first, within capacities."""
    n = len(loads)
    rooms = [max(0, c - load) for c, load in zip(capacities, loads)]
    if count >= sum(rooms):  # everyone fills up: nothing to level
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


def plan_balance(loads: list[int], pending: list[bool], rooms: list[int] | None = None) -> dict[int, int]:
    """Which workers should give back how many queued tasks so that idle workers get some.

    Only worth doing when some worker is idle (load 0) and another holds at least two tasks. Asks back no more than
    the idle workers have room for (rooms[i], spare room of worker i; unbounded if None), from the most loaded
    workers first, each for its surplus over the mean (rounded, at least 1). A worker with a request still
    unanswered (pending) is left alone. Returns {worker index: tasks to ask back}.
    """
    n = len(loads)
    if n < 2 or min(loads) > 0:
        return {}
    wanted = sum(rooms[i] for i in range(n) if not loads[i]) if rooms is not None else sum(loads)
    keep = max(1, int(sum(loads) / n + 0.5))
    plan: dict[int, int] = {}
    for i in sorted(range(n), key=lambda i: -loads[i]):  # most loaded first, ties in worker order
        surplus = min(loads[i] - keep, wanted)
        if surplus <= 0:
            break
        if not pending[i]:
            plan[i] = surplus
            wanted -= surplus
    return plan
