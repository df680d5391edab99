"""SchedulerClusterCombo: a scheduler and N workers on this machine, as child processes, in one call."""

from __future__ import annotations

import atexit
import dataclasses
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
from collections.abc import Iterable
from typing import Any

from scaler.cluster.cluster import Cluster
from scaler.io.addresses import default_monitor_address
from scaler.io.lifetime import die_with_parent, removing_own_files
from scaler.io.logs import setup_logging
from scaler.scheduler.server import run_scheduler
from scaler.security.keys import ServerKeys, load_server_keys
from scaler.settings.common import keys_directory
from scaler.settings.legacy import IGNORED
from scaler.settings.scheduler import SchedulerSettings
from scaler.settings.worker import ClusterSettings

logger = logging.getLogger(__name__)

STARTUP_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 5.0
SCHEDULER = SchedulerSettings()
WORKERS = ClusterSettings()
# A combo runs inside a program: its processes log warnings and errors only, to stderr, not to the program's output.
LOGGING_LEVEL = "WARNING"
LOGGING_PATHS = ("/dev/stderr",)


def _scheduler_main(
    address: str,
    monitor_address: str,
    settings: SchedulerSettings,
    ready: multiprocessing.connection.Connection,
    keys: ServerKeys | None,
) -> None:
    die_with_parent(signal.SIGTERM)
    setup_logging(settings.logging_level, settings.logging_paths)
    try:
        with removing_own_files():
            run_scheduler(
                address,
                monitor_address,
                settings.core_config(),
                settings.event_loop,
                on_ready=lambda: ready.send(None),
                cpu=settings.cpu,
                keys=keys,
                max_connections=settings.max_connections,
                max_silent_connections=settings.max_silent_connections,
                monitor_task_data=settings.monitor_task_data,
                journal=settings.journal,
                journal_sync=settings.journal_sync,
            )
    except Exception as exc:
        ready.send(f"{type(exc).__name__}: {exc}")
        raise SystemExit(1) from exc


