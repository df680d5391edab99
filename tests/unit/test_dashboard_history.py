"""scaler_ui's history (scaler.monitor.history and the modules under it): statuses in, the page's answers out."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scaler.monitor import fleet as fleet_module
from scaler.monitor import task_history
from scaler.monitor.fleet import GONE, Fleet, wall_ms, worker_state
from scaler.monitor.history import History, function_row
from scaler.monitor.ring import Ring, Spark
from scaler.monitor.series import ClusterSeries, rates
from scaler.monitor.task_history import BUSY, LANES_MAX, LOST_ATTEMPT, RUNNING, TaskHistory, place, summary
from scaler.protocol.messages import (
    ClientStatus,
    DepartedWorker,
    FunctionStatus,
    OutputRecord,
    Status,
    TaskEvents,
    TaskFailure,
    WorkerStatus,
)
from scaler.protocol.records import NO_NAME

T0 = 1_700_000_000_000_000  # wall clock, µs
C0 = 50_000_000  # the scheduler's own clock at T0, µs


def status(second: float, workers: list[WorkerStatus] | None = None, **fields: Any) -> Status:
    """A status `second` seconds after T0, its two clocks in step."""
    us = int(second * 1e6)
    return Status("s", time_us=T0 + us, clock_us=C0 + us, workers=workers or [], **fields)


def at(second: float) -> int:
    """A time `second` s after T0 on the scheduler's clock (µs), as events carry it."""
    return C0 + int(second * 1e6)


def ms(second: float) -> int:
    """The same time as the page gets it: wall clock, ms."""
    return (T0 + int(second * 1e6)) // 1000


def events(*rows: tuple[int, int, int, str, str, float, int]) -> TaskEvents:
    """(task, kind, status, function, worker or "", second, duration µs) rows as a TaskEvents."""
    e = TaskEvents()
    for task, kind, st, function, worker, second, duration in rows:
        for name in (function, worker):
            if name and name not in e.names:
                e.names.append(name)
        e.task_ids.append(task)
        e.kinds += bytes([kind])
        e.statuses += bytes([st])
        e.functions.append(e.names.index(function))
        e.workers.append(e.names.index(worker) if worker else NO_NAME)
        e.times_us.append(at(second))
        e.durations_us.append(duration)
        e.peak_memory.append(7 << 20 if kind else 0)
    return e


def rows_of(bars: dict[str, Any]) -> list[dict[str, Any]]:
    """The stream answer's columns as one dict a bar, names resolved."""
    names = bars["names"]
    keys = ("task", "function", "worker", "lane", "start", "end", "status", "duration_us", "peak_memory")
    result = [dict(zip(keys, values)) for values in zip(*(bars[k] for k in keys))]
    for r in result:
        r["function"], r["worker"] = names[r["function"]], names[r["worker"]]
    return result


# ---------------------------------------------------------------------------------------------------- rings


def test_a_ring_numbers_items_and_keeps_the_newest() -> None:
    ring: Ring[str] = Ring(3)
    assert ring.latest() is None and ring.since(0) == [] and len(ring) == 0
    for item in "abcde":
        ring.append(item)
    assert ring.total == 5 and ring.first == 3 and len(ring) == 3
    assert ring.since(0) == [(3, "c"), (4, "d"), (5, "e")]
    assert ring.since(4) == [(5, "e")] and ring.since(5) == []
    assert ring.since(0, limit=2) == [(4, "d"), (5, "e")]
    assert ring.get(2) is None and ring.get(4) == "d" and ring.get(6) is None
    assert list(ring.newest()) == [(5, "e"), (4, "d"), (3, "c")]
    with pytest.raises(ValueError):
        Ring(0)


