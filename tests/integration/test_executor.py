"""client.get_executor(), `await future`, scaler.progress() and map/get(progress=True), against real processes.

The executor must behave as a concurrent.futures.Executor (results in order, timeouts counted from map(), errors at
their position, shutdown); awaiting must not block the event loop; the bars must draw with tqdm and without it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import scaler
from scaler import Client, ScalerFuture
from scaler.errors import TaskTimeoutError
from tests.helpers import Graph, sleep_and_return

TIMEOUT = 20  # seconds any single wait in this module may take


def fail_at(x: int, bad: int) -> int:
    if x == bad:
        raise ValueError(f"bad item {x}")
    return x * 10


def greet(name: str, profiling: str = "off", **extra: object) -> str:
    return f"{name} profiling={profiling} extra={sorted(extra)}"


def pid_of(_: object) -> int:
    return os.getpid()


def square_roots(executor: concurrent.futures.Executor, numbers: list[int]) -> list[float]:
    """Code written for any concurrent.futures.Executor (ProcessPoolExecutor, say)."""
    futures = {executor.submit(math.sqrt, n): n for n in numbers}
    by_number = {futures[f]: f.result() for f in concurrent.futures.as_completed(futures)}
    return [by_number[n] for n in numbers] + list(executor.map(math.sqrt, numbers, chunksize=2))


@pytest.fixture()
def submits(client: Client, monkeypatch: pytest.MonkeyPatch) -> list[ScalerFuture]:
    """Every future the client's submit path made, in order (a spy on Client._submit)."""
    made: list[ScalerFuture] = []
    original = client._submit

    def spy(*args: Any) -> ScalerFuture:
        future = original(*args)
        made.append(future)
        return future

    monkeypatch.setattr(client, "_submit", spy)
    return made


# ----------------------------------------------------------------------------------------------- executor
def test_the_executor_is_a_concurrent_futures_executor(client: Client) -> None:
    executor = client.get_executor()
    assert isinstance(executor, concurrent.futures.Executor)
    assert list(executor.map(pow, [2, 3], [5, 2])) == [32, 9]
    future = executor.submit(pow, 2, 10)
    assert isinstance(future, ScalerFuture)
    assert future.result(TIMEOUT) == 1024


def test_submit_passes_every_keyword_to_the_function_profiling_included(client: Client) -> None:
    executor = client.get_executor()
    assert executor.submit(greet, "a", profiling="on").result(TIMEOUT) == "a profiling=on extra=[]"
    assert executor.submit(greet, "b", key=1).result(TIMEOUT) == "b profiling=off extra=['key']"


def test_map_is_lazy_zips_the_iterables_consumes_them_at_once_and_keeps_the_order(client: Client) -> None:
    executor = client.get_executor()
    seconds = iter([0.6, 0.3, 0.0, 0.2])  # later items finish first
    results = executor.map(sleep_and_return, seconds, ["a", "b", "c", "d", "e"])
    assert isinstance(results, Iterator) and not isinstance(results, list)
    assert next(seconds, "exhausted") == "exhausted"  # every task was submitted by map() itself
    assert list(results) == ["a", "b", "c", "d"]  # zip: the shortest iterable decides


def test_map_timeout_counts_from_the_call_and_raises_on_next(client: Client, submits: list[ScalerFuture]) -> None:
    executor = client.get_executor()
    results = executor.map(sleep_and_return, [0.0, 30.0, 30.0], [1, 2, 3], timeout=2.0)
    time.sleep(2.5)  # the timeout passes before iterating (time must pass here: the scenario is about it)
    assert next(results) == 1
    waited = time.monotonic()
    with pytest.raises(concurrent.futures.TimeoutError):
        next(results)
    # the point: the timeout counted from the map() call, so next() raised at once (a count from this next() would
    # wait 2 s more); at once is milliseconds, 1 s a generous bound
    assert time.monotonic() - waited < 1.0
    assert [f.cancelled() for f in submits] == [False, True, True]  # the tasks not reached are cancelled


