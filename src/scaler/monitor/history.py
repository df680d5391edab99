"""What scaler_ui remembers of a scheduler, fed one status at a time, and the answers its page asks for.

A status carries the present, and the task events, failures, output and departures since the previous status only;
this keeps the past, every table bounded: the cluster's time series (scaler.monitor.series), each worker's recent
figures and the departed workers (scaler.monitor.fleet), the tasks' bars, failures and output
(scaler.monitor.task_history). Answers are plain data for JSON; the incremental ones take `since`, the number the
previous answer ended at, so that a page polling every second moves little data.

Pure: statuses in, plain data out; no I/O, no clock, not thread-safe (scaler.monitor.ui holds a lock around it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from scaler.monitor.fleet import Fleet
from scaler.monitor.render import is_nested, timed_tasks
from scaler.monitor.series import SERIES_WINDOW_MS, ClusterSeries, at_workers
from scaler.monitor.task_history import ENDED_CAPACITY, TaskHistory
from scaler.protocol.messages import FunctionStatus, Status

WORKER_TASKS = 50  # recent tasks shown in a worker's detail


def function_row(f: FunctionStatus) -> dict[str, Any]:
    """A function's progress in the words of docs/monitoring.md: queued is what was submitted and is neither assigned
    to a worker nor ended (waiting for other tasks, or queued at the scheduler); assigned (FunctionStatus.running) is
    at workers, in their queues or running."""
    ended = f.success + f.error + f.canceled + f.failed
    timed = timed_tasks(f)
    return {
        "name": f.name,
        "submitted": f.submitted,
        "queued": max(0, f.submitted - f.running - ended),
        "assigned": f.running,
        "success": f.success,
        "error": f.error,
        "canceled": f.canceled,
        "failed": f.failed,
        "mean_us": f.duration_us // timed if timed else None,
        "timed": timed,  # the mean is of these tasks' run times (profiled ones): fewer than success + error: a sample
    }


def worker_name(label: str) -> str:
    """The worker name of a label of one of its lives (fleet.life_label)."""
    name, _, life = label.rpartition(" #")
    return name if name and life.isdigit() else label


class History:
    """Everything scaler_ui keeps; `epoch` names this history (a page seeing another one starts over)."""

    def __init__(self, epoch: str, ended_capacity: int = ENDED_CAPACITY) -> None:
        self.epoch = epoch
        self.latest: Status | None = None
        self.statuses = 0
        self.series = ClusterSeries()
        self.fleet = Fleet()
        self.tasks = TaskHistory(ended_capacity)
        self.restarts: list[dict[str, Any]] = []  # the scheduler restarted: when, how long it was away, what came back

    def add(self, status: Status) -> None:
        previous = self.latest
        if previous is not None and status.started_us and status.started_us != previous.started_us:
            away_ms = max(0, (status.started_us - previous.time_us) // 1000)
            restart = {"time": status.started_us // 1000, "away_ms": away_ms, "recovered": status.recovered}
            self.restarts = [*self.restarts[-9:], restart]  # (the last 10)
        self.latest = status
        self.statuses += 1
        self.series.add(status)
        before = set(self.fleet.tracks)
        self.fleet.add(status)
        self.tasks.add(status)
        for name in before.difference(self.fleet.tracks):
            departed = self.fleet.departed.get(self.fleet.label(name))
            self.tasks.forget_worker(name, departed.time_ms if departed is not None else self.now_ms)
        self.tasks.settle(status)

    @property
    def now_ms(self) -> int:
        return 0 if self.latest is None else self.latest.time_us // 1000

    def summary(self, monitor_address: str, age_seconds: float | None) -> dict[str, Any]:
        """The header and the small views: the scheduler, task counts, functions, clients, worker states."""
        result: dict[str, Any] = {
            "epoch": self.epoch,
            "monitor_address": monitor_address,
            "age_seconds": None if age_seconds is None else round(age_seconds, 3),
            "status": None,
        }
        s = self.latest
        if s is None:
            return result
        tasks = self.tasks
        result["status"] = {
            "scheduler_name": s.scheduler_name,
            "time": s.time_us // 1000,
            "cpu_percent": round(s.cpu_percent, 1),
            "rss_bytes": s.rss_bytes,
            "protected": s.protected,
            "dropped_messages": s.dropped_messages,
            "refused_peers": s.refused_peers,
            "handler_errors": s.handler_errors,
            "tasks_by_state": s.tasks_by_state,
            "sent": s.sent,
            "received": s.received,
            "workers": len(s.workers),
            "worker_states": self.fleet.counts(),
            "processors": sum(w.processors for w in s.workers),
            **at_workers(s),
            "clients": [
                {
                    "name": c.name,
                    "tasks": c.tasks,
                    "queued": c.queued,
                    "assigned": c.assigned,
                    "objects": c.objects,
                    "completed": c.completed,
                    "nested": is_nested(c.name),
                }
                for c in s.clients
            ],
            "functions": [function_row(f) for f in s.functions],
            "managers": [dataclasses.asdict(m) for m in s.managers],
            "waiting": [dataclasses.asdict(g) for g in s.waiting],
            "units": {"started": s.units_started, "stopped": s.units_stopped, "failed": s.units_failed},
            "started": s.started_us // 1000,
            "recovered": s.recovered,
            "restarts": self.restarts,
            "sample_every": tasks.sample_every,
            "dropped_events": tasks.dropped,
            "ends_not_seen": tasks.ends_not_seen,
            "failures": tasks.failures.total,
            "outputs": tasks.output_total,
            "ended_seq": tasks.ended.total,
        }
        return result

    def series_since(self, since: int) -> dict[str, Any]:
        return {"epoch": self.epoch, **self.series.since(since, SERIES_WINDOW_MS)}

    def workers(self, sort: str, descending: bool, offset: int, limit: int, contains: str = "") -> dict[str, Any]:
        return {"epoch": self.epoch, **self.fleet.table(sort, descending, offset, limit, contains)}

    def worker(self, name: str) -> dict[str, Any] | None:
        detail = self.fleet.detail(name)
        if detail is not None:  # the tasks of every life of the worker: they are recorded under its name
            detail["tasks"] = self.tasks.log(WORKER_TASKS, worker=worker_name(name))
        return detail

    def stream(self, since: int, window_ms: int, limit: int, running_limit: int) -> dict[str, Any]:
        now = self.now_ms
        bars = self.tasks.bars(since, now - window_ms, now, limit, running_limit)
        return {"epoch": self.epoch, "sample_every": self.tasks.sample_every, **bars}

    def log(self, limit: int, statuses: frozenset[str], function: str, worker: str) -> dict[str, Any]:
        return {"epoch": self.epoch, "tasks": self.tasks.log(limit, statuses, function, worker)}

    def failures(self, since: int, limit: int) -> dict[str, Any]:
        return {"epoch": self.epoch, **self.tasks.failures_since(since, limit)}

    def outputs(self, since: int, limit: int) -> dict[str, Any]:
        return {"epoch": self.epoch, **self.tasks.outputs_since(since, limit)}

    def task(self, task_id: int) -> dict[str, Any]:
        return {"epoch": self.epoch, **self.tasks.task(task_id)}