def test_a_spark_keeps_the_last_values_in_order() -> None:
    spark = Spark(3)
    assert spark.values() == []
    for v in (1, 2, 3, 4, 5):
        spark.add(v)
    assert spark.values() == [3.0, 4.0, 5.0]
    times = Spark(2, "d")
    times.add(1_700_000_000_123.0)
    assert times.values() == [1_700_000_000_123.0]  # 64-bit: a time in ms keeps its precision


# ---------------------------------------------------------------------------------------------------- series


def test_throughput_comes_from_the_counters_growth_per_second() -> None:
    assert rates(None, 10, (5,)) == [None]
    assert rates((1_000_000, (10, 0)), 3_000_000, (30, 4)) == [10.0, 2.0]
    assert rates((1_000_000, (10,)), 1_000_000, (30,)) == [None]  # no time passed
    assert rates((1_000_000, (10,)), 2_000_000, (3,)) == [None]  # a new scheduler counts from 0


def test_the_series_has_a_point_per_status_with_states_rates_cpu_and_memory() -> None:
    series = ClusterSeries()
    w = WorkerStatus("w", agent_cpu_percent=2, agent_rss_bytes=10, cpu_percent=90, rss_bytes=100, running=3)
    series.add(status(0, [w], tasks_by_state={"queued": 7, "success": 10}, cpu_percent=5, rss_bytes=1000))
    series.add(status(2, [w, w], tasks_by_state={"queued": 1, "success": 30, "error": 2, "failed": 2}))
    data = series.since(0)
    assert data["seq"] == 2 and data["t"] == [ms(0), ms(2)]
    assert data["queued"] == [7, 1] and data["running"] == [3, 6] and data["workers"] == [1, 2]
    assert data["success_rate"] == [None, 10.0] and data["failed_rate"] == [None, 2.0]
    assert data["processors_cpu"] == [90, 180] and data["agents_rss"] == [10, 20] and data["scheduler_rss"][0] == 1000
    assert series.since(2)["t"] == [] and series.since(1)["t"] == [ms(2)]
    assert json.loads(json.dumps(data)) == data


def test_the_series_gives_the_last_window_only() -> None:
    series = ClusterSeries(capacity=5)
    for second in range(8):
        series.add(status(second * 60))
    assert len(series.points) == 5  # bounded
    assert series.since(0, window_ms=120_000)["t"] == [ms(300), ms(360), ms(420)]


# ---------------------------------------------------------------------------------------------------- workers


def test_times_on_the_scheduler_clock_become_wall_clock_ms() -> None:
    s = status(10)
    assert wall_ms(s, at(7.5)) == ms(7.5)
    assert wall_ms(Status("s", time_us=T0), 123) == T0 // 1000  # a scheduler without clockUs


@pytest.mark.parametrize(
    ("fields", "state"),
    [
        ({}, "idle"),
        ({"running": 1}, "busy"),
        ({"queued": 2}, "busy"),
        ({"running": 1, "heartbeat_age_ms": 9000}, "stale"),
        ({"running": 1, "heartbeat_age_ms": 9000, "held_back_ms": 5000}, "held back"),
    ],
)
def test_a_workers_state(fields: dict[str, Any], state: str) -> None:
    assert worker_state(WorkerStatus("w", **fields)) == state


def test_departed_workers_are_remembered_with_their_reason_for_a_while() -> None:
    fleet = Fleet()
    a, b, c = WorkerStatus("a", running=1), WorkerStatus("b"), WorkerStatus("c", cpu_percent=50)
    fleet.add(status(0, [a, b, c]))
    lost = DepartedWorker("a", "no heartbeat for 60 s", True, at(0.5))
    fleet.add(status(1, [c], departed=[lost]))  # a: lost; b: vanished without a record
    rows = {r["name"]: r for r in fleet.rows()}
    assert rows["a"]["state"] == "lost" and rows["a"]["reason"] == "no heartbeat for 60 s"
    assert rows["a"]["departed_ms"] == ms(0.5) and rows["a"]["running"] == 1  # its last figures
    assert rows["b"]["state"] == "gone" and rows["b"]["reason"] == GONE
    assert rows["c"]["state"] == "idle"
    assert fleet.counts() == {"idle": 1, "lost": 1, "gone": 1}
    fleet.add(status(2, [c, WorkerStatus("b")]))  # b is back: a second life, the first one kept apart
    assert {r["name"]: r["state"] for r in fleet.rows()} == {"c": "idle", "b #2": "idle", "a": "lost", "b #1": "gone"}
    keep = fleet_module.DEPARTED_KEEP_MS / 1000
    fleet.add(status(keep + 2, [c, WorkerStatus("b")]))
    assert [r["name"] for r in fleet.rows()] == ["c", "b #2"]  # a and b's first life were forgotten


