"""SchedulerCore's figures for monitors (issue 16): per-function counters, the status period's task events, failures,
printed output and departed workers (only while monitored), taskOutput forwarding, one moment per worker row.

State is built only by feeding events (Driver runs validate() after each one, with its check that every function's
submitted = ended + in flight).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from scaler.core.scheduler import Received, monitoring
from scaler.core.scheduler.monitoring import EVENT_TASKS, MAX_FUNCTIONS, MAX_TEXT, OTHER_FUNCTIONS, UNNAMED
from scaler.protocol.messages import (
    FLAG_PROFILING,
    FLAG_STREAM_OUTPUT,
    ID_COUNTER_MASK,
    NO_NAME,
    OUTPUT_ERROR,
    OUTPUT_STDERR,
    OUTPUT_STDOUT,
    CancelTasks,
    Disconnect,
    Error,
    ErrorCode,
    FunctionStatus,
    Heartbeat,
    OutputRecord,
    PutObjects,
    SubmitTasks,
    TaskFailure,
    TaskOutput,
    TaskResults,
    TasksStarted,
    TaskStatus,
)
from scaler.protocol.records import DURATION_BOUNDS_US
from tests.core_dump import canonical, first_difference
from tests.unit.scheduler_driver import Driver, logs, of_type, ok, results, sends, submit, tid

C, W1, W2 = b"c1", b"w1", b"w2"
P = 1
F, G = tid(P, 1), tid(P, 2)  # the client's two function objects, named "f" and "g"


def t(n: int) -> int:
    return tid(P, n + 2)


def connected(monitored: bool = False, capacity: int = 4, **settings: Any) -> Driver:
    """Client C with functions F ("f") and G ("g"), worker W1."""
    d = Driver(**settings)
    d.core.monitored = monitored
    assert d.client(C) == P
    d.recv(C, PutObjects([F, G], [b"<f>", b"<g>"], ["f", "g"]))
    d.worker(W1, capacity)
    return d


def counts(d: Driver) -> dict[str, tuple[int, ...]]:
    """name -> (submitted, running, success, error, canceled, failed), from a status."""
    return {
        f.name: (f.submitted, f.running, f.success, f.error, f.canceled, f.failed) for f in d.core.status().functions
    }


def output(*pieces: tuple[int, int, str]) -> TaskOutput:
    return TaskOutput([i for i, _, _ in pieces], bytes(s for _, s, _ in pieces), [x for _, _, x in pieces])


# ----------------------------------------------------------------------------------------------- functions
def test_tasks_are_counted_by_function_name_from_submission_to_end() -> None:
    d = connected()
    d.recv(C, submit(*((t(i), F, [b"x"]) for i in range(1, 4)), (t(4), G, [])))
    d.recv(W1, results((t(1), TaskStatus.SUCCESS, b"r"), (t(2), TaskStatus.ERROR, b"e")))
    d.recv(C, submit((t(5), F, [])))  # queued: the worker is full
    assert counts(d) == {"f": (4, 2, 1, 1, 0, 0), "g": (1, 1, 0, 0, 0, 0)}
    d.recv(W1, results((t(3), TaskStatus.FAILED, b"why"), (t(4), TaskStatus.TIMED_OUT, b"late")))
    d.recv(W1, results((t(5), TaskStatus.OVER_MEMORY, b"big")))
    assert counts(d) == {"f": (4, 0, 1, 1, 0, 2), "g": (1, 0, 0, 0, 0, 1)}


def test_cancelled_and_refused_tasks_are_counted_and_unnamed_functions_shown_as_such() -> None:
    d = connected(capacity=3)
    d.recv(C, PutObjects([tid(P, 90)], [b"<anonymous>"]))  # no names: unnamed
    d.recv(C, submit((t(1), tid(P, 90), []), (t(2), tid(P, 99), [])))  # t(2)'s function does not exist: it fails
    d.recv(C, submit((t(3), F, [])))
    d.recv(C, submit((t(4), F, [])))
    d.recv(C, submit((t(5), F, [])))  # queued
    d.recv(C, CancelTasks([t(5)]))
    assert counts(d) == {UNNAMED: (2, 1, 0, 0, 0, 1), "f": (3, 2, 0, 0, 1, 0)}


def test_long_names_are_cut_and_names_past_the_bound_share_one_entry() -> None:
    d = connected()
    d.recv(C, PutObjects([tid(P, 90)], [b"<long>"], ["x" * 500]))
    d.recv(C, submit((t(1), tid(P, 90), [])))
    assert counts(d)["x" * 200][0] == 1
    table = d.core.functions
    for n in range(MAX_FUNCTIONS):  # fill the table up (as many names' tasks would have, all ended)
        table.by_name[f"n{n}"] = monitoring.FunctionStats(f"n{n}", 0.0)
    d.recv(C, PutObjects([tid(P, 91)], [b"<h>"], ["h"]))
    d.recv(C, submit((t(2), tid(P, 91), [])))
    assert "h" not in table.by_name and table.by_name[OTHER_FUNCTIONS].submitted == 1
    d.recv(W1, ok(t(2)))
    assert table.by_name[OTHER_FUNCTIONS].in_flight == 0


def test_idle_names_are_forgotten_once_over_the_bound_and_busy_ones_kept() -> None:
    d = connected(worker_timeout_seconds=1e6, client_timeout_seconds=1e6)
    d.recv(C, submit((t(1), F, []), (t(2), G, [])))
    d.recv(W1, ok(t(1)))  # f: idle; g: in flight
    table = d.core.functions
    for n in range(MAX_FUNCTIONS):
        table.by_name[f"n{n}"] = monitoring.FunctionStats(f"n{n}", 0.0)
    d.core.status()
    assert "f" in table.by_name  # not idle for long yet
    d.tick(monitoring.IDLE_SECONDS + 1)
    d.core.status()
    assert "f" not in table.by_name and F not in table.by_id  # forgotten, its cache with it
    assert "g" in table.by_name and UNNAMED not in table.by_name
    d.recv(C, submit((t(3), F, [])))  # counted afresh
    assert table.by_name["f"].submitted == 1


def test_status_lists_functions_in_flight_first_then_the_latest_at_most_200() -> None:
    d = connected(capacity=1000)
    names = [f"fn{n}" for n in range(250)]
    ids = [tid(P, 100 + n) for n in range(250)]
    d.recv(C, PutObjects(ids, [b"<fn>"] * 250, names))
    d.recv(C, submit(*((t(1000 + n), ids[n], []) for n in range(250))))
    d.recv(W1, ok(*(t(1000 + n) for n in range(1, 250))))  # all but fn0 ended
    d.core.status()
    d.tick(5.0)
    d.recv(C, submit((t(2000), ids[7], [])))
    d.recv(W1, ok(t(2000)))  # fn7: the latest active
    reported = [f.name for f in d.core.status().functions]
    assert len(reported) == 200 and reported[:2] == ["fn0", "fn7"]


def test_durations_are_summed_for_results_only() -> None:
    d = connected()
    d.recv(C, submit((t(1), F, []), (t(2), F, []), (t(3), F, []), flags=FLAG_PROFILING))
    d.recv(W1, TaskResults([t(1), t(2), t(3)], bytes([0, 1, 4]), [b"r", b"e", b"no"], [100, 20, 3], [0] * 3, [0] * 3))
    [f] = [f for f in d.core.status().functions if f.name == "f"]
    assert f == FunctionStatus(
        "f", 3, 0, 1, 1, 0, 1, duration_us=120, timed_tasks=2, duration_buckets=f.duration_buckets
    )
    assert f.buckets() == [2] + [0] * len(DURATION_BOUNDS_US)  # 100 and 20 µs: under 1 ms


def test_the_mean_run_time_counts_only_the_tasks_that_came_with_one() -> None:
    d = connected(capacity=400)
    d.recv(C, submit(*((t(i), F, []) for i in range(1, 302))))
    d.recv(W1, TaskResults([t(1)], bytes([0]), [b"r"], [100_000], [0], [0]))  # profiled: 100 ms
    rest = [t(i) for i in range(2, 302)]
    d.recv(W1, TaskResults(rest, bytes(300), [b"r"] * 300))  # not profiled: no run time
    [f] = [f for f in d.core.status().functions if f.name == "f"]
    assert (f.success, f.duration_us, f.timed_tasks) == (301, 100_000, 1)  # the mean is 100 ms, not 0.33 ms
    assert f.buckets()[DURATION_BOUNDS_US.index(100_000)] == 1 and sum(f.buckets()) == 1


def test_a_period_ended_without_a_status_leaves_the_core_as_a_status_would() -> None:
    """With no monitor subscribed the shell builds no status (O(workers)) but ends the period: the functions' activity,
    the bound on names and the next period's sampling must come out the same."""
    for monitored in (False, True):
        built = connected(monitored, 1000, worker_timeout_seconds=1e6, client_timeout_seconds=1e6)
        built.recv(C, submit(*((t(n), F if n % 2 else G, []) for n in range(300))))
        built.recv(W1, TasksStarted([t(0), t(1)]))
        for n in range(MAX_FUNCTIONS):  # over the bound: idle names are forgotten at a period's end
            built.core.functions.by_name[f"n{n}"] = monitoring.FunctionStats(f"n{n}", 0.0)
        skipped = copy.deepcopy(built)
        for d in (built, skipped):
            d.recv(W1, ok(*(t(n) for n in range(250))))
            d.tick(monitoring.IDLE_SECONDS + 1)
        built.core.status()
        events = skipped.core.end_period()[0]
        assert canonical(built.core) == canonical(skipped.core), first_difference(built.core, skipped.core)
        assert "f" in skipped.core.functions.by_name and "n0" not in skipped.core.functions.by_name
        assert skipped.core._log.sample_every == monitoring.next_sample_every(250)
        assert bool(events.task_ids) == monitored


