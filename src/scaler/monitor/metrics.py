"""The Prometheus text exposition (format 0.0.4) of a scheduler's status: what scaler_ui answers on /metrics.

Pure: a status and its age in, text out. No I/O and no clock: the caller measures how old the status is.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from scaler.monitor.series import at_workers
from scaler.protocol.messages import ClientStatus, FunctionStatus, Status, WorkerStatus
from scaler.protocol.records import DURATION_BOUNDS_US

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
UP_WITHIN_SECONDS = 5.0  # a status older than this and the scheduler counts as down, as the web page says
LIVE_STATES = ("waiting", "queued", "assigned", "canceling")  # gauges: tasks in these states now
ENDED_STATES = ("success", "error", "canceled", "failed")  # counters: tasks that ended so, since the start
MAX_FUNCTIONS = 200  # series per function metric: the scheduler sends at most this many functions
FUNCTION_COUNTS = ("submitted", "running", "success", "error", "canceled", "failed", "duration_us", "timed_tasks")

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Family:
    """One metric: its name, type (gauge, counter or histogram), help text and samples (labels, value); a histogram's
    samples each have a suffix (_bucket, _sum, _count), in `suffixes`."""

    name: str
    type: str
    help: str
    samples: tuple[tuple[Labels, float], ...]
    suffixes: tuple[str, ...] = ()


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def format_family(family: Family) -> list[str]:
    lines = [f"# HELP {family.name} {escape_help(family.help)}", f"# TYPE {family.name} {family.type}"]
    for i, (labels, value) in enumerate(family.samples):
        name = family.name + (family.suffixes[i] if family.suffixes else "")
        inner = ",".join(f'{key}="{escape_label_value(text)}"' for key, text in labels)
        lines.append(f"{name}{{{inner}}} {format_value(value)}" if labels else f"{name} {format_value(value)}")
    return lines


def single(name: str, type_: str, help_: str, value: float) -> Family:
    return Family(name, type_, help_, (((), value),))


def by_label(name: str, type_: str, help_: str, label: str, values: Iterable[tuple[str, float]]) -> Family:
    return Family(name, type_, help_, tuple((((label, key),), value) for key, value in values))


# Per-worker gauges: name after scaler_worker_, help, and how to read it from a WorkerStatus.
WORKER_GAUGES: tuple[tuple[str, str, Callable[[WorkerStatus], float]], ...] = (
    ("agent_cpu_percent", "CPU use of the worker's agent, in percent of one core.", lambda w: w.agent_cpu_percent),
    ("agent_rss_bytes", "Resident memory of the worker's agent.", lambda w: w.agent_rss_bytes),
    ("processor_cpu_percent", "CPU use of the worker's processors, in percent of one core.", lambda w: w.cpu_percent),
    ("processor_rss_bytes", "Resident memory of the worker's processors.", lambda w: w.rss_bytes),
    ("free_slots", "Task slots the scheduler may still fill on the worker.", lambda w: w.free),
    ("assigned_tasks", "Tasks the scheduler gave the worker that have not finished.", lambda w: w.sent),
    ("prefetched_tasks", "Tasks waiting in the worker's queue for a processor.", lambda w: w.queued),
    ("running_tasks", "Tasks running on the worker's processors.", lambda w: w.running),
    ("waiting_tasks", "The worker's tasks waiting on nested tasks.", lambda w: w.waiting),
    ("processors", "Processors alive on the worker.", lambda w: w.processors),
    ("blocked_processors", "The worker's processors blocked on nested tasks.", lambda w: w.blocked_processors),
    ("lag_seconds", "Heartbeat round trip between the worker and the scheduler.", lambda w: w.lag_us / 1e6),
    (
        "held_back_seconds",
        "How long the scheduler still holds tasks back from the worker.",
        lambda w: w.held_back_ms / 1e3,
    ),
    (
        "heartbeat_age_seconds",
        "Age of the worker's last heartbeat, which its prefetched, running, cpu, rss and assigned figures are as of.",
        lambda w: w.heartbeat_age_ms / 1e3,
    ),
)

CLIENT_GAUGES: tuple[tuple[str, str, Callable[[ClientStatus], float]], ...] = (
    ("unfinished_tasks", "The client's tasks that have not finished.", lambda c: c.tasks),
    (
        "queued_tasks",
        "The client's unfinished tasks not at a worker: waiting on other tasks or queued at the scheduler.",
        lambda c: c.queued,
    ),
    ("assigned_tasks", "The client's tasks at workers: prefetched or running.", lambda c: c.assigned),
    ("objects", "Objects the client holds in the scheduler.", lambda c: c.objects),
)


def families(status: Status | None, age_seconds: float | None) -> list[Family]:
    """Every metric for a status (None before the first: scaler_up 0 only) of the given age in seconds."""
    up = status is not None and age_seconds is not None and age_seconds <= UP_WITHIN_SECONDS
    result = [single("scaler_up", "gauge", f"1 if a status arrived in the last {UP_WITHIN_SECONDS:g} s.", int(up))]
    if status is None:
        return result
    return (
        result
        + scheduler_families(status, age_seconds or 0.0)
        + worker_families(status.workers)
        + client_families(status.clients)
        + function_families(status.functions)
        + manager_families(status)
    )


def scheduler_families(status: Status, age_seconds: float) -> list[Family]:
    counts = status.tasks_by_state
    info = (("scheduler", status.scheduler_name), ("protected", str(status.protected).lower()))
    return [
        single("scaler_status_age_seconds", "gauge", "Age of the latest status.", round(age_seconds, 3)),
        Family("scaler_scheduler_info", "gauge", "The scheduler's name and mode, as labels.", ((info, 1),)),
        single(
            "scaler_scheduler_cpu_percent",
            "gauge",
            "CPU use of the scheduler, in percent of one core.",
            status.cpu_percent,
        ),
        single("scaler_scheduler_rss_bytes", "gauge", "Resident memory of the scheduler.", status.rss_bytes),
        single(
            "scaler_scheduler_start_time_seconds",
            "gauge",
            "When the scheduler process started (Unix time): it changes when the scheduler restarts.",
            status.started_us / 1e6,
        ),
        single(
            "scaler_scheduler_recovered",
            "gauge",
            "1 if the scheduler started from its journal with work in it (--journal), else 0.",
            int(bool(status.recovered)),
        ),
        by_label(
            "scaler_tasks", "gauge", "Tasks by state, now.", "state", ((s, counts.get(s, 0)) for s in LIVE_STATES)
        ),
        by_label(
            "scaler_tasks_at_workers",
            "gauge",
            "Tasks assigned to workers, by whether they run in a processor or wait in the worker's queue (the workers'"
            " latest heartbeats).",
            "state",
            ((state, at_workers(status)[state]) for state in ("running", "prefetched")),
        ),
        by_label(
            "scaler_tasks_ended_total",
            "counter",
            "Tasks that ended, by how.",
            "state",
            ((s, counts.get(s, 0)) for s in ENDED_STATES),
        ),
        by_label(
            "scaler_messages_sent_total",
            "counter",
            "Messages the scheduler sent, by kind.",
            "kind",
            sorted(status.sent.items()),
        ),
        by_label(
            "scaler_messages_received_total",
            "counter",
            "Messages the scheduler received, by kind.",
            "kind",
            sorted(status.received.items()),
        ),
        single(
            "scaler_dropped_messages_total",
            "counter",
            "Messages the scheduler dropped as bad.",
            status.dropped_messages,
        ),
        single("scaler_refused_peers_total", "counter", "Peers the scheduler refused.", status.refused_peers),
        single(
            "scaler_handler_errors_total", "counter", "Errors the scheduler's handlers survived.", status.handler_errors
        ),
        single("scaler_workers", "gauge", "Workers connected.", len(status.workers)),
        single("scaler_clients", "gauge", "Clients connected.", len(status.clients)),
    ]


def worker_families(workers: list[WorkerStatus]) -> list[Family]:
    result = [
        by_label(f"scaler_worker_{name}", "gauge", help_, "worker", ((w.name, read(w)) for w in workers))
        for name, help_, read in WORKER_GAUGES
    ]
    done = ((w.name, w.completed) for w in workers)
    result.append(
        by_label("scaler_worker_completed_tasks_total", "counter", "Tasks the worker finished.", "worker", done)
    )
    return result


def client_families(clients: list[ClientStatus]) -> list[Family]:
    result = [
        by_label(f"scaler_client_{name}", "gauge", help_, "client", ((c.name, read(c)) for c in clients))
        for name, help_, read in CLIENT_GAUGES
    ]
    done = ((c.name, c.completed) for c in clients)
    result.append(
        by_label("scaler_client_completed_tasks_total", "counter", "The client's tasks that finished.", "client", done)
    )
    return result


def manager_families(status: Status) -> list[Family]:
    """The worker managers' units by state, how long the oldest pending one has waited, and the scale events."""
    units = tuple(
        ((("manager", m.name), ("state", state)), count)
        for m in status.managers
        for state, count in (("connected", m.connected), ("draining", m.draining), ("pending", m.pending))
    )
    events = (("started", status.units_started), ("stopped", status.units_stopped), ("failed", status.units_failed))
    return [
        Family("scaler_manager_units", "gauge", "Units of each worker manager, by state.", units),
        by_label(
            "scaler_manager_oldest_pending_seconds",
            "gauge",
            "How long the manager's oldest unit asked for and not connected has waited (0: none).",
            "manager",
            ((m.name, m.oldest_pending_ms / 1e3) for m in status.managers),
        ),
        by_label(
            "scaler_manager_failed_starts",
            "gauge",
            "Units of the manager in a row that failed to start (0: its last one started).",
            "manager",
            ((m.name, m.failures) for m in status.managers),
        ),
        by_label(
            "scaler_units_total",
            "counter",
            "Units the scheduler asked managers to start, stopped, and units that failed to start, since it started.",
            "event",
            events,
        ),
        by_label(
            "scaler_waiting_tasks",
            "gauge",
            "Queued tasks no worker holds, by the capabilities they require (the largest groups).",
            "requires",
            ((",".join(g.capabilities), g.tasks) for g in status.waiting),
        ),
    ]


