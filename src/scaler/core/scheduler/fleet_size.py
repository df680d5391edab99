"""How many workers may take tasks now, and how many tasks they hold at once between them: what the scheduler tells
its clients in Welcome and in the echo of their heartbeats (docs/protocol.md, "welcome"), so that a client (and the
joblib backend's n_jobs=-1) learns the cluster's size from its own session, not from the monitor.

Pure; runs on Python 3.9 (the scheduler's closure).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeVar

from scaler.protocol.records import HeartbeatEcho, Welcome

if TYPE_CHECKING:
    from scaler.core.scheduler.sessions import WorkerSession

ToClient = TypeVar("ToClient", Welcome, HeartbeatEcho)


def fleet_size(workers: Iterable[WorkerSession], now: float) -> tuple[int, int]:
    """(workers, their queue capacities added up), counting the connected workers not held back at `now`."""
    count = capacity = 0
    for worker in workers:
        if worker.held_until <= now:
            count += 1
            capacity += worker.capacity
    return count, capacity


def with_workers(message: ToClient, workers: Iterable[WorkerSession], now: float) -> ToClient:
    """`message`, for a client, stating the workers that may take tasks at `now` (fleet_size)."""
    message.workers, message.worker_capacity = fleet_size(workers, now)
    message.workers_stated = True
    return message
