"""A queue shared by several owners (clients), taken in turns. Pure; no I/O.

The scheduler's queue of ready tasks and a worker agent's queue of tasks waiting for a processor are both
FairQueues keyed by the client that submitted each task: one client's million tasks no longer make another
client's single task wait until they are all gone. Within one owner, items keep their order, except that with a
`priority` function (the scheduler's queue: Client.options(priority=...)) an owner's higher-priority items come
first; priorities never change whose turn it is.

With a `cost` function (the scheduler's queue: an estimate of each task's run time), owners take turns by time
instead of by item: the owner that has been charged least goes next, so an owner of tiny tasks is not held to one
task per long task of another. An owner that (re)appears starts level with the owner served last: it neither waits
for the others' past nor saves up credit while it had nothing queued.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Generic, TypeVar

from scaler.protocol.records import ID_PREFIX_SHIFT

T = TypeVar("T")


def owner_of_task(task_id: int) -> int:
    """The session (client) a task id belongs to: its id prefix."""
    return task_id >> ID_PREFIX_SHIFT


class _Levels(Generic[T]):
    """One owner's items by priority, higher first, FIFO within a priority: what a lane becomes once it gets an
    item of a priority other than 0 (until it empties). The deque methods a lane needs, nothing more."""

    __slots__ = ("_levels", "_order", "_priority", "_size")

    def __init__(self, items: Iterable[T], priority: Callable[[T], int]) -> None:
        self._priority = priority
        self._levels: dict[int, deque[T]] = {}
        self._order: list[int] = []  # the priorities present, negated and sorted: the highest first
        self._size = 0
        for item in items:
            self.append(item)

    def _level(self, item: T) -> deque[T]:
        priority = self._priority(item)
        level = self._levels.get(priority)
        if level is None:
            level = self._levels[priority] = deque()
            bisect.insort(self._order, -priority)
        return level

    def append(self, item: T) -> None:
        self._level(item).append(item)
        self._size += 1

    def appendleft(self, item: T) -> None:
        self._level(item).appendleft(item)
        self._size += 1

    def popleft(self) -> T:
        priority = -self._order[0]
        level = self._levels[priority]
        item = level.popleft()
        if not level:
            del self._levels[priority]
            del self._order[0]
        self._size -= 1
        return item

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[T]:
        for negated in self._order:
            yield from self._levels[-negated]


class FairQueue(Generic[T]):
    """FIFO per owner; `popleft` takes from the owners with items in turn (round robin, one item per turn).

    `appendleft` and `extendleft` put items back at the front: theirs is then the next turn. With `priority`, an
    owner's items of higher priority come before its others (same priority: FIFO); priority 0 costs nothing.

    With `cost` (settable later: `queue.cost = ...`), turns go by time: `popleft` takes from the owner charged least
    (ties: in turn order) and charges it the item's cost; items put back at the front are first of their owner's
    lane but do not make it that owner's turn (an owner without items that gets one put back starts charged for it,
    after the owner served last: these items had their turn when they were taken). With one owner nothing is
    charged: the queue is then plain FIFO."""

    __slots__ = ("_clock", "_key", "_lanes", "_priority", "_size", "_turns", "_used", "cost")

    def __init__(
        self,
        key: Callable[[T], Hashable],
        priority: Callable[[T], int] | None = None,
        cost: Callable[[T], float] | None = None,
    ) -> None:
        self._key = key
        self._priority = priority
        self.cost = cost
        self._lanes: dict[Hashable, deque[T] | _Levels[T]] = {}
        self._turns: deque[Hashable] = deque()  # the owners with items, whose turn comes first at the left
        self._size = 0
        self._used: dict[Hashable, float] = {}  # with `cost`: what each owner with items was charged
        self._clock = 0.0  # with `cost`: the charge of the owner served last, where a (re)appearing owner starts

    def _lane(self, owner: Hashable, lane: deque[T] | _Levels[T], item: T) -> deque[T] | _Levels[T]:
        """The lane to put `item` in: a plain deque becomes _Levels once an item of another priority than 0 comes."""
        if self._priority is not None and type(lane) is deque and self._priority(item):
            lane = self._lanes[owner] = _Levels(lane, self._priority)
        return lane

    def append(self, item: T) -> None:
        owner = self._key(item)
        lane = self._lanes.get(owner)
        if lane is None:
            lane = self._lanes[owner] = deque()
            self._turns.append(owner)
            self._used[owner] = self._clock
        if self._priority is not None:
            lane = self._lane(owner, lane, item)
        lane.append(item)
        self._size += 1

    def extend(self, items: Iterable[T]) -> None:
        """Append each of `items`, in order: exactly as many appends would, with one call (a batch of tasks)."""
        key, lanes, turns, used = self._key, self._lanes, self._turns, self._used
        priority = self._priority
        owner: Hashable = None
        lane: deque[T] | _Levels[T] | None = None
        added = 0
        for item in items:
            mine = key(item)
            if lane is None or mine is not owner:  # the same owner as the item before: its lane, not looked up
                owner = mine
                lane = lanes.get(owner)
                if lane is None:
                    lane = lanes[owner] = deque()
                    turns.append(owner)
                    used[owner] = self._clock
            if priority is not None and type(lane) is deque and priority(item):
                lane = self._lane(owner, lane, item)
            lane.append(item)
            added += 1
        self._size += added

    def appendleft(self, item: T) -> None:
        owner = self._key(item)
        lane = self._lanes.get(owner)
        if lane is None:
            lane = self._lanes[owner] = deque()
            if self.cost is None:
                self._turns.appendleft(owner)
                self._used[owner] = self._clock
            else:  # by time, an item put back was taken before, in a turn this owner had: it pays for it again
                self._turns.append(owner)
                self._used[owner] = self._clock + self.cost(item)
        elif self.cost is not None:
            pass  # turns go by time: the item is first of its lane, whose turn it is stays as it was
        elif self._turns[0] != owner:
            self._turns.remove(owner)  # owners are few: clients, not tasks
            self._turns.appendleft(owner)
        if self._priority is not None:
            lane = self._lane(owner, lane, item)
        lane.appendleft(item)
        self._size += 1

    def extendleft(self, items: Iterable[T]) -> None:
        """Put `items` back at the front, in their order (unlike deque.extendleft)."""
        for item in reversed(list(items)):
            self.appendleft(item)

    def popleft(self) -> T:
        turns = self._turns
        if not turns:
            raise IndexError("pop from an empty FairQueue")
        cost = self.cost
        if cost is not None and len(turns) > 1:
            return self._pop_by_time(cost)
        owner = turns[0]
        lane = self._lanes[owner]
        item = lane.popleft()
        if lane:
            turns.rotate(-1)  # this owner's next item waits for every other owner's turn
        else:
            turns.popleft()
            del self._lanes[owner]
            del self._used[owner]
        self._size -= 1
        return item

    def popmany(self, count: int) -> list[T]:
        """The next `count` items (fewer if the queue holds fewer), taken: exactly what as many poplefts would give,
        with one call. With one owner (the common case: one client's map), a slice of its lane."""
        turns = self._turns
        if len(turns) != 1:
            return [self.popleft() for _ in range(min(count, self._size))]
        owner = turns[0]
        lane = self._lanes[owner]
        if type(lane) is not deque:
            items = [lane.popleft() for _ in range(min(count, len(lane)))]
        elif count >= len(lane):
            items = list(lane)
            lane.clear()
        else:
            pop = lane.popleft
            items = [pop() for _ in range(count)]
        if not lane:
            turns.popleft()
            del self._lanes[owner]
            del self._used[owner]
        self._size -= len(items)
        return items

    def _next_owner(self) -> Hashable:
        """The owner whose item comes next: with `cost` and several owners, the one charged least."""
        turns = self._turns
        if self.cost is None or len(turns) == 1:
            return turns[0]
        used = self._used
        return min(turns, key=used.__getitem__)  # owners are few: clients, not tasks

    def _pop_by_time(self, cost: Callable[[T], float]) -> T:
        owner = self._next_owner()
        lane = self._lanes[owner]
        item = lane.popleft()
        start = self._used[owner]
        self._clock = start
        turns = self._turns
        turns.remove(owner)
        if lane:
            self._used[owner] = start + cost(item)
            turns.append(owner)  # among owners charged alike, the others go first
        else:
            del self._lanes[owner]
            del self._used[owner]
        self._size -= 1
        return item

    def peek(self) -> T:
        """The item `popleft` would take, left in place."""
        if not self._turns:
            raise IndexError("peek into an empty FairQueue")
        lane = self._lanes[self._next_owner()]
        return next(iter(lane))

    def clear(self) -> None:
        self._lanes.clear()
        self._turns.clear()
        self._used.clear()
        self._size = 0

    def owners(self) -> int:
        return len(self._turns)

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __iter__(self) -> Iterator[T]:
        """Every item, owner by owner (not in the order popleft would give them)."""
        for lane in list(self._lanes.values()):
            yield from lane

    def __repr__(self) -> str:
        return f"<FairQueue {self._size} items of {len(self._turns)} owners>"
