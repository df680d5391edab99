"""Scheduler: a scheduler in a process of its own, with the constructor of scaler 1.9.9's scheduler process
(scaler.cluster.scheduler.SchedulerProcess), kept for programs written for it. start() runs it, terminate() stops it.
The settings that have an equivalent here map to it; the others are accepted and ignored (docs/client.md)."""

from __future__ import annotations

import multiprocessing
import os
import signal

from scaler.io.addresses import default_monitor_address
from scaler.io.lifetime import die_with_parent, removing_own_files
from scaler.io.logs import setup_logging
from scaler.security.keys import load_server_keys
from scaler.settings.common import keys_directory
from scaler.settings.legacy import IGNORED
from scaler.settings.scheduler import SchedulerSettings
from scaler.settings.worker import ClusterSettings

DEFAULTS = SchedulerSettings()


class Scheduler(multiprocessing.get_context("fork").Process):  # type: ignore[misc]
    """A scheduler listening on `address` (a str, or 1.9.9's ZMQConfig), for clients and workers.

    >>> scheduler = Scheduler(address="tcp://127.0.0.1:2345")
    >>> scheduler.start()
    >>> ...
    >>> scheduler.terminate(); scheduler.join()

    Mapped: monitor_address (default <host>_<port>_monitor in a folder of the user's only), client_timeout_seconds,
    worker_timeout_seconds, load_balance_seconds (the least time between two balancing passes; 0 or None, 1.9.9's
    "off", keep this package's default: balancing is always on), protected, event_loop, logging_path (1.9.9's name)
    or logging_paths, logging_level. Accepted and ignored: io_threads, max_number_of_tasks_waiting (tasks wait at the
    scheduler without limit), per_worker_queue_size (a worker's setting here: Cluster and scaler_cluster take it),
    object_retention_seconds, load_balance_trigger_times, logging_config_file. Beyond 1.9.9: max_task_retries, cpu
    (as scaler_scheduler --cpu) and keys (a keys directory, see docs/security.md). The defaults and the values taken
    are scaler_scheduler's (scaler.settings.scheduler.SchedulerSettings).
    """

    def __init__(
        self,
        address: object,
        monitor_address: object | None = DEFAULTS.monitor_address,
        io_threads: int = IGNORED.io_threads,
        max_number_of_tasks_waiting: int = IGNORED.max_number_of_tasks_waiting,
        per_worker_queue_size: int = ClusterSettings.default("per_worker_queue_size"),
        client_timeout_seconds: float = DEFAULTS.client_timeout_seconds,
        worker_timeout_seconds: float = DEFAULTS.worker_timeout_seconds,
        object_retention_seconds: float = IGNORED.object_retention_seconds,
        load_balance_seconds: float | None = None,
        load_balance_trigger_times: int = IGNORED.load_balance_trigger_times,
        protected: bool = DEFAULTS.protected,
        event_loop: str = DEFAULTS.event_loop,
        logging_path: tuple[str, ...] = DEFAULTS.logging_paths,
        logging_config_file: str | None = IGNORED.logging_config_file,
        *,
        logging_paths: tuple[str, ...] | None = None,
        logging_level: str | int = DEFAULTS.logging_level,
        max_task_retries: int = DEFAULTS.max_task_retries,
        cpu: str | int | None = DEFAULTS.cpu,
        keys: str | os.PathLike[str] | bool | None = DEFAULTS.keys,
    ) -> None:
        super().__init__(name="scaler-scheduler")
        settings = SchedulerSettings.of(
            {
                "address": address,
                "monitor_address": monitor_address,
                "client_timeout_seconds": client_timeout_seconds,
                "worker_timeout_seconds": worker_timeout_seconds,
                "balance_interval_seconds": load_balance_seconds or DEFAULTS.balance_interval_seconds,
                "protected": protected,
                "event_loop": event_loop,
                "logging_paths": logging_paths if logging_paths is not None else logging_path,
                "logging_level": logging_level,
                "max_task_retries": max_task_retries,
                "cpu": cpu,
                "keys": keys,
            },
            {"balance_interval_seconds": "load_balance_seconds"},
        )
        assert settings.address is not None
        self.settings = settings
        directory = keys_directory(settings.keys)
        self._keys = load_server_keys(directory) if directory is not None else None
        self._address = settings.address
        self._monitor_address = settings.monitor_address or default_monitor_address(settings.address)

    @property
    def address(self) -> str:
        return self._address

    @property
    def monitor_address(self) -> str:
        return self._monitor_address

    def run(self) -> None:
        die_with_parent(signal.SIGTERM)
        setup_logging(self.settings.logging_level, self.settings.logging_paths)
        from scaler.scheduler.server import run_scheduler

        with removing_own_files():
            run_scheduler(
                self._address,
                self._monitor_address,
                self.settings.core_config(),
                self.settings.event_loop,
                cpu=self.settings.cpu,
                keys=self._keys,
                max_connections=self.settings.max_connections,
                max_silent_connections=self.settings.max_silent_connections,
                monitor_task_data=self.settings.monitor_task_data,
                journal=self.settings.journal,
                journal_sync=self.settings.journal_sync,
            )