# ----------------------------------------------------------------------------------------------- events
def test_nothing_is_recorded_unless_monitored() -> None:
    d = connected()
    d.recv(C, submit((t(1), F, [])))
    d.recv(W1, TasksStarted([t(1)]))
    d.recv(W1, output((t(1), OUTPUT_ERROR, "Traceback")))
    d.recv(W1, results((t(1), TaskStatus.ERROR, b"e")))
    d.gone(W1)
    status = d.core.status()
    assert status.events.task_ids == [] and status.failures == [] and status.departed == [] and status.outputs == []
    assert d.core._log.error_texts == {}


def test_starts_and_ends_are_recorded_on_the_core_clock_and_taken_by_status() -> None:
    d = connected(monitored=True)
    d.recv(C, submit((t(1), F, []), (t(2), G, []), flags=FLAG_PROFILING))
    d.now = 1.5
    d.recv(W1, TasksStarted([t(1), t(2), t(99)]))  # t(99): not held, no event
    d.now = 2.0
    d.recv(W1, TaskResults([t(1)], bytes([0]), [b"r"], [400], [4096], [300]))
    d.recv(C, CancelTasks([t(2)]))
    d.recv(W1, results((t(2), TaskStatus.CANCELED, b"")))
    status = d.core.status()
    assert status.clock_us == 2_000_000
    e = status.events
    assert e.task_ids == [t(1), t(2), t(1), t(2)]
    assert e.kinds == bytes([0, 0, 1, 1]) and e.statuses == bytes([0, 0, 0, TaskStatus.CANCELED])
    assert [e.names[i] for i in e.functions] == ["f", "g", "f", "g"]
    assert [e.names[i] for i in e.workers] == ["w1"] * 4
    assert e.times_us == [1_500_000, 1_500_000, 2_000_000, 2_000_000]
    assert e.durations_us == [0, 0, 400, 0] and e.peak_memory == [0, 0, 4096, 0]
    assert (e.sample_every, e.dropped) == (1, 0)
    assert d.core.status().events.task_ids == []  # taken


