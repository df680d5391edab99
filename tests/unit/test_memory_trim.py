"""When the scheduler gives memory back (scaler.io.memory.MemoryTrimmer): once quiet after growing, not while a
burst runs or drains, not over and over, at most every interval; and malloc_trim itself, where glibc has it."""

from __future__ import annotations

import logging

import pytest

from scaler.io.memory import MIB, QUIET_HELD, MemoryTrimmer, malloc_trim

BASE = 40 * MIB
PEAK = 500 * MIB


class FakeMemory:
    """An RSS the test sets, and a malloc_trim that brings it down to `trimmed_to`."""

    def __init__(self) -> None:
        self.rss = BASE
        self.trimmed_to = BASE
        self.trims = 0

    def trim(self, pad: int) -> int:
        assert pad == 0
        self.trims += 1
        self.rss = self.trimmed_to
        return 1


def trimmer(memory: FakeMemory) -> MemoryTrimmer:
    return MemoryTrimmer(lambda: memory.rss, memory.trim, growth=64 * MIB, interval=10.0)


def feed(t: MemoryTrimmer, memory: FakeMemory, start: float, helds: list[int]) -> list[bool]:
    """One check a second, from `start`, with these counts of held tasks and objects."""
    return [t.check(start + i, memory.rss, held) for i, held in enumerate(helds)]


def test_it_trims_once_quiet_after_a_burst(caplog: pytest.LogCaptureFixture) -> None:
    memory = FakeMemory()
    t = trimmer(memory)
    memory.rss = PEAK
    with caplog.at_level(logging.DEBUG, "scaler.io.memory"):
        # the check that sees the drop is not quiet (draining), the next two are
        assert feed(t, memory, 0, [5000, 5000, 0, 0, 0, 0]) == [False, False, False, False, True, False]
    assert memory.trims == 1 and memory.rss == BASE
    assert "RSS 500 -> 40 MiB" in caplog.text and "malloc_trim returned 1" in caplog.text


def test_it_waits_for_a_burst_to_drain_and_never_trims_a_process_that_holds_its_peak() -> None:
    memory = FakeMemory()
    t = trimmer(memory)
    memory.rss = PEAK
    assert not any(feed(t, memory, 0, [1_000_000] * 5))  # a backlog waits for workers: its memory is in use
    draining = [1_000_000 // 2**k for k in range(1, 12)]  # a quarter of the peak, and less, but falling fast
    assert not any(feed(t, memory, 5, draining))
    assert feed(t, memory, 16, [200, 200, 200, 200]) == [False, False, True, False]  # drained: quiet twice


def test_a_small_steady_load_is_quiet() -> None:
    memory = FakeMemory()
    t = trimmer(memory)
    memory.rss = PEAK
    assert feed(t, memory, 0, [QUIET_HELD, 3, 50]) == [False, True, False]


def test_it_needs_growth_and_leaves_alone_memory_a_trim_could_not_free() -> None:
    memory = FakeMemory()
    t = trimmer(memory)
    memory.rss = BASE + 63 * MIB
    assert not any(feed(t, memory, 0, [0] * 5))  # not worth a trim
    memory.rss = memory.trimmed_to = BASE + 100 * MIB  # in use (fragmented, say): a trim frees nothing
    assert feed(t, memory, 5, [0] * 30).count(True) == 1
    memory.rss = BASE + 170 * MIB  # grew again, beyond the futile trim's result plus growth
    assert feed(t, memory, 35, [0, 0]) == [True, False]


def test_trims_are_rate_limited() -> None:
    memory = FakeMemory()
    t = trimmer(memory)
    memory.rss = PEAK
    assert feed(t, memory, 0, [0, 0]) == [False, True]
    memory.rss = PEAK  # another burst, at once
    assert feed(t, memory, 2, [5000, 0, 0, 0, 0, 0, 0, 0, 0, 0]).index(True) == 9  # 10 s after the first trim
    assert t.trims == 2


def test_without_malloc_trim_nothing_happens() -> None:
    t = MemoryTrimmer(lambda: PEAK, None)
    assert not any(t.check(float(i), PEAK, 0) for i in range(30))


def test_malloc_trim_where_glibc_has_it() -> None:
    trim = malloc_trim()
    if trim is None:
        pytest.skip("not glibc: nothing to trim with")
    assert trim(0) in (0, 1)