def test_a_departure_record_after_the_worker_vanished_gives_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = Fleet()
    fleet.add(status(0, [WorkerStatus("a")]))
    fleet.add(status(1, []))
    fleet.add(status(2, [], departed=[DepartedWorker("a", "said goodbye", False, at(0.8))]))
    assert [(r["state"], r["reason"]) for r in fleet.rows()] == [("left", "said goodbye")]
    monkeypatch.setattr(fleet_module, "DEPARTED_MAX", 2)
    fleet.add(status(3, [], departed=[DepartedWorker(n, "bye", False, at(3)) for n in "xyz"]))
    assert [r["name"] for r in fleet.rows()] == ["y", "z"]  # bounded: the newest kept


def test_the_workers_table_sorts_filters_and_pages_with_sparklines() -> None:
    fleet = Fleet()
    workers = [WorkerStatus(f"w{i}", cpu_percent=i * 10.0, rss_bytes=1000 - i, held_back_ms=0) for i in range(12)]
    for second in range(3):
        fleet.add(status(second, workers))
    page = fleet.table("cpu", True, 0, 5)
    assert page["total"] == 12 and [r["name"] for r in page["rows"]] == ["w11", "w10", "w9", "w8", "w7"]
    assert page["rows"][0]["spark_cpu"] == [110.0, 110.0, 110.0] and page["rows"][0]["spark_rss"] == [989.0] * 3
    assert [r["name"] for r in fleet.table("cpu", True, 10, 5)["rows"]] == ["w1", "w0"]
    assert [r["name"] for r in fleet.table("rss", False, 0, 2)["rows"]] == ["w11", "w10"]
    assert [r["name"] for r in fleet.table("name", False, 0, 3, contains="w1")["rows"]] == ["w1", "w10", "w11"]
    assert fleet.table("name", False, 0, 3, contains="nobody")["total"] == 0
    detail = fleet.detail("w3")
    assert detail is not None and detail["history"]["cpu"] == [30.0] * 3 and detail["history"]["t"][-1] == ms(2)
    assert fleet.detail("nobody") is None


def test_the_workers_table_shows_sorts_and_filters_capabilities() -> None:
    """The capabilities a worker offers beyond payload=python (every Python worker's), as scaler_top's caps column;
    the filter matches a name or a capability."""
    fleet = Fleet()
    offers = {"cpu-a": (), "gpu-b": ("gpu", "mem=64G"), "ts-c": ("payload=json", "lang=ts"), "gpu-d": ("gpu",)}
    fleet.add(status(0, [WorkerStatus(name, capabilities=["payload=python", *caps]) for name, caps in offers.items()]))
    rows = {r["name"]: r for r in fleet.table("name", False, 0, 10)["rows"]}
    assert {name: r["offers"] for name, r in rows.items()} == {
        "cpu-a": [],
        "gpu-b": ["gpu", "mem=64G"],
        "ts-c": ["payload=json", "lang=ts"],
        "gpu-d": ["gpu"],
    }
    assert rows["ts-c"]["capabilities"] == ["payload=python", "payload=json", "lang=ts"]  # the whole list stays
    by_caps = [r["name"] for r in fleet.table("capabilities", False, 0, 10)["rows"]]
    assert by_caps == ["cpu-a", "gpu-d", "gpu-b", "ts-c"]  # by the list as shown ("" < "gpu" < "gpu, mem=64G" < ...)
    assert [r["name"] for r in fleet.table("name", False, 0, 10, contains="gpu")["rows"]] == ["gpu-b", "gpu-d"]
    assert [r["name"] for r in fleet.table("name", False, 0, 10, contains="lang=ts")["rows"]] == ["ts-c"]
    assert [r["name"] for r in fleet.table("name", False, 0, 10, contains="mem=64")["rows"]] == ["gpu-b"]
    assert fleet.table("name", False, 0, 10, contains="payload=python")["total"] == 4  # offered, though not shown


