"""Progress for waits: scaler.progress(futures), the bar of map()/get(progress=True), the line of a long wait.

The bar is tqdm's (tqdm.auto: a widget in Jupyter) when tqdm is installed, else a plain line on stderr. This module
only waits and draws: it submits nothing and cancels nothing.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Protocol, TextIO

from scaler.client.future import ScalerFuture, check_may_wait

REFRESH_SECONDS = 0.1  # how often a bar is redrawn while it waits
TEXT_EVERY_SECONDS = 10.0  # the plain line, when stderr is no terminal (a log file, CI): this often at most


def progress(
    futures: Iterable[concurrent.futures.Future[Any]] | concurrent.futures.Future[Any],
    *,
    timeout: float | None = None,
    description: str | None = None,
) -> concurrent.futures._base.DoneAndNotDoneFutures[Any]:
    """Wait for futures (any concurrent.futures futures) with a live progress bar; returns (done, not_done), as
    concurrent.futures.wait does. timeout: seconds to wait at most (None: until all are done); the bar ends then
    too, and the futures not done are left as they are.

    >>> futures = [client.submit(slow, i) for i in range(100)]
    >>> scaler.progress(futures)
    100%|██████████| 100/100 [00:04<00:00, 24.1task/s]
    """
    if isinstance(futures, concurrent.futures.Future):
        futures = [futures]
    unique = list(dict.fromkeys(futures))
    _check_timeout(timeout)
    wait_futures_with_bar(unique, description, timeout, "progress()")
    done = {future for future in unique if future.done()}
    return concurrent.futures._base.DoneAndNotDoneFutures(done, set(unique) - done)


def wait_futures_with_bar(
    futures: list[concurrent.futures.Future[Any]], description: str | None, timeout: float | None, what: str
) -> float | None:
    """Draw a bar of the futures done until all are or timeout seconds passed (None: no limit); returns the
    seconds of the timeout left. `what` names the wait in the error raised where it could never end."""
    for future in futures:
        if isinstance(future, ScalerFuture) and not future.done():
            check_may_wait(what, future._pid, future._io_thread)
    counter = _Counter(len(futures))
    for future in futures:
        future.add_done_callback(counter.one_done)
    return wait_with_bar(description, len(futures), counter.count, counter.all_done, timeout)


def wait_with_bar(
    description: str | None,
    total: int,
    count: Callable[[], int],
    finished: threading.Event,
    timeout: float | None,
) -> float | None:
    """Draw a bar of count() out of total until `finished` is set or timeout seconds passed (None: no limit);
    returns the seconds of the timeout left (None without one)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    bar = open_bar(total, description)
    try:
        while not finished.is_set():
            bar.update_to(count())
            left = REFRESH_SECONDS if deadline is None else min(REFRESH_SECONDS, deadline - time.monotonic())
            if left <= 0:
                break
            finished.wait(left)
    finally:
        bar.update_to(count())
        bar.close()
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def report_wait(logger: logging.Logger, line: str) -> None:
    """How far a long map() or get() got: an INFO record where logging is set up (a handler on the logger or
    above: its level decides), else the line on stderr, so that an unconfigured program shows it too."""
    if logger.hasHandlers():
        logger.info("%s", line)
    else:
        print(f"scaler: {line}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------- bars
class Bar(Protocol):
    def update_to(self, done: int) -> None: ...

    def close(self) -> None: ...


def open_bar(total: int, description: str | None) -> Bar:
    """A tqdm bar if tqdm can be imported, else a TextBar on stderr."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return TextBar(total, description, sys.stderr)
    return _TqdmBar(tqdm(total=total, desc=description, unit="task"))


class _TqdmBar:
    def __init__(self, bar: Any) -> None:
        self._bar = bar

    def update_to(self, done: int) -> None:
        if done > self._bar.n:
            self._bar.update(done - self._bar.n)

    def close(self) -> None:
        self._bar.close()


class TextBar:
    """A progress line without tqdm: redrawn in place on a terminal; elsewhere (a log file) written at most every
    TEXT_EVERY_SECONDS and once at the end, one line each time."""

    def __init__(self, total: int, description: str | None, stream: TextIO) -> None:
        self._total = total
        self._label = f"{description}: " if description else ""
        self._stream = stream
        self._tty = _isatty(stream)
        self._started = time.monotonic()
        self._shown: int | None = None
        self._next_line = self._started + TEXT_EVERY_SECONDS

    def update_to(self, done: int) -> None:
        if self._tty:
            if done != self._shown:
                self._write("\r" + self._text(done))
        elif time.monotonic() >= self._next_line:
            self._write(self._text(done) + "\n")
            self._next_line = time.monotonic() + TEXT_EVERY_SECONDS
        self._shown = done

    def close(self) -> None:
        done = self._shown or 0
        self._write(("\r" if self._tty else "") + self._text(done) + "\n")

    def _text(self, done: int) -> str:
        percent = f" ({100 * done // self._total}%)" if self._total else ""
        elapsed = time.monotonic() - self._started
        return f"{self._label}{done:,} of {self._total:,} tasks done{percent} after {elapsed:.0f}s"

    def _write(self, text: str) -> None:
        self._stream.write(text)
        self._stream.flush()


class _Counter:
    """Futures done so far, counted by done-callbacks (in whatever thread ends each future)."""

    def __init__(self, total: int) -> None:
        self._total = total
        self._done = 0
        self._lock = threading.Lock()
        self.all_done = threading.Event()
        if total == 0:
            self.all_done.set()

    def one_done(self, _: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._done += 1
            if self._done == self._total:
                self.all_done.set()

    def count(self) -> int:
        return self._done


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _check_timeout(timeout: object) -> None:
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"progress(): timeout must be a number of seconds or None, not {type(timeout).__name__}")
    if not timeout >= 0:
        raise ValueError(f"progress(): timeout must be >= 0 seconds, not {timeout!r}")


class GraphCount:
    """(get(progress=True), Dask's progress callbacks.) The tasks of a graph that ended: the silent ones the scheduler
    told of (ended(), FLAG_REPORT_END) and the futures of the keys asked for. `watch`, if given, is told each key."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ended = 0
        self.total = 0
        self.all_done = threading.Event()  # every future of a key asked for is done
        self._watch: Callable[[Hashable], None] | None = None
        self._early: list[Hashable] | None = []  # keys ended before start() (then None)

    def ended(self, key: Hashable) -> None:
        with self._lock:
            self._ended += 1
            if self._early is not None:
                self._early.append(key)
                return
            watch = self._watch
        if watch is not None:
            watch(key)

    def start(
        self,
        total: int,
        keys: Iterable[Hashable],
        futures: list[ScalerFuture],
        watch: Callable[[Hashable], None] | None,
    ) -> None:
        """The graph is submitted: `total` tasks, `futures` of `keys`."""
        with self._lock:
            self.total = total
            self._watch = watch
            early, self._early = self._early or [], None
        for key in early:
            if watch is not None:
                watch(key)
        counter = _Counter(len(futures))
        for key, future in zip(keys, futures):
            if future.task_id:  # (a key whose value is a literal is no task)
                future.add_done_callback(functools.partial(self._key_done, key))
            future.add_done_callback(counter.one_done)
        self.all_done = counter.all_done

    def _key_done(self, key: Hashable, _: concurrent.futures.Future[Any]) -> None:
        self.ended(key)

    def count(self) -> int:
        return self._ended


def wait_graph_with_bar(
    futures: list[ScalerFuture], counted: GraphCount, description: str | None, timeout: float | None
) -> float | None:
    """Draw a bar of every task of a graph that ended until its keys' futures are all done or timeout seconds passed
    (None: no limit); returns the seconds of the timeout left."""
    for future in futures:
        if not future.done():
            check_may_wait("get()", future._pid, future._io_thread)
    return wait_with_bar(description, max(counted.total, 1), counted.count, counted.all_done, timeout)