@pytest.mark.parametrize("chunksize", [1, 3])
def test_a_task_exception_is_raised_at_its_position(client: Client, chunksize: int) -> None:
    results = client.get_executor().map(fail_at, range(7), [4] * 7, chunksize=chunksize)
    seen = []
    with pytest.raises(ValueError, match="bad item 4") as caught:
        for value in results:
            seen.append(value)
    assert seen == [0, 10, 20, 30]  # with chunks too: item 3 shares its chunk with the failing item 4
    assert type(caught.value) is ValueError  # fn's own exception, not a wrapper


def test_with_chunksize_each_chunk_is_one_task_and_the_results_come_flat(
    client: Client, submits: list[ScalerFuture]
) -> None:
    executor = client.get_executor()
    assert list(executor.map(pow, range(10), [2] * 10, chunksize=3)) == [i * i for i in range(10)]
    assert len(submits) == 4  # chunks of 3, 3, 3 and 1
    pids = list(executor.map(pid_of, range(6), chunksize=3))
    assert len(set(pids[:3])) == 1 and len(set(pids[3:])) == 1  # a chunk runs in one processor
    assert list(executor.map(pow, [], [], chunksize=5)) == []
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="chunksize"):
            # a call mypy refuses, made anyway: the run-time check is what is tested
            executor.map(pow, [1], [1], chunksize=bad)  # type: ignore[arg-type]


def test_a_map_that_cannot_submit_every_call_cancels_the_ones_it_did(
    client: Client, submits: list[ScalerFuture]
) -> None:
    values = [0, 1, threading.Lock()]  # the third cannot be serialized
    with pytest.raises(TypeError, match="could not be serialized"):
        client.get_executor().map(sleep_and_return, [0.0, 30.0, 30.0], values)  # raises from map() itself
    assert len(submits) == 2
    assert submits[1].cancelled()


def test_shutdown_refuses_new_work_and_waits_for_the_unfinished(client: Client) -> None:
    executor = client.get_executor()
    slow = executor.submit(sleep_and_return, 0.5, "slow")
    executor.shutdown(wait=True)
    assert slow.done() and slow.result() == "slow"
    with pytest.raises(RuntimeError, match="after shutdown"):
        executor.submit(pow, 2, 2)
    with pytest.raises(RuntimeError, match="after shutdown"):
        executor.map(pow, [2], [2])
    executor.shutdown()  # twice: harmless
    assert client.submit(pow, 2, 3).result(TIMEOUT) == 8  # the client stays connected


def test_shutdown_with_cancel_futures_cancels_the_unfinished(client: Client) -> None:
    executor = client.get_executor()
    done = executor.submit(pow, 2, 4)
    assert done.result(TIMEOUT) == 16
    hanging = [executor.submit(sleep_and_return, 60, i) for i in range(3)]
    executor.shutdown(wait=True, cancel_futures=True)
    assert all(f.cancelled() for f in hanging)  # (waiting for them would have taken 60 s and left them done)
    assert done.result() == 16
    # the workers were freed: new work runs at once
    assert client.map(pow, [(3, 2), (4, 2)], timeout=TIMEOUT) == [9, 16]


def test_shutdown_without_waiting_returns_at_once(client: Client) -> None:
    executor = client.get_executor()
    slow = executor.submit(sleep_and_return, 1.0, "late")
    executor.shutdown(wait=False)
    assert not slow.done()  # it returned without waiting for the 1 s task
    assert slow.result(TIMEOUT) == "late"  # not cancelled


def test_the_executor_is_a_context_manager_that_waits(client: Client) -> None:
    with client.get_executor() as executor:
        future = executor.submit(sleep_and_return, 0.3, 7)
    assert future.done() and future.result() == 7