def test_each_life_of_a_worker_restarted_under_its_name_is_kept_apart() -> None:
    fleet = Fleet()
    fleet.add(status(0, [WorkerStatus("w", completed=40, running=1)]))
    fleet.add(status(1, [], departed=[DepartedWorker("w", "no heartbeat for 60 s", True, at(0.9))]))
    fleet.add(status(2, [WorkerStatus("w", completed=1)]))  # scaler_cluster restarted it: same name
    rows = {r["name"]: r for r in fleet.rows()}
    assert rows["w #1"]["state"] == "lost" and rows["w #1"]["completed"] == 40
    assert rows["w #1"]["reason"] == "no heartbeat for 60 s" and rows["w #2"]["completed"] == 1
    assert fleet.counts() == {"lost": 1, "idle": 1}
    detail = fleet.detail("w #1")
    assert detail is not None and detail["history"]["t"] == [ms(0)]
    assert fleet.detail("w #2") is not None and fleet.detail("w") is None
    # Lost and back within one status, or back before scaler_ui noticed (its counters started again): a new life.
    fleet.add(status(3, [WorkerStatus("w", completed=0)], departed=[DepartedWorker("w", "killed", True, at(2.5))]))
    fleet.add(status(4, [WorkerStatus("w", completed=9)]))
    fleet.add(status(5, [WorkerStatus("w", completed=2)]))
    assert sorted(r["name"] for r in fleet.rows()) == ["w #1", "w #2", "w #3", "w #4"]
    assert {r["name"]: r["state"] for r in fleet.rows()}["w #3"] == "gone"


def test_sorting_by_state_puts_the_workers_needing_a_look_first() -> None:
    fleet = Fleet()
    workers = [WorkerStatus("idle"), WorkerStatus("busy", running=1), WorkerStatus("held", held_back_ms=1)]
    fleet.add(status(0, [*workers, WorkerStatus("gone")]))
    fleet.add(status(1, workers, departed=[DepartedWorker("gone", "lost", True, at(1))]))
    assert [r["name"] for r in fleet.table("state", False, 0, 10)["rows"]] == ["gone", "held", "busy", "idle"]


# ---------------------------------------------------------------------------------------------------- tasks


def test_lanes_pack_bars_like_processors() -> None:
    lanes: list[int] = []
    assert place(lanes, 0, BUSY) == 0  # a running task holds its lane
    assert place(lanes, 10, 20) == 1
    assert place(lanes, 20, 30) == 1  # after the previous bar of lane 1
    assert place(lanes, 22, 40) == 2  # overlaps lane 1's bar by more than the slack
    assert place(lanes, 30 - task_history.LANE_SLACK_MS, 50) == 1  # within the slack
    full = [BUSY] * LANES_MAX
    assert place(full, 0, 5) < LANES_MAX and len(full) == LANES_MAX


