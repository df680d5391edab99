"""The client API against a real scheduler and two real workers on loopback (the module-scoped `cluster`)."""

from __future__ import annotations

import concurrent.futures
import gc
import logging
import math
import os
import re
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import pytest

from scaler import Client, ObjectReference, ProfilingInfo, ScalerFuture, SchedulerClusterCombo
from scaler.errors import ClientClosedError, ProtectedModeError
from tests.helpers import Graph, combo_cluster, fibonacci, sleep_and_return, wait_until

TIMEOUT = 20  # seconds any single wait in this module may take


class CustomError(Exception):
    pass


def square(x: int) -> int:
    return x * x


def add(a: Any, b: Any) -> Any:
    return a + b


def inc(i: int) -> int:
    return i + 1


def minus(a: int, b: int) -> int:
    return a - b


def join_words(*words: str, sep: str = " ") -> str:
    return sep.join(words)


def fail_deeply(value: int) -> None:
    def innermost_user_frame(v: int) -> None:
        raise CustomError(f"task failed on {v}")

    innermost_user_frame(value)


def divide(a: float, b: float) -> float:
    return a / b


def return_a_lock() -> object:
    return threading.Lock()


def grow_memory(megabytes: int) -> int:
    block = bytearray(megabytes * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    return len(block)


# ----------------------------------------------------------------------------------------------- submit and map
def test_submit_returns_a_future_with_the_result(client: Client) -> None:
    future = client.submit(square, 4)
    assert isinstance(future, concurrent.futures.Future)
    assert isinstance(future, ScalerFuture)
    assert future.result(timeout=TIMEOUT) == 16


def test_submit_passes_positional_and_keyword_arguments(client: Client) -> None:
    future = client.submit(join_words, "a", "b", "c", sep="-")
    assert future.result(timeout=TIMEOUT) == "a-b-c"


def test_submit_many_sums_like_the_readme(client: Client) -> None:
    futures = [client.submit(math.sqrt, i) for i in range(100)]
    assert sum(f.result(timeout=TIMEOUT) for f in futures) == pytest.approx(661.4629471031477)


def test_map_returns_results_in_order(client: Client) -> None:
    assert client.map(square, [(i,) for i in range(1000)]) == [i * i for i in range(1000)]


def test_map_of_nothing_is_an_empty_list(client: Client) -> None:
    assert client.map(square, []) == []


def test_map_with_several_arguments_per_task(client: Client) -> None:
    assert client.map(pow, [(2, 1), (2, 2), (2, 3)]) == [2, 4, 8]


@pytest.mark.parametrize(("items", "expected"), [([1, 2, 3], [1, 4, 9]), ([(1,), 2], [1, 4])])
def test_map_takes_an_item_that_is_not_a_tuple_as_the_one_argument(
    client: Client, items: list[object], expected: list[object]
) -> None:
    """As Dask's Client.map and scaler 2.x (peer benchmarks call map(noop, xs)): a tuple holds the arguments."""
    assert client.map(square, items) == expected
    assert client.map(len, [[1, 2], "abc"]) == [2, 3]


def test_map_over_several_iterables_takes_them_in_step_as_the_builtin_map(client: Client) -> None:
    assert client.map(pow, [2, 3, 4], [1, 2]) == [2, 9]
    assert client.options(retries=1).map(pow, [2], [3]) == [8]


def test_map_raises_the_exception_of_a_failing_task(client: Client) -> None:
    with pytest.raises(ZeroDivisionError):
        client.map(divide, [(1, 1), (1, 0), (2, 1)])
    assert client.map(divide, [(4, 2)]) == [2.0]


def test_map_within_its_timeout_returns_the_results(client: Client) -> None:
    assert client.map(square, [(i,) for i in range(10)], timeout=TIMEOUT) == [i * i for i in range(10)]


def test_map_past_its_timeout_raises_and_cancels_the_unfinished_tasks(client: Client) -> None:
    with pytest.raises(TimeoutError, match=r"4 of 4 tasks had not finished after 0.5s; they were cancelled"):
        client.map(sleep_and_return, [(60, i) for i in range(4)], timeout=0.5)
    # Both workers were running a 60 s task: only the cancellation frees them within this map's own limit.
    assert client.map(square, [(i,) for i in range(4)], timeout=TIMEOUT) == [0, 1, 4, 9]


def test_get_past_its_timeout_raises_and_cancels_the_whole_graph(client: Client) -> None:
    graph: Graph = {
        "slow1": (sleep_and_return, 60, 1),
        "slow2": (sleep_and_return, 60, 2),
        "late": (add, "slow1", "slow2"),
    }
    with pytest.raises(TimeoutError, match=r"1 of 1 keys had not been computed after 0.5s"):
        client.get(graph, keys=["late"], timeout=0.5)
    # The intermediate keys, which have no futures, were cancelled too: both workers, which ran them, are free.
    assert client.map(square, [(i,) for i in range(4)], timeout=TIMEOUT) == [0, 1, 4, 9]
    assert client.get(GRAPH, keys=["e"], timeout=TIMEOUT) == {"e": 1}


def test_a_long_map_or_get_logs_its_progress(
    client: Client, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import scaler.client.client as client_module

    monkeypatch.setattr(client_module, "PROGRESS_SECONDS", 0.2)
    with caplog.at_level(logging.INFO, logger="scaler.client.client"):
        assert client.map(sleep_and_return, [(0.5, i) for i in range(4)], timeout=TIMEOUT) == [0, 1, 2, 3]
        graph: Graph = {"a": (sleep_and_return, 0.5, 1), "b": (sleep_and_return, 0.5, 2), "c": (add, "a", "b")}
        assert client.get(graph, keys=["c", "a"], timeout=TIMEOUT) == {"c": 3, "a": 1}
    lines = [record.getMessage() for record in caplog.records]
    assert any(re.fullmatch(r"map\(sleep_and_return\): [0-3] of 4 tasks done after \d+s", line) for line in lines)
    assert any(re.fullmatch(r"get\(\): [01] of 2 keys computed after \d+s", line) for line in lines)


@pytest.mark.parametrize(
    ("timeout", "error"), [(-1, ValueError), (float("nan"), ValueError), ("5", TypeError), (True, TypeError)]
)
def test_a_bad_timeout_is_refused_before_anything_is_submitted(
    client: Client, timeout: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match="timeout"):
        # a call mypy refuses, made anyway: the run-time check is what is tested
        client.map(square, [(1,)], timeout=timeout)  # type: ignore[arg-type]
    with pytest.raises(error, match="timeout"):
        client.get({"a": (inc, 1)}, keys=["a"], timeout=timeout)  # type: ignore[arg-type]
    assert client.map(square, [(3,)]) == [9]


def test_submit_of_a_non_callable_raises_type_error(client: Client) -> None:
    with pytest.raises(TypeError):
        # a call mypy refuses, made anyway: the run-time check is what is tested
        client.submit(42)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------- graphs
GRAPH: Graph = {
    "a": 2,
    "b": 2,
    "c": (inc, "a"),
    "d": (add, "a", "b"),
    "e": (minus, "d", "c"),
}


def test_get_computes_the_documented_graph(client: Client) -> None:
    assert client.get(GRAPH, keys=["e"]) == {"e": 1}


def test_get_several_keys_including_a_literal(client: Client) -> None:
    assert client.get(GRAPH, keys=["a", "c", "d", "e"]) == {"a": 2, "c": 3, "d": 4, "e": 1}


def test_submit_graph_returns_one_future_per_key_in_order(client: Client) -> None:
    futures = client.submit_graph(GRAPH, keys=["e", "c"])
    assert len(futures) == 2
    assert all(isinstance(f, concurrent.futures.Future) for f in futures)
    assert [f.result(timeout=TIMEOUT) for f in futures] == [1, 3]


def test_graph_with_nested_lists_of_keys(client: Client) -> None:
    graph: Graph = {"x": 1, "y": 2, "total": (sum, ["x", "y", "x"])}
    assert client.get(graph, keys=["total"]) == {"total": 4}


def test_a_failing_graph_node_fails_its_dependents_only(client: Client) -> None:
    graph: Graph = {
        "zero": 0,
        "one": 1,
        "bad": (divide, "one", "zero"),
        "after_bad": (inc, "bad"),
        "fine": (inc, "one"),
    }
    after_bad, fine = client.submit_graph(graph, keys=["after_bad", "fine"])
    assert fine.result(timeout=TIMEOUT) == 2
    with pytest.raises(ZeroDivisionError):
        after_bad.result(timeout=TIMEOUT)


def test_a_graph_with_a_cycle_is_refused(client: Client) -> None:
    with pytest.raises(ValueError):
        client.submit_graph({"a": (inc, "b"), "b": (inc, "a")}, keys=["a"])
    assert gc.isenabled()  # paused while the graph was planned, and back on after the error
    assert client.get(GRAPH, keys=["e"], timeout=TIMEOUT) == {"e": 1}  # and the client still works
    assert gc.isenabled()


# ----------------------------------------------------------------------------------------------- futures
def test_concurrent_futures_wait(client: Client) -> None:
    futures = [client.submit(sleep_and_return, 0.05, i) for i in range(10)]
    done, not_done = concurrent.futures.wait(futures, timeout=TIMEOUT)
    assert not not_done
    assert sorted(f.result() for f in done) == list(range(10))


def test_concurrent_futures_wait_first_completed(client: Client) -> None:
    slow = client.submit(sleep_and_return, 5, "slow")
    fast = client.submit(sleep_and_return, 0, "fast")
    done, not_done = concurrent.futures.wait([slow, fast], timeout=TIMEOUT, return_when="FIRST_COMPLETED")
    assert fast in done
    assert slow in not_done
    slow.cancel()


def test_as_completed_yields_every_future(client: Client) -> None:
    futures = [client.submit(sleep_and_return, 0.01 * (i % 3), i) for i in range(12)]
    seen = [f.result() for f in concurrent.futures.as_completed(futures, timeout=TIMEOUT)]
    assert sorted(seen) == list(range(12))


def test_add_done_callback_is_called_with_the_future(client: Client) -> None:
    called = threading.Event()
    received: list[object] = []

    def callback(future: concurrent.futures.Future[object]) -> None:
        received.append(future.result())
        called.set()

    future = client.submit(square, 7)
    future.add_done_callback(callback)
    assert called.wait(TIMEOUT)
    assert received == [49]
    # a callback added to a finished future runs at once
    late: list[object] = []
    future.add_done_callback(lambda f: late.append(f.result()))
    assert late == [49]


def test_waiting_inside_a_done_callback_raises_instead_of_hanging(client: Client) -> None:
    """Callbacks run in the client's I/O thread: a wait there could never end, so it is refused."""
    slow = client.submit(sleep_and_return, 1.0, "slow")
    seen: list[BaseException] = []
    called = threading.Event()

    def callback(_: object) -> None:
        for wait in (slow.result, slow.exception, lambda: client.map(square, [(1,)])):
            try:
                wait()
            except BaseException as exc:
                seen.append(exc)
        called.set()

    trigger = client.submit(sleep_and_return, 0.2, "trigger")
    trigger.add_done_callback(callback)  # registered long before the task ends: the callback runs in the I/O thread
    assert called.wait(TIMEOUT)
    assert [type(e) for e in seen] == [RuntimeError] * 3, seen
    assert "done-callback" in str(seen[0])
    assert slow.result(timeout=TIMEOUT) == "slow"  # and the client kept working
    assert client.submit(square, 3).result(timeout=TIMEOUT) == 9


def test_a_done_callback_may_wait_on_another_clients_future(client: Client, cluster: SchedulerClusterCombo) -> None:
    """Only the client whose I/O thread runs the callback is stuck there; another client's results still come."""
    with Client(address=cluster.address, timeout_seconds=TIMEOUT) as other:
        theirs = other.submit(sleep_and_return, 0.5, "theirs")
        got: list[object] = []
        called = threading.Event()

        def callback(_: object) -> None:
            try:
                got.append(theirs.result(timeout=TIMEOUT))
            except BaseException as exc:
                got.append(exc)
            called.set()

        client.submit(sleep_and_return, 0.2, "trigger").add_done_callback(callback)
        assert called.wait(TIMEOUT)
        assert got == ["theirs"]


def test_a_forked_child_gets_clear_errors_from_its_parents_client(client: Client) -> None:
    """A client (and its futures) copied into a forked process cannot work there: it says so instead of hanging,
    and the parent's client is untouched, even by the child's disconnect()."""
    slow = client.submit(sleep_and_return, 1.0, "slow")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what each use raised, then leave without running any cleanup
        outcome = []
        for use in (lambda: client.submit(square, 2), lambda: slow.result(), client.disconnect):
            try:
                use()
                outcome.append("ok")
            except BaseException as exc:
                outcome.append(type(exc).__name__)
        os.write(write_end, ",".join(outcome).encode())
        os._exit(0)
    os.close(write_end)
    reaped = False
    try:
        deadline = time.monotonic() + TIMEOUT
        while not reaped:
            reaped = os.waitpid(pid, os.WNOHANG) != (0, 0)
            assert reaped or time.monotonic() < deadline, "the forked child is stuck"
            time.sleep(0.05)
        assert os.read(read_end, 1000).decode() == "ClientClosedError,RuntimeError,ok"
    finally:
        os.close(read_end)
        if not reaped:  # only a child we have not reaped is still ours to kill
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    assert slow.result(timeout=TIMEOUT) == "slow"
    assert client.submit(square, 4).result(timeout=TIMEOUT) == 16


def test_done_before_and_after(client: Client) -> None:
    future = client.submit(sleep_and_return, 0.5, "x")
    assert not future.done()
    assert future.result(timeout=TIMEOUT) == "x"
    assert future.done()
    assert not future.cancelled()


def test_exception_returns_the_task_error(client: Client) -> None:
    future = client.submit(divide, 1, 0)
    assert isinstance(future.exception(timeout=TIMEOUT), ZeroDivisionError)
    assert future.done()
    assert client.submit(square, 2).exception(timeout=TIMEOUT) is None


def test_result_timeout_raises_timeout_error(client: Client) -> None:
    future = client.submit(sleep_and_return, 3, "late")
    with pytest.raises(concurrent.futures.TimeoutError):
        future.result(timeout=0.1)
    future.cancel()


def test_cancel_a_queued_task(client: Client) -> None:
    # two workers: keep both busy, then the third task waits in a queue and can be cancelled
    blockers = [client.submit(sleep_and_return, 1.5, i) for i in range(2)]
    victim = client.submit(sleep_and_return, 0, "should not run")
    assert victim.cancel()
    assert victim.cancelled()
    assert victim.done()
    with pytest.raises(concurrent.futures.CancelledError):
        victim.result(timeout=TIMEOUT)
    assert [b.result(timeout=TIMEOUT) for b in blockers] == [0, 1]
    # the client is still usable afterwards
    assert client.submit(square, 5).result(timeout=TIMEOUT) == 25


def test_wait_and_as_completed_see_cancelled_futures(client: Client) -> None:
    """concurrent.futures.wait and as_completed hear of a cancel() at once, as they do for an executor's futures."""
    futures = [client.submit(sleep_and_return, 0.2, i) for i in range(8)]
    cancelled = [f for f in futures[2:] if f.cancel()]
    assert cancelled
    for f in cancelled:
        assert f.cancel()  # cancelling twice is fine too
    done, not_done = concurrent.futures.wait(cancelled, timeout=5)
    assert not not_done and done == set(cancelled)
    assert set(concurrent.futures.as_completed(futures, timeout=TIMEOUT)) == set(futures)
    finished = [f for f in futures if not f.cancelled()]
    assert all(f.result() == futures.index(f) for f in finished)


def test_cancel_of_a_finished_future_returns_false(client: Client) -> None:
    future = client.submit(square, 3)
    assert future.result(timeout=TIMEOUT) == 9
    assert not future.cancel()
    assert not future.cancelled()


# ----------------------------------------------------------------------------------------------- profiling
def test_profiling_info_of_a_profiled_task(client: Client) -> None:
    future = client.submit(sleep_and_return, 0.05, "p", profiling=True)
    assert future.result(timeout=TIMEOUT) == "p"
    info = future.profiling_info()
    assert isinstance(info, ProfilingInfo)
    assert info.duration_us > 0
    assert info.duration_us >= 40_000  # the task slept 50 ms
    assert info.duration_us < 10_000_000
    assert info.peak_memory >= 0


def test_profiling_peak_memory_sees_a_large_allocation(client: Client) -> None:
    future = client.submit(grow_memory, 64, profiling=True)
    assert future.result(timeout=TIMEOUT) == 64 * 1024 * 1024
    assert future.profiling_info().peak_memory >= 32 * 1024 * 1024


def test_profiling_info_without_profiling_raises_value_error(client: Client) -> None:
    future = client.submit(square, 3)
    assert future.result(timeout=TIMEOUT) == 9
    with pytest.raises(ValueError):
        future.profiling_info()


def test_profiling_info_before_the_end_raises_value_error(client: Client) -> None:
    future = client.submit(sleep_and_return, 2, None, profiling=True)
    with pytest.raises(ValueError):
        future.profiling_info()
    future.cancel()


def test_client_with_profiling_profiles_every_task(cluster: SchedulerClusterCombo) -> None:
    with Client(address=cluster.address, profiling=True, timeout_seconds=TIMEOUT) as profiled:
        future = profiled.submit(square, 3)
        assert future.result(timeout=TIMEOUT) == 9
        assert future.profiling_info().duration_us > 0


# ----------------------------------------------------------------------------------------------- errors
def test_a_failing_task_raises_the_same_exception_with_remote_frames(client: Client) -> None:
    future = client.submit(fail_deeply, 42)
    with pytest.raises(CustomError, match="task failed on 42") as caught:
        future.result(timeout=TIMEOUT)
    text = "".join(traceback.format_exception(caught.value))
    assert "innermost_user_frame" in text, text
    assert "fail_deeply" in text, text
    assert os.path.basename(__file__) in text, text
    # the processor's own plumbing is not shown as if it were the user's code
    assert "_run_one" not in text, text


def test_builtin_exceptions_keep_their_type(client: Client) -> None:
    with pytest.raises(ZeroDivisionError):
        client.submit(divide, 1, 0).result(timeout=TIMEOUT)
    with pytest.raises(KeyError):
        client.submit(dict.__getitem__, {}, "missing").result(timeout=TIMEOUT)


def test_unpicklable_function_raises_type_error_at_submit(client: Client) -> None:
    lock = threading.Lock()

    def uses_a_lock() -> object:
        return lock

    with pytest.raises(TypeError):
        client.submit(uses_a_lock)
    assert client.submit(square, 6).result(timeout=TIMEOUT) == 36


def test_unpicklable_argument_raises_type_error_at_submit(client: Client) -> None:
    with pytest.raises(TypeError, match=r"^argument 0 of len could not be serialized \(lock\): cannot pickle"):
        client.submit(len, threading.Lock())
    with pytest.raises(TypeError, match=r"^keyword argument 'sep' of join_words could not be serialized \(lock\)"):
        client.submit(join_words, "a", sep=threading.Lock())
    with pytest.raises(TypeError, match=r"^argument 0 of len could not be serialized"):
        client.map(len, [([1],), (threading.Lock(),)])
    with pytest.raises(TypeError, match=r"^the object could not be serialized \(lock\)"):
        client.send_object(threading.Lock())
    with pytest.raises(TypeError, match=r"^argument 0 of key 'b' could not be serialized \(lock\)"):
        client.get({"a": 1, "b": (len, threading.Lock())}, keys=["b"])
    with pytest.raises(TypeError, match=r"^the value of key 'a' could not be serialized \(lock\)"):
        client.get({"a": threading.Lock(), "b": (len, "a")}, keys=["b"])
    assert client.submit(square, 6).result(timeout=TIMEOUT) == 36


def test_unpicklable_result_fails_only_that_future(client: Client) -> None:
    bad = client.submit(return_a_lock)
    good = client.submit(square, 8)
    assert isinstance(bad.exception(timeout=TIMEOUT), TypeError)
    with pytest.raises(TypeError):
        bad.result()
    assert good.result(timeout=TIMEOUT) == 64
    assert client.submit(square, 9).result(timeout=TIMEOUT) == 81


# ----------------------------------------------------------------------------------------------- objects
def test_send_object_new_order(client: Client) -> None:
    ref = client.send_object([1, 2, 3, 4, 5], name="large_object")
    assert isinstance(ref, ObjectReference)
    assert client.submit(add, ref, [6]).result(timeout=TIMEOUT) == [1, 2, 3, 4, 5, 6]


def test_send_object_without_a_name(client: Client) -> None:
    ref = client.send_object({"k": 1})
    assert client.submit(dict.get, ref, "k").result(timeout=TIMEOUT) == 1


def test_send_object_old_order_warns_and_works(client: Client) -> None:
    with pytest.warns(DeprecationWarning):
        # 1.9's order (name first), not in the signature: the run time still takes it, with a warning
        ref = client.send_object("large_object", [1, 2, 3, 4, 5])  # type: ignore[arg-type]
    assert client.submit(add, ref, [6]).result(timeout=TIMEOUT) == [1, 2, 3, 4, 5, 6]


def test_send_object_new_order_does_not_warn(client: Client) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ref = client.send_object("a string object", name="text")
    assert client.submit(len, ref).result(timeout=TIMEOUT) == len("a string object")


def test_object_reference_reused_by_many_tasks_and_a_map(client: Client) -> None:
    ref = client.send_object(list(range(1000)), name="numbers")
    futures = [client.submit(add, ref, [i]) for i in range(5)]
    assert [f.result(timeout=TIMEOUT)[-1] for f in futures] == [0, 1, 2, 3, 4]
    assert client.map(add, [(ref, [i]) for i in range(3)])[2][-1] == 2


def test_object_reference_as_a_keyword_argument(client: Client) -> None:
    ref = client.send_object(":", name="separator")
    assert client.submit(join_words, "a", "b", sep=ref).result(timeout=TIMEOUT) == "a:b"


def test_object_reference_is_not_resolved_inside_a_list(client: Client) -> None:
    ref = client.send_object([1, 2], name="inner")
    result = client.submit(list, [ref]).result(timeout=TIMEOUT)
    assert len(result) == 1 and isinstance(result[0], ObjectReference)


def test_an_object_reference_in_a_graph(client: Client) -> None:
    ref = client.send_object(10, name="ten")
    assert client.get({"x": (add, ref, 5)}, keys=["x"]) == {"x": 15}


def test_a_large_object(client: Client) -> None:
    blob = os.urandom(8 * 1024 * 1024)
    ref = client.send_object(blob, name="blob")
    assert client.submit(len, ref).result(timeout=TIMEOUT) == len(blob)
    assert client.submit(bytes.__getitem__, ref, slice(-16, None)).result(timeout=TIMEOUT) == blob[-16:]


# ----------------------------------------------------------------------------------------------- nested tasks
def test_nested_fibonacci_with_two_workers(client: Client) -> None:
    assert client.submit(fibonacci, client, 8).result(timeout=60) == 21


# ----------------------------------------------------------------------------------------------- lifetime
def test_client_as_a_context_manager(cluster: SchedulerClusterCombo) -> None:
    with Client(address=cluster.address, timeout_seconds=TIMEOUT) as c:
        assert c.submit(square, 11).result(timeout=TIMEOUT) == 121
    with pytest.raises(ClientClosedError):
        c.submit(square, 11)


@pytest.mark.parametrize(
    "use",
    [
        lambda c: c.submit(square, 1),
        lambda c: c.map(square, [(1,)]),
        lambda c: c.get({"a": (inc, 1)}, keys=["a"]),
        lambda c: c.submit_graph({"a": (inc, 1)}, keys=["a"]),
        lambda c: c.send_object([1]),
        lambda c: c.clear(),
        lambda c: c.shutdown(),
    ],
    ids=["submit", "map", "get", "submit_graph", "send_object", "clear", "shutdown"],
)
def test_a_disconnected_client_raises_client_closed_error(
    cluster: SchedulerClusterCombo, use: Callable[[Client], object]
) -> None:
    c = Client(address=cluster.address, timeout_seconds=TIMEOUT)
    c.disconnect()
    with pytest.raises(ClientClosedError):
        use(c)
    c.disconnect()  # a second disconnect is harmless


def test_shutdown_is_refused_in_protected_mode(cluster: SchedulerClusterCombo, client: Client) -> None:
    with pytest.raises(ProtectedModeError):
        client.shutdown()
    # the scheduler and its workers are still there, and this client still works
    assert cluster._scheduler.is_alive() and combo_cluster(cluster).is_alive()
    assert client.submit(square, 12).result(timeout=TIMEOUT) == 144


def test_clear_cancels_pending_tasks_and_keeps_the_client_usable(client: Client) -> None:
    pending = [client.submit(sleep_and_return, 1, i) for i in range(6)]
    client.clear()
    for future in pending:
        try:
            future.result(timeout=TIMEOUT)
        except concurrent.futures.CancelledError:
            pass
    assert any(f.cancelled() for f in pending)
    assert client.submit(square, 13).result(timeout=TIMEOUT) == 169


def test_clear_from_another_thread_ends_a_waiting_get(client: Client) -> None:
    """get() waits with no timeout of its own: a clear() that cancels its tasks must end that wait."""
    outcome: list[object] = []

    def run_get() -> None:
        try:
            outcome.append(client.get({"a": (sleep_and_return, 2, 1), "b": (sleep_and_return, 2, 2)}, keys=["a", "b"]))
        except BaseException as exc:
            outcome.append(exc)

    getter = threading.Thread(target=run_get, daemon=True)  # a regression must fail this test, not hang the run
    getter.start()
    wait_until(lambda: len(client._connection.sinks) == 2, timeout=TIMEOUT, what="the graph's tasks to be submitted")
    client.clear()
    getter.join(TIMEOUT)
    assert not getter.is_alive(), "get() kept waiting on cancelled tasks"
    assert len(outcome) == 1 and isinstance(outcome[0], concurrent.futures.CancelledError), outcome


def test_two_clients_share_the_cluster(cluster: SchedulerClusterCombo) -> None:
    address = cluster.address
    with Client(address=address, timeout_seconds=TIMEOUT) as a, Client(address=address, timeout_seconds=TIMEOUT) as b:
        fa = [a.submit(square, i) for i in range(50)]
        fb = [b.submit(inc, i) for i in range(50)]
        assert [f.result(timeout=TIMEOUT) for f in fa] == [i * i for i in range(50)]
        assert [f.result(timeout=TIMEOUT) for f in fb] == [i + 1 for i in range(50)]


def test_submit_from_several_threads(client: Client) -> None:
    results: dict[int, list[int]] = {}

    def work(k: int) -> None:
        results[k] = [f.result(timeout=TIMEOUT) for f in [client.submit(square, k * 100 + i) for i in range(50)]]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert sorted(results) == [0, 1, 2, 3]
    for k, values in results.items():
        assert values == [(k * 100 + i) ** 2 for i in range(50)]


class SlowToPickle:
    """An argument whose pickling takes a while: the window in which another thread submits the same function."""

    def __init__(self, value: int, pause: threading.Event | None = None) -> None:
        self.value = value
        self.pause = pause

    def __reduce__(self) -> tuple[object, tuple[int]]:
        if self.pause is not None:
            self.pause.set()  # the other thread may go now: our function is in the client's cache, not yet sent
            time.sleep(0.5)
        return (SlowToPickle, (self.value,))


def value_of(x: SlowToPickle | int) -> int:
    return x.value if isinstance(x, SlowToPickle) else x


def test_a_function_first_sent_by_one_thread_is_usable_at_once_by_another(client: Client) -> None:
    """Thread A submits a new function with an argument that is slow to pickle; thread B submits the same
    function meanwhile. B's task must not reach the scheduler before the function does."""
    function = lambda x: value_of(x)  # noqa: E731 (a fresh function object: never sent by this client)
    pickling = threading.Event()
    first: list[ScalerFuture] = []
    a = threading.Thread(target=lambda: first.append(client.submit(function, SlowToPickle(1, pickling))))
    a.start()
    assert pickling.wait(TIMEOUT)
    second = client.submit(function, 2)
    a.join(TIMEOUT)
    assert second.result(timeout=TIMEOUT) == 2
    assert first[0].result(timeout=TIMEOUT) == 1


def test_disconnect_cancels_the_pending_futures(cluster: SchedulerClusterCombo) -> None:
    c = Client(address=cluster.address, timeout_seconds=TIMEOUT)
    pending = [c.submit(sleep_and_return, 2, i) for i in range(4)]
    c.disconnect()
    _, not_done = concurrent.futures.wait(pending, timeout=TIMEOUT)
    assert not not_done  # cancelled futures are announced to wait() too, not only done()
    assert all(f.done() for f in pending)
    # disconnect() is documented as "unfinished tasks are cancelled": the futures say so, not "connection failed"
    assert all(f.cancelled() for f in pending), [repr(f.exception()) for f in pending if not f.cancelled()]
