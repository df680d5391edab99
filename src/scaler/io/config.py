"""scaler 1.9.9's scaler.io.config (issue 29): its DEFAULT_* names, each with this version's default for the same
setting (or, for a setting this version takes and ignores, 1.9.9's value: scaler.settings.legacy). Its internal
constants are gone: reading one raises an ImportError saying so."""

from __future__ import annotations

from typing import Any

from scaler.core.scheduler.config import SchedulerConfig
from scaler.settings.legacy import IGNORED
from scaler.settings.worker import ClusterSettings

_SCHEDULER = SchedulerConfig()

DEFAULT_WORKER_TIMEOUT_SECONDS = _SCHEDULER.worker_timeout_seconds
DEFAULT_CLIENT_TIMEOUT_SECONDS = _SCHEDULER.client_timeout_seconds
DEFAULT_LOAD_BALANCE_SECONDS = _SCHEDULER.balance_interval_seconds
DEFAULT_HEARTBEAT_INTERVAL_SECONDS = ClusterSettings.default("heartbeat_interval_seconds")
DEFAULT_PER_WORKER_QUEUE_SIZE = ClusterSettings.default("per_worker_queue_size")
DEFAULT_WORKER_DEATH_TIMEOUT = ClusterSettings.default("death_timeout_seconds")
DEFAULT_NUMBER_OF_WORKER = ClusterSettings.default("n_workers")
# taken and ignored by this version (1.9.9's values)
DEFAULT_IO_THREADS = IGNORED.io_threads
DEFAULT_MAX_NUMBER_OF_TASKS_WAITING = IGNORED.max_number_of_tasks_waiting
DEFAULT_OBJECT_RETENTION_SECONDS = IGNORED.object_retention_seconds
DEFAULT_GARBAGE_COLLECT_INTERVAL_SECONDS = IGNORED.garbage_collect_interval_seconds
DEFAULT_TRIM_MEMORY_THRESHOLD_BYTES = IGNORED.trim_memory_threshold_bytes
DEFAULT_TASK_TIMEOUT_SECONDS = IGNORED.task_timeout_seconds
DEFAULT_LOAD_BALANCE_TRIGGER_TIMES = IGNORED.load_balance_trigger_times
DEFAULT_HARD_PROCESSOR_SUSPEND = IGNORED.hard_processor_suspend


def __getattr__(name: str) -> Any:
    if name.startswith("__"):  # (the import system's own probes)
        raise AttributeError(name)
    # an ImportError, not an AttributeError: `from scaler.io.config import NAME` would replace that with its own text
    raise ImportError(
        f"scaler.io.config.{name} was an internal constant of scaler 1.9.9 with no counterpart here; the DEFAULT_* "
        "settings are kept (their values are this version's defaults)"
    )
