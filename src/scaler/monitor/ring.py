"""Bounded, numbered histories for scaler_ui: the last n items appended, each with a sequence number (1, 2, ...), so
that a page can ask for what came since the number it saw last.

Pure data structures; no I/O, no clock.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Numbering:
    """The sequence numbers of the last `capacity` of `total` items appended: item k (from 1) sits in slot
    (k - 1) % capacity."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a ring holds at least one item, not {capacity}")
        self.capacity = capacity
        self.total = 0  # items appended so far; the newest one's number

    @property
    def first(self) -> int:
        """The number of the oldest item kept (total + 1 when empty)."""
        return max(1, self.total - self.capacity + 1)

    def __len__(self) -> int:
        return self.total - self.first + 1

    def slot(self, number: int) -> int:
        return (number - 1) % self.capacity

    def numbers_since(self, since: int, limit: int | None = None) -> range:
        """The numbers kept that are greater than `since`, oldest first; with `limit`, only the newest `limit`."""
        start = max(since + 1, self.first)
        if limit is not None:
            start = max(start, self.total - limit + 1)
        return range(start, self.total + 1)

    def newest_first(self) -> range:
        return range(self.total, self.first - 1, -1)


class Ring(Numbering, Generic[T]):
    """The last `capacity` items appended, numbered."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._items: list[T | None] = []

    def append(self, item: T) -> int:
        """Keep `item` (dropping the oldest when full); its number."""
        self.total += 1
        if len(self._items) < self.capacity:
            self._items.append(item)
        else:
            self._items[self.slot(self.total)] = item
        return self.total

    def get(self, number: int) -> T | None:
        if not self.first <= number <= self.total:
            return None
        return self._items[self.slot(number)]

    def since(self, since: int, limit: int | None = None) -> list[tuple[int, T]]:
        """(number, item) for the items kept numbered above `since`, oldest first (the newest `limit` with one)."""
        return [(n, self._at(n)) for n in self.numbers_since(since, limit)]

    def newest(self) -> Iterator[tuple[int, T]]:
        return ((n, self._at(n)) for n in self.newest_first())

    def latest(self) -> T | None:
        return self.get(self.total)

    def _at(self, number: int) -> T:
        item = self._items[self.slot(number)]
        assert item is not None
        return item


class Spark:
    """The last `size` values of one measure (a worker's cpu, say), as 32-bit floats (4 bytes a point), or another
    array type code ("d": 64-bit floats, for times)."""

    __slots__ = ("_count", "_values")

    def __init__(self, size: int, typecode: str = "f") -> None:
        self._values: array[Any] = array(typecode, bytes(array(typecode).itemsize * size))
        self._count = 0

    def add(self, value: float) -> None:
        self._values[self._count % len(self._values)] = value
        self._count += 1

    def values(self) -> list[float]:
        """Oldest first: at most `size` of them."""
        size = len(self._values)
        if self._count <= size:
            return self._values[: self._count].tolist()
        split = self._count % size
        return (self._values[split:] + self._values[:split]).tolist()
