"""The cluster over time, for scaler_ui's overview: one point per status (about one a second) with tasks by state,
throughput (from the ended-task counters' growth), and the cpu and memory of the scheduler, the workers' agents and
their processors.

Pure: statuses in, plain data out; time comes from the statuses themselves.
"""

from __future__ import annotations

from typing import Any

from scaler.monitor.ring import Ring
from scaler.protocol.messages import Status

SERIES_CAPACITY = 3600  # points kept: one per status, so an hour at one status a second
SERIES_WINDOW_MS = 30 * 60 * 1000  # the page is given the points of the last 30 minutes at most

# The columns of a point, in order; rates are tasks per second since the previous status (None: unknown).
COLUMNS = (
    "t",  # the status's wall-clock time, ms since the epoch
    "waiting",
    "queued",
    "assigned",
    "running",  # the workers' running tasks, summed
    "canceling",
    "success_rate",
    "failed_rate",  # error and failed (which includes timed out and over memory)
    "canceled_rate",
    "scheduler_cpu",  # percent of one core
    "agents_cpu",
    "processors_cpu",
    "scheduler_rss",  # bytes
    "agents_rss",
    "processors_rss",
    "workers",
)

Point = tuple[Any, ...]


def ended_counts(status: Status) -> tuple[int, int, int]:
    """The status's totals of tasks that ended: succeeded, failed (error or failed), canceled."""
    by_state = status.tasks_by_state
    failed = by_state.get("error", 0) + by_state.get("failed", 0)
    return by_state.get("success", 0), failed, by_state.get("canceled", 0)


def rates(before: tuple[int, tuple[int, ...]] | None, now_us: int, counts: tuple[int, ...]) -> list[float | None]:
    """Per second, from the counters `before` (time in µs, counts) to `counts` at `now_us`; None for each when there
    is no earlier status, time did not move forward, or a counter went down (the scheduler restarted)."""
    if before is None or now_us <= before[0] or any(c < b for c, b in zip(counts, before[1])):
        return [None] * len(counts)
    seconds = (now_us - before[0]) / 1e6
    return [round((c - b) / seconds, 2) for c, b in zip(counts, before[1])]


class ClusterSeries:
    """The last `capacity` points, numbered (scaler.monitor.ring)."""

    def __init__(self, capacity: int = SERIES_CAPACITY) -> None:
        self.points: Ring[Point] = Ring(capacity)
        self._before: tuple[int, tuple[int, ...]] | None = None

    def add(self, status: Status) -> None:
        counts = ended_counts(status)
        success_rate, failed_rate, canceled_rate = rates(self._before, status.time_us, counts)
        self._before = (status.time_us, counts)
        by_state, workers = status.tasks_by_state, status.workers
        point = (
            status.time_us // 1000,
            by_state.get("waiting", 0),
            by_state.get("queued", 0),
            by_state.get("assigned", 0),
            at_workers(status)["running"],
            by_state.get("canceling", 0),
            success_rate,
            failed_rate,
            canceled_rate,
            round(status.cpu_percent, 1),
            round(sum(w.agent_cpu_percent for w in workers), 1),
            round(sum(w.cpu_percent for w in workers), 1),
            status.rss_bytes,
            sum(w.agent_rss_bytes for w in workers),
            sum(w.rss_bytes for w in workers),
            len(workers),
        )
        self.points.append(point)

    def since(self, since: int, window_ms: int = SERIES_WINDOW_MS) -> dict[str, Any]:
        """The points numbered above `since` and within `window_ms` of the newest, as columns, with `seq`: the
        newest point's number (the `since` of the next call)."""
        newest = self.points.latest()
        oldest_t = 0 if newest is None else newest[0] - window_ms
        rows = [point for _, point in self.points.since(since) if point[0] >= oldest_t]
        data: dict[str, Any] = {"seq": self.points.total}
        for i, name in enumerate(COLUMNS):
            data[name] = [row[i] for row in rows]
        return data


def at_workers(status: Status) -> dict[str, int]:
    """Tasks at workers (docs/monitoring.md, "Words"): assigned is the scheduler's own count (sent to a worker, not
    ended, canceling included); running and prefetched (in a worker's queue) are the workers' heartbeat figures, which
    lag by up to a heartbeat, capped by assigned (a status without the scheduler's counts: not capped)."""
    running, prefetched = sum(w.running for w in status.workers), sum(w.queued for w in status.workers)
    by_state = status.tasks_by_state
    if "assigned" not in by_state:
        return {"assigned": running + prefetched, "running": running, "prefetched": prefetched}
    assigned = by_state["assigned"] + by_state.get("canceling", 0)
    running = min(assigned, running)
    return {"assigned": assigned, "running": running, "prefetched": min(assigned - running, prefetched)}
