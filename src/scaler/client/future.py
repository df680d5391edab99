"""ScalerFuture: a concurrent.futures.Future whose result is decoded lazily, on first use, in the caller's
thread, and which can tell how the task ran (profiling_info)."""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures._base import CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED, PENDING, RUNNING
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scaler.io.lifetime import current_pid
from scaler.payloads import unpack_exception
from scaler.protocol.messages import Payload
from scaler.serializer import serializer_input
from scaler.task_context import NestedWait, wake_blocked_waits

if TYPE_CHECKING:
    from collections.abc import Generator

    from scaler.serializer import Serializer

_UNDECODED = object()
_ENDED = frozenset((CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED))
_callback_logger = logging.getLogger("concurrent.futures")  # where concurrent.futures logs a failing callback


class CallbackRoute(threading.local):
    """Where the done-callbacks of futures ended in this thread run. `hand_over` is None (run them here) except in a
    thread that reads the socket for a client's I/O thread (Connection.wait), which hands them to that I/O thread:
    results' callbacks always run there (docs/client.md)."""

    hand_over: Callable[[Callable[[ScalerFuture], object], ScalerFuture], None] | None = None


callback_route = CallbackRoute()


def run_callback(fn: Callable[[ScalerFuture], object], future: ScalerFuture) -> None:
    """Run one done-callback as concurrent.futures does: what it raises is logged, not raised."""
    try:
        fn(future)
    except Exception:
        _callback_logger.exception("exception calling callback for %r", future)


def _route_callback(fn: Callable[[ScalerFuture], object], future: ScalerFuture) -> None:
    hand_over = callback_route.hand_over
    if hand_over is None:
        fn(future)
    else:
        hand_over(fn, future)


def check_may_wait(what: str, pid: int, io_thread: int | None) -> None:
    """Raise RuntimeError where waiting would never end: for a task of the process this one was forked from (`pid`:
    where the wait's task was submitted), or in the I/O thread of the client that would end the wait (`io_thread`),
    which is where done-callbacks run."""
    if pid != current_pid():
        raise RuntimeError(
            f"{what} would wait for a task of process {pid}, and this process is a fork of it: the results go "
            "there, not here. Wait in the process that submitted, or create a new Client here."
        )
    if io_thread is not None and threading.get_ident() == io_thread:
        raise RuntimeError(
            f"{what} would wait inside a done-callback, which runs in the client's I/O thread: no result of this "
            "client could arrive meanwhile. Wait outside the callback (submit from it and keep the future, or "
            "use concurrent.futures.wait elsewhere)."
        )


@dataclass(frozen=True)
class ProfilingInfo:
    """How a task submitted with profiling=True ran on its worker. duration_s, memory_peak and cpu_time_s are
    scaler 1.9's names for the same measures."""

    duration_us: int  # run time of the function, in microseconds
    peak_memory: int  # peak memory (RSS) the run added on top of the processor's own, in bytes
    cpu_time_us: int = 0  # CPU time (user + system) the processor used during the run, in microseconds

    @property
    def duration_s(self) -> float:
        return self.duration_us / 1e6

    @property
    def memory_peak(self) -> int:
        return self.peak_memory

    @property
    def cpu_time_s(self) -> float:
        return self.cpu_time_us / 1e6


