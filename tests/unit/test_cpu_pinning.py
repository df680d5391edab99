"""The scheduler's CPU choice (scaler.io.processes.check_cpu, pin_to_cpu): checked where it enters, applied to the
calling thread only (each test pins a thread of its own, never the test process)."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

from scaler.io.processes import _ranges, allowed_cpus, check_cpu, pin_to_cpu

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux CPU affinity")


def in_a_thread(choice: Any) -> tuple[int | None, set[int]]:
    """pin_to_cpu(choice) in a new thread: what it returned, and that thread's CPUs afterwards."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append((pin_to_cpu(choice), os.sched_getaffinity(0)))
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]  # type: ignore[no-any-return]


@pytest.mark.parametrize("choice", ["auto", "none", None])
def test_the_named_choices_are_accepted_as_they_are(choice: Any) -> None:
    assert check_cpu(choice) == choice


def test_a_cpu_number_may_be_given_as_text_or_number() -> None:
    cpu = allowed_cpus()[0]
    assert check_cpu(str(cpu)) == cpu
    assert check_cpu(cpu) == cpu


@pytest.mark.parametrize("choice", ["fast", "-1", "1.5", True, 2.0, ""])
def test_anything_else_is_refused_with_the_choices(choice: Any) -> None:
    with pytest.raises(ValueError, match="'auto', 'none' or a CPU number"):
        check_cpu(choice)


def test_a_cpu_this_process_may_not_use_is_refused_naming_those_it_may() -> None:
    allowed = allowed_cpus()
    with pytest.raises(ValueError, match=f"CPU 99999 is not one this process may run on \\({_ranges(allowed)}\\)"):
        check_cpu(99999)


def test_ranges_are_written_compactly() -> None:
    assert _ranges([0, 1, 2, 3, 6]) == "0-3, 6"
    assert _ranges([5]) == "5"
    assert _ranges([1, 3, 4]) == "1, 3-4"
    assert _ranges([]) == "none"


def test_a_cpu_number_pins_the_calling_thread_only() -> None:
    before = os.sched_getaffinity(0)
    cpu = allowed_cpus()[0]
    assert in_a_thread(cpu) == (cpu, {cpu})
    assert os.sched_getaffinity(0) == before


def test_auto_pins_to_the_last_allowed_cpu_when_there_is_a_choice() -> None:
    allowed = allowed_cpus()
    pinned, cpus = in_a_thread("auto")
    if len(allowed) > 1:
        assert (pinned, cpus) == (allowed[-1], {allowed[-1]})
    else:
        assert (pinned, cpus) == (None, set(allowed))


def test_none_leaves_the_thread_where_it_was() -> None:
    assert in_a_thread("none") == (None, os.sched_getaffinity(0))


def test_threads_started_after_pinning_inherit_it() -> None:
    cpu = allowed_cpus()[-1]
    seen: list[set[int]] = []

    def run() -> None:
        pin_to_cpu(cpu)
        child = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
        child.start()
        child.join(10)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    assert seen == [{cpu}]
