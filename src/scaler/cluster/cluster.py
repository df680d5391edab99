"""Cluster: scaler 1.9.9's worker-process class, kept for programs written for it. A multiprocessing.Process whose
start() runs a cluster of workers (scaler_cluster's run_cluster) connected to a scheduler; terminate() stops them.
The settings that have an equivalent here map to it; the others are accepted and ignored (docs/client.md)."""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Iterable, Sequence

from scaler.core.worker.agent import AgentConfig
from scaler.io.lifetime import die_with_parent
from scaler.io.logs import setup_logging
from scaler.security.keys import PeerKeys, load_peer_keys
from scaler.settings.common import keys_directory
from scaler.settings.legacy import IGNORED
from scaler.settings.worker import ClusterSettings
from scaler.worker.cluster import run_cluster

DEFAULTS = ClusterSettings()


def load_keys(keys: str | os.PathLike[str] | bool | None, role: str) -> PeerKeys | None:
    """A keys directory (None: $SCALER_KEYS if set; False: none) to the keys of `role`, as the combo reads them."""
    directory = keys_directory(keys)
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
    (what the workers offer beyond payload=python, e.g. ["gpu", "licence=matlab"]: docs/capabilities.md). The
    defaults and the values taken are scaler_cluster's (scaler.settings.worker.ClusterSettings);
    Cluster.from_settings(settings) starts one from such settings.

    SIGINT or SIGTERM (terminate()) stop the workers and then this process; it ends on its own when every worker
    gave up (a scheduler silent past death_timeout_seconds). A worker that crashes is started again.
    """

    def __init__(
        self,
        address: object,
        worker_io_threads: int = IGNORED.worker_io_threads,
        worker_names: Sequence[str] | None = None,
        heartbeat_interval_seconds: float = DEFAULTS.heartbeat_interval_seconds,
        task_timeout_seconds: float = IGNORED.task_timeout_seconds,
        death_timeout_seconds: float = DEFAULTS.death_timeout_seconds,
        garbage_collect_interval_seconds: float = IGNORED.garbage_collect_interval_seconds,
        trim_memory_threshold_bytes: int = IGNORED.trim_memory_threshold_bytes,
        hard_processor_suspend: bool = IGNORED.hard_processor_suspend,
        event_loop: str = DEFAULTS.event_loop,
        logging_paths: tuple[str, ...] = DEFAULTS.logging_paths,
        logging_level: str | int = DEFAULTS.logging_level,
        logging_config_file: str | None = IGNORED.logging_config_file,
        *,
        n_workers: int | None = None,
        per_worker_queue_size: int = DEFAULTS.per_worker_queue_size,
        max_processors_per_worker: int = DEFAULTS.max_processors_per_worker,
        memory_limit_bytes: int = DEFAULTS.memory_limit_bytes,
        keys: str | os.PathLike[str] | bool | None = DEFAULTS.keys,
        capabilities: Iterable[str] = DEFAULTS.capabilities,
    ) -> None:
        if (worker_names is None) == (n_workers is None):
            raise TypeError("Cluster() needs worker_names (one worker per name) or n_workers, and not both")
        if worker_names is not None and (
            isinstance(worker_names, str) or not all(isinstance(n, str) for n in worker_names)
        ):
            raise TypeError(f"worker_names must be a list of names, not {worker_names!r}")
        settings = ClusterSettings.of(
            {
                "address": address,
                "n_workers": len(worker_names) if worker_names is not None else n_workers,
                "heartbeat_interval_seconds": heartbeat_interval_seconds,
                "death_timeout_seconds": death_timeout_seconds,
                "event_loop": event_loop,
                "logging_paths": logging_paths,
                "logging_level": logging_level,
                "per_worker_queue_size": per_worker_queue_size,
                "max_processors_per_worker": max_processors_per_worker,
                "memory_limit_bytes": memory_limit_bytes,
                "keys": keys,
                "capabilities": capabilities,
            }
        )
        self._setup(settings, list(worker_names) if worker_names is not None else None)
        self._address = address  # as given (1.9.9's ZMQConfig stays one)
        self._worker_io_threads = worker_io_threads
        self._task_timeout_seconds = task_timeout_seconds
        self._garbage_collect_interval_seconds = garbage_collect_interval_seconds
        self._trim_memory_threshold_bytes = trim_memory_threshold_bytes
        self._hard_processor_suspend = hard_processor_suspend
        self._logging_config_file = logging_config_file

    @classmethod
    def from_settings(cls, settings: ClusterSettings, worker_names: Sequence[str] | None = None) -> Cluster:
        """Workers as `settings` say (n_workers of them, or one per name in worker_names), named worker-<pid>-<i>."""
        if settings.address is None:
            raise ValueError("Cluster.from_settings: the settings give no address (the scheduler's)")
        cluster: Cluster = cls.__new__(cls)
        cluster._setup(settings, list(worker_names) if worker_names is not None else None)
        cluster._address = settings.address
        for name in ("worker_io_threads", "task_timeout_seconds", "garbage_collect_interval_seconds"):
            setattr(cluster, f"_{name}", getattr(IGNORED, name))
        for name in ("trim_memory_threshold_bytes", "hard_processor_suspend", "logging_config_file"):
            setattr(cluster, f"_{name}", getattr(IGNORED, name))
        return cluster

    def _setup(self, settings: ClusterSettings, worker_names: list[str] | None) -> None:
        super().__init__(name="scaler-cluster")
        assert settings.address is not None
        self.settings = settings
        self._address_text = settings.address
        self._worker_names = worker_names
        self._n_workers = len(worker_names) if worker_names is not None else settings.n_workers
        # read by programs written for 1.9.9 (its tests read a combo's cluster settings there)
        self._heartbeat_interval_seconds = settings.heartbeat_interval_seconds
        self._death_timeout_seconds = settings.death_timeout_seconds
        self._event_loop = settings.event_loop
        self._logging_paths = settings.logging_paths
        self._logging_level = settings.logging_level
        self._keys = load_keys(settings.keys, "worker")
        self._agent_config = settings.agent_config(AgentConfig.name)

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
