"""Giving memory back to the operating system once a burst is over (glibc's malloc_trim), for a long-lived shell.

glibc keeps what a process freed for reuse: the scheduler's payload frames (allocated by ZeroMQ's I/O thread, in an
arena of its own) stay resident after their tasks end, 5,000 arguments of 100 KB leaving some 400 MB that nothing
uses. `MemoryTrimmer.check`, called once a second with the process's RSS, trims when the process has gone quiet
after growing: never on the hot path, at most every `interval` seconds. Shell plumbing; no sockets, no core.
"""

from __future__ import annotations

import gc
import logging
import math
import sys
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

MIB = 1 << 20
TRIM_GROWTH_BYTES = 64 * MIB  # RSS above the lowest seen that makes a trim worth its cost
TRIM_INTERVAL_SECONDS = 10.0
# Quiet: holding at most QUIET_HELD tasks and objects, or a QUIET_SHARE-th of the most held since the last trim, and
# not draining: at most QUIET_HELD fewer than at the check before (a burst's tail is left to finish first).
QUIET_HELD = 100
QUIET_SHARE = 4


def malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim(pad), or None where there is none (another C library or OS, no ctypes)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes  # PyPy has it too

        libc = ctypes.CDLL("libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 (glibc's own: raises AttributeError with another C library)
        trim = libc.malloc_trim
        trim.argtypes = [ctypes.c_size_t]
        trim.restype = ctypes.c_int
    except (AttributeError, ImportError, OSError, ValueError):
        return None

    def call(pad: int) -> int:
        return int(trim(pad))

    return call


class MemoryTrimmer:
    """Decides when to give freed memory back, on a periodic check (the scheduler's: once a second). It trims when
    - the process is quiet at this check and the one before (see QUIET_HELD: what it holds, tasks and objects, is
      the caller's count),
    - its RSS is `growth` bytes above the lowest seen, and above what the last trim left if that one freed little
      (a process whose memory is in use is not trimmed over and over),
    - `interval` seconds passed since the last trim.
    A trim collects garbage (and with it the interpreter's free lists), then calls malloc_trim(0), which hands every
    free page of every glibc arena back to the OS."""

    def __init__(
        self,
        rss: Callable[[], int],
        trim: Callable[[int], int] | None = None,
        growth: int = TRIM_GROWTH_BYTES,
        interval: float = TRIM_INTERVAL_SECONDS,
        name: str = "Scheduler",
        before: Callable[[], None] | None = None,
    ) -> None:
        self.rss = rss
        self.before = before  # what the process itself lets go of first (caches, emptied tables)
        self.trim = trim
        self.growth = growth
        self.interval = interval
        self.name = name
        self.lowest = rss() if trim is not None else 0  # the lowest RSS seen, from the start
        self.futile: int | None = None  # the RSS a trim that freed less than `growth` left; None after a useful one
        self.last_trim = -math.inf
        self.trims = 0
        self._most_held = 0
        self._held = -1  # at the last check; -1: none yet
        self._was_quiet = False

    def check(self, now: float, rss: int, held: int) -> bool:
        """Called on a periodic tick with the RSS just read and how much the process holds; True if it trimmed."""
        if self.trim is None:
            return False
        self.lowest = min(self.lowest, rss)
        self._most_held = max(self._most_held, held)
        quiet = held <= max(QUIET_HELD, self._most_held // QUIET_SHARE) and held >= self._held - QUIET_HELD
        due = (
            quiet
            and self._was_quiet
            and rss >= self.lowest + self.growth
            and (self.futile is None or rss >= self.futile + self.growth)
            and now - self.last_trim >= self.interval
        )
        self._was_quiet = quiet
        self._held = held
        if due:
            self._trim(now, rss, held)
        return due

    def _trim(self, now: float, rss: int, held: int) -> None:
        assert self.trim is not None
        started = time.perf_counter()
        if self.before is not None:
            self.before()
        gc.collect()
        returned = self.trim(0)
        after = self.rss()
        logger.debug(
            "%s: gave memory back after a peak: RSS %.0f -> %.0f MiB in %.1f ms (malloc_trim returned %d; %d tasks "
            "and objects held, %d at most since the last trim)",
            self.name,
            rss / MIB,
            after / MIB,
            (time.perf_counter() - started) * 1e3,
            returned,
            held,
            self._most_held,
        )
        self.futile = after if rss - after < self.growth else None
        self.last_trim = now
        self.trims += 1
        self._most_held = held
