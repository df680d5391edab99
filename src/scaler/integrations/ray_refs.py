"""ObjectRef, and the call behind each task ref: submitted at once, or when the tasks whose results it takes as
arguments have ended, so that f.remote(...) never waits. Used by scaler.integrations.ray; the client does the I/O."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from scaler.client.future import ScalerFuture
from scaler.client.object_reference import ObjectReference
from scaler.integrations.ray_exceptions import GetTimeoutError, RayError, TaskCancelledError, task_error


class Call:
    """One f.remote(...): its task once submitted, or, until then, the calls whose results it waits for."""

    def __init__(self, label: str, num_returns: int) -> None:
        self.label = label
        self.num_returns = num_returns
        self.lock = threading.Lock()
        self.future: ScalerFuture | None = None
        self.error: BaseException | None = None  # failed (an argument did) or cancelled before it was submitted
        self.submitted = threading.Event()  # future or error is set
        self.settled: concurrent.futures.Future[None] = concurrent.futures.Future()  # done once the task ended
        self.deps: list[Call] = []
        self._waiting = 0
        self._start: Callable[[], None] | None = None

    def start(
        self, client: Any, submitter: Any, task: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """Submit now if no argument waits for a task; else when the last of those ends (in the thread that ends
        it), so that .remote() never blocks. `submitter`: the client, or a view of it with task options; the task
        is submitted as task((len(args), keyword names), *positional values, *keyword values)."""
        values = (*args, *kwargs.values())
        layout = (len(args), tuple(kwargs))
        calls = (ref._call for value in values for ref in refs_in(value) if ref._call is not None)
        self.deps = list({id(call): call for call in calls}.values())
        pending = [dep for dep in self.deps if not dep.settled.done()]

        def submit() -> None:
            try:
                resolved = [argument(value, client) for value in values]
            except Exception as exc:  # an argument's task failed: so does this call, as Ray's do
                self._fail(exc)
                return
            self._submitted(submitter.submit(task, layout, *resolved))

        if not pending:
            with self.lock:
                submit()  # an argument that cannot be serialized raises here, in .remote()
            return
        self._start = submit
        self._waiting = len(pending)
        for dep in pending:
            dep.settled.add_done_callback(self._dep_settled)

    def _dep_settled(self, _: object) -> None:
        with self.lock:
            self._waiting -= 1
            if self._waiting or self.submitted.is_set():
                return
            start, self._start = self._start, None
            try:
                assert start is not None
                start()
            except Exception as exc:  # could not be submitted (an argument cannot be serialized, ...)
                self._fail(exc)

    def _submitted(self, future: ScalerFuture) -> None:
        self.future = future
        self.deps = []  # their values are in the task's arguments now
        self.submitted.set()
        future.add_done_callback(self._settle)

    def _fail(self, exc: BaseException) -> None:
        self.error = exc
        self.deps = []
        self.submitted.set()
        self._settle(None)

    def _settle(self, _: object) -> None:
        try:
            self.settled.set_result(None)
        except concurrent.futures.InvalidStateError:
            pass

    def cancel(self) -> None:
        with self.lock:
            if not self.submitted.is_set():
                self._start = None
                self._fail(TaskCancelledError(f"{self.label} was cancelled"))
                return
            future = self.future
        if future is not None:
            future.cancel()

    def outcome(self, deadline: float | None) -> Any:
        """The task's value (raises its error), waiting at most until `deadline` (time.monotonic()); a wait inside a
        task lets its worker run other tasks meanwhile."""
        if not self.submitted.is_set():
            for dep in list(self.deps):
                dep.wait(deadline)
            if not self.submitted.wait(time_left(deadline)):
                raise GetTimeoutError(f"{self.label} had not started when the timeout came")
        if self.error is not None:
            raise self.error
        future = self.future
        assert future is not None
        try:
            return future.result(time_left(deadline))
        except concurrent.futures.CancelledError:
            raise TaskCancelledError(f"{self.label} was cancelled") from None
        except Exception as exc:
            if not future.done():  # (waiting ran out of time)
                raise GetTimeoutError(f"{self.label} had not finished when the timeout came") from None
            if isinstance(exc, RayError):  # (raised by a get() inside the task: Ray's nested errors stay as they are)
                raise
            raise task_error(self.label, exc) from None  # Ray's RayTaskError(<its class>); .cause is exc

    def wait(self, deadline: float | None) -> None:
        """Until the task ended, whatever its outcome."""
        try:
            self.outcome(deadline)
        except GetTimeoutError:
            raise
        except Exception:
            pass


class ObjectRef:
    """A value to come: from f.remote(...) (a task's result) or from put(obj). Pass it to get(), wait(), cancel(),
    or as an argument of f.remote(...), which then receives the value."""

    __slots__ = ("__weakref__", "_call", "_client", "_index", "_reference", "_value")

    def __init__(
        self,
        call: Call | None,
        index: int | None = None,
        value: Any = None,
        reference: ObjectReference | None = None,
        client: Any = None,
    ) -> None:
        self._call = call
        self._index = index
        self._value = value  # put(): the object itself
        self._reference = reference  # put(): the object at the scheduler, to pass to tasks of `client`
        self._client = client

    def _result(self, deadline: float | None) -> Any:
        if self._call is None:
            return self._value
        value = self._call.outcome(deadline)
        if self._index is None:
            return value
        try:
            if len(value) != self._call.num_returns:
                raise ValueError
            return value[self._index]
        except (TypeError, ValueError):
            raise ValueError(
                f"{self._call.label} was declared with num_returns={self._call.num_returns}, and returned "
                f"{type(value).__name__}: it must return a sequence of that many values"
            ) from None

    def _ready(self) -> bool:
        return self._call is None or self._call.settled.done()

    def __reduce__(self) -> tuple[Any, ...]:
        """A ref inside another argument (or a task's result) travels as its value, which must be known by then."""
        if self._call is not None and not self._call.settled.done():
            raise TypeError(
                f"an ObjectRef of {self._call.label}, which has not finished, is nested too deep in an argument: "
                "pass it as an argument, or as an item of a list, tuple or dict argument (the task waits for those), "
                "or get() it first"
            )
        try:
            return known_ref, (self._result(None), None)
        except Exception as exc:
            return known_ref, (None, exc)

    def __repr__(self) -> str:
        if self._call is None:
            return f"ObjectRef(put {type(self._value).__name__})"
        state = "ready" if self._call.settled.done() else "pending"
        index = "" if self._index is None else f"[{self._index}]"
        return f"ObjectRef({self._call.label}{index} {state})"


def known_ref(value: Any, error: BaseException | None) -> ObjectRef:
    if error is None:
        return ObjectRef(None, value=value)
    call = Call("a task", 1)
    call._fail(error)
    return ObjectRef(call)


def refs_in(value: Any) -> Iterator[ObjectRef]:
    """The refs a task waits for in one of its arguments: the argument itself, or the items of a list, tuple, set
    or dict (values) argument, which reach the task as refs, finished (as Ray passes them; get() them there)."""
    if isinstance(value, ObjectRef):
        yield value
    elif isinstance(value, (list, tuple, set, frozenset)):
        yield from (item for item in value if isinstance(item, ObjectRef))
    elif isinstance(value, dict):
        yield from (item for item in value.values() if isinstance(item, ObjectRef))


def argument(value: Any, client: Any) -> Any:
    """What a task receives for one of its arguments: an ObjectRef becomes its value (an object put with this same
    client travels as its reference: the scheduler has it)."""
    if not isinstance(value, ObjectRef):
        return value
    if value._call is None:
        if value._reference is not None and value._client is client:
            return value._reference
        return value._value
    return value._result(None)


def deadline_after(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
        raise ValueError(f"timeout must be a number of seconds >= 0 or None, not {timeout!r}")
    return time.monotonic() + timeout


def time_left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())
