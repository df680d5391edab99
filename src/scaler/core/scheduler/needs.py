"""Capability requirements as the scheduler holds them: one Need per distinct requirement, and the Offers, the
distinct capability sets of the connected workers.

A task runs on a worker iff its need's capabilities are a subset of the worker's. The ready tasks of the needs that
every connected worker offers (all of them while no worker is connected) wait in one shared queue, in the order they
would without capabilities; each other need ("split": only some workers, or none, can run its tasks) has a queue of
its own. In the common case every worker offers what every task requires: one queue, and placement decides exactly as
without capabilities. Pure; no I/O.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Callable

from scaler.core.fair import FairQueue
from scaler.core.scheduler.tasks import TaskState
from scaler.protocol.capabilities import MAX_REQUIRED, capabilities_problem

if TYPE_CHECKING:
    from scaler.core.scheduler.monitoring import FunctionStats
    from scaler.core.scheduler.tasks import Task

Capabilities = frozenset  # of str; interned: equal sets are one object (Offers.add, NeedTable.of)

_CLIENT = operator.attrgetter("client")
_PRIORITY = operator.attrgetter("priority")


_QUEUED = TaskState.QUEUED
# Needs (distinct requirements) kept while no task has them, so that tasks that come again with a recent requirement
# find it checked and filed; more are forgotten at the next tick (NeedTable.prune).
KEEP_NEEDS = 16


def ready_queue(cost: Callable[[Task], float] | None = None) -> FairQueue[Task]:
    """A queue of ready tasks: taken client by client in turns (by time, with the scheduler's `cost` of a task),
    higher priority first within a client."""
    return FairQueue(_CLIENT, _PRIORITY, cost)


class Need:
    """The tasks that require one set of capabilities: where their ready tasks wait (`ready`: the shared queue, or
    `queue`, its own while it is split; a queue may hold tasks that ended meanwhile, skipped), how many of them are
    queued, and what the connected workers offer them (Offers.check)."""

    __slots__ = ("caps", "epoch", "everywhere", "functions", "offered", "queue", "queued", "ready", "since", "tasks")

    def __init__(self, caps: frozenset[str], shared: FairQueue[Task]) -> None:
        self.caps = caps
        self.queue: FairQueue[Task] = ready_queue(shared.cost)
        self.ready = shared  # the queue its ready tasks go to now
        self.queued = 0  # its tasks in state QUEUED
        self.tasks = 0  # its tasks in the scheduler (the core forgets a need once it has none)
        self.since: float | None = None  # since when no connected worker offers it (while tasks are queued)
        self.epoch = -1  # the Offers epoch `offered` and `everywhere` were worked out at
        self.offered = False  # some connected worker offers every capability of it
        self.everywhere = False  # every connected worker does (then placement needs no filter)
        # The counters of the functions its tasks were submitted with (an ordered set, noted once per batch), for the
        # scaling policy's estimate of its work; the scaling tick forgets those with no task in flight.
        self.functions: dict[FunctionStats, None] = {}

    def __repr__(self) -> str:
        return f"<Need {sorted(self.caps)} queued={self.queued} tasks={self.tasks}>"


class Offers:
    """The distinct capability sets of the connected workers, with how many workers offer each. Each change of the
    distinct sets starts a new epoch, after which each need works out again whether it is offered."""

    __slots__ = ("_keys", "counts", "epoch")

    def __init__(self) -> None:
        self.counts: dict[frozenset[str], int] = {}
        self._keys: dict[frozenset[str], frozenset[str]] = {}  # each set offered, to itself: the interned object
        self.epoch = 0

    def add(self, caps: frozenset[str]) -> frozenset[str]:
        """Count a worker offering `caps`; returns the one object of that value the workers offering it share."""
        known = self._keys.get(caps)
        if known is None:
            known = self._keys[caps] = caps
            self.counts[caps] = 0
            self.epoch += 1
        self.counts[known] += 1
        return known

    def remove(self, caps: frozenset[str]) -> None:
        count = self.counts[caps] - 1
        if count:
            self.counts[caps] = count
        else:
            del self.counts[caps]
            del self._keys[caps]
            self.epoch += 1

    def check(self, need: Need) -> None:
        """Bring need.offered and need.everywhere up to date."""
        if need.epoch != self.epoch:
            caps = need.caps
            need.offered = any(caps <= offer for offer in self.counts)
            need.everywhere = all(caps <= offer for offer in self.counts)
            need.epoch = self.epoch


class NeedTable:
    """Every need by its capabilities (`by_caps`; the empty one, `no_need`, always), the shared ready queue
    (`ready`), the split needs (`split`, in the order they split) and the Offers. Every queue charges clients by
    time (`cost`: the scheduler's estimate of a task's run time)."""

    __slots__ = ("by_caps", "cost", "no_need", "offers", "ready", "split")

    def __init__(self, cost: Callable[[Task], float]) -> None:
        self.cost = cost
        self.ready = ready_queue(cost)
        self.no_need = Need(frozenset(), self.ready)
        self.by_caps: dict[frozenset[str], Need] = {self.no_need.caps: self.no_need}
        self.split: dict[Need, None] = {}
        self.offers = Offers()

    def batch(self, requirements: list[list[str]] | None) -> tuple[list[Need | frozenset[str] | None], set[str]]:
        """For each of a batch's requirements its Need, or its capabilities if it has none yet (made when a task
        has it: of()), or None if it is not valid; [no_need] if there are none. And what is wrong with the invalid."""
        if not requirements:
            return [self.no_need], set()
        needs: list[Need | frozenset[str] | None] = []
        problems: set[str] = set()
        for required in requirements:
            caps = frozenset(required)
            need = self.by_caps.get(caps)  # filed: checked already
            if need is not None and len(required) <= MAX_REQUIRED:
                needs.append(need)
                continue
            problem = capabilities_problem(required, MAX_REQUIRED, "a task's requirement")
            if problem is not None:
                problems.add(problem)
                needs.append(None)
            else:
                needs.append(caps)
        return needs, problems

    def of(self, caps: frozenset[str]) -> Need:
        """The Need of these capabilities (made on first use)."""
        need = self.by_caps.get(caps)
        if need is None:
            need = self.by_caps[caps] = Need(caps, self.ready)
            self.offers.check(need)
            if not need.everywhere:
                need.ready = need.queue
                self.split[need] = None
        return need

    def offer(self, caps: frozenset[str]) -> frozenset[str]:
        """A worker offering `caps` joined; returns the one object of that value (Offers.add)."""
        epoch = self.offers.epoch
        known = self.offers.add(caps)
        if self.offers.epoch != epoch:
            self._offers_changed()
        return known

    def withdraw(self, caps: frozenset[str]) -> None:
        """A worker offering `caps` left."""
        epoch = self.offers.epoch
        self.offers.remove(caps)
        if self.offers.epoch != epoch:
            self._offers_changed()

    def _offers_changed(self) -> None:
        """A capability set appeared or went: the needs every connected worker offers (all while none is connected)
        share the ready queue; the others are split, with a queue each. Moves the ready tasks of the needs that
        changed side (once per change of the distinct sets: rare)."""
        leaving: list[Need] = []
        joining: list[Need] = []
        for need in self.by_caps.values():
            self.offers.check(need)
            if need.everywhere == (need in self.split):
                (joining if need.everywhere else leaving).append(need)
        if leaving:
            for need in leaving:
                need.ready = need.queue
                self.split[need] = None
            shared, self.ready = self.ready, ready_queue(self.cost)
            for need in self.by_caps.values():
                if need.ready is shared:
                    need.ready = self.ready
            while shared:  # in the order they would be taken: the new queue takes them in the same order
                task = shared.popleft()
                if task.state == _QUEUED:
                    task.need.ready.append(task)
        for need in joining:
            del self.split[need]
            need.ready = self.ready
            need.since = None
            queue = need.queue
            while queue:
                task = queue.popleft()
                if task.state == _QUEUED:
                    self.ready.append(task)

    def prune(self) -> None:
        """Forget the needs no task has any more (but the empty one, the default), once more than KEEP_NEEDS."""
        if len(self.by_caps) <= KEEP_NEEDS:
            return
        for caps in [caps for caps, need in self.by_caps.items() if not need.tasks and need is not self.no_need]:
            need = self.by_caps.pop(caps)
            need.queue.clear()
            self.split.pop(need, None)

    def extend_ready(self, tasks: list[Task]) -> None:
        """Append tasks that became ready to their ready queues, in their order (each queue gets its own in the
        order given: as appending them one by one would)."""
        if not tasks:
            return
        if not self.split:  # the common case: one queue
            self.ready.extend(tasks)
            return
        for queue, mine in _by_queue(tasks):
            queue.extend(mine)

    def requeue_front(self, tasks: list[Task]) -> None:
        """Put tasks back at the front of their ready queues, in their order."""
        if not tasks:
            return
        if not self.split:  # the common case: one queue
            self.ready.extendleft(tasks)
            return
        for queue, mine in _by_queue(tasks):
            queue.extendleft(mine)

    def any_ready(self) -> bool:
        """Whether some ready queue holds anything (queued tasks, or ended ones not yet skipped)."""
        if self.ready:
            return True
        for need in self.split:
            if need.queue:
                return True
        return False

    def clear(self) -> None:
        """No task is queued: the ready queues hold only tasks that ended while queued (skipped lazily); let their
        arguments go."""
        if self.ready:
            self.ready.clear()
        for need in self.split:
            if need.queue:
                need.queue.clear()

    def first_waiting(self) -> FairQueue[Task] | None:
        """The shared queue if it holds anything, else the first split queue that does; None if all are empty."""
        if self.ready:
            return self.ready
        return next((need.queue for need in self.split if need.queue), None)


def _by_queue(tasks: list[Task]) -> list[tuple[FairQueue[Task], list[Task]]]:
    """The tasks grouped by the ready queue each goes to (task.need.ready), each group in the order given."""
    groups: dict[int, tuple[FairQueue[Task], list[Task]]] = {}
    for task in tasks:
        queue = task.need.ready
        groups.setdefault(id(queue), (queue, []))[1].append(task)
    return list(groups.values())
