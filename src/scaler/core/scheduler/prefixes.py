"""Id prefixes: each session mints its task and object ids under a prefix of its own (the id's top bits).

A fresh prefix for each new session while there are fresh ones; those of ended sessions of which nothing remains are
reused only once REUSE_PREFIXES_FROM of them wait, oldest first: ids stay unique for a long while in normal use, and
a storm of hellos recycles a bounded set instead of using up the 2**24 prefixes. Pure. Python 3.9 (PyPy scheduler).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from scaler.protocol.records import MAX_ID_PREFIX

if TYPE_CHECKING:
    from scaler.core.scheduler.sessions import ClientSession

REUSE_PREFIXES_FROM = 4096


class Prefixes:
    __slots__ = ("free", "last", "next")

    def __init__(self, last: int = MAX_ID_PREFIX) -> None:
        self.next = 1  # the next fresh prefix
        self.last = last  # the last prefix there is
        self.free: deque[int] = deque()  # of ended sessions of which nothing remains, oldest first

    def take(self) -> int | None:
        """A prefix for a new session: a fresh one, or the oldest free one once enough are waiting (or the fresh ones
        are used up); None if there is none at all."""
        free = self.free
        if free and (len(free) >= REUSE_PREFIXES_FROM or self.next > self.last):
            return free.popleft()
        if self.next > self.last:
            return None
        prefix = self.next
        self.next += 1
        return prefix

    def claim(self, prefix: int) -> None:
        """`prefix` is a restored session's (the journal's): never handed out while it is. (Fresh prefixes below it
        that no session holds are skipped, not reused.)"""
        self.next = max(self.next, prefix + 1)
        if prefix in self.free:
            self.free.remove(prefix)

    def release(self, prefix: int) -> None:
        """Nothing remains of the session that had `prefix`: it may be reused."""
        self.free.append(prefix)

    def reclaim(self, client: ClientSession) -> None:
        """A gone client's prefix is free again once none of its tasks or objects remains: no id it minted can
        then be confused with one a new session mints (a worker's late result for a task of an ended session finds
        no task, since tasks are looked up in the worker session they were assigned to)."""
        if client.gone and not client.task_count and not client.objects and client.prefix:
            self.release(client.prefix)
            client.prefix = 0
