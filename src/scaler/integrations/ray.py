"""Ray's task API on Scaler: code written with @ray.remote, ray.get, ray.put, ray.wait and ray.cancel runs on a Scaler
cluster once it imports this module in place of ray.

    import scaler.compat.ray as ray  # the documented path; the module is scaler.integrations.ray

    ray.init(address="tcp://127.0.0.1:2345")  # or ray.init(): a local cluster

    @ray.remote
    def square(x):
        return x * x

    print(ray.get([square.remote(i) for i in range(4)]))  # [0, 1, 4, 9]

Remote functions only: actors raise NotImplementedError. Client side; the ray package is neither needed nor touched.
See docs/integrations.md.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import socket
import sys
import threading
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import cloudpickle

from scaler.client.client import Client
from scaler.core.capabilities import check_capability
from scaler.integrations import ray_exceptions
from scaler.integrations.ray_refs import Call, ObjectRef, deadline_after, time_left
from scaler.task_context import in_task

logger = logging.getLogger(__name__)

__all__ = [
    "ObjectRef",
    "RemoteFunction",
    "cancel",
    "cluster_resources",
    "exceptions",
    "get",
    "get_actor",
    "init",
    "is_initialized",
    "kill",
    "method",
    "put",
    "remote",
    "shutdown",
    "wait",
]
exceptions = ray_exceptions  # ray.exceptions.RayTaskError, GetTimeoutError, TaskCancelledError, ...

_ACTORS = (
    "actors (@ray.remote on a class) are not supported on Scaler: tasks are stateless and any worker may run them. "
    "Use remote functions: keep the state in the driver and pass it to each call (ray.put() it once if it is large), "
    "or return the new state from each task"
)
# Ray's options for remote functions that mean nothing here: accepted, and ignored with a warning.
_IGNORED_OPTIONS = frozenset(
    """
    num_cpus accelerator_type memory object_store_memory max_calls runtime_env
    scheduling_strategy name placement_group placement_group_bundle_index placement_group_capture_child_tasks
    label_selector fallback_strategy enable_task_events _metadata _labels
    """.split()
)
# num_gpus= and resources= become capabilities the task requires (docs/capabilities.md): a GPU ("gpu") and each
# custom resource by its name; amounts are not counted (a worker runs one task at a time).
_OPTIONS = _IGNORED_OPTIONS | {"num_returns", "max_retries", "retry_exceptions", "num_gpus", "resources"}
_RAY_INIT_ONLY = frozenset(
    """
    labels object_store_memory local_mode namespace runtime_env log_to_driver
    include_dashboard dashboard_host dashboard_port job_config configure_logging logging_format logging_config
    _temp_dir _system_config
    """.split()
)
_warned: set[str] = set()


# ----------------------------------------------------------------------------------------------- session
class _Session:
    def __init__(self, client: Any, owned: bool, combo: Any = None) -> None:
        self.client = client
        self.owned = owned  # we connected it: shutdown() disconnects it
        self.combo = combo  # the local cluster init() started, if it did

    @property
    def address(self) -> str:
        return str(self.client.address)

    def __enter__(self) -> _Session:
        return self

    def __exit__(self, *exc: object) -> None:
        shutdown()

    def __repr__(self) -> str:
        return f"<scaler.compat.ray session {self.address}{' (local cluster)' if self.combo else ''}>"


_session: _Session | None = None
_session_lock = threading.RLock()
_task_link: bytes | None = None  # inside a task: the pickled client of whoever submitted it (connects on first use)


def init(
    address: str | None = None,
    *,
    client: Any = None,
    num_cpus: int | None = None,
    num_gpus: float | None = None,
    resources: dict[str, float] | None = None,
    ignore_reinit_error: bool = False,
    logging_level: str = "WARNING",
    **kwargs: Any,
) -> _Session:
    """Connect to the scheduler at `address`, or use `client` (an existing Client, left connected by shutdown()), or,
    with neither, start a local cluster of `num_cpus` workers (default: this machine's CPUs), whose workers offer the
    capability "gpu" with num_gpus > 0 and each of `resources` by its name (tasks with num_gpus= or resources= require
    them). Ray's other init options are ignored with a warning; other keywords go to Client (keys=,
    timeout_seconds=, ...). Returns the session; `with ray.init(): ...` shuts down at the end of the block."""
    global _session
    with _session_lock:
        if _session is not None:
            if ignore_reinit_error:
                return _session
            raise RuntimeError("ray.init() was called already; call shutdown() first, or pass ignore_reinit_error=True")
        client_kwargs = _client_settings(kwargs)
        offered = _capabilities({"num_gpus": num_gpus, "resources": resources}, "ray.init")
        if address == "auto" or (address or "").startswith("ray://"):
            raise ValueError(f"address={address!r}: give the scheduler's tcp://HOST:PORT, or none for a local cluster")
        if client is not None:
            if address is not None or client_kwargs:
                raise ValueError("init(client=...) takes no address nor Client settings: the client has them")
            _session = _Session(client, owned=False)
        elif address is not None and address != "local":
            if num_cpus is not None or offered:
                _warn_once(
                    "init:num_cpus",
                    "init(num_cpus=, num_gpus=, resources=) are ignored with an address: the cluster has its workers "
                    "(start them with scaler_cluster --capability gpu, ...)",
                )
            _session = _Session(Client(address, **client_kwargs), owned=True)
        else:
            from scaler.cluster.combo import SchedulerClusterCombo

            combo = SchedulerClusterCombo(
                _free_address(), n_workers=num_cpus, logging_level=logging_level, capabilities=offered
            )
            try:
                _session = _Session(Client(combo.address, **client_kwargs), owned=True, combo=combo)
            except BaseException:
                combo.shutdown()
                raise
            logger.info("started a local Scaler cluster at %s", combo.address)
        return _session


def shutdown() -> None:
    """Disconnect (unfinished tasks are cancelled) and stop the local cluster init() started. A client given to
    init(client=...) stays connected. Safe to call when not initialized."""
    global _session
    with _session_lock:
        session, _session = _session, None
    if session is None:
        return
    if session.owned:
        session.client.disconnect()
    if session.combo is not None:
        session.combo.shutdown()


def is_initialized() -> bool:
    """Whether init() was called (inside a task: always, through the submitting client)."""
    return _session is not None or _task_link is not None


def _client() -> Any:
    """The client to submit with: the session's; inside a task, the submitter's; else a local cluster, as Ray
    starts one when a program forgets ray.init()."""
    session = _session
    if session is not None:
        return session.client
    link = _task_link
    if link is not None:
        return cloudpickle.loads(link)  # one shared client per process and settings (Client's own pickling)
    if in_task():  # in a worker, in a task not submitted by us
        raise RuntimeError("this task was not submitted through scaler.compat.ray: call init(address=...) in it first")
    with _session_lock:
        if _session is None:
            logger.info("ray.init() was not called: starting a local cluster")
            init()
        assert _session is not None
        return _session.client


def _client_settings(kwargs: dict[str, Any]) -> dict[str, Any]:
    for name in sorted(kwargs.keys() & _RAY_INIT_ONLY):
        _warn_once(f"init:{name}", f"ray.init({name}=...) is ignored on Scaler")
    return {name: value for name, value in kwargs.items() if name not in _RAY_INIT_ONLY}


def _free_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def _warn_once(key: str, message: str) -> None:
    """Warn once per `key`, pointing at the user's line (the first caller outside the scaler package)."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, UserWarning, stacklevel=_outside_scaler())