def test_a_task_ending_while_not_assigned_has_no_worker() -> None:
    d = connected(monitored=True)
    d.recv(C, submit((t(1), F, []), (t(2), F, [t(1)])))  # t(2) waits on t(1)
    d.recv(W1, results((t(1), TaskStatus.ERROR, b"e")))  # t(2) fails with it
    e = d.core.status().events
    assert e.task_ids == [t(1), t(2)] and e.workers[1] == NO_NAME and e.names[e.workers[0]] == "w1"


def test_after_a_busy_period_one_task_in_k_is_drawn_start_and_end_alike() -> None:
    d = connected(monitored=True, capacity=10_000)
    n = 3 * EVENT_TASKS
    d.recv(C, submit(*((t(i), F, []) for i in range(1, n + 1))))
    d.recv(W1, ok(*(t(i) for i in range(1, n + 1))))
    first = d.core.status().events
    assert first.sample_every == 1 and first.dropped == 0 and len(first.task_ids) == n
    d.recv(C, submit(*((t(i), F, []) for i in range(n + 1, n + 101))))
    d.recv(W1, TasksStarted([t(i) for i in range(n + 1, n + 101)]))
    d.recv(W1, ok(*(t(i) for i in range(n + 1, n + 101))))
    e = d.core.status().events
    drawn = [i for i in range(n + 1, n + 101) if (t(i) & ID_COUNTER_MASK) % 3 == 0]
    assert e.sample_every == 3
    assert e.task_ids == [t(i) for i in drawn] * 2 and e.kinds == bytes([0] * len(drawn) + [1] * len(drawn))
    assert e.dropped == 2 * (100 - len(drawn))
    assert d.core.status().events.sample_every == 1  # 100 ended in that period


