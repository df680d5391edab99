"""The scheduler's CPU choice (scaler.io.cpus.check_cpu, pin_to_cpu): checked where it enters, applied to the
calling thread only (each test pins a thread of its own, never the test process), and "auto" keeps off the CPUs
other processes claimed (claim_cpu: real processes hold the claims, in a $XDG_RUNTIME_DIR of the test's own)."""

from __future__ import annotations

import functools
import multiprocessing
import os
import stat
import threading
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

from scaler.io.cpus import _ranges, allowed_cpus, check_cpu, claim_cpu, pin_to_cpu, release_cpu

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux CPU affinity")
two_cpus = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs or more"
)
FORK = multiprocessing.get_context("fork")


@pytest.fixture(autouse=True)
def claims(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The folder of this test's CPU claims (nobody else's claims count here); this process's claim let go after."""
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    release_cpu()
    yield runtime / "scaler"
    release_cpu()


class Holder:
    """Another process that runs `action` (claim_cpu(n), pin_to_cpu("auto")...), reports what it returned, and keeps
    its claim until stop()."""

    def __init__(self, action: Callable[[], Any]) -> None:
        self._receive, send = FORK.Pipe(duplex=False)
        self._stop, self._told = FORK.Pipe(duplex=False)
        self.process = FORK.Process(target=self._run, args=(action, send, self._stop), daemon=True)
        self.process.start()
        send.close()
        assert self._receive.poll(10), "the holder process did not answer"
        self.result = self._receive.recv()

    @staticmethod
    def _run(action: Callable[[], Any], send: Connection, stop: Connection) -> None:
        send.send(action())
        stop.poll(30)

    def stop(self) -> None:
        self._told.send(None)
        self.process.join(10)
        assert self.process.exitcode == 0


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
    answer: tuple[int | None, set[int]] = out[0]
    return answer


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


def test_auto_pins_to_the_last_allowed_cpu_when_there_is_a_choice(claims: Path) -> None:
    allowed = allowed_cpus()
    pinned, cpus = in_a_thread("auto")
    if len(allowed) > 1:
        assert (pinned, cpus) == (allowed[-1], {allowed[-1]})
        assert (claims / f"cpu{allowed[-1]}.claim").read_text() == f"{os.getpid()}\n"
        assert stat.S_IMODE((claims / f"cpu{allowed[-1]}.claim").stat().st_mode) == 0o600
    else:
        assert (pinned, cpus) == (None, set(allowed))


@two_cpus
def test_auto_keeps_off_a_cpu_another_process_claimed() -> None:
    allowed = allowed_cpus()
    holder = Holder(lambda: claim_cpu(allowed[-1]))
    try:
        assert holder.result is True
        assert in_a_thread("auto") == (allowed[-2], {allowed[-2]})
    finally:
        holder.stop()


@two_cpus
def test_two_processes_on_auto_get_two_cpus() -> None:
    first = Holder(lambda: pin_to_cpu("auto"))
    second = Holder(lambda: pin_to_cpu("auto"))
    try:
        assert first.result is not None and second.result is not None
        assert first.result != second.result
    finally:
        first.stop()
        second.stop()


@two_cpus
def test_auto_does_not_pin_when_every_cpu_is_claimed() -> None:
    pair = allowed_cpus()[:2]
    holders = [Holder(functools.partial(claim_cpu, cpu)) for cpu in pair]
    try:

        def run() -> tuple[int | None, set[int]]:
            os.sched_setaffinity(0, set(pair))  # this thread may use those two only: both are claimed
            return pin_to_cpu("auto"), os.sched_getaffinity(0)

        assert in_a_thread_running(run) == (None, set(pair))
    finally:
        for holder in holders:
            holder.stop()


@two_cpus
def test_a_claim_ends_with_its_process_or_when_let_go(claims: Path) -> None:
    cpu = allowed_cpus()[-1]
    outcome(lambda: claim_cpu(cpu))  # it ended without letting go: the kernel released its lock
    assert claim_cpu(cpu)
    release_cpu()
    assert not (claims / f"cpu{cpu}.claim").exists()
    assert outcome(lambda: claim_cpu(cpu)) is True


@two_cpus
def test_a_cpu_given_by_number_is_claimed_so_that_auto_keeps_off_it() -> None:
    allowed = allowed_cpus()
    assert in_a_thread(allowed[-1]) == (allowed[-1], {allowed[-1]})
    assert outcome(lambda: pin_to_cpu("auto")) == allowed[-2]


@two_cpus
def test_a_forked_child_does_not_inherit_the_claim() -> None:
    cpu = allowed_cpus()[-1]
    assert claim_cpu(cpu)
    assert outcome(lambda: claim_cpu(cpu)) is False  # the parent still holds it
    assert claim_cpu(cpu)  # and the child's exit took nothing from the parent
    assert outcome(lambda: claim_cpu(cpu)) is False


def outcome(action: Callable[[], Any]) -> Any:
    """What `action` returns in another process, which has ended since."""
    holder = Holder(action)
    holder.stop()
    return holder.result


def in_a_thread_running(run: Callable[[], Any]) -> Any:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(run()))
    thread.start()
    thread.join(10)
    return out[0]


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