_SCALER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _outside_scaler() -> int:
    """The stacklevel, for warnings.warn called from this module's caller, of the first frame not in scaler."""
    frame = sys._getframe(2)  # (the frame of _warn_once's caller; level 2 for warnings.warn called there)
    level = 2
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_SCALER_DIR):
        frame = frame.f_back
        level += 1
    return level


# ----------------------------------------------------------------------------------------------- remote functions
def remote(*args: Any, **options: Any) -> Any:
    """@ray.remote or @ray.remote(num_returns=2, ...) on a function: f.remote(*args) runs it as a task and returns
    an ObjectRef (a list of num_returns of them). On a class: NotImplementedError (actors are not supported)."""
    if len(args) == 1 and not options and callable(args[0]):
        return _make_remote(args[0], {})
    if args:
        raise TypeError("use @ray.remote or @ray.remote(option=value, ...)")
    _check_options(options)
    return lambda target: _make_remote(target, options)


def _make_remote(target: Any, options: dict[str, Any]) -> RemoteFunction:
    if isinstance(target, type):
        raise NotImplementedError(f"@ray.remote on class {target.__qualname__}: {_ACTORS}")
    if not callable(target):
        raise TypeError(f"@ray.remote needs a function, not {type(target).__name__}")
    return RemoteFunction(target, options)


