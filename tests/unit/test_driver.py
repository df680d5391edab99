"""The shells' driver (scaler.io.driver) on a real asyncio loop: handlers that raise are logged, counted and survived
(or, with debug, stop the shell loudly); the tasks and readers it owns are gone when serve() returns; its clock can
be replaced."""

from __future__ import annotations

import asyncio
import logging
import os

import pytest

from scaler.io.driver import Driver, ShellStopped


def test_a_handler_that_raises_is_logged_counted_and_survived(caplog: pytest.LogCaptureFixture) -> None:
    driver: Driver[str] = Driver("Test", debug=False)
    calls: list[int] = []

    def flaky() -> None:
        calls.append(1)
        if len(calls) == 2:
            raise ValueError("a bug in the handler")
        if len(calls) == 5:
            driver.stop("done")

    async def main() -> str:
        return await driver.serve(lambda: driver.every(0.01, "the flaky tick", flaky))

    with caplog.at_level(logging.ERROR):
        assert asyncio.run(asyncio.wait_for(main(), 5)) == "done"
    assert len(calls) == 5 and driver.errors == 1  # it kept ticking after the error
    [record] = [r for r in caplog.records if "the flaky tick failed" in r.getMessage()]
    assert record.exc_info is not None and "a bug in the handler" in str(record.exc_info[1])


def test_with_debug_the_first_error_stops_the_shell_loudly() -> None:
    driver: Driver[str] = Driver("Test", debug=True)

    def broken() -> None:
        raise KeyError("invariant")

    async def main() -> str:
        return await driver.serve(lambda: driver.soon("the broken handler", broken))

    with pytest.raises(ShellStopped, match="the broken handler failed") as stopped:
        asyncio.run(asyncio.wait_for(main(), 5))
    assert isinstance(stopped.value.__cause__, KeyError)


def test_owned_tasks_and_readers_are_gone_when_serve_returns() -> None:
    driver: Driver[int] = Driver("Test", debug=False)
    read, write = os.pipe()
    seen: list[bytes] = []

    def readable() -> None:
        seen.append(os.read(read, 10))
        driver.stop(7)

    async def main() -> tuple[int, int]:
        def setup() -> None:
            driver.every(3600, "a slow tick", lambda: None)
            driver.reader(read, "the pipe", readable)
            os.write(write, b"x")

        result = await driver.serve(setup)
        ticking = [t for t in asyncio.all_tasks() if getattr(t.get_coro(), "__qualname__", "") == "Driver._every"]
        return result, len(ticking)

    try:
        assert asyncio.run(asyncio.wait_for(main(), 5)) == (7, 0)
        assert seen == [b"x"]
    finally:
        os.close(read)
        os.close(write)


def test_the_clock_can_be_replaced() -> None:
    now = [100.0]
    driver: Driver[str] = Driver("Test", clock=lambda: now[0], debug=False)
    assert driver.clock() == 100.0
    now[0] = 250.5
    assert driver.clock() == 250.5