def free_local_address() -> str:
    """tcp://127.0.0.1:<a port free now> (the OS picks it; another program could still take it before we do)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{probe.getsockname()[1]}"


class SchedulerClusterCombo:
    """Start a scheduler on `address` and `n_workers` workers connected to it; shutdown() stops them all.

    >>> cluster = SchedulerClusterCombo(address="tcp://127.0.0.1:2345", n_workers=4)
    >>> ...
    >>> cluster.shutdown()

    Everything stops too when this process exits. Without an address the scheduler listens on a free local port:
    cluster.address tells which. The processes log to stderr, warnings and errors only (logging_level,
    logging_paths), so that a program's own output stays clean. SchedulerClusterCombo(4), scaler 1.9's order
    (n_workers first), means 4 workers on a free port.

    scheduler_cpu: the CPU the scheduler keeps to, with its ZeroMQ I/O thread: "auto" (the default: the last CPU
    this process may use that no other scheduler of this user's on this machine holds; when every one is held, not
    pinned), "none" (anywhere, as the OS decides) or a CPU number. Every message crosses between those
    two threads; on one CPU that costs a plain wake-up instead of an inter-processor interrupt (about 15 % of a
    round trip on a 2-vCPU virtual machine, docs/benchmarks.md). Workers and their processors are not pinned.

    keys: a keys directory made by scaler_keygen (default: $SCALER_KEYS if set; False: none): the scheduler then
    admits only authorized keys, over encrypted connections, and the workers use the directory's worker key.
    Clients pass the same directory: Client(address, keys=DIR). See docs/security.md.
    max_payload_bytes: the most bytes one function, argument, object or result may have once serialized.
    capabilities: what the workers offer beyond payload=python (as scaler_cluster --capability), e.g. ["gpu"]:
    tasks that require capabilities (client.options(capabilities=...)) run only on workers offering them all; one
    that none of the workers can run fails with MissingCapabilityError (docs/capabilities.md), at once or, with
    capability_grace_seconds, once no worker that can run it joined for that long (scaler_scheduler
    --capability-grace-seconds).
    journal, journal_sync: the scheduler keeps a journal in that file (scaler_scheduler --journal, --journal-sync):
    a scheduler started again on it resumes its clients' sessions (docs/adr/0023).

    scaler 1.9.9's other settings: load_balance_seconds is the least time between two balancing passes (0 or None,
    1.9.9's "off", keep the default: balancing is always on); death_timeout_seconds is how long a worker waits for a
    silent scheduler before it exits. Accepted and ignored: worker_io_threads, scheduler_io_threads,
    max_number_of_tasks_waiting, object_retention_seconds, task_timeout_seconds, load_balance_trigger_times,
    garbage_collect_interval_seconds, trim_memory_threshold_bytes, hard_processor_suspend, logging_config_file.
    The workers run in a scaler.Cluster process, self._cluster (1.9.9's tests read its settings there).

    Each keyword is the setting of that name of scaler.settings.scheduler.SchedulerSettings or
    scaler.settings.worker.ClusterSettings (the flags of scaler_scheduler and scaler_cluster), with its default, and
    checked as they are: a bad value is a ValueError (a TypeError too for one of the wrong type) naming the keyword.
    SchedulerClusterCombo.from_settings(scheduler, workers) starts one from such settings objects.
    """

    def __init__(
        self,
        address: str | None = None,
        n_workers: int | None = None,
        event_loop: str = SCHEDULER.event_loop,
        protected: bool = SCHEDULER.protected,
        monitor_address: str | None = SCHEDULER.monitor_address,
        heartbeat_interval_seconds: float = WORKERS.heartbeat_interval_seconds,
        worker_timeout_seconds: float = SCHEDULER.worker_timeout_seconds,
        client_timeout_seconds: float = SCHEDULER.client_timeout_seconds,
        max_task_retries: int = SCHEDULER.max_task_retries,
        per_worker_queue_size: int = WORKERS.per_worker_queue_size,
        max_processors_per_worker: int = WORKERS.max_processors_per_worker,
        logging_level: str | int = LOGGING_LEVEL,
        logging_paths: tuple[str, ...] = LOGGING_PATHS,
        scheduler_cpu: str | int | None = SCHEDULER.cpu,
        keys: str | os.PathLike[str] | bool | None = SCHEDULER.keys,
        max_payload_bytes: int = SCHEDULER.max_payload_bytes,
        memory_limit: int | str | None = None,
        *,
        capabilities: Iterable[str] = WORKERS.capabilities,
        capability_grace_seconds: float = SCHEDULER.capability_grace_seconds,
        journal: str | os.PathLike[str] | None = SCHEDULER.journal,
        journal_sync: str = SCHEDULER.journal_sync,
        load_balance_seconds: float | None = None,
        death_timeout_seconds: float = WORKERS.death_timeout_seconds,
        worker_io_threads: int = IGNORED.worker_io_threads,
        scheduler_io_threads: int = IGNORED.scheduler_io_threads,
        max_number_of_tasks_waiting: int = IGNORED.max_number_of_tasks_waiting,
        object_retention_seconds: float = IGNORED.object_retention_seconds,
        task_timeout_seconds: float = IGNORED.task_timeout_seconds,
        load_balance_trigger_times: int = IGNORED.load_balance_trigger_times,
        garbage_collect_interval_seconds: float = IGNORED.garbage_collect_interval_seconds,
        trim_memory_threshold_bytes: int = IGNORED.trim_memory_threshold_bytes,
        hard_processor_suspend: bool = IGNORED.hard_processor_suspend,
        logging_config_file: str | None = IGNORED.logging_config_file,
    ) -> None:
        if isinstance(address, int) and not isinstance(address, bool):  # scaler 1.9: (n_workers, address=None)
            if n_workers is not None:
                raise TypeError(
                    "SchedulerClusterCombo() got n_workers twice: SchedulerClusterCombo(address, n_workers)"
                )
            address, n_workers = None, address
        shared = {
            "address": address if address is not None else free_local_address(),
            "event_loop": event_loop,
            "logging_level": logging_level,
            "logging_paths": logging_paths,
            "keys": keys,
        }
        scheduler = SchedulerSettings.of(
            {
                **shared,
                "protected": protected,
                "monitor_address": monitor_address,
                "worker_timeout_seconds": worker_timeout_seconds,
                "client_timeout_seconds": client_timeout_seconds,
                "max_task_retries": max_task_retries,
                "cpu": scheduler_cpu,
                "max_payload_bytes": max_payload_bytes,
                "capability_grace_seconds": capability_grace_seconds,
                "journal": journal,
                "journal_sync": journal_sync,
                "balance_interval_seconds": load_balance_seconds or SCHEDULER.balance_interval_seconds,
            },
            {"cpu": "scheduler_cpu", "balance_interval_seconds": "load_balance_seconds"},
        )
        workers = ClusterSettings.of(
            {
                **shared,
                "n_workers": n_workers if n_workers is not None else ClusterSettings.default("n_workers"),
                "heartbeat_interval_seconds": heartbeat_interval_seconds,
                "death_timeout_seconds": death_timeout_seconds,
                "per_worker_queue_size": per_worker_queue_size,
                "max_processors_per_worker": max_processors_per_worker,
                "memory_limit_bytes": memory_limit if memory_limit is not None else WORKERS.memory_limit_bytes,
                "capabilities": capabilities,
            },
            {"memory_limit_bytes": "memory_limit"},
        )
        self._start(scheduler, workers)

    @classmethod
    def from_settings(cls, scheduler: SchedulerSettings, workers: ClusterSettings) -> SchedulerClusterCombo:
        """A scheduler as `scheduler` says (on a free local port when it gives no address) and workers as `workers`
        says, connected to it (their address is the scheduler's)."""
        if scheduler.address is None:
            scheduler = dataclasses.replace(scheduler, address=free_local_address())
        combo: SchedulerClusterCombo = cls.__new__(cls)
        combo._start(scheduler, dataclasses.replace(workers, address=scheduler.address))
        return combo

    def _start(self, scheduler: SchedulerSettings, workers: ClusterSettings) -> None:
        assert scheduler.address is not None
        directory = keys_directory(scheduler.keys)
        server_keys = load_server_keys(directory) if directory is not None else None
        self._address = scheduler.address
        self._monitor_address = scheduler.monitor_address or default_monitor_address(scheduler.address)
        self._n_workers = workers.n_workers
        # Built (and checked) before anything starts; started once the scheduler is ready.
        cluster = Cluster.from_settings(workers)
        context = multiprocessing.get_context("fork")
        receive, send = context.Pipe(duplex=False)
        self._scheduler: Any = context.Process(
            target=_scheduler_main,
            args=(self._address, self._monitor_address, scheduler, send, server_keys),
            name="scaler-scheduler",
        )
        self._scheduler.start()
        send.close()
        self._cluster: Cluster | None = None
        atexit.register(self.shutdown)
        self._wait_ready(receive)
        self._cluster = cluster
        self._cluster.start()

    def _wait_ready(self, receive: multiprocessing.connection.Connection) -> None:
        try:
            if not receive.poll(STARTUP_TIMEOUT_SECONDS):
                raise RuntimeError(f"the scheduler did not start within {STARTUP_TIMEOUT_SECONDS:g}s")
            error = receive.recv()
        except EOFError:
            error = f"the scheduler process exited (code {self._scheduler.exitcode}) before it was ready"
        except RuntimeError as exc:
            error = str(exc)
        finally:
            receive.close()
        if error is not None:
            self.shutdown()
            raise RuntimeError(f"could not start a scheduler on {self._address}: {error}")

    def get_address(self) -> str:
        return self._address

    @property
    def address(self) -> str:
        return self._address

    @property
    def monitor_address(self) -> str:
        return self._monitor_address

    def __enter__(self) -> SchedulerClusterCombo:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        alive = self._scheduler is not None and self._scheduler.is_alive()
        return f"<SchedulerClusterCombo {self._address} workers={self._n_workers} {'running' if alive else 'stopped'}>"

    def shutdown(self) -> None:
        """Stop the workers, then the scheduler: it hears them leave, and none of them says goodbye to a scheduler
        that is already gone. Safe to call more than once."""
        for process in (self._cluster, self._scheduler):
            if process is None or process.pid is None:
                continue
            if process.is_alive():
                process.terminate()
            process.join(STOP_TIMEOUT_SECONDS)
            if process.is_alive():
                logger.warning("%s did not stop within %gs; killing it", process.name, STOP_TIMEOUT_SECONDS)
                process.kill()
                process.join(STOP_TIMEOUT_SECONDS)
        atexit.unregister(self.shutdown)
