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
from typing import TYPE_CHECKING

from scaler.core.fair import FairQueue

if TYPE_CHECKING:
    from scaler.core.scheduler.tasks import Task

Capabilities = frozenset  # of str; interned: equal sets are one object (Offers.intern, SchedulerCore._need)

_CLIENT = operator.attrgetter("client")
_PRIORITY = operator.attrgetter("priority")


def ready_queue() -> FairQueue[Task]:
    """A queue of ready tasks: taken client by client in turns, higher priority first within a client."""
    return FairQueue(_CLIENT, _PRIORITY)


class Need:
    """The tasks that require one set of capabilities: where their ready tasks wait (`ready`: the shared queue, or
    `queue`, its own while it is split; a queue may hold tasks that ended meanwhile, skipped), how many of them are
    queued, and what the connected workers offer them (Offers.check)."""

    __slots__ = ("caps", "epoch", "everywhere", "offered", "queue", "queued", "ready", "since", "tasks")

    def __init__(self, caps: frozenset[str], shared: FairQueue[Task]) -> None:
        self.caps = caps
        self.queue: FairQueue[Task] = ready_queue()
        self.ready = shared  # the queue its ready tasks go to now
        self.queued = 0  # its tasks in state QUEUED
        self.tasks = 0  # its tasks in the scheduler (the core forgets a need once it has none)
        self.since: float | None = None  # since when no connected worker offers it (while tasks are queued)
        self.epoch = -1  # the Offers epoch `offered` and `everywhere` were worked out at
        self.offered = False  # some connected worker offers every capability of it
        self.everywhere = False  # every connected worker does (then placement needs no filter)

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