def test_code_written_for_process_pool_executor_runs_unchanged(client: Client) -> None:
    numbers = [1, 4, 9, 16, 25]
    with concurrent.futures.ProcessPoolExecutor(max_workers=2) as pool:
        expected = square_roots(pool, numbers)
    with client.get_executor() as executor:  # the one line that changes
        assert square_roots(executor, numbers) == expected


def test_the_executor_serves_asyncio_run_in_executor(client: Client) -> None:
    async def main(executor: concurrent.futures.Executor) -> list[int]:
        loop = asyncio.get_running_loop()
        return list(await asyncio.gather(*(loop.run_in_executor(executor, pow, 2, i) for i in range(4))))

    with client.get_executor() as executor:
        assert asyncio.run(main(executor)) == [1, 2, 4, 8]


def test_an_executor_of_client_options_gives_its_tasks_those_options(client: Client) -> None:
    executor = client.options(timeout=0.5).get_executor()
    with pytest.raises(TaskTimeoutError):
        executor.submit(sleep_and_return, 30, 1).result(TIMEOUT)
    with pytest.raises(TaskTimeoutError):
        list(executor.map(sleep_and_return, [30], [1]))
    assert client.get_executor().submit(sleep_and_return, 1.0, "no limit").result(TIMEOUT) == "no limit"


# ----------------------------------------------------------------------------------------------- asyncio
def test_await_a_future_in_a_coroutine(client: Client) -> None:
    async def main() -> int:
        return int(await client.submit(pow, 2, 10))

    assert asyncio.run(main()) == 1024


