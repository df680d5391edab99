"""Task options (timeout, retries, priority, stream_output, capabilities, idempotency_key) and the view of a client that
submits with them: client.options().

The options travel with each task (docs/protocol.md, "Task options"; stream_output is a flag bit): the worker enforces
the timeout and captures output, the scheduler decides retries, keeps priorities, forwards output and places a task
only on a worker offering the capabilities it requires. They never touch the function's own keyword arguments.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from scaler.client.dask_graph import DASK_GET_MOVED, dask_form
from scaler.client.executor import ScalerExecutor
from scaler.core.capabilities import PYTHON_REQUIREMENT, requirement
from scaler.core.capabilities import describe as describe_capabilities
from scaler.protocol.records import (
    DEFAULT_OPTIONS,
    FLAG_STREAM_OUTPUT,
    MAX_IDEMPOTENCY_KEY_BYTES,
    MAX_RETRIES,
    MAX_TIMEOUT_MS,
    PRIORITY_RANGE,
    TaskOptions,
)

if TYPE_CHECKING:
    from scaler.client.client import Client
    from scaler.client.future import ScalerFuture

KEEP: Any = object()  # an option not given: it stays as it was

# Keywords Dask's submit takes for itself; passed to Scaler's submit, they would reach the function.
DASK_KEYWORDS = frozenset({"retries", "priority", "key", "pure", "workers", "resources", "allow_other_workers"})


class Options(NamedTuple):
    """What a client, or a view of it, submits every task with."""

    task: TaskOptions = DEFAULT_OPTIONS  # timeout_ms, retries, priority: columns of submitTasks
    flags: int = 0  # flag bits every task gets (FLAG_STREAM_OUTPUT)
    # What every task requires of its worker: sorted, payload=python included (core.capabilities.requirement).
    # One shared tuple per Options, so that a batch of its tasks finds them equal by identity.
    requirement: tuple[str, ...] = PYTHON_REQUIREMENT
    # The idempotency key of the task submit() sends, or "": map's task i gets f"{key}/{i}", a graph's task
    # f"{key}/{graph key}". The scheduler keeps a keyed task's result: a task sent later with its key gets it.
    key: str = ""


# An option's key with the suffix map or a graph adds stays within the scheduler's limit
MAX_KEY_BYTES = MAX_IDEMPOTENCY_KEY_BYTES - 224


def check_options(
    base: Options,
    timeout: Any,
    retries: Any,
    priority: Any,
    stream_output: Any = KEEP,
    capabilities: Any = KEEP,
    idempotency_key: Any = KEEP,
) -> Options:
    """`base` with the options given (not KEEP) checked and applied; a clear error for a bad one."""
    task = base.task
    flags = base.flags
    required = base.requirement
    key = base.key if idempotency_key is KEEP else _checked_key(idempotency_key)
    if timeout is not KEEP:
        if timeout is None:
            timeout_ms = 0
        elif isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds or None (no limit), not {timeout!r}")
        elif math.ceil(timeout * 1000) > MAX_TIMEOUT_MS:
            raise ValueError(f"timeout must be at most {MAX_TIMEOUT_MS // 1000:,} seconds, not {timeout!r}")
        else:
            timeout_ms = max(1, math.ceil(timeout * 1000))
        task = task._replace(timeout_ms=timeout_ms)
    if retries is not KEEP:
        if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= MAX_RETRIES:
            raise ValueError(f"retries must be a whole number from 0 to {MAX_RETRIES}, not {retries!r}")
        task = task._replace(retries=retries)
    if priority is not KEEP:
        low, high = PRIORITY_RANGE
        if isinstance(priority, bool) or not isinstance(priority, int) or not low <= priority <= high:
            raise ValueError(f"priority must be a whole number from {low} to {high}, not {priority!r}")
        task = task._replace(priority=priority)
    if stream_output is not KEEP:
        if not isinstance(stream_output, bool):
            raise ValueError(f"stream_output must be True or False, not {stream_output!r}")
        flags = flags | FLAG_STREAM_OUTPUT if stream_output else flags & ~FLAG_STREAM_OUTPUT
    if capabilities is not KEEP:
        required = requirement(capabilities)
    return Options(task, flags, required, key)


def _checked_key(key: Any) -> str:
    if key is None:
        return ""
    if not isinstance(key, str) or not key:
        raise ValueError(f"idempotency_key must be a non-empty str naming the task's work (None: no key), not {key!r}")
    if len(key.encode()) > MAX_KEY_BYTES:
        raise ValueError(f"idempotency_key must be at most {MAX_KEY_BYTES} bytes in UTF-8, not {key[:60]!r}...")
    return key


def graph_task_key(options: Options, graph_key: Hashable) -> str:
    """The idempotency key of a graph's task (Options.key): "" without one. Too long: ValueError, before sending."""
    if not options.key:
        return ""
    key = f"{options.key}/{graph_key}"
    if len(key.encode()) > MAX_IDEMPOTENCY_KEY_BYTES:
        raise ValueError(
            f"the idempotency key {key[:60]!r}... of graph key {graph_key!r} is over {MAX_IDEMPOTENCY_KEY_BYTES} bytes"
        )
    return key


def describe(options: Options) -> str:
    task = options.task
    timeout = f"{task.timeout_ms / 1000:g}s" if task.timeout_ms else "None"
    stream = " stream_output=True" if options.flags & FLAG_STREAM_OUTPUT else ""
    required = options.requirement
    capabilities = f" capabilities={describe_capabilities(required)}" if required != PYTHON_REQUIREMENT else ""
    key = f" idempotency_key={options.key!r}" if options.key else ""
    return f"timeout={timeout} retries={task.retries} priority={task.priority}{stream}{capabilities}{key}"


