"""A joblib backend: joblib.Parallel's batches run as Scaler tasks, and so does scikit-learn's n_jobs.

    from scaler.joblib import register_scaler  # or scaler.integrations.joblib
    register_scaler()
    with joblib.parallel_config(backend="scaler", address="tcp://127.0.0.1:2345"):
        squares = Parallel(n_jobs=-1)(delayed(pow)(i, 2) for i in range(10))

Client side only: one task per batch, through an ordinary Client; n_jobs=-1 is the number of workers the scheduler
states to that client (Client.cluster_resources). See docs/integrations.md.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import os
import threading
import time
import warnings
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

from scaler.client.client import Client
from scaler.client.future import ScalerFuture
from scaler.client.shipped import run_batch
from scaler.errors import ScalerError
from scaler.task_context import in_task

logger = logging.getLogger(__name__)

COUNT_KEPT_SECONDS = 10.0  # a worker count asked by a client connected for that only is used this long

_counts: dict[str, tuple[float, int]] = {}  # address -> (when asked, workers), for backends not connected
_counts_lock = threading.Lock()
_warned: set[str] = set()
_MONITOR_IGNORED = (
    "monitor_address= is ignored: n_jobs=-1 is now the number of workers the scheduler states to the backend's "
    "client (Client.cluster_resources), wherever it runs"
)


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
    default backend. monitor_address is ignored (kept for programs that pass it)."""
    if monitor_address is not None:
        warnings.warn(_MONITOR_IGNORED, DeprecationWarning, stacklevel=2)
    defaults = {"address": address, "client": client, **client_kwargs}
    defaults = {key: value for key, value in defaults.items() if value is not None}
    register_parallel_backend(name, functools.partial(_make_backend, defaults), make_default=make_default)


def _make_backend(defaults: dict[str, Any], **given: Any) -> ScalerBackend:
    """A backend from register_scaler's defaults and parallel_config's keywords: a scheduler given there (address
    or client) replaces the default one, with the default's Client settings."""
    if "address" in given or "client" in given:
        defaults = {key: value for key, value in defaults.items() if key not in ("address", "client")}
        if "client" in given:
            defaults = {}
    return ScalerBackend(**{**defaults, **given})


# The task: run one of joblib's BatchedCalls on a worker (by value: the worker needs joblib, not scaler)
_run_batch = run_batch


class ScalerBackend(AutoBatchingMixin, ParallelBackendBase):  # type: ignore[misc]
    """Runs each batch of joblib.Parallel as a task of a Scaler client.

    address: the scheduler to connect to; the backend then connects when a Parallel call starts and disconnects
        when it ends. client: an existing Client (or client.options(...)) to use instead; it stays connected.
    monitor_address: ignored (n_jobs=-1 asks the scheduler through the client; kept for programs that pass it).
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
        if monitor_address is not None:
            warnings.warn(_MONITOR_IGNORED, DeprecationWarning, stacklevel=2)
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
        return not in_task()

    def effective_n_jobs(self, n_jobs: int | None) -> int:
        """n_jobs > 0 as is; -1 the number of workers that may take tasks (Client.cluster_resources), -2 one less,
        and so on."""
        if n_jobs == 0:
            raise ValueError("n_jobs == 0 in Parallel has no meaning")
        if n_jobs is None:
            n_jobs = self.default_n_jobs
        if n_jobs > 0:
            return int(n_jobs)
        return max(self._workers() + 1 + n_jobs, 1)

    def configure(self, n_jobs: int | None = 1, parallel: Any = None, **backend_kwargs: Any) -> int:
        """Called as a Parallel call (or a `with Parallel(...)` block) starts: connects if needed (for n_jobs < 0
        first: the client counts the workers)."""
        if n_jobs is None or n_jobs < 0:
            self._connect()
        n = self.effective_n_jobs(n_jobs)
        if n == 1:  # Parallel runs it in this thread then: no need to stay connected
            self.terminate()
            raise FallbackToBackend(SequentialBackend(nesting_level=self.nesting_level))
        self.parallel = parallel
        self._connect()
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
        return _backend_in_task(self._address, level, self._for_tasks, self._client_kwargs), 1

    def __reduce__(self) -> tuple[Any, ...]:
        """What travels inside joblib's batches: how to connect from the task, never a live client."""
        return _backend_in_task, (self._address, self.nesting_level, self._for_tasks, self._client_kwargs)

    # ------------------------------------------------------------------------------------------- internals
    def _connect(self) -> None:
        if self._client is not None:
            return
        if self._reconnect is not None:  # inside a task: the shared client of this process, never ours
            self._client = cloudpickle.loads(self._reconnect)
        else:
            assert self._address is not None
            self._client = Client(self._address, **self._client_kwargs)
            self._owned = True

    def _forget(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._futures.discard(future)

    def _workers(self) -> int:
        """The workers that may take tasks, as the scheduler states them to a client (Client.cluster_resources):
        the backend's own if connected, else one connected for that (kept COUNT_KEPT_SECONDS: joblib and
        scikit-learn ask several times per call). This machine's CPUs while it states none (workers still joining,
        an older scheduler) or cannot be reached."""
        if self._reconnect is not None:
            self._connect()  # in a task: the shared client of its process
        try:
            count = _count(self._client) if self._client is not None else _count_at(self._address, self._client_kwargs)
        except (ScalerError, RuntimeError, TimeoutError) as exc:
            logger.debug("no worker count from %s: %s", self._address, exc)
            count = 0
        if count > 0:
            return count
        fallback = os.cpu_count() or 1
        where = str(self._address)
        if where not in _warned:
            _warned.add(where)
            logger.info(
                "the scheduler at %s states no worker that may take tasks yet: n_jobs=-1 means %d (this machine's "
                "CPUs). Pass n_jobs, or start the workers first",
                where,
                fallback,
            )
        return fallback


def _count(client: Any) -> int:
    """The workers `client` (a Client or client.options(...)) was last told may take tasks."""
    return int(client.cluster_resources().workers)


def _count_at(address: str | None, client_kwargs: dict[str, Any]) -> int:
    """The workers that may take tasks at the scheduler at `address`, through a client connected for that only."""
    if address is None:
        return 0
    with _counts_lock:
        known = _counts.get(address)
    if known is not None and time.monotonic() - known[0] < COUNT_KEPT_SECONDS:
        return known[1]
    with Client(address, **client_kwargs) as client:
        count = _count(client)
    if count > 0:  # none yet: the workers are joining, ask again next time
        with _counts_lock:
            _counts[address] = (time.monotonic(), count)
    return count


def _backend_in_task(
    address: str | None, nesting_level: int | None, reconnect: bytes | None, client_kwargs: dict[str, Any]
) -> ScalerBackend:
    """A backend for Parallel calls inside a task: through the pickled client `reconnect` when there is one (the
    shared client of the task's process, connected on first use), else a client of its own to `address`."""
    if reconnect is None:
        return ScalerBackend(address, nesting_level=nesting_level, **client_kwargs)
    backend = ScalerBackend(nesting_level=nesting_level, _reconnect=reconnect)
    backend._address = address
    return backend