def _check_options(options: dict[str, Any]) -> None:
    unknown = sorted(options.keys() - _OPTIONS)
    if unknown:
        raise ValueError(f"invalid option keyword {', '.join(unknown)} for remote functions")
    num_returns = options.get("num_returns", 1)
    if num_returns in ("dynamic", "streaming"):
        raise NotImplementedError(f"num_returns={num_returns!r} (generators) is not supported on Scaler")
    if isinstance(num_returns, bool) or not isinstance(num_returns, int) or num_returns < 1:
        raise ValueError(f"num_returns must be a whole number >= 1, not {num_returns!r}")
    for name in sorted(options.keys() & _IGNORED_OPTIONS):
        _warn_once(f"option:{name}", f"ray.remote option {name}= is ignored on Scaler (one task per worker at a time)")


def _capabilities(options: dict[str, Any], what: str) -> list[str]:
    """The capabilities Ray's num_gpus= and resources= stand for: "gpu" for num_gpus > 0, each resource with an
    amount > 0 by its name (Ray counts amounts; a Scaler worker runs one task at a time, so only presence counts)."""
    wanted = []
    num_gpus = options.get("num_gpus")
    if num_gpus is not None:
        if isinstance(num_gpus, bool) or not isinstance(num_gpus, (int, float)) or not num_gpus >= 0:
            raise ValueError(f"{what}: num_gpus must be a number >= 0, not {num_gpus!r}")
        if num_gpus > 0:
            wanted.append("gpu")
    resources = options.get("resources")
    if resources is not None:
        if not isinstance(resources, dict):
            raise ValueError(f"{what}: resources must be a dict like {{'licence': 1}}, not {resources!r}")
        for name, amount in resources.items():
            if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not amount >= 0:
                raise ValueError(f"{what}: resources[{name!r}] must be a number >= 0, not {amount!r}")
            if amount > 0:
                wanted.append(check_capability(name, f"{what}: resources"))
    return wanted


def _retries(options: dict[str, Any]) -> int | None:
    """Scaler's retries for Ray's max_retries: only with retry_exceptions=True (Scaler re-runs tasks lost with their
    worker anyway, as Ray's max_retries alone does)."""
    if not options.get("retry_exceptions"):
        return None
    max_retries = options.get("max_retries", 3)
    return 255 if max_retries < 0 else min(int(max_retries), 255)


class RemoteFunction:
    """What @ray.remote makes of a function: call f.remote(*args, **kwargs), not f(...)."""

    def __init__(self, fn: Callable[..., Any], options: dict[str, Any]) -> None:
        _check_options(options)
        self._fn = fn
        self._options = dict(options)
        self._num_returns: int = options.get("num_returns", 1)
        self._retries = _retries(options)
        self._capabilities = _capabilities(options, "ray.remote")
        self._bound: tuple[Any, _Task] | None = None  # (client, the task callable submitted with it)
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__doc__ = getattr(fn, "__doc__", None)

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function as a task; an ObjectRef of its result (num_returns > 1: a list of them, one per item
        of the returned sequence). ObjectRef arguments (top level) are resolved to their values first."""
        client = _client()
        task = self._task(client)
        settings: dict[str, Any] = {}
        if self._retries is not None:
            settings["retries"] = self._retries
        if self._capabilities:
            settings["capabilities"] = self._capabilities
        submitter = client.options(**settings) if settings else client
        call = Call(self.__qualname__, self._num_returns)
        call.start(client, submitter, task, args, kwargs)
        if self._num_returns == 1:
            return ObjectRef(call)
        return [ObjectRef(call, index) for index in range(self._num_returns)]

    def options(self, **options: Any) -> RemoteFunction:
        """This function with other options (num_returns=, max_retries=, retry_exceptions=, num_gpus=,
        resources=; Ray's others are ignored with a warning)."""
        return RemoteFunction(self._fn, {**self._options, **options})

    def _task(self, client: Any) -> _Task:
        """The callable submitted for this function with `client`, made once (the client then sends it once)."""
        bound = self._bound
        if bound is None or bound[0] is not client:
            bound = (client, _Task(self._fn, cloudpickle.dumps(client)))
            self._bound = bound
        return bound[1]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"remote functions cannot be called directly: use {self.__qualname__}.remote(...)")

    def __reduce__(self) -> tuple[Any, ...]:
        return RemoteFunction, (self._fn, self._options)

    def __repr__(self) -> str:
        return f"<RemoteFunction {self.__qualname__}>"