def merged_functions(functions: list[FunctionStatus]) -> list[FunctionStatus]:
    """One entry per name (two with the same name are added up: a series must be unique), the first MAX_FUNCTIONS
    names in the scheduler's order, sorted by name."""
    merged: dict[str, FunctionStatus] = {}
    for f in functions:
        into = merged.get(f.name)
        if into is None and len(merged) < MAX_FUNCTIONS:
            merged[f.name] = dataclasses.replace(f)
        elif into is not None:
            for name in FUNCTION_COUNTS:
                setattr(into, name, getattr(into, name) + getattr(f, name))
            into.duration_buckets = [a + b for a, b in zip(into.buckets(), f.buckets())]
    return [merged[name] for name in sorted(merged)]


def function_families(functions: list[FunctionStatus]) -> list[Family]:
    """Per function (`function` label, the name its client gave it): tasks submitted, assigned to workers, ended by
    how, and the run times of those whose worker measured one (profiled tasks), as a histogram."""
    merged = merged_functions(functions)
    ended = tuple(
        ((("function", f.name), ("state", state)), getattr(f, state)) for f in merged for state in ENDED_STATES
    )
    return [
        by_label(
            "scaler_function_tasks_submitted_total",
            "counter",
            "Tasks of the function submitted.",
            "function",
            ((f.name, f.submitted) for f in merged),
        ),
        by_label(
            "scaler_function_tasks_assigned",
            "gauge",
            "Tasks of the function assigned to a worker now (prefetched there or running).",
            "function",
            ((f.name, f.running) for f in merged),
        ),
        Family("scaler_function_tasks_total", "counter", "Tasks of the function that ended, by how.", ended),
        duration_histogram(merged),
    ]


