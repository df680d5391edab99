"""ScalerFuture: a concurrent.futures.Future whose result is decoded lazily, on first use, in the caller's
thread, and which can tell how the task ran (profiling_info)."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable
from concurrent.futures._base import CANCELLED, PENDING, RUNNING
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scaler.io.processes import current_pid
from scaler.payloads import unpack_exception
from scaler.protocol.messages import Payload
from scaler.serializer import serializer_input

if TYPE_CHECKING:
    from collections.abc import Generator

    from scaler.serializer import Serializer

_UNDECODED = object()

# Set inside a processor: called when a task is about to wait on a nested future, and when it stops waiting;
# the processor's own wait (which may run other tasks meanwhile), and what wakes that wait up.
_block_enter: Callable[[], bool] | None = None
_block_exit: Callable[[], None] | None = None
_block_wait: Callable[[Callable[[], bool], float | None], None] | None = None
_block_wake: Callable[[], None] | None = None


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


def set_blocking_hook(
    enter: Callable[[], bool] | None,
    exit: Callable[[], None] | None,
    wait: Callable[[Callable[[], bool], float | None], None] | None = None,
    wake: Callable[[], None] | None = None,
) -> None:
    global _block_enter, _block_exit, _block_wait, _block_wake
    _block_enter, _block_exit, _block_wait, _block_wake = enter, exit, wait, wake


def wake_blocked_waits() -> None:
    """Called by a client's I/O thread after it ended futures or map slots: a processor's wait looks again."""
    wake = _block_wake
    if wake is not None:
        wake()


class BlockingSection:
    """Around a wait on nested tasks inside a processor: lets the worker run other tasks meanwhile."""

    def __init__(self, needed: bool = True) -> None:
        self.entered = bool(needed and _block_enter is not None and _block_enter())

    def wait(self, is_done: Callable[[], bool], timeout: float | None) -> bool:
        """Inside a processor: wait until is_done() or `timeout` seconds (None: no limit), running the tasks the
        worker hands over meanwhile, and return True. Elsewhere return False at once: the caller waits its way."""
        wait = _block_wait
        if not self.entered or wait is None:
            return False
        wait(is_done, timeout)
        return True

    def __enter__(self) -> BlockingSection:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.entered and _block_exit is not None:
            _block_exit()


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
        wait_alone: Callable[[ScalerFuture, float | None], None] | None = None,
    ) -> None:
        """io_thread: the ident of the I/O thread that will end this future (a wait there is refused). wait_alone:
        waits for this future in the calling thread, if it can (Connection.wait_alone)."""
        super().__init__()
        self.task_id = task_id
        self._label = label
        self._on_cancel = on_cancel
        self._serializer: Serializer | None = None
        self._payload: Payload | None = None
        self._profiling: ProfilingInfo | None = None
        self._decode_lock = threading.Lock()
        self._pid = current_pid()
        self._io_thread = io_thread
        self._wait_alone = wait_alone

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

    # ------------------------------------------------------------------------------------------- user side
    def result(self, timeout: float | None = None) -> Any:
        if not self.done():
            check_may_wait("result() of an unfinished future", self._pid, self._io_thread)
            with BlockingSection() as section:
                if section.wait(self.done, timeout):
                    timeout = 0
                elif self._wait_alone is not None:
                    deadline = None if timeout is None else time.monotonic() + timeout
                    self._wait_alone(self, timeout)
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
        with BlockingSection(not self.done()) as section:
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