class ScalerFuture(concurrent.futures.Future):  # type: ignore[type-arg]
    """The future of one task. Works with concurrent.futures.wait/as_completed, callbacks and cancel()."""

    def __init__(
        self,
        task_id: int,
        label: str,
        on_cancel: Callable[[int], None] | None = None,
        io_thread: int | None = None,
        wait_reading: Callable[[ScalerFuture, float | None], bool] | None = None,
        running: bool = False,
    ) -> None:
        """io_thread: the ident of the I/O thread that will end this future (a wait there is refused). wait_reading:
        waits for this future by reading the client's socket in the calling thread, if it may (Connection.wait).
        running: made running (as set_running_or_notify_cancel() would, but no other thread can see it yet, so
        without its lock): running() from submit until the task ends; cancel() still works."""
        super().__init__()
        if running:
            self._state = RUNNING
        self.task_id = task_id
        self._label = label
        self._on_cancel = on_cancel
        self._serializer: Serializer | None = None
        self._payload: Payload | None = None
        self._profiling: ProfilingInfo | None = None
        self._decode_lock = threading.Lock()
        self._pid = current_pid()
        self._io_thread = io_thread
        self._wait_reading = wait_reading

    # ------------------------------------------------------------------------------------------- I/O side
    def _deliver(self, serializer: Serializer, payload: Payload, profiling: ProfilingInfo | None) -> None:
        self._serializer, self._payload, self._profiling = serializer, payload, profiling
        try:
            self.set_result(_UNDECODED)
        except concurrent.futures.InvalidStateError:
            pass  # cancelled meanwhile

    def _deliver_error(self, payload: Payload, profiling: ProfilingInfo | None) -> None:
        self._profiling = profiling
        self._fail(unpack_exception(bytes(payload)))  # type: ignore[call-overload]

    def _fail(self, exc: BaseException) -> None:
        try:
            self.set_exception(exc)
        except concurrent.futures.InvalidStateError:
            pass

    def _cancel_quietly(self) -> None:
        if self._cancel_state():
            self._notify_cancelled()

    def _cancel_state(self) -> bool:
        """concurrent.futures.Future.cancel(), which refuses a running future: ours runs from submit until it ends,
        and a running task can be cancelled (the worker stops it)."""
        with self._condition:  # reentrant: Future.cancel takes it again
            if self._state == RUNNING:
                self._state = PENDING
            return concurrent.futures.Future.cancel(self)

    def _notify_cancelled(self) -> None:
        """Tell concurrent.futures.wait and as_completed too. Future.cancel() wakes only result() and callbacks;
        the waiters of wait/as_completed hear of a cancellation from set_running_or_notify_cancel(), which an
        executor calls when it takes the work item up, and which without this nobody would call here."""
        with self._condition:  # reentrant: set_running_or_notify_cancel takes it again
            if self._state == CANCELLED:  # cancelled, not yet announced to its waiters
                self.set_running_or_notify_cancel()

    def _ended(self) -> bool:
        """done() without taking the future's lock (one attribute read, atomic under the GIL), for a thread that
        reads the client's socket and looks after every message (Connection.wait)."""
        return self._state in _ENDED

    # ------------------------------------------------------------------------------------------- user side
    def result(self, timeout: float | None = None) -> Any:
        if not self.done():
            check_may_wait("result() of an unfinished future", self._pid, self._io_thread)
            with NestedWait() as section:
                if section.wait(self.done, timeout):
                    timeout = 0
                elif self._wait_reading is not None:
                    deadline = None if timeout is None else time.monotonic() + timeout
                    self._wait_reading(self, timeout)
                    if deadline is not None:
                        timeout = max(0.0, deadline - time.monotonic())
                value = super().result(timeout)
        else:
            value = super().result(0)
        if value is _UNDECODED:
            return self._decode()
        return value

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self.done():
            check_may_wait("exception() of an unfinished future", self._pid, self._io_thread)
        with NestedWait(not self.done()) as section:
            exc = super().exception(0 if section.wait(self.done, timeout) else timeout)
        if exc is None and self._result is _UNDECODED:
            try:
                self._decode()
            except Exception as decode_error:
                return decode_error
        return exc

    def _decode(self) -> Any:
        with self._decode_lock:
            if self._result is _UNDECODED:
                assert self._serializer is not None and self._payload is not None
                try:
                    self._result = self._serializer.deserialize(serializer_input(self._serializer, self._payload))
                except Exception as exc:
                    self._result = None
                    self._exception = exc
                    raise
                finally:
                    self._payload = None
            if self._exception is not None:
                raise self._exception
            return self._result

    def cancel(self) -> bool:
        """Cancel the task; False if it already ended. Works while it runs (running() is True from submit on), unlike
        a stdlib future's cancel(): the worker stops the task."""
        cancelled = self._cancel_state()
        if cancelled:
            self._notify_cancelled()
            wake_blocked_waits()  # a task may wait on this future in a processor (another thread cancelled it)
            if self._on_cancel is not None:
                self._on_cancel(self.task_id)
        return cancelled

    def add_done_callback(self, fn: Callable[[ScalerFuture], object]) -> None:
        """As concurrent.futures.Future's. A callback runs in the client's I/O thread when the task's outcome comes
        (also when the thread waiting in result() read it: it hands the callback over), in the cancelling thread on
        cancel(), and at once, in this thread, if the future is done already (docs/client.md)."""
        super().add_done_callback(functools.partial(_route_callback, fn))

    def profiling_info(self) -> ProfilingInfo:
        """Run time and peak memory of the task; for tasks submitted with profiling=True, once they ended."""
        if not self.done():
            raise ValueError("profiling_info() is available once the task ended: call result() first")
        if self._profiling is None:
            raise ValueError("no profiling information: submit the task with profiling=True")
        return self._profiling

    def __await__(self) -> Generator[Any, None, Any]:
        """`await future` in a coroutine: its result (or its exception raised), without blocking the event loop.
        Cancelling the awaiting task cancels the task of this future (asyncio.shield keeps it running)."""
        import asyncio  # here: a program that never awaits never loads asyncio

        if not self.done():
            check_may_wait("await of an unfinished future", self._pid, self._io_thread)
        return asyncio.wrap_future(self).__await__()

    def __repr__(self) -> str:
        with self._condition:
            state = "cancelled" if self._state.startswith("CANCELLED") else self._state.lower()
            if self._exception is not None:
                state += f" raised {type(self._exception).__name__}"
            elif state == "finished" and self._result is not _UNDECODED:  # the value's type, once decoded
                state += f" returned {type(self._result).__name__}"
        return f"<ScalerFuture task={self.task_id:#x} {self._label} state={state}>"