def test_events_are_bounded_within_a_period_whatever_the_sampling() -> None:
    d = connected(monitored=True, capacity=20_000)
    n = monitoring.MAX_EVENTS + 10
    d.recv(C, submit(*((t(i), F, []) for i in range(1, n + 1))))
    d.recv(W1, ok(*(t(i) for i in range(1, n + 1))))
    e = d.core.status().events
    assert len(e.task_ids) == monitoring.MAX_EVENTS and e.dropped == 10


def test_a_task_whose_start_was_kept_has_its_end_kept_past_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(monitoring, "MAX_EVENTS", 4)
    d = connected(monitored=True, capacity=100)
    d.recv(C, submit(*((t(i), F, []) for i in range(1, 9))))
    d.recv(W1, TasksStarted([t(i) for i in range(1, 9)]))  # 4 starts kept, 4 dropped
    d.recv(W1, ok(*(t(i) for i in range(1, 9))))  # the ends of the 4 kept, past the bound
    e = d.core.status().events
    assert e.task_ids == [t(i) for i in range(1, 5)] * 2 and e.kinds == bytes([0] * 4 + [1] * 4)
    assert e.dropped == 8


def test_a_start_kept_has_its_end_kept_in_a_later_period_whatever_it_draws() -> None:
    log = monitoring.PeriodLog(sample_every=1)
    assert log.drawn(5) and log.drawn(6)
    log.rows += [(5, monitoring.STARTED, 0, "f", "w", 0, 0, 0), (6, monitoring.STARTED, 0, "f", "w", 0, 0, 0)]
    assert log.drawn(6)
    log.rows.append((6, monitoring.ENDED, 0, "f", "w", 1, 0, 0))
    later = monitoring.PeriodLog(sample_every=1000)
    later.carry(log)
    assert later.drawn(5) and not later.drawn(6) and later.dropped == 1  # 6 ended in the previous period
    assert later.error_texts is log.error_texts


# ----------------------------------------------------------------------------------------------- failures
def test_a_failure_carries_the_error_text_its_worker_sent_before_the_result() -> None:
    d = connected(monitored=True)
    d.recv(C, submit((t(1), F, []), (t(2), G, []), (t(3), F, []), (t(4), F, [t(1)])))
    d.now = 3.0
    assert d.recv(W1, output((t(1), OUTPUT_ERROR, "Traceback...\n"), (t(1), OUTPUT_ERROR, "ValueError: x"))) == []
    d.recv(W1, results((t(1), TaskStatus.ERROR, b"<pickled>"), (t(2), TaskStatus.TIMED_OUT, b"ran over 1s")))
    d.recv(W1, results((t(3), TaskStatus.ERROR, b"<pickled>")))  # no text came: none shown
    assert d.core.status().failures == [
        TaskFailure(t(1), "f", "w1", TaskStatus.ERROR, "Traceback...\nValueError: x", 3_000_000),
        TaskFailure(t(4), "f", "", TaskStatus.ERROR, "Traceback...\nValueError: x", 3_000_000),  # its dependent
        TaskFailure(t(2), "g", "w1", TaskStatus.TIMED_OUT, "ran over 1s", 3_000_000),
        TaskFailure(t(3), "f", "w1", TaskStatus.ERROR, "", 3_000_000),
    ]
    assert d.core._log.error_texts == {}