def duration_histogram(merged: list[FunctionStatus]) -> Family:
    """scaler_function_duration_seconds: the run times of the function's tasks that ended with a result and a run
    time (profiled: Client(..., profiling=True)); _count says how many, so rate(_sum) / rate(_count) is their mean."""
    samples: list[tuple[Labels, float]] = []
    suffixes: list[str] = []
    for f in merged:
        if not f.timed_tasks:
            continue
        total = 0
        for bound, count in zip((*DURATION_BOUNDS_US, math.inf), f.buckets()):
            total += count
            le = "+Inf" if bound == math.inf else format_value(bound / 1e6)
            samples.append(((("function", f.name), ("le", le)), total))
            suffixes.append("_bucket")
        samples += [((("function", f.name),), f.duration_us / 1e6), ((("function", f.name),), f.timed_tasks)]
        suffixes += ["_sum", "_count"]
    help_ = "Run time of the function's profiled tasks that ended with a result (success or error)."
    return Family("scaler_function_duration_seconds", "histogram", help_, tuple(samples), tuple(suffixes))


def render_metrics(status: Status | None, age_seconds: float | None) -> str:
    """The /metrics page: every metric with samples, each with its HELP and TYPE lines, ending in a newline."""
    lines = [line for family in families(status, age_seconds) if family.samples for line in format_family(family)]
    return "\n".join(lines) + "\n"