class _Task:
    """What runs on the worker: the function, with ray.* inside it going through the submitting client."""

    def __init__(self, fn: Callable[..., Any], link: bytes) -> None:
        self.fn = fn
        self.link = link
        self.__qualname__ = getattr(fn, "__qualname__", "task")

    def __call__(self, layout: tuple[int, tuple[str, ...]], *values: Any) -> Any:
        """values: the positional arguments, then the keyword ones named by layout (all top level, so that the
        client resolves object references among them; no keyword is reserved by submit())."""
        global _task_link
        count, names = layout
        previous, _task_link = _task_link, self.link
        try:
            return self.fn(*values[:count], **dict(zip(names, values[count:], strict=False)))
        finally:
            _task_link = previous  # tasks run inside this one's waits end before it resumes: a stack


# ----------------------------------------------------------------------------------------------- get, put, wait
def get(refs: Any, *, timeout: float | None = None) -> Any:
    """The value of an ObjectRef, or the list of values of a list of them, waiting at most `timeout` seconds in
    all (None: no limit; then GetTimeoutError). A task's exception is raised as Ray raises it: an instance of both
    ray.exceptions.RayTaskError and the exception's class, the exception itself as its `.cause`."""
    deadline = deadline_after(timeout)
    if isinstance(refs, ObjectRef):
        return refs._result(deadline)
    if isinstance(refs, (list, tuple)) and all(isinstance(ref, ObjectRef) for ref in refs):
        return [ref._result(deadline) for ref in refs]
    raise ValueError(f"get() takes an ObjectRef or a list of ObjectRefs, not {type(refs).__name__}")


def put(value: Any) -> ObjectRef:
    """Send `value` to the scheduler once; the ref passes it to any number of tasks (get() returns `value`). It stays
    at the scheduler until shutdown()."""
    if isinstance(value, ObjectRef):
        raise TypeError("put() of an ObjectRef: pass the ref itself")
    client = _client()
    return ObjectRef(None, value=value, reference=client.send_object(value), client=client)


def wait(
    refs: list[ObjectRef], *, num_returns: int = 1, timeout: float | None = None, fetch_local: bool = True
) -> tuple[list[ObjectRef], list[ObjectRef]]:
    """(ready, not_ready): the first num_returns refs whose tasks ended (successfully or not) and the others, both
    in the order given; after `timeout` seconds (None: no limit), ready may be shorter."""
    if isinstance(refs, ObjectRef) or not isinstance(refs, Iterable):
        raise TypeError("wait() takes a list of ObjectRefs")
    refs = list(refs)
    if not all(isinstance(ref, ObjectRef) for ref in refs):
        raise TypeError("wait() takes a list of ObjectRefs")
    if len({id(ref) for ref in refs}) != len(refs):
        raise ValueError("wait() takes a list of distinct ObjectRefs")
    if isinstance(num_returns, bool) or not isinstance(num_returns, int) or not 1 <= num_returns <= len(refs):
        raise ValueError(f"num_returns must be from 1 to the number of refs ({len(refs)}), not {num_returns!r}")
    deadline = deadline_after(timeout)
    while True:
        done = [ref for ref in refs if ref._ready()]
        left = time_left(deadline)
        if len(done) >= num_returns or left == 0:
            break
        pending = [ref._call.settled for ref in refs if ref._call is not None and not ref._ready()]
        concurrent.futures.wait(pending, left, return_when=concurrent.futures.FIRST_COMPLETED)
    ready = {id(ref) for ref in done[:num_returns]}
    return [ref for ref in refs if id(ref) in ready], [ref for ref in refs if id(ref) not in ready]


def cancel(ref: ObjectRef, *, force: bool = False, recursive: bool = True) -> None:
    """Cancel the task of `ref`: a queued one never runs, a running one is stopped (its processor is replaced, as
    Ray's force=True does); get() then raises TaskCancelledError. Nothing happens to a task that ended."""
    if not isinstance(ref, ObjectRef) or ref._call is None:
        raise TypeError("cancel() takes the ObjectRef of a task (from f.remote(...))")
    ref._call.cancel()


def cluster_resources() -> dict[str, float]:
    """{"CPU": the workers that may take tasks now}: a worker runs one task at a time (Client.cluster_resources)."""
    return {"CPU": float(_client().cluster_resources().workers)}


def get_actor(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError(f"ray.get_actor(): {_ACTORS}")


def kill(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError(f"ray.kill(): {_ACTORS}")


def method(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError(f"ray.method(): {_ACTORS}")


def __getattr__(name: str) -> Any:
    raise AttributeError(
        f"scaler.compat.ray has no {name!r}: it offers init, remote (functions), get, put, wait, cancel, shutdown, "
        "is_initialized, cluster_resources, ObjectRef and exceptions (docs/integrations.md)"
    )