def test_lanes_are_as_few_as_tasks_ran_at_once_whatever_order_they_ended_in() -> None:
    lanes: list[int] = []
    # Two processors: a [0, 30] then c [30, 100]; b [0, 60] then d [60, 70]; they end in the order a, b, d, c.
    assert [place(lanes, s, e) for s, e in ((0, 30), (0, 60), (60, 70), (30, 100))] == [0, 1, 1, 0]
    assert place([10, 20], 50, 60, most=2) == 1  # of the free lanes, the one freed last
    squeezed = [100, 90]
    assert place(squeezed, 0, 120, most=2) == 1 and squeezed == [100, 120]  # no lane free: the one that frees first


def test_a_worker_has_at_most_as_many_lanes_as_processors() -> None:
    tasks = TaskHistory()
    # Its tasks ran one after the other, but the scheduler saw each end 0.2 s after the next start.
    rows = [(i, kind, 0, "f", "w", i + (0.0 if kind == 0 else 1.2), 0) for i in range(1, 4) for kind in (0, 1)]
    rows.sort(key=lambda r: r[5])
    tasks.add(status(5, [WorkerStatus("w", processors=1)], events=events(*rows)))
    assert {r["lane"] for r in rows_of(tasks.bars(0, 0, ms(5), 100, 100))} == {0}
    later = [(task + 10, kind, st, f, w, second + 10, d) for task, kind, st, f, w, second, d in rows]
    tasks.add(status(15, [WorkerStatus("w", processors=2)], events=events(*later)))
    assert {r["lane"] for r in rows_of(tasks.bars(3, 0, ms(15), 100, 100))} == {0, 1}  # two processors: two lanes


def test_starts_and_ends_pair_into_bars_in_lanes() -> None:
    tasks = TaskHistory()
    tasks.add(status(1, events=events((1, 0, 0, "f", "w", 0.1, 0), (2, 0, 0, "g", "w", 0.2, 0))))
    tasks.add(status(2, events=events((1, 1, 0, "f", "w", 1.5, 1_200_000), (3, 0, 0, "f", "w", 1.6, 0))))
    bars = tasks.bars(0, 0, ms(2), 100, 100)
    rows = rows_of(bars)
    assert bars["seq"] == 1 and bars["running"] == 2 and bars["skipped"] == 0
    ended, running = rows[0], rows[1:]
    assert ended == {
        "task": "0x1",
        "function": "f",
        "worker": "w",
        "lane": 0,
        "start": ms(0.3),  # end minus the duration the worker measured
        "end": ms(1.5),
        "status": 0,
        "duration_us": 1_200_000,
        "peak_memory": 7 << 20,
    }
    assert [(r["task"], r["lane"], r["status"], r["start"], r["end"]) for r in running] == [
        ("0x2", 1, RUNNING, ms(0.2), ms(2)),  # drawn up to now
        ("0x3", 0, RUNNING, ms(1.6), ms(2)),  # lane 0 freed when task 1 ended
    ]
    assert tasks.bars(1, 0, ms(2), 100, 100)["seq"] == 1 and rows_of(tasks.bars(1, 0, ms(2), 100, 0)) == []


def test_an_end_without_its_start_is_laid_out_from_its_duration() -> None:
    tasks = TaskHistory()
    tasks.add(status(5, events=(events((9, 1, 1, "f", "w", 4.0, 2_000_000), (10, 1, 2, "f", "", 4.5, 0)))))
    [bar] = rows_of(tasks.bars(0, 0, ms(5), 100, 100))  # task 10 never ran on a worker: not in the stream
    assert (bar["task"], bar["start"], bar["end"], bar["lane"], bar["status"]) == ("0x9", ms(2), ms(4), 0, 1)
    assert [(e["task"], e["worker"], e["status"]) for e in tasks.log(10)] == [
        ("0xa", "", "canceled"),
        ("0x9", "w", "error"),
    ]


