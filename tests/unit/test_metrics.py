"""The Prometheus text exposition of a status (scaler.monitor.metrics), read back by a small strict parser."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from scaler.monitor.metrics import CONTENT_TYPE, MAX_FUNCTIONS, render_metrics
from scaler.protocol.messages import ClientStatus, FunctionStatus, ManagerStatus, Status, WaitingTasks, WorkerStatus

pytestmark = pytest.mark.timeout(60)

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
VALUE = r"[+-]?(?:\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|Inf|NaN)"
LABEL = r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"'
SAMPLE = re.compile(rf"({NAME})(?:\{{((?:{LABEL},)*{LABEL})?\}})? ({VALUE})")
UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass
class Exposition:
    types: dict[str, str] = field(default_factory=dict)
    helps: dict[str, str] = field(default_factory=dict)
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = field(default_factory=dict)

    def value(self, name: str, **labels: str) -> float:
        return self.samples[(name, frozenset(labels.items()))]

    def labelled(self, name: str, label: str) -> dict[str, float]:
        return {dict(key)[label]: v for (n, key), v in self.samples.items() if n == name}


def parse(text: str) -> Exposition:
    """Every line a HELP, a TYPE (before the metric's samples, once) or `name{labels} value`; else AssertionError."""
    assert text.endswith("\n") and "\n\n" not in text, repr(text)
    out = Exposition()
    for line in text[:-1].split("\n"):
        if line.startswith("# HELP "):
            name, _, help_ = line[7:].partition(" ")
            assert re.fullmatch(NAME, name) and name not in out.helps and help_, line
            out.helps[name] = help_
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            assert re.fullmatch(NAME, name) and name not in out.types and kind in ("gauge", "counter", "histogram"), (
                line
            )
            assert kind != "counter" or name.endswith("_total"), line
            out.types[name] = kind
        else:
            match = SAMPLE.fullmatch(line)
            assert match is not None, f"not a sample line: {line!r}"
            name, labels_text, value = match.group(1), match.group(2) or "", match.group(7)
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            assert name in out.types or out.types.get(base) == "histogram", line
            assert name.startswith("scaler_"), line
            pairs = re.findall(LABEL, labels_text)
            labels = frozenset((k, re.sub(r"\\[\\\"n]", lambda m: UNESCAPE[m.group()], v)) for k, v in pairs)
            assert len(labels) == len(pairs) and (name, labels) not in out.samples, line
            out.samples[(name, labels)] = float(value)
    assert out.types.keys() == out.helps.keys()
    return out


def a_status() -> Status:
    return Status(
        scheduler_name="sched",
        cpu_percent=12.5,
        rss_bytes=1000,
        tasks_by_state={"waiting": 1, "queued": 2, "assigned": 3, "canceling": 0, "success": 10, "error": 1},
        sent={"welcome": 2, "dispatchTasks": 5},
        received={"hello": 2},
        workers=[
            WorkerStatus(
                "w1",
                1.5,
                100,
                50.0,
                200,
                free=3,
                sent=1,
                queued=2,
                lag_us=1500,
                processors=4,
                running=1,
                heartbeat_age_ms=6500,
            ),
            WorkerStatus("w2", blocked_processors=1, completed=7, waiting=2, held_back_ms=250),
        ],
        clients=[ClientStatus("c1", tasks=4, objects=2, completed=9, assigned=3)],
        protected=False,
        dropped_messages=3,
        refused_peers=4,
        handler_errors=5,
    )


def test_before_the_first_status_only_scaler_up_0() -> None:
    text = render_metrics(None, None)
    assert text == "# HELP scaler_up 1 if a status arrived in the last 5 s.\n# TYPE scaler_up gauge\nscaler_up 0\n"
    assert parse(text).samples == {("scaler_up", frozenset()): 0}


def test_every_metric_of_a_status_with_its_type() -> None:
    m = parse(render_metrics(a_status(), 1.25))
    assert m.value("scaler_up") == 1 and m.value("scaler_status_age_seconds") == 1.25
    assert m.labelled("scaler_tasks", "state") == {"waiting": 1, "queued": 2, "assigned": 3, "canceling": 0}
    assert m.labelled("scaler_tasks_ended_total", "state") == {"success": 10, "error": 1, "canceled": 0, "failed": 0}
    assert m.types["scaler_tasks"] == "gauge" and m.types["scaler_tasks_ended_total"] == "counter"
    assert m.labelled("scaler_messages_sent_total", "kind") == {"welcome": 2, "dispatchTasks": 5}
    assert m.labelled("scaler_messages_received_total", "kind") == {"hello": 2}
    assert m.value("scaler_dropped_messages_total") == 3 and m.value("scaler_refused_peers_total") == 4
    assert m.value("scaler_handler_errors_total") == 5
    assert m.value("scaler_scheduler_cpu_percent") == 12.5 and m.value("scaler_scheduler_rss_bytes") == 1000
    assert m.value("scaler_scheduler_info", scheduler="sched", protected="false") == 1
    assert m.value("scaler_workers") == 2 and m.value("scaler_clients") == 1
    w1 = {n: v for (n, key), v in m.samples.items() if ("worker", "w1") in key}
    assert w1 == {
        "scaler_worker_agent_cpu_percent": 1.5,
        "scaler_worker_agent_rss_bytes": 100,
        "scaler_worker_processor_cpu_percent": 50.0,
        "scaler_worker_processor_rss_bytes": 200,
        "scaler_worker_free_slots": 3,
        "scaler_worker_assigned_tasks": 1,
        "scaler_worker_prefetched_tasks": 2,
        "scaler_worker_running_tasks": 1,
        "scaler_worker_waiting_tasks": 0,
        "scaler_worker_processors": 4,
        "scaler_worker_blocked_processors": 0,
        "scaler_worker_lag_seconds": 0.0015,
        "scaler_worker_held_back_seconds": 0.0,
        "scaler_worker_heartbeat_age_seconds": 6.5,
        "scaler_worker_completed_tasks_total": 0,
    }
    assert m.value("scaler_worker_held_back_seconds", worker="w2") == 0.25
    assert m.value("scaler_worker_completed_tasks_total", worker="w2") == 7
    assert m.types["scaler_worker_completed_tasks_total"] == "counter"
    assert m.types["scaler_worker_lag_seconds"] == "gauge"
    assert m.value("scaler_client_unfinished_tasks", client="c1") == 4
    assert m.value("scaler_client_queued_tasks", client="c1") == 1
    assert m.value("scaler_client_assigned_tasks", client="c1") == 3
    assert m.value("scaler_client_objects", client="c1") == 2
    assert m.value("scaler_client_completed_tasks_total", client="c1") == 9
    assert {n for n, t in m.types.items() if t == "counter"} == {n for n in m.types if n.endswith("_total")}


def test_tasks_by_function_submitted_assigned_ended_and_their_run_time() -> None:
    status = a_status()
    buckets = [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]  # the one profiled task: under 1 ms
    status.functions = [
        FunctionStatus("abs", 300, 2, 290, 3, 4, 1, duration_us=1500, timed_tasks=1, duration_buckets=buckets),
        FunctionStatus("Outer.<locals>.spin", submitted=1, running=1),
    ]
    m = parse(render_metrics(status, 0.0))
    assert m.types["scaler_function_tasks_submitted_total"] == "counter"
    assert m.types["scaler_function_tasks_assigned"] == "gauge"
    assert m.types["scaler_function_tasks_total"] == "counter"
    assert m.types["scaler_function_duration_seconds"] == "histogram"
    assert m.labelled("scaler_function_tasks_submitted_total", "function") == {"abs": 300, "Outer.<locals>.spin": 1}
    assert m.labelled("scaler_function_tasks_assigned", "function") == {"abs": 2, "Outer.<locals>.spin": 1}
    ended = {k: v for (n, k), v in m.samples.items() if n == "scaler_function_tasks_total" and ("function", "abs") in k}
    assert {dict(k)["state"]: v for k, v in ended.items()} == {"success": 290, "error": 3, "canceled": 4, "failed": 1}
    assert m.value("scaler_function_tasks_total", function="Outer.<locals>.spin", state="success") == 0
    assert m.value("scaler_function_duration_seconds_sum", function="abs") == 0.0015
    assert m.value("scaler_function_duration_seconds_count", function="abs") == 1  # not 293: one was profiled
    assert "scaler_function_duration_seconds_count" not in {
        n for n, k in m.samples if ("function", "Outer.<locals>.spin") in k
    }


def test_run_times_are_a_prometheus_histogram_of_the_profiled_tasks() -> None:
    status = a_status()
    counts = [0, 0, 0, 0, 3, 296, 0, 0, 0, 0, 0, 1]  # 3 of at most 100 ms, 296 at most 500 ms, 1 over 300 s
    status.functions = [
        FunctionStatus("f", 300, 0, 300, duration_us=120_000_000, timed_tasks=300, duration_buckets=counts)
    ]
    m = parse(render_metrics(status, 0.0))
    le = {dict(k)["le"]: v for (n, k), v in m.samples.items() if n == "scaler_function_duration_seconds_bucket"}
    assert le == {
        "0.001": 0, "0.005": 0, "0.01": 0, "0.05": 0, "0.1": 3, "0.5": 299, "1.0": 299, "5.0": 299, "10.0": 299,
        "60.0": 299, "300.0": 299, "+Inf": 300,
    }  # fmt: skip
    assert m.value("scaler_function_duration_seconds_count", function="f") == 300 == le["+Inf"]
    assert m.value("scaler_function_duration_seconds_sum", function="f") == 120.0


def test_no_functions_no_function_metrics() -> None:
    assert "scaler_function" not in render_metrics(a_status(), 0.0)


def test_function_series_are_unique_and_bounded() -> None:
    one = [1] + [0] * 11
    twice = [
        FunctionStatus("f", submitted=2, success=1, duration_us=10, timed_tasks=1, duration_buckets=one),
        FunctionStatus("f", submitted=3, error=1, duration_us=20, timed_tasks=1, duration_buckets=one),
    ]
    m = parse(render_metrics(Status(functions=twice), 0.0))  # parse() fails on a repeated series
    assert m.value("scaler_function_tasks_submitted_total", function="f") == 5
    assert m.value("scaler_function_duration_seconds_bucket", function="f", le="0.001") == 2
    assert m.value("scaler_function_tasks_total", function="f", state="error") == 1
    many = [FunctionStatus(f"fn{i}", submitted=i) for i in range(MAX_FUNCTIONS + 50)]
    m = parse(render_metrics(Status(functions=many), 0.0))
    assert len(m.labelled("scaler_function_tasks_submitted_total", "function")) == MAX_FUNCTIONS == 200
    assert "fn0" in m.labelled("scaler_function_tasks_assigned", "function")  # the first ones, in the scheduler's order
    ended = [key for (n, key) in m.samples if n == "scaler_function_tasks_total"]
    assert len(ended) == 4 * MAX_FUNCTIONS


def test_label_values_are_escaped() -> None:
    tricky = 'a\\b"c\nd'
    status = Status(
        scheduler_name=tricky,
        workers=[WorkerStatus(tricky, free=1)],
        clients=[ClientStatus(tricky)],
        functions=[FunctionStatus(tricky, submitted=2), FunctionStatus('{x="1"}', running=1)],
    )
    text = render_metrics(status, 0.0)
    assert 'scaler_worker_free_slots{worker="a\\\\b\\"c\\nd"} 1\n' in text
    assert 'scaler_function_tasks_submitted_total{function="a\\\\b\\"c\\nd"} 2\n' in text
    m = parse(text)
    assert m.value("scaler_worker_free_slots", worker=tricky) == 1
    assert m.value("scaler_client_objects", client=tricky) == 0
    assert m.value("scaler_scheduler_info", scheduler=tricky, protected="true") == 1
    assert m.value("scaler_function_tasks_total", function=tricky, state="failed") == 0
    assert m.value("scaler_function_tasks_assigned", function='{x="1"}') == 1


def test_an_old_status_is_down_and_empty_families_are_left_out() -> None:
    m = parse(render_metrics(Status(), 5.5))
    assert m.value("scaler_up") == 0 and m.value("scaler_status_age_seconds") == 5.5
    assert m.value("scaler_workers") == 0 and "scaler_worker_free_slots" not in m.types
    assert "scaler_messages_sent_total" not in m.types
    assert parse(render_metrics(Status(), 5.0)).value("scaler_up") == 1


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e-7, 3])
def test_odd_numbers_parse(value: float) -> None:
    m = parse(render_metrics(Status(cpu_percent=value), 0.0))
    got = m.value("scaler_scheduler_cpu_percent")
    assert got == value or (math.isnan(got) and math.isnan(value))


