"""SchedulerClusterCombo: a scheduler and N workers on this machine, as child processes, in one call."""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
from collections.abc import Iterable
from typing import Any

from scaler.cluster.cluster import DEFAULT_DEATH_TIMEOUT_SECONDS, Cluster
from scaler.core.scheduler import SchedulerConfig
from scaler.core.scheduler.config import DEFAULT_MAX_PAYLOAD_BYTES
from scaler.io.loop import check_event_loop
from scaler.io.processes import (
    check_cpu,
    default_monitor_address,
    die_with_parent,
    parse_address,
    parse_size,
    removing_own_files,
    setup_logging,
)
from scaler.scheduler.server import run_scheduler
from scaler.security.keys import ServerKeys, load_server_keys, resolve

logger = logging.getLogger(__name__)

STARTUP_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 5.0


def _scheduler_main(
    address: str,
    monitor_address: str,
    config: SchedulerConfig,
    event_loop: str,
    log_level: str,
    log_paths: tuple[str, ...],
    ready: multiprocessing.connection.Connection,
    cpu: str | int | None,
    keys: ServerKeys | None,
) -> None:
    die_with_parent(signal.SIGTERM)
    setup_logging(log_level, log_paths)
    try:
        with removing_own_files():
            run_scheduler(
                address, monitor_address, config, event_loop, on_ready=lambda: ready.send(None), cpu=cpu, keys=keys
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

    scaler 1.9.9's other settings: load_balance_seconds is the least time between two balancing passes (0 or None,
    1.9.9's "off", keep the default: balancing is always on); death_timeout_seconds is how long a worker waits for a
    silent scheduler before it exits. Accepted and ignored: worker_io_threads, scheduler_io_threads,
    max_number_of_tasks_waiting, object_retention_seconds, task_timeout_seconds, load_balance_trigger_times,
    garbage_collect_interval_seconds, trim_memory_threshold_bytes, hard_processor_suspend, logging_config_file.
    The workers run in a scaler.Cluster process, self._cluster (1.9.9's tests read its settings there).
    """

    def __init__(
        self,
        address: str | None = None,
        n_workers: int | None = None,
        event_loop: str = "builtin",
        protected: bool = True,
        monitor_address: str | None = None,
        heartbeat_interval_seconds: float = 2.0,
        worker_timeout_seconds: float = 10.0,
        client_timeout_seconds: float = 60.0,
        max_task_retries: int = 3,
        per_worker_queue_size: int = 1000,
        max_processors_per_worker: int = 16,
        logging_level: str = "WARNING",
        logging_paths: tuple[str, ...] = ("/dev/stderr",),
        scheduler_cpu: str | int | None = "auto",
        keys: str | os.PathLike[str] | bool | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        memory_limit: int | str | None = None,
        *,
        capabilities: Iterable[str] = (),
        capability_grace_seconds: float = 0.0,
        load_balance_seconds: float | None = None,
        death_timeout_seconds: float = DEFAULT_DEATH_TIMEOUT_SECONDS,
        worker_io_threads: int = 1,
        scheduler_io_threads: int = 1,
        max_number_of_tasks_waiting: int = -1,
        object_retention_seconds: float = 60,
        task_timeout_seconds: float = 0,
        load_balance_trigger_times: int = 2,
        garbage_collect_interval_seconds: float = 30,
        trim_memory_threshold_bytes: int = 1024**3,
        hard_processor_suspend: bool = False,
        logging_config_file: str | None = None,
    ) -> None:
        if isinstance(address, int) and not isinstance(address, bool):  # scaler 1.9: (n_workers, address=None)
            if n_workers is not None:
                raise TypeError(
                    "SchedulerClusterCombo() got n_workers twice: SchedulerClusterCombo(address, n_workers)"
                )
            address, n_workers = None, address
        if address is None:
            address = free_local_address()
        parse_address(address)
        memory_limit_bytes = parse_size(memory_limit) if memory_limit is not None else 0
        check_event_loop(event_loop)
        scheduler_cpu = check_cpu(scheduler_cpu)
        if n_workers is None:
            n_workers = os.cpu_count() or 1
        if not isinstance(n_workers, int) or n_workers < 0:
            raise ValueError(f"n_workers must be a whole number >= 0, not {n_workers!r}")
        if per_worker_queue_size < 1:
            raise ValueError(f"per_worker_queue_size must be at least 1, not {per_worker_queue_size!r}")
        if (
            not isinstance(max_processors_per_worker, int)
            or isinstance(max_processors_per_worker, bool)
            or max_processors_per_worker < 1
        ):
            raise ValueError(f"max_processors_per_worker must be at least 1, not {max_processors_per_worker!r}")
        if isinstance(max_payload_bytes, bool) or not isinstance(max_payload_bytes, int) or max_payload_bytes < 1:
            raise ValueError(f"max_payload_bytes must be a whole number of bytes >= 1, not {max_payload_bytes!r}")
        if isinstance(capability_grace_seconds, bool) or not (
            isinstance(capability_grace_seconds, (int, float)) and capability_grace_seconds >= 0
        ):
            raise ValueError(f"capability_grace_seconds must be 0 or more, not {capability_grace_seconds!r}")
        if isinstance(keys, bool) and keys:
            raise TypeError("keys must be a keys directory, None (use $SCALER_KEYS if set) or False (no keys)")
        directory = None if keys is False else resolve(keys)
        server_keys = load_server_keys(directory) if directory is not None else None
        self._address = address
        self._monitor_address = monitor_address or default_monitor_address(address)
        self._n_workers = n_workers
        scheduler_config = SchedulerConfig(
            protected=protected,
            worker_timeout_seconds=worker_timeout_seconds,
            client_timeout_seconds=client_timeout_seconds,
            max_task_retries=max_task_retries,
            max_payload_bytes=max_payload_bytes,
            balance_interval_seconds=load_balance_seconds or SchedulerConfig().balance_interval_seconds,
            capability_grace_seconds=float(capability_grace_seconds),
        )
        # Built (and checked) before anything starts; started once the scheduler is ready.
        cluster = Cluster(
            address,
            worker_io_threads=worker_io_threads,
            heartbeat_interval_seconds=heartbeat_interval_seconds,
            task_timeout_seconds=task_timeout_seconds,
            death_timeout_seconds=death_timeout_seconds,
            garbage_collect_interval_seconds=garbage_collect_interval_seconds,
            trim_memory_threshold_bytes=trim_memory_threshold_bytes,
            hard_processor_suspend=hard_processor_suspend,
            event_loop=event_loop,
            logging_paths=logging_paths,
            logging_level=logging_level,
            logging_config_file=logging_config_file,
            n_workers=n_workers,
            per_worker_queue_size=per_worker_queue_size,
            max_processors_per_worker=max_processors_per_worker,
            memory_limit_bytes=memory_limit_bytes,
            keys=directory if directory is not None else False,
            capabilities=capabilities,
        )
        context = multiprocessing.get_context("fork")
        receive, send = context.Pipe(duplex=False)
        self._scheduler: Any = context.Process(
            target=_scheduler_main,
            args=(
                address,
                self._monitor_address,
                scheduler_config,
                event_loop,
                logging_level,
                logging_paths,
                send,
                scheduler_cpu,
                server_keys,
            ),
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