def test_a_task_started_again_ends_its_lost_attempt_and_a_departed_worker_ends_its_tasks() -> None:
    tasks = TaskHistory()
    tasks.add(status(1, events=events((1, 0, 0, "f", "a", 0.5, 0), (2, 0, 0, "f", "a", 0.6, 0))))
    tasks.add(status(2, events=events((1, 0, 0, "f", "b", 1.5, 0))))  # a was lost; task 1 runs again on b
    tasks.forget_worker("a", ms(1.4))
    rows = rows_of(tasks.bars(0, 0, ms(2), 100, 100))
    assert [(r["task"], r["worker"], r["status"], r["end"]) for r in rows] == [
        ("0x1", "a", LOST_ATTEMPT, ms(1.5)),
        ("0x2", "a", LOST_ATTEMPT, ms(1.4)),
        ("0x1", "b", RUNNING, ms(2)),
    ]
    assert "a" not in [tasks.names.names[w] for w in tasks.lanes]


def test_bars_are_given_since_a_number_within_a_window_and_a_limit() -> None:
    tasks = TaskHistory(ended_capacity=4)
    for i in range(6):
        tasks.add(status(i + 1, events=events((i, 1, 0, "f", "w", i + 0.5, 100_000))))
    assert tasks.ended.total == 6 and len(tasks.ended) == 4  # bounded
    assert [r["task"] for r in rows_of(tasks.bars(0, 0, ms(7), 100, 0))] == ["0x2", "0x3", "0x4", "0x5"]
    assert [r["task"] for r in rows_of(tasks.bars(4, 0, ms(7), 100, 0))] == ["0x4", "0x5"]
    assert [r["task"] for r in rows_of(tasks.bars(0, ms(4.5), ms(7), 100, 0))] == ["0x4", "0x5"]
    limited = tasks.bars(0, 0, ms(7), 1, 0)
    assert [r["task"] for r in rows_of(limited)] == ["0x5"] and limited["skipped"] == 3


def test_sampling_and_dropped_events_are_kept_for_the_page() -> None:
    tasks = TaskHistory()
    sampled = events((8, 0, 0, "f", "w", 0.1, 0))
    sampled.sample_every, sampled.dropped = 4, 30
    tasks.add(status(1, events=sampled))
    tasks.add(status(2, events=TaskEvents(dropped=5)))
    assert tasks.sample_every == 4 and tasks.dropped == 35


def test_running_is_what_the_scheduler_holds_not_unpaired_starts() -> None:
    tasks = TaskHistory()
    starts = [(i, 0, 0, "quick", "w", 0.1 * i, 0) for i in range(1, 6)] + [(9, 0, 0, "slow", "w", 0.05, 0)]
    by_function = [FunctionStatus("quick", 100, running=2), FunctionStatus("slow", 1, running=1)]
    tasks.add(now := status(1, events=events(*starts), tasks_by_state={"assigned": 3}, functions=by_function))
    tasks.settle(now)
    assert sorted(tasks.running) == [4, 5, 9]  # quick: the two newest; the oldest three never ended here
    assert tasks.ends_not_seen == 3
    tasks.settle(status(2, tasks_by_state={"assigned": 1, "canceling": 0}))  # no function row: the total alone
    assert list(tasks.running) == [9] and tasks.ends_not_seen == 5  # the oldest went first
    tasks.settle(status(3, tasks_by_state={"assigned": 0}))
    assert tasks.running == {} and tasks.bars(0, 0, ms(3), 100, 100)["running"] == 0
    tasks.add(now := status(4, events=events((7, 0, 0, "quick", "w", 3.5, 0))))  # an older scheduler: no counts
    tasks.settle(now)
    assert list(tasks.running) == [7]


