"""The cluster's supervision policy (scaler.worker.supervision), pure: which workers start when, which are restarted
after what back-off, what is said about each end, and the cluster's exit code. Time is passed in; nothing runs."""

from __future__ import annotations

import logging
import signal

import pytest

from scaler.worker.supervision import End, RestartPolicy, Supervisor, classify, describe

KILLED = -signal.SIGKILL


def running(n: int, now: float = 0.0, policy: RestartPolicy | None = None) -> Supervisor:
    """A supervisor whose n workers (pids 100, 101, ...) all started at `now`."""
    supervisor = Supervisor(n, policy)
    assert supervisor.due(now) == list(range(n))
    for index in range(n):
        supervisor.started(index, 100 + index, now)
    assert supervisor.due(now) == [] and supervisor.next_start() is None
    return supervisor


@pytest.mark.parametrize(
    "exitcode, asked, end",
    [
        (0, False, End.NORMAL),
        (0, True, End.NORMAL),
        (-signal.SIGTERM, True, End.ASKED),
        (-signal.SIGINT, True, End.ASKED),  # Ctrl-C reaches the whole process group
        (-signal.SIGTERM, False, End.CRASHED),  # somebody else's SIGTERM before the worker could handle it
        (-signal.SIGINT, False, End.CRASHED),
        (1, False, End.GAVE_UP),
        (1, True, End.GAVE_UP),
        (KILLED, False, End.CRASHED),
        (KILLED, True, End.CRASHED),
        (-signal.SIGSEGV, False, End.CRASHED),
        (3, False, End.CRASHED),
        (137, False, End.CRASHED),
    ],
)
def test_how_a_worker_ended(exitcode: int, asked: bool, end: End) -> None:
    assert classify(exitcode, asked) == end


def test_ends_in_words() -> None:
    assert describe(KILLED) == "was killed by SIGKILL"
    assert describe(-signal.SIGSEGV) == "was killed by SIGSEGV"
    assert describe(3) == "exited with code 3"


def test_back_off_doubles_up_to_the_limit_and_starts_afresh_after_a_healthy_life() -> None:
    policy = RestartPolicy()
    delays = [policy.next_delay(0, 0.5)]
    for _ in range(8):
        delays.append(policy.next_delay(delays[-1], 0.5))
    assert delays == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert policy.next_delay(60, 59.9) == 60
    assert policy.next_delay(60, 60.0) == 1


def test_a_killed_worker_is_restarted_after_a_growing_back_off() -> None:
    supervisor = running(2)
    assert supervisor.ended(0, KILLED, 5.0) == (
        logging.WARNING,
        "Worker[0] (pid 100) was killed by SIGKILL; restarting it in 1.0s (restart 1)",
    )
    assert supervisor.next_start() == 6.0 and supervisor.wait_seconds(5.5) == 0.5
    assert supervisor.due(5.9) == [] and supervisor.due(6.0) == [0]
    supervisor.started(0, 200, 6.0)
    _, text = supervisor.ended(0, -signal.SIGSEGV, 6.5)  # died again soon: the back-off doubles
    assert text == "Worker[0] (pid 200) was killed by SIGSEGV; restarting it in 2.0s (restart 2)"
    assert supervisor.due(8.4) == [] and supervisor.due(8.5) == [0]
    supervisor.started(0, 300, 8.5)
    _, text = supervisor.ended(0, 3, 8.5 + 60)  # it lived a minute: the back-off starts afresh
    assert text == "Worker[0] (pid 300) exited with code 3; restarting it in 1.0s (restart 3)"
    assert supervisor.running() == [101] and not supervisor.done()


@pytest.mark.parametrize(
    "exitcode, level, text",
    [
        (0, logging.INFO, "Worker[0] ended (exit code 0)"),
        (1, logging.WARNING, "Worker[0] ended (exit code 1); not restarted: it stopped on an error"),
    ],
)
def test_a_worker_that_ended_normally_or_gave_up_is_not_restarted(exitcode: int, level: int, text: str) -> None:
    supervisor = running(1)
    assert supervisor.ended(0, exitcode, 1.0) == (level, text)
    assert supervisor.next_start() is None and supervisor.due(1e9) == [] and supervisor.done()


