"""Scheduler: a scheduler in a process of its own, with the constructor of scaler 1.9.9's scheduler process
(scaler.cluster.scheduler.SchedulerProcess), kept for programs written for it. start() runs it, terminate() stops it.
The settings that have an equivalent here map to it; the others are accepted and ignored (docs/client.md)."""

from __future__ import annotations

import multiprocessing
import os
import signal

from scaler.cluster.cluster import address_text
from scaler.core.scheduler import SchedulerConfig
from scaler.io.loop import check_event_loop
from scaler.io.processes import (
    check_cpu,
    check_logging_level,
    check_logging_paths,
    default_monitor_address,
    die_with_parent,
    removing_own_files,
    setup_logging,
)
from scaler.security.keys import load_server_keys, resolve

DEFAULTS = SchedulerConfig()


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
    (as scaler_scheduler --cpu) and keys (a keys directory, see docs/security.md).
    """

    def __init__(
        self,
        address: object,
        monitor_address: object | None = None,
        io_threads: int = 1,
        max_number_of_tasks_waiting: int = -1,
        per_worker_queue_size: int = 1000,
        client_timeout_seconds: float = DEFAULTS.client_timeout_seconds,
        worker_timeout_seconds: float = DEFAULTS.worker_timeout_seconds,
        object_retention_seconds: float = 60,
        load_balance_seconds: float | None = None,
        load_balance_trigger_times: int = 2,
        protected: bool = True,
        event_loop: str = "builtin",
        logging_path: tuple[str, ...] = ("/dev/stdout",),
        logging_config_file: str | None = None,
        *,
        logging_paths: tuple[str, ...] | None = None,
        logging_level: str = "INFO",
        max_task_retries: int = DEFAULTS.max_task_retries,
        cpu: str | int | None = "auto",
        keys: str | os.PathLike[str] | bool | None = None,
    ) -> None:
        super().__init__(name="scaler-scheduler")
        check_event_loop(event_loop)
        check_logging_level(logging_level)
        check_logging_paths(tuple(logging_paths if logging_paths is not None else logging_path))
        if client_timeout_seconds <= 0 or worker_timeout_seconds <= 0 or max_task_retries < 0:
            raise ValueError("timeouts must be positive and max_task_retries at least 0")
        if isinstance(keys, bool) and keys:
            raise TypeError("keys must be a keys directory, None (use $SCALER_KEYS if set) or False (no keys)")
        directory = None if keys is False else resolve(keys)
        self._keys = load_server_keys(directory) if directory is not None else None
        self._address = address_text(address)
        self._monitor_address = (
            address_text(monitor_address) if monitor_address is not None else default_monitor_address(self._address)
        )
        self._cpu = check_cpu(cpu)
        self._event_loop = event_loop
        self._logging_paths = tuple(logging_paths if logging_paths is not None else logging_path)
        self._logging_level = logging_level
        self._scheduler_config = SchedulerConfig(
            protected=protected,
            worker_timeout_seconds=worker_timeout_seconds,
            client_timeout_seconds=client_timeout_seconds,
            max_task_retries=max_task_retries,
            balance_interval_seconds=load_balance_seconds or DEFAULTS.balance_interval_seconds,
        )

    @property
    def address(self) -> str:
        return self._address

    @property
    def monitor_address(self) -> str:
        return self._monitor_address

    def run(self) -> None:
        die_with_parent(signal.SIGTERM)
        setup_logging(self._logging_level, self._logging_paths)
        from scaler.scheduler.server import run_scheduler

        with removing_own_files():
            run_scheduler(
                self._address,
                self._monitor_address,
                self._scheduler_config,
                self._event_loop,
                cpu=self._cpu,
                keys=self._keys,
            )