def test_failures_keep_their_text_and_give_a_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    text = 'Traceback (most recent call last):\n  File "x.py", line 1, in f\nValueError: bad chunk 7\n'
    tasks = TaskHistory()
    tasks.add(status(3, failures=[TaskFailure(0x10, "f", "w", 1, text, at(2.5))]))
    answer = tasks.failures_since(0, 10)
    assert answer == {
        "seq": 1,
        "failures": [
            {
                "seq": 1,
                "task": "0x10",
                "function": "f",
                "worker": "w",
                "status": "error",
                "cause": "",
                "summary": "ValueError: bad chunk 7",
                "time": ms(2.5),
            }
        ],
    }
    assert tasks.failures_since(1, 10)["failures"] == []
    assert tasks.task(0x10)["failures"][0]["text"] == text
    assert summary("x" * 500).endswith("\u2026") and len(summary("x" * 500)) == task_history.SUMMARY_MAX
    assert summary("") == ""
    monkeypatch.setattr(task_history, "FAILURE_TEXT_MAX", 10)
    tasks.add(status(4, failures=[TaskFailure(0x11, "f", "w", 4, "y" * 50, at(3))]))
    assert tasks.task(0x11)["failures"][0]["text"] == "y" * 10


def test_output_is_kept_per_task_within_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(task_history, "OUTPUT_PIECES_MAX", 3)
    monkeypatch.setattr(task_history, "OUTPUT_CHARS_MAX", 14)
    tasks = TaskHistory()
    pieces = [OutputRecord(i % 2, "f", "w", 1 + i % 2, f"line {i}\n", at(i)) for i in range(4)]
    tasks.add(status(5, outputs=pieces))
    answer = tasks.outputs_since(0, 100)
    assert answer["seq"] == 4 and [p["text"] for p in answer["outputs"]] == [
        "line 2\n",
        "line 3\n",
    ]  # 7 characters each
    assert answer["outputs"][1]["stream"] == "stderr" and answer["outputs"][1]["task"] == "0x1"
    assert [p["text"] for p in tasks.task(1)["output"]] == ["line 3\n"]
    assert tasks.outputs_since(3, 1)["outputs"][0]["seq"] == 4


