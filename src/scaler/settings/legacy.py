"""scaler 1.9.9's keywords that have no equivalent here: SchedulerClusterCombo, Cluster and Scheduler take them (a
program written for 1.9.9 runs) and ignore them. Their defaults, as 1.9.9 had them, are written here once.

Runs on Python 3.9 (nothing here is the scheduler's, but nothing needs more).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ignored:
    """The defaults of the keywords taken and ignored (docs/guide/local-cluster.md, "SchedulerClusterCombo")."""

    worker_io_threads: int = 1
    scheduler_io_threads: int = 1
    io_threads: int = 1
    max_number_of_tasks_waiting: int = -1
    object_retention_seconds: float = 60
    task_timeout_seconds: float = 0
    load_balance_trigger_times: int = 2
    garbage_collect_interval_seconds: float = 30
    trim_memory_threshold_bytes: int = 1024**3
    hard_processor_suspend: bool = False
    logging_config_file: str | None = None


IGNORED = Ignored()