def test_the_content_type_is_the_0_0_4_text_format() -> None:
    assert CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


def test_every_metric_is_in_the_table_of_docs_monitoring_md() -> None:
    status = a_status()
    status.functions = [FunctionStatus("f", submitted=1, timed_tasks=1, duration_buckets=[1] + [0] * 11)]
    names = parse(render_metrics(status, 0.0)).types
    docs = (Path(__file__).resolve().parents[2] / "docs" / "monitoring.md").read_text()
    table = "\n".join(line for line in docs.splitlines() if line.startswith("| `scaler_"))
    assert [name for name in names if f"`{name}`" not in table] == []


def test_worker_managers_units_by_state_scale_events_and_waiting_tasks() -> None:
    status = a_status()
    status.managers = [
        ManagerStatus("slurm", 0, ["payload=python"], 0, 8, 3, 1, 2, 12_500, 0, "", 0),
        ManagerStatus("k8s", 1, ["payload=python", "gpu"], 0, 2, 0, 0, 0, 0, 3, "k8s-4: 403", 20_000),
    ]
    status.waiting = [WaitingTasks(["gpu", "payload=python"], 7, "no connected worker offers gpu")]
    status.units_started, status.units_stopped, status.units_failed = 9, 4, 3
    m = parse(render_metrics(status, 0.0))
    assert m.types["scaler_manager_units"] == "gauge" and m.types["scaler_units_total"] == "counter"
    assert [
        m.value("scaler_manager_units", manager="slurm", state=s) for s in ("connected", "draining", "pending")
    ] == [
        3,
        1,
        2,
    ]
    assert m.value("scaler_manager_oldest_pending_seconds", manager="slurm") == 12.5
    assert m.value("scaler_manager_failed_starts", manager="k8s") == 3
    assert [m.value("scaler_units_total", event=e) for e in ("started", "stopped", "failed")] == [9, 4, 3]
    assert m.value("scaler_waiting_tasks", requires="gpu,payload=python") == 7


def test_a_restart_shows_as_a_new_start_time_and_whether_the_journal_brought_work_back() -> None:
    status = a_status()
    status.started_us = 1_764_000_000_000_000
    m = parse(render_metrics(status, 0.0))
    assert m.value("scaler_scheduler_start_time_seconds") == 1_764_000_000.0
    assert m.value("scaler_scheduler_recovered") == 0
    status.recovered = "1 client session, 45 tasks, 0 held results"
    assert parse(render_metrics(status, 0.0)).value("scaler_scheduler_recovered") == 1