def check_dask_keywords(fn: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    """Raise a clear TypeError for Dask's submit keywords (retries=, priority=, ...) that `fn` does not take: they
    would reach the function on the worker and fail there, confusingly."""
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return  # no signature to read (a builtin): let it run as written
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    unknown = sorted(name for name in kwargs.keys() & DASK_KEYWORDS if name not in parameters)
    if unknown:
        name = getattr(fn, "__qualname__", repr(fn))
        advice = "; ".join(_dask_advice(keyword, kwargs[keyword]) for keyword in unknown)
        raise TypeError(
            f"{name}() does not take {', '.join(unknown)}: Scaler passes every keyword of submit() to the function. "
            f"{advice} (task options: timeout, retries, priority, stream_output, capabilities, idempotency_key)"
        )


def _dask_advice(keyword: str, value: Any) -> str:
    """What to do instead of Dask's submit keyword `keyword` (only what works here)."""
    if keyword in ("retries", "priority"):
        return f"for {keyword}: client.options({keyword}={value!r}).submit(...)"
    if keyword == "pure":
        return (
            "for pure: leave it out (Scaler runs every submit; to reuse a result, name the work: "
            "client.options(idempotency_key=...).submit(...))"
        )
    if keyword == "key":
        return f"for key: client.options(idempotency_key={str(value)!r}).submit(...) names the work"
    if keyword == "resources":
        return "for resources: client.options(capabilities={...}) with workers started with --capability NAME"
    return (
        f"for {keyword}: Scaler places tasks itself; to run on some workers only, start them with --capability NAME "
        "and submit with client.options(capabilities=[NAME])"
    )


class ClientOptions:
    """A client that submits with these task options: submit, map, get, submit_graph and get_executor as on Client;
    anything else is the client's own (send_object, disconnect, ...). Made by Client.options()."""

    def __init__(self, client: Client, options: Options) -> None:
        self._client = client
        self._options = options

    def options(
        self,
        *,
        timeout: Any = KEEP,
        retries: Any = KEEP,
        priority: Any = KEEP,
        stream_output: Any = KEEP,
        capabilities: Any = KEEP,
        idempotency_key: Any = KEEP,
    ) -> ClientOptions:
        """These options with the ones given changed (see Client.options)."""
        options = check_options(self._options, timeout, retries, priority, stream_output, capabilities, idempotency_key)
        return ClientOptions(self._client, options)

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> ScalerFuture:
        return self._client._submit(self._options, fn, args, kwargs)

    def submit_verbose(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        capabilities: Any = None,
        *,
        profiling: bool | None = None,
    ) -> ScalerFuture:
        """As Client.submit_verbose, with these options (capabilities=, if given, replaces theirs)."""
        return self._client._submit_verbose(self._options, fn, args, kwargs, capabilities, profiling)

    def map(
        self,
        fn: Callable[..., Any],
        iterable: Iterable[Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        progress: bool = False,
    ) -> list[Any]:
        return self._client._map(self._options, fn, (iterable, *iterables), timeout, progress)

    def starmap(
        self,
        fn: Callable[..., Any],
        iterable: Iterable[Iterable[Any]],
        *,
        timeout: float | None = None,
        progress: bool = False,
    ) -> list[Any]:
        from scaler.client.client import _starred

        return self._client._map(self._options, fn, (_starred(iterable),), timeout, progress)

    def get(
        self,
        graph: Mapping[Any, Any],
        keys: Sequence[Hashable],
        block: bool = True,
        *,
        timeout: float | None = None,
        progress: bool = False,
        group: int | None = None,
        on_task_end: Callable[[Hashable], None] | None = None,
    ) -> Any:
        if dask_form(graph, keys):  # deprecated, as in Client.get
            warnings.warn(DASK_GET_MOVED, FutureWarning, stacklevel=2)
            return self.dask_get(graph, keys, block=block, timeout=timeout, progress=progress, group=group)
        return self._client._get(self._options, graph, keys, timeout, block, progress, group, on_task_end)

    def dask_get(self, graph: Any, keys: Any, **kwargs: Any) -> Any:
        """Dask's scheduler protocol with these task options (see Client.dask_get)."""
        from scaler.integrations import dask

        return dask.get(self, graph, keys, **kwargs)

    def __call__(self, graph: Any, keys: Any, **kwargs: Any) -> Any:
        """dask_get: dask.compute(..., scheduler=client.options(...)) (see Client.__call__)."""
        return self.dask_get(graph, keys, **kwargs)

    def submit_graph(
        self,
        graph: Mapping[Any, Any],
        keys: Sequence[Hashable],
        profiling: bool | None = None,
        *,
        group: int | None = None,
    ) -> list[ScalerFuture]:
        return self._client._submit_graph(self._options, graph, keys, profiling, group)[0]

    def get_executor(self) -> ScalerExecutor:
        """A concurrent.futures.Executor whose tasks get these options (see Client.get_executor)."""
        if self._options.key:
            raise ValueError(
                "an executor's tasks cannot share one idempotency_key (each would get the first one's result): "
                "use client.options(idempotency_key=...).submit(...) for each task, or .map(...)"
            )
        return ScalerExecutor(self._client, self._options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def __reduce__(self) -> tuple[type[ClientOptions], tuple[Client, Options]]:
        """Passed to a task, it is its client (reconnected from the worker) with the same options: nested tasks
        submitted through it require the same capabilities. (Without this, unpickling would ask __getattr__ for
        attributes not set yet, forever.)"""
        return ClientOptions, (self._client, self._options)

    def __repr__(self) -> str:
        return f"<Client {self._client.address} with {describe(self._options)}>"
