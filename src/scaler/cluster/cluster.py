"""Cluster: scaler 1.9.9's worker-process class, kept for programs written for it. A multiprocessing.Process whose
start() runs a cluster of workers (scaler_cluster's run_cluster) connected to a scheduler; terminate() stops them.
The settings that have an equivalent here map to it; the others are accepted and ignored (docs/client.md)."""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Iterable, Sequence

from scaler.core.capabilities import worker_capabilities
from scaler.core.worker.agent import AgentConfig
from scaler.io.loop import check_event_loop
from scaler.io.processes import check_logging_level, check_logging_paths, die_with_parent, parse_address, setup_logging
from scaler.security.keys import PeerKeys, load_peer_keys, resolve
from scaler.worker.cluster import run_cluster

DEFAULT_DEATH_TIMEOUT_SECONDS = AgentConfig().scheduler_timeout_seconds


def address_text(address: object) -> str:
    """A scheduler address as text: a str, or an object with to_address() (1.9.9's ZMQConfig), or one whose str()
    is the address."""
    to_address = getattr(address, "to_address", None)
    text = str(to_address() if callable(to_address) else address)
    parse_address(text)
    return text


def load_keys(keys: str | os.PathLike[str] | bool | None, role: str) -> PeerKeys | None:
    """A keys directory (None: $SCALER_KEYS if set; False: none) to the keys of `role`, as the combo reads them."""
    if isinstance(keys, bool) and keys:
        raise TypeError("keys must be a keys directory, None (use $SCALER_KEYS if set) or False (no keys)")
    directory = None if keys is False else resolve(keys)
    return load_peer_keys(directory, role) if directory is not None else None


class Cluster(multiprocessing.get_context("fork").Process):  # type: ignore[misc]
    """Workers on this machine, one per name in `worker_names`, connected to the scheduler at `address`.

    >>> cluster = Cluster(address="tcp://127.0.0.1:2345", worker_names=["a", "b"])
    >>> cluster.start()
    >>> ...
    >>> cluster.terminate(); cluster.join()

    Mapped: heartbeat_interval_seconds; death_timeout_seconds (a worker whose scheduler stays silent this long exits);
    event_loop, logging_paths, logging_level. Accepted and ignored (no equivalent here): worker_io_threads,
    task_timeout_seconds, garbage_collect_interval_seconds, trim_memory_threshold_bytes, hard_processor_suspend,
    logging_config_file. Beyond 1.9.9: n_workers (unnamed workers instead of worker_names), per_worker_queue_size,
    max_processors_per_worker, memory_limit_bytes, keys (a keys directory, see docs/security.md) and capabilities
    (what the workers offer beyond payload=python, e.g. ["gpu", "licence=matlab"]: docs/capabilities.md).

    SIGINT or SIGTERM (terminate()) stop the workers and then this process; it ends on its own when every worker
    gave up (a scheduler silent past death_timeout_seconds). A worker that crashes is started again.
    """

    def __init__(
        self,
        address: object,
        worker_io_threads: int = 1,
        worker_names: Sequence[str] | None = None,
        heartbeat_interval_seconds: float = 2.0,
        task_timeout_seconds: float = 0,
        death_timeout_seconds: float = DEFAULT_DEATH_TIMEOUT_SECONDS,
        garbage_collect_interval_seconds: float = 30,
        trim_memory_threshold_bytes: int = 1024**3,
        hard_processor_suspend: bool = False,
        event_loop: str = "builtin",
        logging_paths: tuple[str, ...] = ("/dev/stdout",),
        logging_level: str = "INFO",
        logging_config_file: str | None = None,
        *,
        n_workers: int | None = None,
        per_worker_queue_size: int = 1000,
        max_processors_per_worker: int = 16,
        memory_limit_bytes: int = 0,
        keys: str | os.PathLike[str] | bool | None = None,
        capabilities: Iterable[str] = (),
    ) -> None:
        super().__init__(name="scaler-cluster")
        if (worker_names is None) == (n_workers is None):
            raise TypeError("Cluster() needs worker_names (one worker per name) or n_workers, and not both")
        if worker_names is not None and (
            isinstance(worker_names, str) or not all(isinstance(n, str) for n in worker_names)
        ):
            raise TypeError(f"worker_names must be a list of names, not {worker_names!r}")
        if n_workers is not None and (isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 0):
            raise ValueError(f"n_workers must be a whole number >= 0, not {n_workers!r}")
        if heartbeat_interval_seconds <= 0 or death_timeout_seconds <= 0:
            raise ValueError("heartbeat_interval_seconds and death_timeout_seconds must be positive")
        check_event_loop(event_loop)
        check_logging_level(logging_level)
        check_logging_paths(tuple(logging_paths))
        self._address = address
        self._address_text = address_text(address)
        self._worker_io_threads = worker_io_threads
        self._worker_names = list(worker_names) if worker_names is not None else None
        self._n_workers = len(self._worker_names) if self._worker_names is not None else n_workers
        self._heartbeat_interval_seconds = heartbeat_interval_seconds
        self._task_timeout_seconds = task_timeout_seconds
        self._death_timeout_seconds = death_timeout_seconds
        self._garbage_collect_interval_seconds = garbage_collect_interval_seconds
        self._trim_memory_threshold_bytes = trim_memory_threshold_bytes
        self._hard_processor_suspend = hard_processor_suspend
        self._event_loop = event_loop
        self._logging_paths = tuple(logging_paths)
        self._logging_level = logging_level
        self._logging_config_file = logging_config_file
        self._keys = load_keys(keys, "worker")
        self._agent_config = AgentConfig(
            name="worker",
            queue_capacity=per_worker_queue_size,
            heartbeat_interval_seconds=heartbeat_interval_seconds,
            scheduler_timeout_seconds=death_timeout_seconds,
            max_processors=max_processors_per_worker,
            memory_limit_bytes=memory_limit_bytes,
            capabilities=worker_capabilities(capabilities)[1:],
        )

    def run(self) -> None:
        die_with_parent(signal.SIGTERM)
        setup_logging(self._logging_level, self._logging_paths)
        assert self._n_workers is not None
        code = run_cluster(
            self._address_text,
            self._n_workers,
            self._agent_config,
            self._event_loop,
            self._logging_level,
            self._logging_paths,
            self._keys,
            names=self._worker_names,
        )
        raise SystemExit(code)
