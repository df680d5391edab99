"""A joblib backend: joblib.Parallel's batches run as Scaler tasks, and so does scikit-learn's n_jobs.

    from scaler.joblib import register_scaler
    register_scaler()
    with joblib.parallel_config(backend="scaler", address="tcp://127.0.0.1:2345"):
        squares = Parallel(n_jobs=-1)(delayed(pow)(i, 2) for i in range(10))

Client side only: one task per batch, through an ordinary Client. See docs/integrations.md.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import os
import threading
import time
from typing import Any

import cloudpickle

try:
    from joblib.parallel import (
        AutoBatchingMixin,
        FallbackToBackend,
        ParallelBackendBase,
        SequentialBackend,
        register_parallel_backend,
    )
except ImportError as exc:  # pragma: no cover - joblib is an optional dependency
    raise ImportError("scaler.joblib needs joblib 1.3 or newer: pip install joblib") from exc

from scaler.client import future as future_module
from scaler.client.client import Client
from scaler.client.future import ScalerFuture
from scaler.client.shipped import run_batch
from scaler.io.ipc import find_monitor, ipc_path
from scaler.io.processes import documented_monitor_address

logger = logging.getLogger(__name__)

STATUS_WAIT_SECONDS = 2.0  # the scheduler publishes its status once a second
COUNT_KEPT_SECONDS = 10.0  # a worker count read from the monitor is used this long

_counts: dict[str, tuple[float, int | None]] = {}  # monitor address -> (when read, live workers; None: no status)
_counts_lock = threading.Lock()
_warned: set[str] = set()


def register_scaler(
    name: str = "scaler",
    *,
    address: str | None = None,
    client: Any = None,
    monitor_address: str | None = None,
    make_default: bool = False,
    **client_kwargs: Any,
) -> None:
    """Make joblib know the backend as `name`. The keyword arguments are defaults for every backend of that name
    (what parallel_config(backend=name, ...) gives wins); see ScalerBackend. make_default=True makes it joblib's
    default backend."""
    defaults = {"address": address, "client": client, "monitor_address": monitor_address, **client_kwargs}
    defaults = {key: value for key, value in defaults.items() if value is not None}
    register_parallel_backend(name, functools.partial(_make_backend, defaults), make_default=make_default)


def _make_backend(defaults: dict[str, Any], **given: Any) -> ScalerBackend:
    """A backend from register_scaler's defaults and parallel_config's keywords: a scheduler given there (address
    or client) replaces the default one, with the default's Client settings."""
    if "address" in given or "client" in given:
        defaults = {key: value for key, value in defaults.items() if key not in ("address", "client")}
        if "client" in given:
            defaults = {key: value for key, value in defaults.items() if key in ("monitor_address",)}
    return ScalerBackend(**{**defaults, **given})


# The task: run one of joblib's BatchedCalls on a worker (by value: the worker needs joblib, not scaler)
_run_batch = run_batch


