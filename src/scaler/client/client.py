"""Client: the API applications use to run functions on a Scaler cluster.

Serializes functions (once per function object) and arguments in the caller's thread, hands requests to the
connection's I/O thread, and returns standard futures. See docs/client.md (and the guide pages it lists) for every
method with examples.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import functools
import gc
import inspect
import logging
import os
import pickle
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, overload

from scaler.client.connection import Collector, CollectorSlot, Connection, EndSink, FutureSink, ResultSink
from scaler.client.dask_graph import DASK_GET_MOVED, as_task_tuples, dask_form
from scaler.client.executor import ScalerExecutor
from scaler.client.future import ScalerFuture, check_may_wait
from scaler.client.graph import KeyArg, TaskNode, plan_graph
from scaler.client.grouped_futures import submit_grouped
from scaler.client.grouping import check_group, group_plan
from scaler.client.object_reference import ObjectReference
from scaler.client.options import (
    DASK_KEYWORDS,
    KEEP,
    ClientOptions,
    Options,
    check_dask_keywords,
    check_options,
    graph_task_key,
)
from scaler.client.progress import GraphCount, report_wait, wait_futures_with_bar, wait_graph_with_bar, wait_with_bar
from scaler.client.resources import ClusterResources
from scaler.client.shared import SharedSink
from scaler.core.client.session import (
    HEADER_BUDGET,
    SCHEDULER_RESTART_GRACE_SECONDS,
    CancelRequest,
    CloseKind,
    FreeRequest,
    NewObject,
    NewTask,
    Request,
    task_header_bytes,
)
from scaler.errors import (
    AuthenticationError,
    ClientClosedError,
    ConnectionFailedError,
    PayloadTooLargeError,
    task_failure,
)
from scaler.io.addresses import parse_address
from scaler.io.lifetime import current_pid
from scaler.payloads import pack_function, unpack_exception
from scaler.protocol.messages import (
    FLAG_PROFILING,
    FLAG_SILENT,
    FLAG_STREAM_OUTPUT,
    ID_PREFIX_SHIFT,
    Payload,
    TaskStatus,
)
from scaler.protocol.records import FLAG_REPORT_END, FLAG_SHARED_ARGUMENTS, FLAG_SHARED_RESULT
from scaler.security.keys import PeerKeys, load_peer_keys, resolve
from scaler.serializer import DEFAULT_SERIALIZER, DefaultSerializer, Serializer, _is_plain, serializer_input
from scaler.shm import (
    DEFAULT_THRESHOLD,
    SIZED_KINDS,
    SMALL_KINDS,
    Parts,
    Reference,
    SharedArguments,
    encode_reference,
    load_object,
    may_be_big,
    object_payload,
    pickle_parts,
    untag,
)
from scaler.task_context import SCHEDULER_ADDRESS_VARIABLE, NestedWait, current_task_id, in_task

logger = logging.getLogger(__name__)

_UNREAD: Any = object()  # a function's signature not read yet
_MAP_CHUNK = 2000  # requests handed to the I/O thread at once by map()
_NO_REFERENCE = (0,)  # the references of a task whose one argument is a value
_MANY_ARGUMENTS = 1024  # a task with more arguments than this may not fit in one message: checked (_check_header)
PROGRESS_SECONDS = 10.0  # a map() or get() waiting longer logs how far it got (INFO, or stderr) this often


class Client:
    """A connection to a Scaler scheduler.

    >>> with Client(address="tcp://127.0.0.1:2345") as client:
    ...     client.submit(pow, 2, 10).result()
    1024

    Arguments:
        address: the scheduler's address, tcp://HOST:PORT.
        profiling: profile every task (see ScalerFuture.profiling_info()).
        timeout_seconds: give up connecting, or declare the scheduler lost, after this much silence.
        heartbeat_interval_seconds: how often to tell the scheduler this client is alive.
        serializer: a Serializer for functions, arguments, objects and results (default: cloudpickle).
        keys: the keys directory (scaler_keygen) for a scheduler that requires keys: its scheduler.key and
            client.key_secret are used. Default: $SCALER_KEYS if set, else no keys; False: no keys, whatever
            $SCALER_KEYS says. See docs/security.md.
        task_timeout: the timeout in seconds every task of this client gets unless client.options(timeout=...) says
            otherwise (see options()).
        task_retries: how many times a task of this client runs again after it fails, unless
            client.options(retries=...) says otherwise.
        task_priority: the priority of this client's tasks, unless client.options(priority=...) says otherwise.
        stream_output: print what this client's tasks write to sys.stdout and sys.stderr here, in this process's
            sys.stdout and sys.stderr, each line prefixed "(function task 0x...) " (docs/guide/tasks.md, "Task output");
            client.options(stream_output=True) for some tasks only.
        shared_memory: arguments of submit and map at least this many bytes once serialized (True: 1 MiB) are
            written once to shared memory (/dev/shm) and read from there by workers on this host, past the
            scheduler; a worker on another host gets them inline, sent again (docs/guide/data.md, "Large arguments").
            With the default serializer, send_object values that big are read in place (copy-on-write) by the
            workers of this host, and results that big come back the same way ("Large objects and results").
            False: always inline.
        scheduler_restart_grace_seconds: with a scheduler that keeps a journal (scaler_scheduler --journal), how long
            to wait for it to come back after its connection closed (a restart) before pending futures fail; the
            client keeps its unfinished tasks meanwhile and sends them again when it is back (docs/guide/errors.md,
            "When the scheduler is lost").
    """

    def __init__(
        self,
        address: str | None = None,
        profiling: bool = False,
        timeout_seconds: float = 60,
        heartbeat_interval_seconds: float = 2,
        serializer: Serializer | type[Serializer] = DEFAULT_SERIALIZER,
        keys: str | os.PathLike[str] | PeerKeys | bool | None = None,
        task_timeout: float | None = None,
        task_retries: int = 0,
        task_priority: int = 0,
        stream_output: bool = False,
        shared_memory: bool | int = True,
        scheduler_restart_grace_seconds: float = SCHEDULER_RESTART_GRACE_SECONDS,
    ) -> None:
        address = _address_or_the_tasks(address)
        parse_address(address)
        threshold = _shared_memory_threshold(shared_memory)
        self._options = check_options(Options(), task_timeout, task_retries, task_priority, stream_output)
        if not timeout_seconds > 0:
            raise ValueError(f"timeout_seconds must be positive, not {timeout_seconds!r}")
        if not heartbeat_interval_seconds > 0:
            raise ValueError(f"heartbeat_interval_seconds must be positive, not {heartbeat_interval_seconds!r}")
        if not scheduler_restart_grace_seconds > 0:
            raise ValueError(
                f"scheduler_restart_grace_seconds must be positive, not {scheduler_restart_grace_seconds!r}"
            )
        if not (
            callable(getattr(serializer, "serialize", None)) and callable(getattr(serializer, "deserialize", None))
        ):
            raise TypeError("serializer must provide serialize(obj) -> bytes and deserialize(bytes) -> obj")
        self._address = address
        self._profiling = bool(profiling)
        self._timeout = float(timeout_seconds)
        self._heartbeat = float(heartbeat_interval_seconds)
        self._restart_grace = float(scheduler_restart_grace_seconds)
        self._serializer: Serializer = serializer  # type: ignore[assignment]
        if isinstance(keys, PeerKeys):  # a client unpickled in a task: the keys it was given
            self._keys: PeerKeys | None = keys
        elif keys is False:
            self._keys = None
        elif isinstance(keys, bool):
            raise TypeError("keys must be a keys directory, None (use $SCALER_KEYS if set) or False (no keys)")
        else:
            directory = resolve(keys)
            self._keys = load_peer_keys(directory, "client") if directory is not None else None
        self._functions: dict[int, tuple[Any, int]] = {}  # id(function) -> (weakref or function, object id)
        self._signatures: dict[int, _CallCheck | None] = {}  # function object id -> how to check a call, if any
        self._objects: set[int] = set()
        # send_object values in shared memory (ADR 0024): object id -> (its segment's reference, its name); and the
        # inline copy sent for one when a worker on another host could not read it
        self._shared_objects: dict[int, tuple[Reference, str]] = {}
        self._inline_copies: dict[int, int] = {}
        self._copy_lock = threading.Lock()
        # Reentrant: a function's weakref callback (_forget_function) may run in whatever thread the garbage
        # collector interrupts, this one included while it holds the lock.
        self._lock = threading.RLock()
        self._closed_by_user = False
        self._pid = os.getpid()
        with _clients_lock:  # numbered in this process: two clients of one thread are two names (monitors, /metrics)
            _clients_made[0] += 1
            kind = "nested" if in_task() else "client"  # nested: made in a worker's processor, in a task
            name = f"{kind}-{os.getpid()}-{_clients_made[0]}"
        self._connection = Connection(
            address, name, self._heartbeat, self._timeout, self._keys, restart_grace=self._restart_grace
        )
        self._connection.start()
        self._connection.wait_connected(self._timeout)
        self._prefix = self._connection.core.id_prefix
        self._max_payload = self._connection.core.max_payload_bytes or (1 << 63)
        self._shared_memory = shared_memory
        self._shared: SharedArguments | None = None
        if threshold is not None:
            shared = SharedArguments(threshold)
            self._shared = shared if shared.enabled else None
        # Arguments at least this big are pickled in pieces (Parts), copied once, into shared memory.
        self._parts_from = threshold if self._shared is not None and type(serializer) is DefaultSerializer else None
        # With the default serializer, arguments of the kinds that are never big (SMALL_KINDS) are pickled at once:
        # DefaultSerializer.serialize gives them pickle.dumps' bytes.
        self._plain_serializer = type(serializer) is DefaultSerializer
        # Tasks whose result comes to this client only (submit, map; not graphs, not keyed) may get it back through
        # shared memory from a worker of this host: the processor writes it, this client reads and unlinks it.
        self._result_flag = FLAG_SHARED_RESULT if self._parts_from is not None else 0
        self._renamed: dict[int, int] = {}  # a map's task id -> the id it was sent again under (inline)
        self._last_big: tuple[weakref.ref[Any] | None, int] = (None, 0)  # the latest big argument, how many times
        self._hinted_send_object = False

    # ------------------------------------------------------------------------------------------- context
    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.disconnect()

    def __reduce__(self) -> tuple[Callable[..., Client], tuple[Any, ...]]:
        """A client passed to a task reconnects from the worker, with the same settings, and the same keys: whoever
        runs the task may act as this client (docs/security.md). They travel inside the task's arguments, which
        are encrypted on every connection when keys are used."""
        settings = (self._address, self._profiling, self._timeout, self._heartbeat, self._serializer)
        return _reconnect, (*settings, self._keys, self._options, self._shared_memory, self._restart_grace)

    def __repr__(self) -> str:
        state = "disconnected" if self._connection.closed.is_set() else "connected"
        pending = len(self._connection.sinks)
        return f"<Client {self._address} {state}, {pending} tasks pending>"

    @property
    def address(self) -> str:
        return self._address

    # ------------------------------------------------------------------------------------------- tasks
    def options(
        self,
        *,
        timeout: float | object | None = KEEP,
        retries: int | object = KEEP,
        priority: int | object = KEEP,
        stream_output: bool | object = KEEP,
        capabilities: Mapping[str, Any] | Iterable[str] | object | None = KEEP,
        idempotency_key: str | object | None = KEEP,
    ) -> ClientOptions:
        """This client with task options, for the tasks submitted through what it returns (submit, map, get,
        submit_graph); options not given stay as they are. The function's own keyword arguments are untouched.

        >>> client.options(timeout=30, retries=2).submit(fetch, url)
        >>> fast = client.options(priority=10)
        >>> fast.map(score, [(x,) for x in batch])

        timeout: seconds a task may run; past it the worker stops the process running it and the future raises
            TaskTimeoutError (a TimeoutError); None: no limit.
        retries: run a task again, up to this many times, when it raises, times out or goes over the worker's
            memory limit; the future then holds the last run's outcome. (Runs lost with a worker are retried
            anyway, up to the scheduler's --max-task-retries.)
        priority: among this client's ready tasks, higher first (default 0); other clients still take turns.
        stream_output: print what the tasks write to sys.stdout and sys.stderr in this process, each line prefixed
            with the task (see Client's stream_output).
        capabilities: what a worker must offer to run the tasks (docs/capabilities.md): a mapping
            {"gpu": True, "lang": "ts"} (True, None or -1: the bare name; a str or int: name=value) or an iterable
            ["gpu", "lang=ts"]; None or empty: nothing beyond payload=python, which every task of this client
            requires. Workers offer capabilities with scaler_cluster --capability gpu. A task that no connected
            worker can run fails at once with MissingCapabilityError (the scheduler may wait for one to join:
            scaler_scheduler --capability-grace-seconds).

        >>> client.options(capabilities={"gpu": True}).submit(train, data)

        idempotency_key: a name for the work (a str of up to 800 bytes; None: none). The scheduler keeps the result
            of a keyed task that succeeded (and, with --journal, across its restarts): a task sent later with the same
            key, by any client of the same credentials, gets that result at once and does not run, and a result once
            kept is never computed again. map's task i gets the key f"{key}/{i}", a graph's task f"{key}/{graph key}".
            See docs/guide/options.md, "Idempotent-keyed tasks".

        >>> client.options(idempotency_key="invoice-2026-12-04").submit(send_invoices, batch)
        """
        options = check_options(self._options, timeout, retries, priority, stream_output, capabilities, idempotency_key)
        return ClientOptions(self, options)

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> ScalerFuture:
        """Run fn(*args, **kwargs) on a worker; returns a future of its result.

        The keyword `profiling` is reserved: submit(fn, x, profiling=True) profiles this task instead of
        passing profiling to fn. Arguments that are ObjectReference (from send_object) become the object.
        Task options (timeout, retries, priority): client.options(...).submit(fn, ...).
        """
        return self._submit(self._options, fn, args, kwargs)

    def submit_verbose(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        capabilities: Mapping[str, Any] | Iterable[str] | None = None,
        *,
        profiling: bool | None = None,
    ) -> ScalerFuture:
        """fn(*args, **kwargs) on a worker, as submit() but with the arguments given whole (opengris-scaler 2.x's
        form): every keyword of `kwargs` goes to fn, `profiling` included. capabilities: what the worker must offer
        (as client.options(capabilities=...)).

        >>> client.submit_verbose(round, args=(3.15,), kwargs={}, capabilities={"gpu": -1})
        """
        return self._submit_verbose(self._options, fn, args, kwargs, capabilities, profiling)

    def _submit_verbose(
        self,
        options: Options,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any] | None,
        capabilities: Any,
        profiling: bool | None,
    ) -> ScalerFuture:
        if not isinstance(args, (tuple, list)):
            raise TypeError(f"submit_verbose() takes args as a tuple, not {type(args).__name__}: args=({args!r},)")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise TypeError(f"submit_verbose() takes kwargs as a dict, not {type(kwargs).__name__}")
        if capabilities is not None:
            options = check_options(options, KEEP, KEEP, KEEP, KEEP, capabilities)
        profiled = self._profiling if profiling is None else bool(profiling)
        return self._submit(options, fn, tuple(args), dict(kwargs or {}), profiled)

    def starmap(
        self,
        fn: Callable[..., Any],
        iterable: Iterable[Iterable[Any]],
        *,
        timeout: float | None = None,
        progress: bool = False,
    ) -> list[Any]:
        """fn(*item) for every item of `iterable` (each a tuple or other iterable of arguments); the results, in order
        (itertools.starmap's form, opengris-scaler 2.x's). As map() otherwise.

        >>> client.starmap(pow, [(2, 1), (2, 2), (2, 3)])
        [2, 4, 8]
        """
        return self._map(self._options, fn, (_starred(iterable),), timeout, progress)

    def _submit(
        self,
        options: Options,
        fn: Callable[..., Any],
        args: Any,
        kwargs: dict[str, Any],
        profiling: bool | None = None,
    ) -> ScalerFuture:
        """profiling: whether to profile (submit_verbose: every keyword then goes to fn); None: submit's reserved
        keyword `profiling`, else the client's setting."""
        if profiling is None:
            profiling = bool(kwargs.pop("profiling", self._profiling))
        if kwargs and kwargs.keys() & DASK_KEYWORDS:  # (no set made for a call without keywords)
            check_dask_keywords(fn, kwargs)
        connection = self._live()
        if not callable(fn):
            raise TypeError(f"submit() needs a callable as its first argument, not {type(fn).__name__}")
        function_id = self._function_object(fn)
        self._check_call(fn, function_id, args, kwargs)
        refs, keywords, payloads = self._encode_arguments(fn, args, kwargs)
        task_id = connection.mint(1)[0]
        future = ScalerFuture(task_id, _label(fn), self._cancel, connection.io_thread, connection.wait, running=True)
        flags = (FLAG_PROFILING if profiling else 0) | options.flags | (0 if options.key else self._result_flag)
        task = NewTask(
            task_id, function_id, flags, refs, keywords, payloads, options.task, options.requirement, options.key
        )
        sink: ResultSink = FutureSink(future, self._serializer, profiling, options.requirement)
        if self._shared is not None and (self._shared.wanted(payloads) or self._refers_shared(refs)):
            task, sink = self._share(connection, task, sink, fn, functools.partial(_retarget_future, future))
        try:
            connection.register([(task_id, sink)])
        except BaseException:
            _release_shared([sink])
            raise
        if flags & FLAG_STREAM_OUTPUT:
            connection.output.expect((task_id,), _label(fn))
        connection.submit_task(task)
        return future

    def map(
        self,
        fn: Callable[..., Any],
        iterable: Iterable[Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        progress: bool = False,
    ) -> list[Any]:
        """Run fn(*args) for every tuple of arguments in iterable; returns the results, in order.

        >>> client.map(pow, [(2, 1), (2, 2), (2, 3)])
        [2, 4, 8]

        An item that is not a tuple is the one argument of its task (client.map(abs, [-1, -2]) is [1, 2], as in
        Dask and scaler 2.x); with several iterables, the tasks take one argument from each, as the builtin map
        (client.map(pow, [2, 2], [1, 2]) is [2, 4]).

        If a task fails, map raises its exception (the other tasks are cancelled). timeout: seconds to wait for
        all the results (None, the default: no limit); past it, map raises TimeoutError and cancels the tasks that
        have not finished. (A limit per task: client.options(timeout=...).map(...).) progress: show a live
        progress bar while waiting (see scaler.progress).
        """
        return self._map(self._options, fn, (iterable, *iterables), timeout, progress)

    def _map(
        self,
        options: Options,
        fn: Callable[..., Any],
        iterables: tuple[Iterable[Any], ...],
        timeout: float | None,
        bar: bool = False,
    ) -> list[Any]:
        connection = self._live()
        if not callable(fn):
            raise TypeError(f"map() needs a callable as its first argument, not {type(fn).__name__}")
        _check_timeout(timeout, "map()")
        items = _argument_tuples(iterables)
        function_id = self._function_object(fn)
        self._check_map_call(fn, function_id, items, len(iterables))
        # not profiling: map returns values, not futures, so there is nowhere to read it from
        flags = options.flags | (0 if options.key else self._result_flag)
        ids = connection.mint(len(items))
        tasks = []
        collector = Collector(len(items))
        sinks: list[ResultSink] = [CollectorSlot(collector, index) for index in range(len(items))]
        shared = self._shared
        task_options, requirement, key = options.task, options.requirement, options.key
        try:
            for index, (task_id, (refs, payloads)) in enumerate(zip(ids, self._encode_items(fn, items), strict=False)):
                task = NewTask(task_id, function_id, flags, refs, None, payloads, task_options, requirement)
                if key:
                    task = task._replace(key=f"{key}/{index}")
                if shared is not None and (shared.wanted(payloads) or self._refers_shared(refs)):
                    retarget = functools.partial(self._renamed.__setitem__, task_id)
                    task, sinks[index] = self._share(connection, task, sinks[index], fn, retarget)
                tasks.append(task)
            connection.register(zip(ids, sinks, strict=False))
        except BaseException:
            _release_shared(sinks)  # nothing was sent
            raise
        if flags & FLAG_STREAM_OUTPUT:
            connection.output.expect(ids, _label(fn))
        for start in range(0, len(tasks), _MAP_CHUNK):
            connection.submit(tasks[start : start + _MAP_CHUNK])
        label = _label(fn)
        started = time.monotonic()

        def progress() -> str:
            done = len(items) - collector.remaining
            return f"map({label}): {done:,} of {len(items):,} tasks done after {time.monotonic() - started:.0f}s"

        left = timeout
        if bar:
            check_may_wait("map()", self._pid, connection.io_thread)
            left = wait_with_bar(
                f"map({label})", len(items), lambda: len(items) - collector.remaining, collector.done, timeout
            )
        try:
            return self._map_outcome(connection, collector, ids, label, left, timeout, progress, options.requirement)
        finally:
            if self._renamed:
                for task_id in ids:
                    self._renamed.pop(task_id, None)

    def _map_outcome(
        self,
        connection: Connection,
        collector: Collector,
        ids: range,
        label: str,
        left: float | None,
        timeout: float | None,
        progress: Callable[[], str],
        requirement: Sequence[str],
    ) -> list[Any]:
        if not self._wait(collector.done, left, progress):
            self._cancel_many([i for i in map(self._current_id, ids) if i in connection.sinks])
            raise TimeoutError(
                f"map({label}): {collector.remaining:,} of {len(ids):,} tasks had not finished after "
                f"{timeout:g}s; they were cancelled"
            )
        if collector.error is not None or collector.failed is not None:
            self._cancel_many([i for i in map(self._current_id, ids) if i in connection.sinks])
            if collector.error is not None:
                raise collector.error
            assert collector.failed is not None
            failed_payload = collector.payloads[collector.failed]
            assert failed_payload is not None
            raise _outcome_error(collector.statuses[collector.failed], failed_payload, requirement)
        serializer = self._serializer
        if (
            type(serializer) is DefaultSerializer
        ):  # its deserialize is pickle.loads, which reads bytes as they are (ADR 0020)
            loads = pickle.loads
            return [
                loads(payload) if type(payload) is bytes else loads(serializer_input(serializer, payload))
                for payload in collector.payloads
            ]
        deserialize = serializer.deserialize
        return [deserialize(serializer_input(serializer, payload)) for payload in collector.payloads]

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
        """Compute a dask-style graph; returns {key: value} for the keys asked for.

        >>> client.get({"a": 2, "b": (inc, "a")}, keys=["b"])
        {'b': 3}

        block=False returns {key: future} at once instead (as scaler 1.9 did). timeout: seconds to wait for the keys
        (None, the default: no limit); past it, get raises TimeoutError and cancels the graph's unfinished tasks.
        progress: show a live progress bar of the graph's tasks done while waiting (see scaler.progress).
        group: run up to this many nodes per task (see submit_graph).
        on_task_end: called with the key of each of the graph's tasks as it ends (in the client's I/O thread; not with
        group=): a progress of your own, or Dask's callbacks (scaler.integrations.dask).
        It answers {key: value} whoever calls it. Dask's scheduler protocol is dask_get (or the client itself:
        dask.compute(..., scheduler=client)). A call in a shape only Dask gives (a graph that is not a dict, keys
        nested in lists, a single key) is still answered as dask_get answers, with a FutureWarning (deprecated).
        """
        if dask_form(graph, keys):
            warnings.warn(DASK_GET_MOVED, FutureWarning, stacklevel=2)
            return self.dask_get(graph, keys, block=block, timeout=timeout, progress=progress, group=group)
        return self._get(self._options, graph, keys, timeout, block, progress, group, on_task_end)

    def dask_get(self, graph: Any, keys: Any, **kwargs: Any) -> Any:
        """Dask's scheduler protocol: Dask collections computed by the cluster (docs/guide/graphs.md, "Dask
        collections").

        >>> dask.compute(x.sum(), bag.count(), scheduler=client.dask_get)  # or scheduler=client

        Takes the graph as Dask hands it over (an expression, a HighLevelGraph, a dict of task tuples or task-spec
        nodes) and answers as Dask's schedulers do: the values in the shape of keys (a tuple for a list, the value
        for a key). Keywords as for get (timeout=, progress=, group=). See scaler.integrations.dask.
        """
        from scaler.integrations import dask  # the integration stands on the public API; this is its door

        return dask.get(self, graph, keys, **kwargs)

    def __call__(self, graph: Any, keys: Any, **kwargs: Any) -> Any:
        """dask_get: a client is a Dask scheduler, dask.compute(..., scheduler=client) (Dask calls a callable
        scheduler as it is, before it looks for a get method)."""
        return self.dask_get(graph, keys, **kwargs)

    def _get(
        self,
        options: Options,
        graph: Mapping[Any, Any],
        keys: Sequence[Hashable],
        timeout: float | None,
        block: bool = True,
        bar: bool = False,
        group: int | None = None,
        watch: Callable[[Hashable], None] | None = None,
    ) -> dict[Hashable, Any]:
        """watch: told each graph key whose task ended (get's on_task_end)."""
        _check_timeout(timeout, "get()")
        if watch is not None and not callable(watch):
            raise TypeError(f"on_task_end must be callable, not {type(watch).__name__}")
        if watch is not None and (group is not None or not block):
            raise TypeError("get(on_task_end=...) is for a blocking get without group=")
        _check_unique(keys)
        if bar and not block:
            raise TypeError("get(block=False) returns futures at once: progress= is for block=True only")
        if not block:
            if timeout is not None:
                raise TypeError("get(block=False) returns futures at once: timeout= is for block=True only")
            return dict(zip(keys, self._submit_graph(options, graph, keys, False, group)[0], strict=True))
        counted = GraphCount() if (bar or watch is not None) and group is None else None  # (a group's tasks: blocks)
        ended = counted.ended if counted is not None else None
        futures, task_ids = self._submit_graph(options, graph, keys, False, group, ended)
        started = time.monotonic()
        if counted is not None:
            counted.start(len(task_ids), keys, futures, watch)

        def progress() -> str:
            done = sum(future.done() for future in futures)
            return f"get(): {done:,} of {len(keys):,} keys computed after {time.monotonic() - started:.0f}s"

        left = timeout
        if bar and counted is not None:  # every task of the graph counted, not only the keys asked for
            left = wait_graph_with_bar(futures, counted, "get()", timeout)
        elif bar:
            left = wait_futures_with_bar(list(futures), "get()", timeout, "get()")
        if not self._wait_futures(futures, left, progress):
            unfinished = sum(not future.done() for future in futures)
            for future in futures:
                future._cancel_quietly()  # here only: the one request below cancels every task of the graph
            self._cancel_many(task_ids)  # the intermediate keys' tasks too (their dependents end with them)
            raise TimeoutError(
                f"get(): {unfinished:,} of {len(keys):,} keys had not been computed after {timeout:g}s; the graph's "
                "unfinished tasks were cancelled"
            )
        return {key: future.result() for key, future in zip(keys, futures, strict=False)}

    def submit_graph(
        self,
        graph: Mapping[Any, Any],
        keys: Sequence[Hashable],
        profiling: bool | None = None,
        *,
        group: int | None = None,
    ) -> list[ScalerFuture]:
        """Submit a dask-style graph; returns one future per key asked for, in order.

        profiling: profile the tasks of the keys asked for (None: as the client was created).
        group: run up to this many consecutive nodes of the graph as one task (None, the default: one task per node;
        see scaler.client.grouping and docs/client.md).
        """
        return self._submit_graph(self._options, graph, keys, profiling, group)[0]

    def _submit_graph(
        self,
        options: Options,
        graph: Mapping[Any, Any],
        keys: Sequence[Hashable],
        profiling: bool | None,
        group: int | None = None,
        ended: Callable[[Hashable], None] | None = None,
    ) -> tuple[list[ScalerFuture], list[int]]:
        """submit_graph, also returning the ids of all the graph's tasks. ended: told the key of each silent task
        that ends (the scheduler is asked to say so: FLAG_REPORT_END); not with `group` (its tasks are blocks)."""
        if not isinstance(keys, (list, tuple)):
            raise TypeError(f"keys must be a list of graph keys, not {type(keys).__name__}")
        if group is not None:  # the graph becomes a graph of block tasks, submitted below as any graph
            size = check_group(group)
            with collector_paused():
                grouped = group_plan(plan_graph(as_task_tuples(graph), keys), list(keys), size)
            submit = lambda g, k: self._submit_graph(options, g, k, profiling)  # noqa: E731
            return submit_grouped(grouped, list(keys), submit, self._cancel_many)
        connection = self._live()
        with collector_paused():
            return self._send_graph(connection, options, graph, keys, profiling, ended)

    def _send_graph(
        self,
        connection: Connection,
        options: Options,
        graph: Mapping[Any, Any],
        keys: Sequence[Hashable],
        profiling: bool | None,
        ended: Callable[[Hashable], None] | None = None,
    ) -> tuple[list[ScalerFuture], list[int]]:
        plan = plan_graph(as_task_tuples(graph), keys)
        requests: list[Request] = []
        ids: dict[Hashable, int] = {}
        for (key, value), object_id in zip(plan.literals.items(), connection.mint(len(plan.literals))):
            if isinstance(value, ObjectReference):  # the object it refers to (already in the scheduler)
                ids[key] = self._graph_reference(value)
                continue
            try:
                payload = self._serialize(value)
            except _Unserializable as exc:
                raise exc.error(f"the value of key {key!r}") from exc.__cause__
            ids[key] = object_id
            requests.append(NewObject(object_id, payload, f"graph key {key!r}"))
        wanted = set(keys)
        futures: dict[Hashable, ScalerFuture] = {}
        sinks: list[tuple[int, ResultSink]] = []
        profiled = bool(self._profiling if profiling is None else profiling)
        flags_base = (FLAG_PROFILING if profiled else 0) | options.flags
        silent = FLAG_SILENT if ended is None else FLAG_SILENT | FLAG_REPORT_END  # (told when it ends: progress)
        tasks: list[Request] = []
        task_ids = list(connection.mint(len(plan.tasks)))
        function_ids: dict[int, int] = {}  # id(function) -> its object id; the graph keeps the functions alive
        required = options.requirement
        for node, task_id in zip(plan.tasks, task_ids):
            function_id = function_ids.get(id(node.function)) or self._graph_function(function_ids, node.function)
            refs: list[int] = []
            payloads: list[Payload] = []
            for position, arg in enumerate(node.args):
                if isinstance(arg, KeyArg):
                    refs.append(ids[arg.key])
                elif isinstance(arg.value, ObjectReference):
                    refs.append(self._graph_reference(arg.value))
                else:
                    refs.append(0)
                    try:
                        payloads.append(self._serialize(arg.value))
                    except _Unserializable as exc:
                        raise exc.error(f"argument {position} of key {node.key!r}") from exc.__cause__
            ids[node.key] = task_id
            flags = flags_base | (0 if node.key in wanted else silent)
            key = graph_task_key(options, node.key)
            tasks.append(
                NewTask(task_id, function_id, flags, tuple(refs), None, tuple(payloads), options.task, required, key)
            )
            if node.key in wanted:
                future = ScalerFuture(task_id, f"key {node.key!r}", self._cancel, connection.io_thread, running=True)
                futures[node.key] = future
                sinks.append((task_id, FutureSink(future, self._serializer, profiled, required)))
        sinks += _end_sinks(plan.tasks, task_ids, wanted, ended)
        connection.register(sinks)
        _print_graph_output(connection, options, plan.tasks, task_ids, list(futures.values()))
        connection.submit(requests + tasks)
        # The scheduler keeps the literals while tasks need them; we do not. (Referenced objects stay the sender's.)
        literals = plan.literals.items()
        connection.submit([FreeRequest(ids[k]) for k, v in literals if not isinstance(v, ObjectReference)])
        out = []
        for key in keys:
            if key in futures:
                out.append(futures[key])
            else:
                done = ScalerFuture(0, f"key {key!r}")
                done.set_result(plan.literals[key])
                out.append(done)
        return out, task_ids

    def cluster_resources(self, refresh: bool = False, timeout: float | None = 5.0) -> ClusterResources:
        """How many workers may take tasks now (connected to the scheduler, not held back) and their queue capacities
        added up, as the scheduler last said: when this client connected, then in the answer to every heartbeat (so
        at most heartbeat_interval_seconds old). refresh=True asks the scheduler now and waits for its answer, at
        most `timeout` seconds (None: no limit; TimeoutError after that).

        >>> client.cluster_resources()
        ClusterResources(workers=4, queue_capacity=16)
        >>> while client.cluster_resources(refresh=True).workers < 4: ...  # wait for the cluster to be complete
        """
        _check_timeout(timeout, "cluster_resources()")
        connection = self._live()
        if refresh and not connection.ask_workers(timeout):
            self._live()  # the session ended meanwhile: raises saying why
            raise TimeoutError(f"cluster_resources(): the scheduler did not answer within {timeout:g}s")
        stated = connection.core.workers
        if stated is None:
            raise RuntimeError(
                f"the scheduler at {self._address} does not say how many workers it has (it is older than this "
                "client): upgrade it"
            )
        return ClusterResources(stated.workers, stated.capacity)

    @overload
    def explain(self, futures: concurrent.futures.Future[Any], timeout: float | None = 10.0) -> str: ...

    @overload
    def explain(self, futures: Iterable[concurrent.futures.Future[Any]], timeout: float | None = 10.0) -> list[str]: ...

    def explain(self, futures: Any, timeout: float | None = 10.0) -> str | list[str]:
        """Why is my task waiting? Where each task is and why, in words, as the scheduler sees it now: waiting for
        the results of other tasks; queued, and why (no worker connected, none offers what it requires, every worker
        busy or draining) with what the worker managers do about it; at a worker (which attempt). One future gives
        one text, several give a list. Asks the scheduler and waits for its answer, at most `timeout` seconds (None:
        no limit; TimeoutError after that); a finished future is answered here.

        >>> print(client.explain(future))
        task 0x10000000004 is queued: no connected worker offers gpu; worker manager slurm-gpu requested 1 units 3s
        ago, 0 connected
        """
        _check_timeout(timeout, "explain()")
        one = isinstance(futures, concurrent.futures.Future)
        if not one and not isinstance(futures, Iterable):
            raise TypeError(f"explain() takes a future of this client or several, not {type(futures).__name__}")
        items: list[ScalerFuture] = []
        for item in [futures] if one else list(futures):
            if not isinstance(item, ScalerFuture):
                raise TypeError(f"explain() takes futures of this client, not {type(item).__name__}")
            items.append(item)
        asked = [f.task_id for f in items if f.task_id and not f.done()]
        connection = self._live() if asked else self._connection
        answers = connection.explain(asked, timeout) if asked else []
        if answers is None:
            self._live()  # the session ended meanwhile: raises saying why
            raise TimeoutError(f"explain(): the scheduler did not answer within {timeout:g}s")
        by_id = dict(zip(asked, answers))
        texts = [by_id.get(f.task_id) or _ended_text(f) for f in items]
        return texts[0] if one else texts

    def get_executor(self) -> ScalerExecutor:
        """A concurrent.futures.Executor whose calls run as tasks of this client (with this client's task options;
        client.options(...).get_executor() for others). Shutting it down leaves the client connected.

        >>> with client.get_executor() as executor:
        ...     list(executor.map(pow, [2, 3], [5, 2]))
        [32, 9]
        """
        return ScalerExecutor(self, self._options)

    # ------------------------------------------------------------------------------------------- Dask habits
    def scatter(self, data: Any, broadcast: bool = False, direct: Any = None, hash: bool = True, **_: Any) -> Any:
        """dask.distributed's scatter: send `data` to the scheduler once (send_object); returns an ObjectReference to
        pass to tasks, or, for a list, tuple or dict, a list or dict of references, one per item. broadcast, direct,
        hash, workers and timeout are taken and ignored: the scheduler sends each object to the workers that need it.

        >>> [big] = client.scatter([frame])
        >>> client.submit(len, big).result()
        """
        if isinstance(data, dict):
            return {key: self.send_object(value) for key, value in data.items()}
        if isinstance(data, (list, tuple)):
            return [self.send_object(value) for value in data]
        return self.send_object(data)

    def gather(self, futures: Any, errors: str = "raise") -> Any:
        """dask.distributed's gather: the values of `futures` (a future, or a list, tuple, set or dict of them, nested),
        in the same shape; anything else is returned as it is. errors="skip" leaves failed futures out (of lists and
        dicts), as Dask does; "raise" (the default) raises the first failure."""
        if errors not in ("raise", "skip"):
            raise ValueError(f'errors must be "raise" or "skip", not {errors!r}')
        return _gathered(futures, errors == "skip")

    if not TYPE_CHECKING:  # (hidden from type checkers: a typo stays an error for them)

        def __getattr__(self, name: str) -> Any:
            """dask.distributed's Client methods that Scaler's has not: an AttributeError that says what to use."""
            hint = _DASK_INSTEAD.get(name)
            if hint is None or name.startswith("_"):
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            raise AttributeError(f"Scaler's Client has no {name}() (dask.distributed's): {hint}")

    # ------------------------------------------------------------------------------------------- objects
    def send_object(self, obj: Any, name: str | None = None) -> ObjectReference:
        """Send obj to the scheduler once; returns a reference to pass to tasks as an argument.

        >>> ref = client.send_object([1, 2, 3], name="numbers")
        >>> client.submit(sum, ref).result()
        6

        The older order send_object(name, obj) is accepted when name is a str and obj is not.
        """
        if name is not None and not isinstance(name, str):
            if isinstance(obj, str):  # send_object("name", value): the order older documents show
                warnings.warn(
                    "send_object(name, obj) is the old argument order; use send_object(obj, name=...)",
                    DeprecationWarning,
                    stacklevel=2,
                )
                obj, name = name, obj
            else:
                raise TypeError(f"send_object(obj, name=None): name must be a str, not {type(name).__name__}")
        connection = self._live()
        shared = self._share_object(obj)
        if shared is None:
            try:
                payload = self._serialize(obj)
            except _Unserializable as exc:
                raise exc.error("the object") from exc.__cause__
            size = len(payload)
        else:
            payload, size = object_payload(shared[0]), shared[1]
            if size > self._max_payload:  # (the limit is the same by any road: an inline copy may have to be sent)
                assert self._shared is not None
                self._shared.release([shared[0].name])
                raise PayloadTooLargeError(self._too_large("the object", size))
        object_id = connection.mint(1)[0]
        label = name if name is not None else f"object-{object_id & ((1 << ID_PREFIX_SHIFT) - 1)}"
        with self._lock:
            self._objects.add(object_id)
            if shared is not None:
                self._shared_objects[object_id] = (shared[0], label)
        connection.submit_one(NewObject(object_id, payload, label))
        return ObjectReference(label, object_id, size)

    def _share_object(self, obj: Any) -> tuple[Reference, int] | None:
        """send_object's value written to shared memory, read in place by the workers of this host (ADR 0024): with
        the default serializer, when it is at least the shared-memory threshold; None: it goes inline."""
        if self._parts_from is None or self._shared is None:
            return None
        if not may_be_big(obj, self._parts_from):
            return None
        try:
            return self._shared.share_object(obj, _is_plain(obj))
        except Exception:  # (not picklable: the inline path says so, in its words)
            return None

    def _inline_refs(self, refs: tuple[int, ...]) -> tuple[int, ...]:
        """A task's object references with each shared object's replaced by an inline copy of it (sent now, once),
        for a task sent again because its worker could not read the segment (another host)."""
        return tuple(self._inline_copy(ref) if ref in self._shared_objects else ref for ref in refs)

    def _inline_copy(self, object_id: int) -> int:
        with self._copy_lock:  # (the I/O thread, for a task sent again, and a graph's thread may ask at once: one copy)
            return self._make_inline_copy(object_id)

    def _make_inline_copy(self, object_id: int) -> int:
        with self._lock:
            copy = self._inline_copies.get(object_id)
            entry = self._shared_objects.get(object_id)
        if copy is not None:
            return copy
        if entry is None:
            raise ValueError(f"object {object_id:#x} was freed")
        reference, label = entry
        value = load_object(encode_reference(reference))
        try:
            payload = self._serialize(value)
        except _Unserializable as exc:
            raise exc.error(f"the object {label!r}") from exc.__cause__
        del value
        copy = self._connection.mint(1)[0]
        with self._lock:
            self._inline_copies[object_id] = copy
            self._objects.add(copy)
        self._connection.submit_one(NewObject(copy, payload, label))
        logger.info("object %r sent again inline: a worker on another host could not read it in place", label)
        return copy

    def clear(self) -> None:
        """Cancel every unfinished task of this client and free every object it sent (references die). Their
        futures are cancelled when clear() returns; a result still on its way for one of them is dropped."""
        connection = self._live()
        connection.cancel_all()
        with self._lock:
            object_ids = list(self._objects) + [object_id for _, object_id in self._functions.values()]
            self._objects.clear()
            self._functions.clear()
            self._signatures.clear()
            segments = [reference.name for reference, _ in self._shared_objects.values()]
            self._shared_objects.clear()
            self._inline_copies.clear()
        connection.submit([FreeRequest(object_id) for object_id in object_ids])
        if segments and self._shared is not None:
            self._shared.release(segments)  # (a processor that maps one keeps its pages until it drops the object)

    # ------------------------------------------------------------------------------------------- lifetime
    def disconnect(self) -> None:
        """Close the session: unfinished tasks are cancelled, objects freed. Safe to call twice."""
        self._closed_by_user = True
        if os.getpid() == self._pid:  # in a forked copy there is nothing of ours to close (the parent's is not)
            self._connection.close("the client disconnected")
            self._close_shared()

    def shutdown(self) -> None:
        """Stop the scheduler and its workers. Refused (ProtectedModeError) when the scheduler is protected."""
        connection = self._live()
        connection.request_shutdown("client.shutdown()", self._timeout)
        self._closed_by_user = True
        self._connection.close("shutdown")
        self._close_shared()

    # ------------------------------------------------------------------------------------------- helpers
    def _live(self) -> Connection:
        if current_pid() != self._pid:
            raise ClientClosedError(
                f"this client was created in process {self._pid} and this process is a fork of it: the client's "
                "I/O thread did not come along. Create a new Client here, or pass the client to tasks as an argument."
            )
        connection = self._connection
        if connection.closed.is_set():
            if self._closed_by_user or connection.close_kind in (CloseKind.LOCAL, None):
                raise ClientClosedError("this client is disconnected; create a new Client to submit work")
            if connection.close_kind == CloseKind.UNAUTHENTICATED:
                raise AuthenticationError(f"this client's session ended: {connection.close_reason}")
            raise ConnectionFailedError(f"this client lost its scheduler: {connection.close_reason}")
        return connection

    def _wait(self, event: threading.Event, timeout: float | None, progress: Callable[[], str]) -> bool:
        """Wait for event, at most timeout seconds (None: no limit), logging progress() every PROGRESS_SECONDS;
        whether it was set."""
        if event.is_set():
            return True
        check_may_wait("map()", self._pid, self._connection.io_thread)
        now = time.monotonic()
        deadline = None if timeout is None else now + timeout
        next_report = now + PROGRESS_SECONDS
        with NestedWait() as section:
            while True:
                left = max(0.0, 0.1 if deadline is None else min(0.1, deadline - time.monotonic()))
                if not section.wait(event.is_set, left):
                    event.wait(left)
                if event.is_set():
                    return True
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    return False
                if now >= next_report:
                    report_wait(logger, progress())
                    next_report = now + PROGRESS_SECONDS

    def _wait_futures(self, futures: list[ScalerFuture], timeout: float | None, progress: Callable[[], str]) -> bool:
        """Wait for futures, at most timeout seconds (None: no limit), logging progress() every PROGRESS_SECONDS;
        whether all are done."""
        pending: list[concurrent.futures.Future[Any]] = [f for f in futures if not f.done()]
        if not pending:
            return True
        check_may_wait("get()", self._pid, self._connection.io_thread)
        deadline = None if timeout is None else time.monotonic() + timeout
        with NestedWait() as section:
            while True:
                wait = PROGRESS_SECONDS if deadline is None else min(PROGRESS_SECONDS, deadline - time.monotonic())
                wait = max(0.0, wait)
                if not section.wait(functools.partial(_all_done, pending), wait):
                    concurrent.futures.wait(pending, wait)
                not_done = [f for f in pending if not f.done()]
                if not not_done:
                    return True
                if deadline is not None and time.monotonic() >= deadline:
                    return False
                pending = not_done
                report_wait(logger, progress())

    def _cancel(self, task_id: int) -> None:
        if not self._connection.closed.is_set():
            self._connection.cancel(task_id)

    def _cancel_many(self, task_ids: list[int]) -> None:
        if task_ids and not self._connection.closed.is_set():
            self._connection.submit([CancelRequest(i) for i in task_ids])

    def _function_object(self, fn: Callable[..., Any]) -> int:
        """The object id of fn, handing it to the connection first if this client has not yet.

        The function is handed over before other threads can find it here: the connection sends requests in the
        order it got them, so every task that uses the function, from any thread, follows the function."""
        key = id(fn)
        entry = self._functions.get(key)
        if entry is not None and _alive(entry[0]) is fn:
            return entry[1]
        try:
            payload = pack_function(self._serializer, fn)
            if self._parts_from is not None and self._shared is not None:  # results may come back by shared memory
                payload += self._shared.reply_trailer(self._max_payload)
        except Exception as exc:
            raise TypeError(f"the function {_label(fn)} could not be serialized: {exc}") from exc
        if len(payload) > self._max_payload:
            raise PayloadTooLargeError(self._too_large(f"the function {_label(fn)}", len(payload)))
        with self._lock:
            entry = self._functions.get(key)
            if entry is not None and _alive(entry[0]) is fn:  # another thread sent it meanwhile
                return entry[1]
            object_id = self._connection.mint(1)[0]
            holder: weakref.ref[Any] | Callable[..., Any]
            try:
                holder = weakref.ref(fn, lambda _, key=key, oid=object_id: self._forget_function(key, oid))  # type: ignore[misc]
            except TypeError:  # builtins cannot be weakly referenced; they live forever anyway
                holder = fn
            self._connection.submit_one(NewObject(object_id, payload, _label(fn)))
            self._functions[key] = (holder, object_id)
        return object_id

    def _graph_function(self, function_ids: dict[int, int], fn: Callable[..., Any]) -> int:
        """_function_object for a graph's task, remembered in `function_ids` (by id: the graph keeps `fn` alive until
        it is sent) so that the graph's other tasks of `fn` do not look it up again."""
        function_ids[id(fn)] = object_id = self._function_object(fn)
        return object_id

    def _forget_function(self, key: int, object_id: int) -> None:
        with self._lock:
            entry = self._functions.get(key)
            if entry is not None and entry[1] == object_id:
                del self._functions[key]
            self._signatures.pop(object_id, None)
        if not self._connection.closed.is_set():
            self._connection.submit_one(FreeRequest(object_id))

    def _check_call(
        self,
        fn: Any,
        function_id: int,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        rule: str = "submit checks the call",
    ) -> None:
        """Raise at submit the TypeError that calling fn(*args, **kwargs) would raise on the worker for missing or
        unknown arguments. The signature is read once per cached function; a function without one (some builtins)
        passes, and so does a decorated one (functools.wraps): its wrapper's own signature is used, not the wrapped
        function's, since a decorator may supply arguments itself."""
        check = self._signatures.get(function_id, _UNREAD)
        if check is _UNREAD:
            try:
                check = _CallCheck(inspect.signature(fn, follow_wrapped=False))
            except (TypeError, ValueError):
                check = None
            self._signatures[function_id] = check
        if check is not None and not (not kwargs and check.fewest <= len(args) <= check.most):
            try:
                check.signature.bind(*args, **kwargs)
            except TypeError as exc:
                raise TypeError(f"{_label(fn)}() {exc}, as calling it would ({rule})") from None

    def _check_map_call(self, fn: Any, function_id: int, items: list[tuple[Any, ...]], iterables: int) -> None:
        """map()'s check of its first task's call (as submit's), with the rule it follows said in the error."""
        if not items:
            return
        first = items[0]
        label = _label(fn)
        if iterables > 1:
            rule = f"with {iterables} iterables, map calls {label}(a, b, ...) with one item of each"
        elif len(first) == 1:
            rule = f"map calls {label}(item) with each item that is not a tuple"
        else:
            rule = (
                f"map calls {label}(*item) with each tuple item: {label}{first!r:.60}; to pass a tuple whole, "
                f"wrap each item in a 1-tuple: client.map({label}, [(item,) for item in items])"
            )
        self._check_call(fn, function_id, first, {}, rule)

    def _encode_arguments(
        self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[int, ...], tuple[str, ...] | None, tuple[Payload, ...]]:
        refs: list[int] = []
        payloads: list[Payload] = []
        for position, arg in enumerate(args):
            if isinstance(arg, ObjectReference):
                refs.append(self._check_reference(arg))
            else:
                refs.append(0)
                try:
                    payloads.append(self._serialize_argument(arg))
                except _Unserializable as exc:
                    raise exc.error(f"argument {position} of {_label(fn)}") from exc.__cause__
        keywords = None
        if kwargs:
            keywords = ("",) * len(args) + tuple(kwargs)
            for key, value in kwargs.items():
                if isinstance(value, ObjectReference):
                    refs.append(self._check_reference(value))
                else:
                    refs.append(0)
                    try:
                        payloads.append(self._serialize_argument(value))
                    except _Unserializable as exc:
                        raise exc.error(f"keyword argument {key!r} of {_label(fn)}") from exc.__cause__
        if len(refs) > _MANY_ARGUMENTS or keywords is not None:
            _check_header(fn, refs, keywords)
        return tuple(refs), keywords, tuple(payloads)

    def _encode_items(
        self, fn: Any, items: list[tuple[Any, ...]]
    ) -> Iterator[tuple[tuple[int, ...], tuple[Payload, ...]]]:
        """map()'s tasks' references and payloads, as _encode_arguments gives them; a task whose one argument is of a
        kind that is never big (an int, a float...: what a map mostly takes), with the default serializer, is pickled
        here without the five calls per task that path makes (about 5 % of a map of no-op tasks: ADR 0020;
        tests/integration/test_map_encoding.py checks both give the same bytes)."""
        plain = self._plain_serializer
        small, dumps, protocol, limit = SMALL_KINDS, pickle.dumps, pickle.HIGHEST_PROTOCOL, self._max_payload
        for item in items:
            if plain and len(item) == 1 and type(item[0]) in small:
                payload = dumps(item[0], protocol)
                if len(payload) <= limit:
                    yield _NO_REFERENCE, (payload,)
                    continue
            refs, _, payloads = self._encode_arguments(fn, item, {})
            yield refs, payloads

    def _graph_reference(self, ref: ObjectReference) -> int:
        """The object a graph's task is given for `ref`: an object in shared memory is given as its inline copy
        (sent once), since a graph's task cannot be sent again alone should its worker be on another host."""
        object_id = self._check_reference(ref)
        return self._inline_copy(object_id) if object_id in self._shared_objects else object_id

    def _check_reference(self, ref: ObjectReference) -> int:
        if ref.object_id >> ID_PREFIX_SHIFT != self._prefix:
            raise ValueError(f"{ref!r} was sent by another client; send the object with this client")
        return ref.object_id

    def _serialize(self, value: Any) -> Payload:
        """value through the serializer; raises _Unserializable, which the caller turns into a TypeError naming
        what it was serializing (that name is built only then: never on the hot path)."""
        try:
            payload = self._serializer.serialize(value)
        except Exception as exc:
            kind, reason = type(value).__name__, str(exc)
            raise _Unserializable(lambda what: f"{what} could not be serialized ({kind}): {reason}") from exc
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            kind = type(payload).__name__
            raise _Unserializable(lambda what: f"the serializer returned {kind} for {what}; it must return bytes")
        if len(payload) > self._max_payload:
            size = len(payload)
            raise _Unserializable(lambda what: self._too_large(what, size), PayloadTooLargeError)
        return payload

    def _share(
        self, connection: Connection, task: NewTask, sink: ResultSink, fn: Any, retarget: Callable[[int], None]
    ) -> tuple[NewTask, ResultSink]:
        """The task with its large arguments written to shared memory (scaler.shm) and the sink that unlinks them
        when it ends, or sends it again inline if its worker cannot read them; as it was if no segment could be
        made."""
        assert self._shared is not None
        names: list[str] = []
        if self._shared.wanted(task.payloads):
            shared = self._shared.share(task.payloads)
            if shared is None:
                task = task._replace(payloads=untag(task.payloads))
            else:
                payloads, names = shared
                task = task._replace(flags=task.flags | FLAG_SHARED_ARGUMENTS, payloads=payloads)
        objects = self._inline_refs if self._refers_shared(task.arg_refs) else None
        if not names and objects is None:
            return task, sink
        return task, SharedSink(connection, self._shared, sink, task, names, fn, _label(fn), retarget, objects)

    def _refers_shared(self, refs: tuple[int, ...]) -> bool:
        """Whether a task's arguments include an object sent by shared memory."""
        shared = self._shared_objects
        if shared:  # (empty for most clients: one test per task)
            for ref in refs:
                if ref in shared:
                    return True
        return False

    def _current_id(self, task_id: int) -> int:
        """The id a map's task runs under now (another if it was sent again with its arguments inline)."""
        return self._renamed.get(task_id, task_id)

    def _close_shared(self) -> None:
        if self._shared is not None:
            self._shared.close()

    def _serialize_argument(self, value: Any) -> Payload | Parts:
        """An argument of submit or map through the serializer: with shared memory on and the default serializer, a
        big one comes as Parts (the pickler's pieces, the big buffers not copied: _share copies them once, into a
        segment); raises _Unserializable."""
        threshold = self._parts_from
        if threshold is None or not may_be_big(value, threshold):
            return self._serialize(value)
        kind = type(value)
        plain = _is_plain(value)
        if plain and kind not in SIZED_KINDS:  # a tuple or list of plain values: not worth looking into
            return self._serialize(value)
        try:
            payload = pickle_parts(value, plain, threshold)
        except Exception as exc:
            kind_name, reason = kind.__name__, str(exc)
            raise _Unserializable(lambda what: f"{what} could not be serialized ({kind_name}): {reason}") from exc
        if len(payload) > self._max_payload:
            size = len(payload)
            raise _Unserializable(lambda what: self._too_large(what, size), PayloadTooLargeError)
        if isinstance(payload, Parts):
            self._note_big_argument(value, payload.size)
        return payload  # type: ignore[no-any-return]

    def _note_big_argument(self, value: Any, size: int) -> None:
        """Say once, when the same big value (an array: what can be weakly referenced) is an argument of a third task
        in a row, that send_object would send it once and let the workers of this host read it in place."""
        last, count = self._last_big
        if last is not None and last() is value:
            count += 1
        else:
            try:
                last, count = weakref.ref(value), 1
            except TypeError:  # (bytes, a tuple...: no weak reference, no hint)
                last, count = None, 0
        self._last_big = (last, count)
        if count == 3 and not self._hinted_send_object:
            self._hinted_send_object = True
            logger.warning(
                "the same %s argument (%s bytes) went to 3 tasks in a row, written to shared memory for each: send "
                "it once with ref = client.send_object(value) and pass ref instead; the workers of this host then "
                'read it in place (docs/guide/data.md, "Large objects and results")',
                type(value).__name__,
                f"{size:,}",
            )

    def _too_large(self, what: str, size: int) -> str:
        return (
            f"{what} is {size:,} bytes once serialized, more than the scheduler's limit of {self._max_payload:,} "
            "bytes per payload (scaler_scheduler --max-payload-bytes): send less, or raise the limit"
        )


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a big graph becomes a plan and then requests.

    That builds millions of objects that all stay alive until sent, and none is part of a cycle. With the
    collector on, each of its full passes walks every one of them again: at 1,000,000 nodes it doubled the time
    of the whole planning. Left as it was if it is already off (the caller's choice).

    What outlives the pause (the requests until they are sent, the futures) is young, and the collector counts it:
    enabled as it is, its next young pass would walk all of it at once (at 1,000,000 nodes, most of a second of
    the hand-over). Freezing then unfreezing moves every tracked object into the oldest generation without walking
    any and restarts the young counts; a cycle among them is found by the next full pass, as for any old object.
    Not done if the program keeps objects frozen itself (unfreezing would thaw them)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if not gc.get_freeze_count():
            gc.freeze()
            gc.unfreeze()
        gc.enable()


def _check_unique(keys: object) -> None:
    """get() answers a dict: a key asked for twice is refused, with scaler 1.9's error."""
    if not isinstance(keys, (list, tuple)):
        return  # _submit_graph says what keys must be
    try:
        counts = collections.Counter(keys)
    except TypeError:  # unhashable: plan_graph says it is not a key
        return
    duplicates = [key for key, count in counts.items() if count > 1]
    if duplicates:
        raise KeyError(f"duplicate key detected in argument keys: {duplicates} (get() returns a dict: ask once)")


def _ended_text(future: ScalerFuture) -> str:
    """explain() of a future the scheduler need not be asked about."""
    if not future.task_id:
        return "not a task: a value the graph held as it was"
    name = f"task {future.task_id:#x}"
    if not future.done():
        return f"{name} is not in the scheduler"
    if future.cancelled():
        return f"{name} was cancelled"
    exc = future.exception(timeout=0)
    return f"{name} is done: it failed ({type(exc).__name__}: {exc})" if exc is not None else f"{name} is done"


def _check_timeout(timeout: object, what: str) -> None:
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"{what}: timeout must be a number of seconds or None, not {type(timeout).__name__}")
    if not timeout >= 0:  # also refuses NaN
        raise ValueError(f"{what}: timeout must be >= 0 seconds, not {timeout!r}")


def _alive(holder: weakref.ref[Any] | Callable[..., Any]) -> Any:
    """What a function cache entry holds: the function, or None once a weakly held one is gone."""
    return holder() if isinstance(holder, weakref.ref) else holder


class _CallCheck:
    """A function's signature, and the numbers of positional arguments a call without keywords may pass: such calls
    (most of them) are checked by counting, about 20 times faster than Signature.bind."""

    __slots__ = ("fewest", "most", "signature")

    def __init__(self, signature: inspect.Signature) -> None:
        kinds = [p.kind for p in signature.parameters.values()]
        positional = [p for p in signature.parameters.values() if p.kind in _POSITIONAL]
        keyword_only_needed = any(
            p.kind is p.KEYWORD_ONLY and p.default is p.empty for p in signature.parameters.values()
        )
        self.signature = signature
        self.fewest = sum(p.default is p.empty for p in positional)
        self.most = 1 << 62 if inspect.Parameter.VAR_POSITIONAL in kinds else len(positional)
        if keyword_only_needed:  # a call without keywords always fails: let bind say why
            self.fewest, self.most = 1, 0


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class _Unserializable(Exception):
    """The serializer failed on a value (the cause), returned something else than bytes, or bytes over the limit."""

    def __init__(self, describe: Callable[[str], str], kind: type[Exception] = TypeError) -> None:
        super().__init__()
        self.describe = describe
        self.kind = kind

    def error(self, what: str) -> Exception:
        """The error to raise, naming `what` was being serialized."""
        return self.kind(self.describe(what))


def _check_header(fn: Any, refs: list[int], keywords: tuple[str, ...] | None) -> None:
    """A task must fit in one message's header (one frame: MAX_FRAME); say what to do when it does not."""
    size = task_header_bytes(len(refs), keywords)
    if size > HEADER_BUDGET:
        raise ValueError(
            f"{_label(fn)}() is called with {len(refs):,} arguments"
            + (f" and {sum(map(len, keywords)):,} characters of keyword names" if keywords else "")
            + f": a task's description must fit in {HEADER_BUDGET:,} bytes (about {HEADER_BUDGET // 32:,} "
            "arguments); pass them as one list, tuple or dict argument instead"
        )


def _label(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def _outcome_error(status: int, payload: Payload, requirement: Sequence[str] | None = None) -> BaseException:
    if status == TaskStatus.ERROR:
        return unpack_exception(bytes(payload))  # type: ignore[call-overload]
    if status == TaskStatus.CANCELED:
        return concurrent.futures.CancelledError()
    return task_failure(status, payload, requirement)


# ----------------------------------------------------------------------------------------------- nested clients
# Clients unpickled in this process (a Client passed to a task): one live client per address, settings and whole key
# pair (a public key, which is no secret, finds nothing). In a processor (scaler.task_context) each belongs to the
# tasks that unpickled it and is closed, forgotten and stripped of its keys when the last of them ends: a later task,
# whoever sent it, finds nothing of it (docs/security.md). Elsewhere they live as long as the process.
_nested: dict[tuple[Any, ...], Client] = {}
_nested_holders: dict[tuple[Any, ...], set[int]] = {}  # in a processor: the ids of the running tasks holding each
_nested_lock = threading.Lock()
_clients_made = [0]  # clients made in this process: the number in each one's name
_clients_lock = threading.Lock()  # not _nested_lock: a nested client is made while that one is held
_nested_made = 0  # clients handed out by _reconnect: a processor keeps no function or object that brought one


def release_nested_clients(task_id: int) -> None:
    """A task ended in a processor: the nested clients no other running task holds are closed and forgotten."""
    if not _nested_holders:
        return
    ended = []
    with _nested_lock:
        for key, holders in list(_nested_holders.items()):
            holders.discard(task_id)
            if not holders:
                del _nested_holders[key]
                ended.append(_nested.pop(key))
    for client in ended:
        _end_nested(client)


def nested_clients_made() -> int:
    """How many clients unpickling has handed out in this process so far."""
    return _nested_made


def _end_nested(client: Client) -> None:
    """Close a nested client and drop its keys: whoever still holds the object cannot act as its owner with it."""
    try:
        client.disconnect()
    finally:
        client._keys = None
        client._connection.keys = None


def _reconnect(
    address: str,
    profiling: bool,
    timeout: float,
    heartbeat: float,
    serializer: Serializer,
    keys: PeerKeys | None = None,
    options: Options = Options(),  # noqa: B008 (a NamedTuple: immutable)
    shared_memory: bool | int = True,
    restart_grace: float = SCHEDULER_RESTART_GRACE_SECONDS,
) -> Client:
    """Unpickling a Client (inside a task) gives one shared, live client per address, settings, key pair and options
    (in a processor: shared by the tasks running at once, closed when the last of them ends)."""
    global _nested_made

    def connect() -> Client:
        client = Client(
            address,
            profiling,
            timeout,
            heartbeat,
            serializer,
            keys=keys if keys is not None else False,
            shared_memory=shared_memory,
            scheduler_restart_grace_seconds=restart_grace,
        )
        client._options = options
        return client

    pair = (keys.server_public, keys.pair.public, keys.pair.secret) if keys is not None else None
    name = type(serializer).__qualname__
    key = (address, profiling, timeout, heartbeat, name, pair, options, os.getpid(), shared_memory, restart_grace)
    task = current_task_id()
    if task is None and in_task():  # in a processor, between tasks (a thread a task left running)
        own = connect()
        with _nested_lock:
            _nested_made += 1
        return own
    with _nested_lock:
        cached = _nested.get(key)
        if cached is None or cached._connection.closed.is_set():
            if cached is not None:  # its scheduler was lost: a new connection
                _end_nested(cached)
            cached = _nested[key] = connect()
        if task is not None:
            _nested_holders.setdefault(key, set()).add(task)
        _nested_made += 1
        return cached


def _print_graph_output(
    connection: Connection, options: Options, nodes: list[TaskNode], task_ids: list[int], futures: list[ScalerFuture]
) -> None:
    """With stream_output, print the output of a graph's tasks: until its task ends, or, for a silent task (whose
    result never reaches this client), until the graph's futures are all done: each silent task is needed by one of
    them, so it ended before, and its output came before their results."""
    if not options.flags & FLAG_STREAM_OUTPUT:
        return
    for node, task_id in zip(nodes, task_ids, strict=True):
        connection.output.expect((task_id,), _label(node.function))
    silent = list(set(task_ids).difference(future.task_id for future in futures))
    if not silent:
        return
    left = [len(futures)]
    lock = threading.Lock()

    def one_done(_: object) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            connection.end_output(silent)

    if not futures:
        connection.end_output(silent)
    for future in futures:
        future.add_done_callback(one_done)


def _shared_memory_threshold(shared_memory: object) -> int | None:
    """Client(shared_memory=...): the size from which arguments go by shared memory, None: never."""
    if shared_memory is True:
        return DEFAULT_THRESHOLD
    if shared_memory is False:
        return None
    if isinstance(shared_memory, int) and shared_memory > 0:
        return shared_memory
    raise ValueError(f"shared_memory must be True, False or a positive number of bytes, not {shared_memory!r}")


def _retarget_future(future: ScalerFuture, task_id: int) -> None:
    """The future's task was sent again under a new id: cancel() and waits follow it."""
    future.task_id = task_id


def _release_shared(sinks: Iterable[ResultSink]) -> None:
    for sink in sinks:
        if isinstance(sink, SharedSink):
            sink.shared.release(sink.names)


def _all_done(futures: list[concurrent.futures.Future[Any]]) -> bool:
    return all(f.done() for f in futures)


_DASK_INSTEAD = {
    "compute": (
        "dask.compute(x, scheduler=client) or x.compute(scheduler=client) computes Dask collections here and returns "
        "their values; for futures of a graph, client.submit_graph(graph, keys) "
        "(docs/guide/graphs.md, 'Dask collections')"
    ),
    "persist": (
        "dask.persist(x, scheduler=client) or x.persist(scheduler=client) computes the collection here and keeps its "
        "values in this process (docs/guide/graphs.md, 'Dask collections')"
    ),
    "upload_file": "send the module's code with the function: cloudpickle.register_pickle_by_value(module)",
    "run": "client.submit(fn) runs fn on one worker; Scaler has no run-on-every-worker",
    "restart": "restart the workers with scaler_cluster (they reconnect by themselves)",
    "who_has": "objects live at the scheduler, sent to the workers that need them (client.cluster_resources())",
    "has_what": "objects live at the scheduler, sent to the workers that need them (client.cluster_resources())",
    "rebalance": "the scheduler balances queued tasks between workers by itself",
    "replicate": "the scheduler sends each object to the workers that need it",
    "publish_dataset": "pass the ObjectReference of client.send_object() to the other client's tasks",
    "get_dataset": "pass the ObjectReference of client.send_object() to the other client's tasks",
    "wait_for_workers": "client.cluster_resources() says how many workers are connected",
    "upload": "send the module's code with the function: cloudpickle.register_pickle_by_value(module)",
}


def _gathered(value: Any, skip: bool) -> Any:
    if isinstance(value, ScalerFuture):
        return value.result()
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            try:
                out[key] = _gathered(item, skip)
            except Exception:
                if not skip:
                    raise
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        items = []
        for item in value:
            try:
                items.append(_gathered(item, skip))
            except Exception:
                if not skip:
                    raise
        return type(value)(items) if not isinstance(value, list) else items
    return value


def _end_sinks(
    nodes: Sequence[TaskNode], task_ids: Sequence[int], wanted: set[Hashable], ended: Callable[[Hashable], None] | None
) -> list[tuple[int, ResultSink]]:
    """(A graph watched for progress.) A sink for each silent task's end, telling `ended` its key."""
    if ended is None:
        return []
    return [(task_id, EndSink(ended, node.key)) for node, task_id in zip(nodes, task_ids) if node.key not in wanted]


def _address_or_the_tasks(address: str | None) -> str:
    """`address`, or, left out inside a task, the address of the scheduler its worker serves (opengris-scaler 2.x's
    nested Client()); a TypeError that says what to give anywhere else."""
    if address is not None:
        return address
    if in_task():
        inherited = os.environ.get(SCHEDULER_ADDRESS_VARIABLE)
        if inherited:
            return inherited
    raise TypeError(
        "Client() needs the scheduler's address: Client('tcp://HOST:PORT') (only inside a task may it be left out: "
        "the task's client then connects to the scheduler its worker serves)"
    )


def _starred(iterable: Iterable[Iterable[Any]]) -> list[tuple[Any, ...]]:
    """starmap()'s items as argument tuples (each item's own iterable), or a TypeError naming the item that is not."""
    items = []
    for index, item in enumerate(iterable):
        if isinstance(item, tuple):
            items.append(item)
        elif isinstance(item, (str, bytes)) or not isinstance(item, Iterable):
            raise TypeError(f"starmap() takes an iterable of argument tuples; item {index} is {item!r:.60}")
        else:
            items.append(tuple(item))
    return items


def _argument_tuples(iterables: tuple[Iterable[Any], ...]) -> list[tuple[Any, ...]]:
    """map()'s tasks' arguments: one iterable of tuples (scaler 1.9.9's form), or of single arguments (any item
    that is not a tuple), or several iterables taken in step (the builtin map's form, stopping at the shortest)."""
    if len(iterables) > 1:
        return list(zip(*iterables))
    return [item if isinstance(item, tuple) else (item,) for item in iterables[0]]