def test_failure_texts_are_cut_and_failures_bounded_per_period() -> None:
    d = connected(monitored=True, capacity=200)
    d.recv(C, submit(*((t(i), F, []) for i in range(1, 151))))
    d.recv(W1, output((t(1), OUTPUT_ERROR, "e" * 10_000)))
    d.recv(W1, results((t(1), TaskStatus.ERROR, b""), (t(2), TaskStatus.FAILED, b"\xff" * 10_000)))
    d.recv(W1, results(*((t(i), TaskStatus.FAILED, b"why") for i in range(3, 151))))
    failures = d.core.status().failures
    assert len(failures) == monitoring.MAX_FAILURES
    assert failures[0].text == monitoring.CUT_MARK + "e" * (MAX_TEXT - len(monitoring.CUT_MARK))
    assert failures[1].text == "\ufffd" * MAX_TEXT


def test_a_long_error_text_keeps_its_end_where_the_exception_and_the_innermost_frames_are() -> None:
    d = connected(monitored=True)
    d.recv(C, submit((t(1), F, [])))
    frames = "".join(f'  File "job.py", line {i}, in step\n' for i in range(500))
    d.recv(W1, output((t(1), OUTPUT_ERROR, "Traceback (most recent call last):\n" + frames)))
    d.recv(W1, output((t(1), OUTPUT_ERROR, "ValueError: the real reason")))
    d.recv(W1, results((t(1), TaskStatus.ERROR, b"<pickled>")))
    (failure,) = d.core.status().failures
    assert len(failure.text) == MAX_TEXT and failure.text.endswith("line 499, in step\nValueError: the real reason")
    assert failure.text.startswith(monitoring.CUT_MARK)


def test_error_texts_are_dropped_when_their_task_leaves_its_worker_and_are_bounded() -> None:
    d = connected(monitored=True, capacity=2000)
    d.recv(C, submit(*((t(i), F, []) for i in range(1, 1201))))
    d.recv(W1, output(*((t(i), OUTPUT_ERROR, "boom") for i in range(1, 1201))))
    assert len(d.core._log.error_texts) == monitoring.MAX_ERROR_TEXTS
    d.recv(W1, output((t(5000), OUTPUT_ERROR, "not held")))
    assert t(5000) not in d.core._log.error_texts
    d.gone(W1)  # its tasks go back to the queue: a text from that run is not theirs any longer
    assert d.core._log.error_texts == {}


def test_error_text_of_a_run_that_is_retried_is_dropped() -> None:
    d = connected(monitored=True)
    d.recv(C, SubmitTasks([t(1)], [F], b"\x00", [0], [], None, [], None, b"\x01", None))  # one retry
    d.recv(W1, output((t(1), OUTPUT_ERROR, "first run")))
    d.recv(W1, results((t(1), TaskStatus.ERROR, b"e")))
    assert d.core._log.error_texts == {} and d.core.status().failures == []


# ----------------------------------------------------------------------------------------------- output
def test_printed_output_of_flagged_tasks_reaches_the_client_before_their_results() -> None:
    d = connected(monitored=True)
    d.recv(C, submit((t(1), F, []), (t(2), F, []), flags=FLAG_STREAM_OUTPUT))
    d.recv(C, submit((t(3), F, [])))  # not flagged: its output stays with monitors
    d.core.feed(Received(1.0, W1, ok(t(2))))
    d.core.feed(
        Received(
            1.0, W1, output((t(1), OUTPUT_STDOUT, "a\n"), (t(3), OUTPUT_STDOUT, "hidden"), (t(1), OUTPUT_STDERR, "b"))
        )
    )
    d.core.feed(Received(1.0, W1, ok(t(1), t(3))))
    assert sends(d.core.flush()) == [
        (C, output((t(1), OUTPUT_STDOUT, "a\n"), (t(1), OUTPUT_STDERR, "b"))),
        (C, TaskResults([t(2), t(1), t(3)], bytes(3), [b"r"] * 3)),
    ]
    assert d.core.status().outputs == [
        OutputRecord(t(1), "f", "w1", OUTPUT_STDOUT, "a\n", 1_000_000),
        OutputRecord(t(3), "f", "w1", OUTPUT_STDOUT, "hidden", 1_000_000),
        OutputRecord(t(1), "f", "w1", OUTPUT_STDERR, "b", 1_000_000),
    ]