def test_workers_stopped_by_our_sigterm_did_not_fail() -> None:
    """Those that handled it exit 0; those still starting are killed by it: neither failed."""
    supervisor = running(3)
    assert supervisor.stop() == [100, 101, 102]
    assert supervisor.ended(0, 0, 1.0) == (logging.INFO, "Worker[0] ended (exit code 0)")
    assert supervisor.ended(1, -signal.SIGTERM, 1.0) == (
        logging.INFO,
        "Worker[1] ended (killed by SIGTERM as the cluster stops)",
    )
    assert supervisor.ended(2, -signal.SIGTERM, 1.0)[0] == logging.INFO
    assert supervisor.done()
    assert supervisor.outcome() == (0, logging.INFO, "ClusterProcess: all workers ended")


def test_every_worker_stopped_while_starting_is_no_failure() -> None:
    """The README's shutdown example used to log 'every worker failed' when its workers were still starting."""
    supervisor = running(2)
    supervisor.stop()
    for index in range(2):
        supervisor.ended(index, -signal.SIGTERM, 0.1)
    assert supervisor.outcome()[0] == 0


def test_a_stop_during_a_back_off_drops_the_restart() -> None:
    supervisor = running(2, policy=RestartPolicy(first_delay_seconds=30))
    supervisor.ended(0, KILLED, 1.0)
    assert supervisor.next_start() == 31.0
    assert supervisor.stop() == [101]  # only the running worker is told; nothing waits for the back-off
    assert supervisor.next_start() is None and supervisor.wait_seconds(2.0) is None and supervisor.due(31.0) == []
    assert not supervisor.done()
    supervisor.ended(1, 0, 2.0)
    assert supervisor.done()
    assert supervisor.outcome()[0] == 0  # the crash was told when it happened; the stop dropped its restart


def test_a_worker_that_crashes_while_the_cluster_stops_is_not_restarted() -> None:
    supervisor = running(2)
    supervisor.stop()
    level, text = supervisor.ended(0, KILLED, 1.0)
    assert (level, text) == (
        logging.WARNING,
        "Worker[0] (pid 100) was killed by SIGKILL; not restarted: the cluster is stopping",
    )
    assert supervisor.due(1e9) == []


def test_no_worker_starts_once_stopping_even_one_never_started() -> None:
    """A signal in the middle of the first forks: the slots not forked yet never start."""
    supervisor = Supervisor(3)
    supervisor.started(0, 100, 0.0)
    assert supervisor.stop() == [100]
    assert supervisor.due(0.0) == []
    supervisor.ended(0, -signal.SIGTERM, 0.1)
    assert supervisor.done() and supervisor.outcome()[0] == 0


def test_the_cluster_fails_only_when_every_worker_failed() -> None:
    supervisor = running(2)
    supervisor.ended(0, 1, 1.0)
    supervisor.ended(1, 0, 1.0)
    assert supervisor.outcome()[0] == 0
    supervisor = running(2)
    supervisor.ended(0, 1, 1.0)
    supervisor.ended(1, 1, 1.0)
    assert supervisor.done()
    assert supervisor.outcome() == (1, logging.ERROR, "ClusterProcess: every worker failed")


def test_a_worker_restarted_after_a_crash_that_then_ends_normally_did_not_fail() -> None:
    supervisor = running(1)
    supervisor.ended(0, KILLED, 1.0)
    supervisor.started(0, 200, 2.0)
    supervisor.ended(0, 0, 3.0)
    assert supervisor.done() and supervisor.outcome()[0] == 0


def test_no_workers_is_no_failure() -> None:
    supervisor = Supervisor(0)
    assert supervisor.done() and supervisor.outcome()[0] == 0