class ScalerBackend(AutoBatchingMixin, ParallelBackendBase):  # type: ignore[misc]
    """Runs each batch of joblib.Parallel as a task of a Scaler client.

    address: the scheduler to connect to; the backend then connects when a Parallel call starts and disconnects
        when it ends. client: an existing Client (or client.options(...)) to use instead; it stays connected.
    monitor_address: where to read the number of workers that n_jobs=-1 means (default: the default monitor address
        of this user's scheduler at `address`, on this machine; a tcp:// one takes a monitor key from keys=).
    Other keywords go to Client(address, ...): keys=, timeout_seconds=, task_timeout=, ...
    """

    default_n_jobs = -1  # Parallel() without n_jobs, under parallel_config(backend="scaler"): every worker
    uses_threads = False
    supports_sharedmem = False
    supports_timeout = True

    def __init__(
        self,
        address: str | None = None,
        *,
        client: Any = None,
        monitor_address: str | None = None,
        nesting_level: int | None = None,
        inner_max_num_threads: int | None = None,
        _reconnect: bytes | None = None,
        **client_kwargs: Any,
    ) -> None:
        super().__init__(nesting_level=nesting_level, inner_max_num_threads=inner_max_num_threads)
        if address is not None and client is not None:
            raise ValueError("the scaler backend takes address= or client=, not both")
        if address is None and client is None and _reconnect is None:
            raise ValueError(
                "the scaler backend needs a scheduler: parallel_config(backend='scaler', address='tcp://HOST:PORT') "
                "or client=Client(...), or register_scaler(address=...)"
            )
        if client is not None and client_kwargs:
            raise ValueError(f"{', '.join(client_kwargs)}: Client settings go with address=, not with client=")
        self._address: str | None = address if address is not None else getattr(client, "address", None)
        self._client: Any = client
        self._owned = False  # whether we connected self._client, and so disconnect it at terminate()
        self._client_kwargs = client_kwargs
        self._monitor_address = monitor_address
        self._reconnect = _reconnect  # a pickled Client: how a backend inside a task connects (lazily)
        self._for_tasks: bytes | None = _reconnect  # the same, for the Parallel calls of our tasks
        self._futures: set[concurrent.futures.Future[Any]] = set()
        self._lock = threading.Lock()
        self.parallel: Any = None

    @property
    def client(self) -> Any:
        """The client batches are submitted with; None until a Parallel call starts (address=) or after it."""
        return self._client

    def __repr__(self) -> str:
        return f"<ScalerBackend {self._address} nesting_level={self.nesting_level}>"

    # ------------------------------------------------------------------------------------------- joblib's calls
    @property
    def supports_retrieve_callback(self) -> bool:
        """Outside tasks, results are taken in done-callbacks (joblib's preferred way). Inside a task, joblib's
        thread waits for each batch in future.result(), which frees the worker for the nested tasks meanwhile;
        joblib's own waiting loop (sleeps) would keep the worker's processor taken."""
        return not _inside_task()

    def effective_n_jobs(self, n_jobs: int | None) -> int:
        """n_jobs > 0 as is; -1 the number of live workers (see monitor_address), -2 one less, and so on."""
        if n_jobs == 0:
            raise ValueError("n_jobs == 0 in Parallel has no meaning")
        if n_jobs is None:
            n_jobs = self.default_n_jobs
        if n_jobs > 0:
            return int(n_jobs)
        return max(self._workers() + 1 + n_jobs, 1)

    def configure(self, n_jobs: int = 1, parallel: Any = None, **backend_kwargs: Any) -> int:
        """Called as a Parallel call (or a `with Parallel(...)` block) starts: connects if needed."""
        n = self.effective_n_jobs(n_jobs)
        if n == 1:  # Parallel runs it in this thread then: no need to connect
            raise FallbackToBackend(SequentialBackend(nesting_level=self.nesting_level))
        self.parallel = parallel
        if self._client is None:
            if self._reconnect is not None:  # inside a task: the shared client of this process, never ours
                self._client = cloudpickle.loads(self._reconnect)
            else:
                assert self._address is not None
                self._client = Client(self._address, **self._client_kwargs)
                self._owned = True
        return n

    def submit(self, func: Any, callback: Any = None) -> ScalerFuture:
        future: ScalerFuture = self._client.submit(_run_batch, func)
        with self._lock:
            self._futures.add(future)
        future.add_done_callback(self._forget)
        if callback is not None:
            future.add_done_callback(callback)
        return future

    def retrieve_result_callback(self, future: ScalerFuture) -> Any:
        return future.result()

    def retrieve_result(self, future: ScalerFuture, timeout: float | None = None) -> Any:
        return future.result(timeout)

    def abort_everything(self, ensure_ready: bool = True) -> None:
        """A batch failed (or the caller stopped early): cancel the batches still queued or running."""
        with self._lock:
            futures, self._futures = self._futures, set()
        for future in futures:
            future.cancel()

    def terminate(self) -> None:
        """The Parallel call ended: a client we connected is disconnected; one given to us stays connected."""
        if self._owned and self._client is not None:
            self._client.disconnect()
            self._client = None
            self._owned = False
        with self._lock:
            self._futures = set()
        self.reset_batch_stats()

    def get_nested_backend(self) -> tuple[ScalerBackend, int]:
        """For a Parallel inside a task: this cluster, through the task's own client (connected only if used).
        Its n_jobs is 1, so Parallel() without n_jobs runs in the task, as joblib's default does; n_jobs=k or -1
        run nested tasks (a task waiting on them frees its worker meanwhile)."""
        if self._for_tasks is None and self._client is not None:
            self._for_tasks = cloudpickle.dumps(self._client)  # a Client pickles as how to reconnect, from a task
        level = (self.nesting_level or 0) + 1
        nested = _backend_in_task(self._address, self._monitor_address, level, self._for_tasks, self._client_kwargs)
        return nested, 1

    def __reduce__(self) -> tuple[Any, ...]:
        """What travels inside joblib's batches: how to connect from the task, never a live client."""
        settings = (self._address, self._monitor_address, self.nesting_level, self._for_tasks, self._client_kwargs)
        return _backend_in_task, settings

    # ------------------------------------------------------------------------------------------- internals
    def _forget(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._futures.discard(future)

    def _workers(self) -> int:
        """The scheduler's live workers, from its monitor; this machine's CPUs when that cannot be read."""
        address = self._monitor_address
        if address is None and self._address is not None:
            try:  # where this user's scheduler of that address publishes (never another user's socket)
                address = find_monitor(documented_monitor_address(self._address))
            except ValueError:
                address = None
        count = _count_workers(address, self._monitor_keys(address)) if address is not None else None
        if count is not None:
            return count
        fallback = os.cpu_count() or 1
        if address is not None and address not in _warned:
            _warned.add(address)
            logger.info(
                "no worker count from the monitor at %s: n_jobs=-1 means %d (this machine's CPUs). Pass n_jobs, "
                "or monitor_address= to parallel_config(backend='scaler', ...)",
                address,
                fallback,
            )
        return fallback

    def _monitor_keys(self, address: str) -> Any:
        """The monitor key to read a tcp:// monitor with (an ipc:// one needs none): from the keys directory the client
        was given (or $SCALER_KEYS). A client machine normally holds no monitor key: None then, and the count falls
        back to this machine's CPUs."""
        if not address.startswith("tcp://"):
            return None
        setting = self._client_kwargs.get("keys")
        if setting is False:
            return None
        from scaler.errors import KeysError
        from scaler.monitor.top import monitor_keys

        try:
            return monitor_keys(address, setting)
        except KeysError:
            return None


def _backend_in_task(
    address: str | None,
    monitor_address: str | None,
    nesting_level: int | None,
    reconnect: bytes | None,
    client_kwargs: dict[str, Any],
) -> ScalerBackend:
    """A backend for Parallel calls inside a task: through the pickled client `reconnect` when there is one (the
    shared client of the task's process, connected on first use), else a client of its own to `address`."""
    if reconnect is None:
        return ScalerBackend(address, monitor_address=monitor_address, nesting_level=nesting_level, **client_kwargs)
    backend = ScalerBackend(monitor_address=monitor_address, nesting_level=nesting_level, _reconnect=reconnect)
    backend._address = address
    return backend


def _inside_task() -> bool:
    """Whether this thread runs a task in a worker's processor, where result() lets the worker run other tasks."""
    return getattr(future_module, "_block_enter", None) is not None


def _count_workers(address: str, keys: Any) -> int | None:
    """The number of workers the scheduler publishing on `address` has and may give tasks to; None if no status
    came within STATUS_WAIT_SECONDS, or it counts no worker yet. What was read (or that nothing came) is kept
    COUNT_KEPT_SECONDS: joblib and scikit-learn ask several times per call."""
    with _counts_lock:
        known = _counts.get(address)
    if known is not None and time.monotonic() - known[0] < COUNT_KEPT_SECONDS:
        return known[1]
    path = ipc_path(address)
    if path is not None and not os.path.exists(path):
        return None  # no scheduler of this machine publishes there: do not wait
    from scaler.monitor.top import Subscription

    try:
        feed = Subscription(address, keys)
    except Exception:  # a malformed address, unreadable keys: the caller falls back
        return None
    try:
        status = feed.next(int(STATUS_WAIT_SECONDS * 1000))
    finally:
        feed.close()
    count = None if status is None else sum(1 for worker in status.workers if not worker.held_back_ms)
    if count == 0:
        return None  # the workers are joining: ask again next time (a status comes every second)
    with _counts_lock:
        _counts[address] = (time.monotonic(), count)
    return count