def test_unused_names_are_let_go(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(task_history, "NAMES_MAX", 5)
    tasks = TaskHistory(ended_capacity=2)
    for i in range(6):
        tasks.add(status(i + 1, events=events((i, 1, 0, f"f{i}", f"w{i}", i + 0.5, 1000))))
    assert not {"f0", "f1", "f2", "f3"} & set(tasks.names.names)  # the workers' names stay: their lanes use them
    assert [(e["function"], e["worker"]) for e in tasks.log(10)] == [("f5", "w5"), ("f4", "w4")]


def test_the_task_log_filters_by_status_function_and_worker() -> None:
    tasks = TaskHistory()
    rows = [
        (i, 1, st, fn, "w", 1.0, 10) for i, (st, fn) in enumerate([(0, "f"), (1, "f"), (2, "g"), (5, "g"), (0, "g")])
    ]
    tasks.add(status(2, events=events(*rows, (9, 0, 0, "f", "lost", 1.5, 0))))
    tasks.forget_worker("lost", ms(1.8))
    assert tasks.log(1)[0]["status"] == "lost"
    assert [e["task"] for e in tasks.log(10, frozenset({"failed"}))] == ["0x3"]  # one word, one meaning
    assert [e["task"] for e in tasks.log(10, frozenset({"error", "failed"}))] == ["0x3", "0x1"]  # not the lost one
    assert [e["task"] for e in tasks.log(10, frozenset({"success"}), function="g")] == ["0x4"]
    assert [e["task"] for e in tasks.log(3)] == ["0x9", "0x4", "0x3"]
    assert tasks.log(10, worker="other") == []
    assert [(e["status"], e["cause"]) for e in tasks.log(10, frozenset({"failed"}))] == [("failed", "timed out")]


# ---------------------------------------------------------------------------------------------------- history


def test_a_function_rows_progress() -> None:
    row = function_row(
        FunctionStatus("f", submitted=10, running=2, success=4, error=1, canceled=1, failed=1, duration_us=5_000_000)
    )
    assert row["queued"] == 1 and row["mean_us"] == 1_000_000
    assert function_row(FunctionStatus("g", submitted=3))["mean_us"] is None
    sampled = function_row(FunctionStatus("h", 301, 0, 301, duration_us=100_000, timed_tasks=1))
    assert sampled["mean_us"] == 100_000 and sampled["timed"] == 1  # one profiled call in 301: its mean, not 0.33 ms


def test_the_history_answers_the_page_in_json() -> None:
    history = History("e1")
    empty = history.summary("ipc:///m", None)
    assert empty == {"epoch": "e1", "monitor_address": "ipc:///m", "age_seconds": None, "status": None}
    w = WorkerStatus("w", running=1, processors=2)
    history.add(status(0, [w, WorkerStatus("x")], clients=[ClientStatus("c", tasks=3, completed=7)]))
    history.add(
        status(
            1,
            [w],
            functions=[FunctionStatus("f", submitted=5, running=1, success=3)],
            tasks_by_state={"assigned": 1},
            events=events((1, 0, 0, "f", "w", 0.5, 0), (2, 0, 0, "f", "x", 0.6, 0)),
            failures=[TaskFailure(3, "f", "w", 1, "ValueError: x", at(0.9))],
            clients=[ClientStatus("c", tasks=3, completed=7, assigned=1), ClientStatus("nested-42-1", tasks=1)],
        )
    )
    s = history.summary("ipc:///m", 0.5)["status"]
    assert s["workers"] == 1 and s["worker_states"] == {"busy": 1, "gone": 1} and s["running"] == 1
    assert s["functions"][0]["queued"] == 1 and s["clients"] == [
        {"name": "c", "tasks": 3, "queued": 2, "assigned": 1, "objects": 0, "completed": 7, "nested": False},
        {"name": "nested-42-1", "tasks": 1, "queued": 1, "assigned": 0, "objects": 0, "completed": 0, "nested": True},
    ]
    assert s["failures"] == 1 and s["ended_seq"] == 1
    stream = history.stream(0, 60_000, 100, 100)
    bars = [(r["task"], r["worker"], r["status"]) for r in rows_of(stream)]
    assert stream["epoch"] == "e1" and bars == [("0x2", "x", LOST_ATTEMPT), ("0x1", "w", RUNNING)]  # x left
    worker = history.worker("w")
    assert worker is not None and worker["state"] == "busy" and worker["tasks"] == []
    assert history.worker("nobody") is None
    for answer in (
        history.series_since(0),
        history.workers("cpu", True, 0, 10),
        history.log(10, frozenset(), "", ""),
        history.failures(0, 10),
        history.outputs(0, 10),
        history.task(3),
    ):
        assert answer["epoch"] == "e1" and json.loads(json.dumps(answer)) == answer


def test_a_workers_row_lists_its_capabilities() -> None:
    fleet = Fleet()
    fleet.add(status(0, [WorkerStatus("gpu", capabilities=["gpu", "payload=python"]), WorkerStatus("plain")]))
    rows = {r["name"]: r for r in fleet.rows()}
    assert rows["gpu"]["capabilities"] == ["gpu", "payload=python"] and rows["plain"]["capabilities"] == []


def test_a_restart_of_the_scheduler_is_kept_with_how_long_it_was_away_and_what_came_back() -> None:
    history = History("e")
    first = T0 - 60_000_000
    history.add(status(1, started_us=first))
    history.add(status(2, started_us=first))
    assert history.summary("ipc://m", 0.1)["status"]["restarts"] == []
    # it was killed after the status at 2 s, and started again at 9 s from its journal
    history.add(status(10, started_us=T0 + 9_000_000, recovered="1 client session, 45 tasks, 0 held results"))
    summary = history.summary("ipc://m", 0.1)["status"]
    assert summary["restarts"] == [
        {"time": ms(9), "away_ms": 7000, "recovered": "1 client session, 45 tasks, 0 held results"}
    ]
    assert summary["started"] == ms(9) and summary["recovered"].startswith("1 client session")
    json.dumps(summary)