def test_output_of_tasks_not_held_is_ignored_and_pending_output_is_bounded() -> None:
    d = connected()
    d.recv(C, submit((t(1), F, []), flags=FLAG_STREAM_OUTPUT))
    assert d.recv(W1, output((t(7), OUTPUT_STDOUT, "stale"))) == []
    big = "x" * (1 << 20)
    d.core.feed(Received(1.0, W1, output(*((t(1), OUTPUT_STDOUT, big) for _ in range(5)))))
    commands = d.core.flush()
    [(_, sent)] = of_type(commands, TaskOutput)
    assert len(sent.texts) == 4 and d.core.output.dropped == 1
    assert "dropped printed output of task" in logs(commands)[0].text


def test_monitors_keep_at_most_256_kib_of_output_per_period() -> None:
    d = connected(monitored=True)
    d.recv(C, submit((t(1), F, [])))
    d.recv(W1, output(*((t(1), OUTPUT_STDOUT, "y" * 100_000) for _ in range(4))))
    outputs = d.core.status().outputs
    assert [len(o.text) for o in outputs] == [100_000, 100_000, 62_144]


def test_a_client_may_not_send_task_output() -> None:
    d = connected()
    [(peer, error)] = sends(d.recv(C, output((t(1), OUTPUT_STDOUT, "x"))))
    assert peer == C and error == Error(ErrorCode.BAD_REQUEST, "a client may not send taskOutput", [])


# ----------------------------------------------------------------------------------------------- workers
def test_departed_workers_say_whether_they_were_lost() -> None:
    d = connected(monitored=True)
    d.worker(W2)
    d.now = 2.0
    d.recv(W1, Disconnect("maintenance"))
    d.gone(W2)
    departed = d.core.status().departed
    assert [(w.name, w.lost, w.time_us) for w in departed] == [("w1", False, 2_000_000), ("w2", True, 2_000_000)]
    assert departed[0].reason == "disconnected: maintenance" and departed[1].reason == "its connection closed"


def test_a_worker_row_is_one_moment_its_last_heartbeat() -> None:
    d = connected()
    d.recv(C, submit(*((t(i), F, []) for i in range(1, 4))))
    d.now = 1.0
    d.recv(W1, Heartbeat(queued=2, running=1))
    d.recv(W1, ok(t(1)))  # after the heartbeat: not in the row yet
    d.tick(1.25)
    [row] = d.core.status().workers
    assert (row.sent, row.queued, row.running, row.heartbeat_age_ms, row.free) == (3, 2, 1, 250, 2)


def test_the_period_records_go_when_monitoring_stops() -> None:
    d = connected(monitored=True)
    d.recv(C, submit((t(1), F, [])))
    d.recv(W1, TasksStarted([t(1)]))
    d.recv(W1, output((t(1), OUTPUT_ERROR, "boom")))
    d.core.monitored = False
    status = d.core.status()
    assert status.events.task_ids == [] and d.core._log.error_texts == {}


def test_dropped_output_warning_is_rate_limited() -> None:
    d = connected()
    d.recv(C, submit((t(1), F, []), flags=FLAG_STREAM_OUTPUT))
    warnings = 0
    for _ in range(40):
        commands = d.recv(W1, output((t(1), OUTPUT_STDOUT, "x" * (5 << 20))))
        warnings += sum(log.level == logging.WARNING for log in logs(commands))
    assert d.core.output.dropped == 40 and warnings < 40


# ----------------------------------------------------------------------------------------------- clients
def test_a_client_row_says_how_many_of_its_unfinished_tasks_are_at_workers() -> None:
    d = connected(capacity=2)
    d.client(b"c2")
    d.recv(C, submit(*((t(i), F, []) for i in range(1, 6))))  # the worker holds 2, 3 are queued
    rows = {c.name: c for c in d.core.status().clients}
    mine, other = rows["c1"], rows["c2"]
    assert (mine.tasks, mine.assigned, other.tasks, other.assigned) == (5, 2, 0, 0)
    d.recv(W1, ok(t(1)))  # one ends, the next queued one takes its place
    mine = next(c for c in d.core.status().clients if c.name == "c1")
    assert (mine.tasks, mine.assigned, mine.completed) == (4, 2, 1)
