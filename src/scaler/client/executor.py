"""ScalerExecutor: a concurrent.futures.Executor that runs its work as tasks of one client (client.get_executor()).

Code written for ProcessPoolExecutor switches in one line. The executor owns no connection and no thread: it submits
through its client, with the task options it was made with, and shutting it down leaves the client connected.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import TYPE_CHECKING, Any

from scaler.client.future import ScalerFuture, check_may_wait

if TYPE_CHECKING:
    from scaler.client.client import Client
    from scaler.client.options import Options


class ScalerExecutor(concurrent.futures.Executor):
    """Runs calls as tasks of a client. Made by client.get_executor() (or client.options(...).get_executor()).

    >>> with client.get_executor() as executor:
    ...     list(executor.map(pow, [2, 3], [5, 2]))
    [32, 9]
    """

    def __init__(self, client: Client, options: Options) -> None:
        self._client = client
        self._options = options
        self._lock = threading.Lock()
        self._shut_down = False
        self._unfinished: set[ScalerFuture] = set()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> ScalerFuture:
        """Run fn(*args, **kwargs) on a worker; returns its future. Every keyword goes to fn, `profiling` included
        (Client.submit keeps that one for itself). RuntimeError after shutdown()."""
        if "profiling" in kwargs:  # Client.submit would take it for itself; here it belongs to fn
            fn, args, kwargs = _call, (fn, args, kwargs), {}
        with self._lock:  # a submit that passed this check is one shutdown() waits for
            if self._shut_down:
                raise RuntimeError("cannot schedule new futures after shutdown")
            future = self._client._submit(self._options, fn, args, kwargs)
            self._unfinished.add(future)
        future.add_done_callback(self._finished)
        return future

    def map(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
    ) -> Iterator[Any]:
        """fn over the iterables zipped, as Executor.map: every task is submitted now, the results come in order
        from the iterator returned. timeout counts from this call: next() raises TimeoutError once it is up. A
        task's exception is raised when its result is reached; the tasks not yet reached are then cancelled.
        chunksize > 1: each chunk of that many calls is one task; the results come one by one all the same."""
        if isinstance(chunksize, bool) or not isinstance(chunksize, int) or chunksize < 1:
            raise ValueError(f"chunksize must be a whole number >= 1, not {chunksize!r}")
        deadline = None if timeout is None else time.monotonic() + timeout
        calls = zip(*iterables)
        if chunksize == 1:
            return _results(self._submit_all(fn, calls), deadline, False)
        run = RunChunk(fn)  # one function object for the whole map: serialized once
        return _results(self._submit_all(run, ((chunk,) for chunk in _chunks(calls, chunksize))), deadline, True)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Refuse new work. cancel_futures: cancel every unfinished task of this executor (a running one is stopped
        too). wait: return once every task of this executor has ended. The client stays connected."""
        with self._lock:
            self._shut_down = True
            unfinished = list(self._unfinished)
        if cancel_futures:
            for future in unfinished:
                future.cancel()
        if wait and any(not future.done() for future in unfinished):
            check_may_wait("shutdown(wait=True)", self._client._pid, self._client._connection.io_thread)
            concurrent.futures.wait(unfinished)

    def _submit_all(self, fn: Callable[..., Any], calls: Iterator[tuple[Any, ...]]) -> list[ScalerFuture]:
        """fn(*args) submitted for every args of calls; if one cannot be (a bad call, shutdown), the tasks submitted
        before it are cancelled and the error raised: map() either starts all its tasks or none."""
        futures: list[ScalerFuture] = []
        try:
            for args in calls:
                futures.append(self.submit(fn, *args))
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        return futures

    def _finished(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._unfinished.discard(future)

    def __repr__(self) -> str:
        state = "shut down" if self._shut_down else f"{len(self._unfinished)} tasks unfinished"
        return f"<ScalerExecutor of {self._client!r}, {state}>"


class RunChunk:
    """The task of one chunk of map(chunksize > 1): fn over each argument tuple of the chunk, in order."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.__name__ = f"chunks of {getattr(fn, '__qualname__', None) or getattr(fn, '__name__', 'a function')}"

    def __call__(self, chunk: list[tuple[Any, ...]]) -> list[Any]:
        results: list[Any] = []
        for args in chunk:
            try:
                results.append(self.fn(*args))
            except Exception as exc:  # the calls after it do not run, as with ProcessPoolExecutor
                raise ChunkFailed(results, exc) from exc
        return results


class ChunkFailed(Exception):
    """A call of a chunk raised `error`: the results of the calls before it come along (the task fails, so
    retries apply to the chunk). The client yields those results, then raises `error` in their place."""

    def __init__(self, results: list[Any], error: Exception) -> None:
        super().__init__(results, error)
        self.results = results
        self.error = error


def _call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return fn(*args, **kwargs)


def _chunks(calls: Iterator[tuple[Any, ...]], size: int) -> Iterator[list[tuple[Any, ...]]]:
    while chunk := list(islice(calls, size)):
        yield chunk


def _results(futures: list[ScalerFuture], deadline: float | None, chunked: bool) -> Iterator[Any]:
    """The values of futures in order (each a list of values when chunked), waiting until deadline at most; the
    futures not reached are cancelled when this ends early (an error, the deadline, the iterator dropped)."""
    futures.reverse()
    try:
        while futures:
            future = futures.pop()
            error: BaseException | None = None
            try:
                value = future.result(None if deadline is None else max(0.0, deadline - time.monotonic()))
            except ChunkFailed as failed:
                value, error = failed.results, failed.error
            finally:
                future.cancel()  # a no-op once it ended; on a timeout, this one is abandoned too
            del future
            if not chunked:
                yield value
                continue
            yield from value
            if error is not None:
                raise error  # outside the except clause: the caller sees fn's own exception, as it was raised
    finally:
        for future in futures:
            future.cancel()
