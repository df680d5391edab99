"""The skeleton every asyncio shell shares (the scheduler's, the worker agent's): it owns the background tasks it
starts, reads the clock through one function tests can replace, handles SIGINT/SIGTERM, and applies one rule to an
exception raised while handling an event: it is logged with its traceback and counted, and the process keeps serving.
With SCALER_DEBUG=1 (the test suite sets it) the exception stops the shell instead, loudly.

Shell plumbing only: what an event means is for the core the shell drives.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")
DEBUG = os.environ.get("SCALER_DEBUG", "") not in ("", "0")


class ShellStopped(Exception):
    """The shell stopped because a handler raised while SCALER_DEBUG was set; the handler's error is the cause."""


class Driver(Generic[T]):
    """One shell's event loop plumbing. `serve()` runs until `stop(result)` and returns the result; meanwhile:
    - `reader(fd, what, handler)` calls `handler()` whenever `fd` is readable;
    - `every(seconds, what, handler)` calls `handler()` that often, from a task the driver owns;
    - `later(delay, what, handler, *args)` calls `handler(*args)` once, after `delay` seconds;
    - `guard(what, handler, *args)` calls `handler(*args)` now, under the rule above;
    - `thread(what, work, stop, on_error)` runs `work()` in a thread it owns (told to `stop()` and joined when
      serve() ends); an exception from `work` is logged and handed to `on_error` in the loop.
    Every handler runs under that rule; `errors` counts what was survived."""

    def __init__(self, name: str, clock: Callable[[], float] = time.monotonic, debug: bool = DEBUG) -> None:
        self.name = name
        self.clock = clock
        self.debug = debug
        self.errors = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Future[T] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._readers: list[int] = []
        self._signals: list[int] = []
        self._threads: list[tuple[threading.Thread, Callable[[], None]]] = []

    # ------------------------------------------------------------------------------------------- lifetime
    async def serve(self, setup: Callable[[], Awaitable[None] | None]) -> T:
        """Run `setup()` (which registers readers and periodic handlers), then serve until stop(); every task and
        reader the driver owns is gone when this returns."""
        self.loop = asyncio.get_running_loop()
        self._stopped = self.loop.create_future()
        try:
            started = setup()
            if started is not None:
                await started
            return await self._stopped
        finally:
            for task in self._tasks:
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            self._tasks.clear()
            for fd in self._readers:
                self.loop.remove_reader(fd)
            self._readers.clear()
            for sig in self._signals:
                self.loop.remove_signal_handler(sig)
            self._signals.clear()
            for thread, stop in self._threads:
                stop()
                thread.join()
            self._threads.clear()

    def stop(self, result: T) -> None:
        if self._stopped is not None and not self._stopped.done():
            self._stopped.set_result(result)

    @property
    def stopping(self) -> bool:
        return self._stopped is not None and self._stopped.done()

    def on_signals(
        self, handler: Callable[[int], None], signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)
    ) -> None:
        assert self.loop is not None
        for sig in signals:
            self.loop.add_signal_handler(sig, self.guard, f"the {signal.Signals(sig).name} handler", handler, sig)
            self._signals.append(sig)

    # ------------------------------------------------------------------------------------------- handlers
    def reader(self, fd: int, what: str, handler: Callable[[], None]) -> None:
        assert self.loop is not None
        self.loop.add_reader(fd, self.guard, what, handler)
        self._readers.append(fd)

    def drop_reader(self, fd: int) -> None:
        if self.loop is not None and fd in self._readers:
            self.loop.remove_reader(fd)
            self._readers.remove(fd)

    def every(self, seconds: float, what: str, handler: Callable[[], None]) -> None:
        self._own(self._every(seconds, what, handler))

    def later(self, delay: float, what: str, handler: Callable[..., None], *args: Any) -> None:
        assert self.loop is not None
        self.loop.call_later(delay, self.guard, what, handler, *args)

    def soon(self, what: str, handler: Callable[..., None], *args: Any) -> None:
        assert self.loop is not None
        self.loop.call_soon(self.guard, what, handler, *args)

    def thread(
        self, what: str, work: Callable[[], None], stop: Callable[[], None], on_error: Callable[[Exception], None]
    ) -> None:
        """Run `work()` in a thread of its own until it returns; `stop()` must make it return soon (serve() calls it,
        then joins the thread, on its way out). An exception from `work` is logged, and `on_error(exc)` is called in
        the loop (under guard)."""
        loop = self.loop
        assert loop is not None

        def run() -> None:
            try:
                work()
            except Exception as exc:
                logger.exception("%s: %s failed", self.name, what)
                if not loop.is_closed():
                    loop.call_soon_threadsafe(self.guard, what, on_error, exc)

        thread = threading.Thread(target=run, name=f"{self.name}: {what}", daemon=True)
        self._threads.append((thread, stop))
        thread.start()

    def guard(self, what: str, handler: Callable[..., None], *args: Any) -> None:
        """Call handler(*args); an exception is logged and counted (the shell keeps serving), or, with debug, stops
        the shell: serve() then raises ShellStopped from it."""
        try:
            handler(*args)
        except Exception as exc:
            self.errors += 1
            logger.exception("%s: %s failed (%d so far); serving on", self.name, what, self.errors)
            if self.debug and self._stopped is not None and not self._stopped.done():
                stopped = ShellStopped(f"{self.name}: {what} failed (SCALER_DEBUG is set)")
                stopped.__cause__ = exc
                self._stopped.set_exception(stopped)

    async def _every(self, seconds: float, what: str, handler: Callable[[], None]) -> None:
        while True:
            await asyncio.sleep(seconds)
            self.guard(what, handler)

    def _own(self, work: Awaitable[None]) -> None:
        assert self.loop is not None
        task: asyncio.Task[None] = self.loop.create_task(work)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
