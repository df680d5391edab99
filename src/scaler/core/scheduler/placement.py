"""Placement as a pure plan: which open worker gets how many ready tasks of which lane, and which busy workers give
some back.

Pure functions over a snapshot the core takes (loads, capacities, capability sets; lanes: the shared ready queue and
each split need's queue, with their queued counts); the core applies their answers (SchedulerCore._place). Nothing
here reads or changes a session. Python 3.9 (the scheduler runs on PyPy).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Callable, Optional

from scaler.core.scheduler.tasks import TaskState

if TYPE_CHECKING:
    from scaler.core.scheduler.sessions import ClientSession, WorkerSession
    from scaler.core.scheduler.tasks import Task

# Fair placement, while several clients have unfinished tasks: a worker is given tasks only while the work it holds is
# estimated under this many µs (ClientSession.task_us per task), and at least one task when it holds none; a task of a
# client whose run time is not known yet (none of its tasks ended) counts as UNKNOWN_TASK_US, or as long as its first
# task reported started has been running, if longer. So a task that becomes ready waits for the tasks running on a
# worker and about this much more, not for another client's queue (docs/architecture.md, "Fairness between clients").
FAIR_QUEUE_US = 50_000.0
UNKNOWN_TASK_US = FAIR_QUEUE_US / 8
# Placement stays fair this long after several clients last had unfinished tasks at once. A client that sends a task
# at a time (submit, wait, think, submit) has nothing unfinished between its tasks: without this, placement levelled
# another client's backlog into the workers' queues to their capacity in each pause, and each of its tasks then waited
# for that backlog to be asked back (balance_interval_seconds): 95 ms a round trip behind 1 ms tasks, against 4 ms.
FAIR_LINGER_SECONDS = 5.0
_ASSIGNED = TaskState.ASSIGNED

# A lane of ready tasks: the capabilities its tasks require (None: the shared queue, whose tasks every connected worker
# can run) and how many are queued in it.
Lane = tuple[Optional[frozenset[str]], int]
# Per lane, the (open worker index, task count) grants in dispatch order; None: no open worker can run its tasks.
Grants = Optional[list[tuple[int, int]]]


def plan_level(
    loads: list[int], limits: list[int], caps: Sequence[frozenset[str]], lanes: Sequence[Lane], grain: int
) -> list[Grants]:
    """Placement while one client has work (or tasks wait on nested ones): each lane's queued tasks are levelled
    over the open workers that can run them (water_fill), lane after lane, the loads rising with each grant. Open
    worker i holds loads[i] tasks and may hold limits[i]; it offers caps[i]. Returns, per lane, its grants
    [(worker index, count)] in worker order, or None if no open worker offers what its tasks require."""
    loads = list(loads)
    plan: list[Grants] = []
    everyone = range(len(loads))
    for required, count in lanes:
        if required is None:
            chosen: Sequence[int] = everyone
        else:
            chosen = [i for i in everyone if required <= caps[i]]
            if not chosen:
                plan.append(None)
                continue
        grants: list[tuple[int, int]] = []
        if count and chosen:
            shares = water_fill([loads[i] for i in chosen], [limits[i] for i in chosen], count, grain)
            for i, share in zip(chosen, shares):
                if share:
                    grants.append((i, share))
                    loads[i] += share
        plan.append(grants)
    return plan


def plan_fair(loads_us: list[float], caps: Sequence[frozenset[str]], lanes: Sequence[Lane]) -> list[list[int] | None]:
    """Placement while several clients have work: the open workers are visited least loaded first (loads_us[i]: the
    estimated µs of work worker i holds), each given tasks while its work stays under the fair bound (the core fills
    it: SchedulerCore._fill, since how many fit depends on whose tasks the queue yields). Returns, per lane, the worker
    indexes to visit in order, or None if no open worker offers what its tasks require."""
    order = sorted(range(len(loads_us)), key=loads_us.__getitem__)
    plan: list[list[int] | None] = []
    for required, count in lanes:
        if required is None:
            plan.append(order if count else [])
            continue
        capable = [i for i in order if required <= caps[i]]
        plan.append(capable if capable else None)
    return plan


def lone_worker(workers: Iterable[WorkerSession], required: frozenset[str] | None, now: float) -> WorkerSession | None:
    """Where a single ready task goes: the least loaded worker with room, not held back, that offers `required` (None:
    any), the first of ties, as water_fill would choose; None if there is none. One pass, ending at the first idle
    such worker: none can be less loaded, so with idle workers a lone task does not walk the whole fleet."""
    best: WorkerSession | None = None
    least = 1 << 62
    if required is None:
        for worker in workers:
            load = len(worker.assigned)
            if load < least and load < worker.limit and worker.held_until <= now:
                best, least = worker, load
                if not load:
                    break
        return best
    for worker in workers:
        load = len(worker.assigned)
        if load < least and load < worker.limit and worker.held_until <= now and required <= worker.capabilities:
            best, least = worker, load
            if not load:
                break
    return best


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


def plan_ask_back(
    workers: Iterable[WorkerSession], cost: Callable[[Task], float], keep: ClientSession | None
) -> list[tuple[WorkerSession, list[int]]]:
    """Tasks wait in a ready queue while several clients have work: which tasks each worker (without a request
    pending) should give back: those it has not started beyond FAIR_QUEUE_US of work (`cost` of each task), but
    `keep`'s (while only that client's tasks wait: they would only come back to wait in its place)."""
    plan = []
    for worker in workers:
        if worker.balance_pending:
            continue
        load = 0.0
        ids = []
        for task_id, task in worker.assigned.items():
            load += cost(task)
            if load > FAIR_QUEUE_US and task.state == _ASSIGNED and not task.started and task.client is not keep:
                ids.append(task_id)
        if ids:
            plan.append((worker, ids))
    return plan


def plan_rebalance(workers: list[WorkerSession]) -> list[tuple[WorkerSession, list[int]]]:
    """Which queued tasks (not yet started) busy workers should give back so that idle ones get some (plan_balance
    over these workers, none held back), only tasks some idle worker can run, the last queued first."""
    loads = [len(w.assigned) for w in workers]
    rooms = [max(0, w.limit - load) for w, load in zip(workers, loads)]
    counts = plan_balance(loads, [w.balance_pending for w in workers], rooms)
    if not counts:
        return []
    idle = {w.capabilities for w, load in zip(workers, loads) if not load}
    runnable: dict[frozenset[str], bool] = {}
    plan = []
    for index, count in counts.items():
        worker = workers[index]
        candidates = []
        for task_id, task in worker.assigned.items():
            if task.state == _ASSIGNED:
                caps = task.need.caps
                ok = runnable.get(caps)
                if ok is None:
                    ok = runnable[caps] = any(caps <= offer for offer in idle)
                if ok:
                    candidates.append(task_id)
        ids = candidates[-count:]
        if ids:
            plan.append((worker, ids))
    return plan