def test_awaiting_does_not_block_the_event_loop(client: Client) -> None:
    async def main() -> tuple[object, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        try:
            value = await client.submit(sleep_and_return, 0.5, "slept")
        finally:
            task.cancel()
        return value, ticks

    value, ticks = asyncio.run(main())
    assert value == "slept"
    assert ticks >= 10  # the loop ran meanwhile


def test_gather_awaits_many_futures_and_an_error_is_raised(client: Client) -> None:
    async def main() -> list[int]:
        return list(await asyncio.gather(*(client.submit(pow, 2, i) for i in range(20))))

    assert asyncio.run(main()) == [2**i for i in range(20)]

    async def failing() -> object:
        return await client.submit(fail_at, 3, 3)

    with pytest.raises(ValueError, match="bad item 3"):
        asyncio.run(failing())


def test_cancelling_the_awaiting_task_cancels_the_scaler_task(client: Client) -> None:
    future = client.submit(sleep_and_return, 60, 1)

    async def main() -> None:
        await asyncio.wait_for(future, 0.3)

    with pytest.raises(TimeoutError):
        asyncio.run(main())
    assert future.cancelled()


# ----------------------------------------------------------------------------------------------- progress
def test_progress_draws_a_tqdm_bar_until_the_futures_are_done(
    client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    futures = [client.submit(sleep_and_return, 0.2, i) for i in range(4)]
    done, not_done = scaler.progress(futures, description="sleeping")
    assert done == set(futures) and not not_done
    err = capsys.readouterr().err
    assert "sleeping" in err and "100%" in err and "4/4" in err


def test_progress_without_tqdm_writes_a_plain_line_on_stderr(
    client: Client, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # import tqdm.auto raises ImportError
    futures = [client.submit(pow, 2, i) for i in range(3)]
    scaler.progress(futures)
    err = capsys.readouterr().err
    assert err.endswith("3 of 3 tasks done (100%) after 0s\n"), err
    assert "\r" not in err  # not a terminal: whole lines only


def test_progress_gives_up_after_its_timeout(client: Client, capsys: pytest.CaptureFixture[str]) -> None:
    futures = [client.submit(pow, 3, 2), client.submit(sleep_and_return, 60, 1)]
    futures[0].result(TIMEOUT)
    done, not_done = scaler.progress(futures, timeout=0.3)
    assert done == {futures[0]} and not_done == {futures[1]}  # (the 60 s task would be done had it waited for it)
    assert "1/2" in capsys.readouterr().err
    futures[1].cancel()


def test_progress_works_with_any_concurrent_futures(capsys: pytest.CaptureFixture[str]) -> None:
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(time.sleep, 0.05) for _ in range(5)]
        done, not_done = scaler.progress(futures)
    assert len(done) == 5 and not not_done
    assert "5/5" in capsys.readouterr().err
    assert scaler.progress([]) == (set(), set())


@pytest.mark.parametrize("with_tqdm", [True, False])
def test_map_and_get_show_a_bar_with_progress_true(
    client: Client, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, with_tqdm: bool
) -> None:
    if not with_tqdm:
        monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    assert client.map(sleep_and_return, [(0.1, i) for i in range(4)], progress=True) == [0, 1, 2, 3]
    graph: Graph = {"a": (sleep_and_return, 0.1, 1), "b": (sleep_and_return, 0.1, 2), "c": (pow, "a", "b")}
    assert client.get(graph, keys=["c", "a"], progress=True) == {"c": 1, "a": 1}
    err = capsys.readouterr().err
    if with_tqdm:  # get's bar counts every task of the graph (3), not the keys asked for (2)
        assert "map(sleep_and_return): 100%" in err and "4/4" in err
        assert "get(): 100%" in err and "3/3" in err
    else:
        assert "map(sleep_and_return): 4 of 4 tasks done (100%)" in err
        assert "get(): 3 of 3 tasks done (100%)" in err
    # no bar unless asked for
    assert client.map(pow, [(2, 2)]) == [4]
    assert capsys.readouterr().err == ""


def test_map_with_progress_still_honours_its_timeout(client: Client, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(TimeoutError, match=r"1 of 2 tasks had not finished after 0.5s"):
        client.map(sleep_and_return, [(0, 1), (60, 2)], timeout=0.5, progress=True)
    assert "1/2" in capsys.readouterr().err
    with pytest.raises(TypeError, match="block=False"):
        client.get({"a": (pow, 2, 2)}, keys=["a"], block=False, progress=True)


def test_a_long_wait_without_logging_set_up_says_how_far_it_got_on_stderr(
    client: Client, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import scaler.client.client as client_module

    monkeypatch.setattr(client_module, "PROGRESS_SECONDS", 0.2)
    assert not client_module.logger.handlers
    monkeypatch.setattr(client_module.logger, "propagate", False)  # no handler anywhere: logging is not set up
    assert client.map(sleep_and_return, [(0.6, i) for i in range(2)], timeout=TIMEOUT) == [0, 1]
    assert client.get({"a": (sleep_and_return, 0.6, 1)}, keys=["a"], timeout=TIMEOUT) == {"a": 1}
    err = capsys.readouterr().err
    assert "scaler: map(sleep_and_return): " in err and " tasks done after " in err
    assert "scaler: get(): 0 of 1 keys computed after " in err


def test_a_long_wait_with_logging_set_up_logs_instead(
    client: Client,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    import scaler.client.client as client_module

    monkeypatch.setattr(client_module, "PROGRESS_SECONDS", 0.2)
    with caplog.at_level(logging.INFO, logger="scaler.client.client"):
        assert client.map(sleep_and_return, [(0.6, 1)], timeout=TIMEOUT) == [1]
    assert any("map(sleep_and_return): 0 of 1 tasks done" in r.getMessage() for r in caplog.records)
    assert "scaler: map(" not in capsys.readouterr().err


def test_the_plain_bar_redraws_in_place_on_a_terminal() -> None:
    from scaler.client.progress import TextBar

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    bar = TextBar(3, "work", stream)
    bar.update_to(0)
    bar.update_to(0)  # unchanged: not drawn again
    bar.update_to(2)
    bar.close()
    assert stream.getvalue().split("\r")[1:] == [
        "work: 0 of 3 tasks done (0%) after 0s",
        "work: 2 of 3 tasks done (66%) after 0s",
        "work: 2 of 3 tasks done (66%) after 0s\n",
    ]
