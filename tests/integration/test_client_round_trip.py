"""The client's lone round trip (one task submitted, its result waited for, nothing else pending): the submitting
thread sends the task itself (Connection.submit_task) and the waiting thread reads the socket in the I/O thread's
place until the result comes (Connection.wait: leader/follower, with the I/O thread's own code). These tests check
when a wait reads, that done-callbacks run in the I/O thread whoever read the result, and that whatever happens
meanwhile (other messages, time-outs, cancellation, profiling, other threads) still ends every future right and
leaves the client working."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from scaler import Client, SchedulerClusterCombo
from tests.helpers import sleep_and_return, wait_until

TIMEOUT = 30
pytestmark = pytest.mark.timeout(120)


def square(x: int) -> int:
    return x * x


def fail(text: str) -> None:
    raise KeyError(text)


@pytest.fixture()
def quiet_client(cluster: SchedulerClusterCombo) -> Iterator[Client]:
    c = Client(address=cluster.address, timeout_seconds=TIMEOUT)
    try:
        assert c.submit(square, 1).result(timeout=TIMEOUT) == 1  # the function has reached the scheduler
        yield c
    finally:
        c.disconnect()


def test_a_thread_waiting_for_the_only_pending_task_reads_in_the_io_threads_place(quiet_client: Client) -> None:
    connection = quiet_client._connection
    future = quiet_client.submit(sleep_and_return, 0.5, "read here")  # long enough to be waited for
    assert connection.wait(future, TIMEOUT)  # it read, until the future was done
    assert future.done() and future.result(0) == "read here"
    assert connection._reader is None  # and handed the socket back: the I/O thread reads again
    assert quiet_client.map(square, [(i,) for i in range(100)]) == [i * i for i in range(100)]


def test_a_wait_does_not_read_while_another_task_is_pending(quiet_client: Client) -> None:
    connection = quiet_client._connection
    first = quiet_client.submit(sleep_and_return, 0.5, "first")
    second = quiet_client.submit(sleep_and_return, 0.5, "second")
    assert not connection.wait(first, TIMEOUT)  # at once: the I/O thread delivers both
    assert (first.result(timeout=TIMEOUT), second.result(timeout=TIMEOUT)) == ("first", "second")


def test_done_callbacks_run_in_the_io_thread_also_when_the_waiting_thread_read_the_result(
    quiet_client: Client,
) -> None:
    io_thread = quiet_client._connection.io_thread
    ran_in: list[int] = []
    all_ran = threading.Event()

    def record(_: object) -> None:
        ran_in.append(threading.get_ident())
        if len(ran_in) == 10:
            all_ran.set()

    for i in range(10):
        future = quiet_client.submit(sleep_and_return, 0.01, i)
        future.add_done_callback(record)
        assert future.result(timeout=TIMEOUT) == i
    assert all_ran.wait(TIMEOUT)
    assert set(ran_in) == {io_thread}


def test_a_callback_may_submit_but_not_wait_whoever_read_the_result(quiet_client: Client) -> None:
    """Waiting in the I/O thread could never end: refused there, and callbacks always run there."""
    outcome: list[object] = []
    submitted: list[concurrent.futures.Future[Any]] = []
    ran = threading.Event()

    def callback(_: object) -> None:
        try:
            submitted.append(quiet_client.submit(square, 8))
            submitted[0].result(timeout=TIMEOUT)
        except RuntimeError as exc:
            outcome.append(exc)
        ran.set()

    future = quiet_client.submit(sleep_and_return, 0.05, "first")
    future.add_done_callback(callback)
    assert future.result(timeout=TIMEOUT) == "first"
    assert ran.wait(TIMEOUT)
    assert len(outcome) == 1 and "done-callback" in str(outcome[0])
    assert submitted[0].result(timeout=TIMEOUT) == 64


def test_a_callback_added_to_a_done_future_runs_at_once_in_the_adding_thread(quiet_client: Client) -> None:
    future = quiet_client.submit(square, 3)
    assert future.result(timeout=TIMEOUT) == 9
    ran_in: list[int] = []
    future.add_done_callback(lambda _: ran_in.append(threading.get_ident()))
    assert ran_in == [threading.get_ident()]


def test_a_failing_callback_is_logged_and_the_client_carries_on(
    quiet_client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    after = threading.Event()

    def broken(_: object) -> None:
        raise ValueError("callback broke")

    future = quiet_client.submit(sleep_and_return, 0.05, "x")
    future.add_done_callback(broken)
    future.add_done_callback(lambda _: after.set())  # callbacks run in order: this one after the log
    assert future.result(timeout=TIMEOUT) == "x"
    assert after.wait(TIMEOUT)
    assert quiet_client.submit(square, 4).result(timeout=TIMEOUT) == 16
    assert any("exception calling callback" in r.getMessage() and r.exc_info for r in caplog.records)


def test_a_lone_failure_raises_in_the_waiting_thread(quiet_client: Client) -> None:
    with pytest.raises(KeyError, match="lone"):
        quiet_client.submit(fail, "lone").result(timeout=TIMEOUT)
    assert quiet_client.submit(square, 4).result(timeout=TIMEOUT) == 16


def test_a_reading_wait_that_times_out_leaves_the_result_to_the_io_thread(quiet_client: Client) -> None:
    future = quiet_client.submit(sleep_and_return, 0.5, "late")
    with pytest.raises(concurrent.futures.TimeoutError):
        future.result(timeout=0.05)
    done, _ = concurrent.futures.wait([future], timeout=TIMEOUT)  # waits on the future, not on the socket
    assert done == {future}
    assert future.result() == "late"
    assert quiet_client.submit(square, 5).result(timeout=TIMEOUT) == 25


def test_cancel_from_another_thread_ends_a_reading_wait(quiet_client: Client) -> None:
    future = quiet_client.submit(sleep_and_return, 10, "never")
    timer = threading.Timer(0.2, future.cancel)
    timer.start()
    try:
        with pytest.raises(concurrent.futures.CancelledError):
            future.result(timeout=TIMEOUT)
    finally:
        timer.cancel()
    assert quiet_client.submit(square, 6).result(timeout=TIMEOUT) == 36


def test_other_messages_during_a_reading_wait_reach_the_session(cluster: SchedulerClusterCombo) -> None:
    """Heartbeat echoes read by the waiting thread go to the session as the I/O thread's would: without them this
    client would think the scheduler silent after a second and fail the task."""
    address = cluster.address
    with Client(address=address, timeout_seconds=1, heartbeat_interval_seconds=0.1) as client:
        assert client.submit(sleep_and_return, 2.5, "kept").result(timeout=TIMEOUT) == "kept"
        assert client.submit(square, 7).result(timeout=TIMEOUT) == 49


def test_a_profiled_lone_task_keeps_its_profiling(quiet_client: Client) -> None:
    future = quiet_client.submit(sleep_and_return, 0.01, "p", profiling=True)
    assert future.result(timeout=TIMEOUT) == "p"
    assert future.profiling_info().duration_us >= 10_000


def test_a_task_submitted_while_another_thread_reads_ends_as_usual(quiet_client: Client) -> None:
    """The reader reads every message, not only its own result (the other thread's result may be among them)."""
    slow = quiet_client.submit(sleep_and_return, 1.0, "slow")
    reading = threading.Thread(target=lambda: slow.result(timeout=TIMEOUT))
    reading.start()
    try:
        wait_until(lambda: quiet_client._connection._reader is slow, timeout=TIMEOUT, what="the waiter to read")
        quick = quiet_client.submit(square, 9)
        done, _ = concurrent.futures.wait([quick], timeout=TIMEOUT)
        assert done == {quick} and quick.result() == 81
    finally:
        reading.join(TIMEOUT)
    assert slow.result(0) == "slow"


def test_threads_each_waiting_on_their_own_task(quiet_client: Client) -> None:
    """Several threads in round trips at once: at most one reads the socket, the others wait the usual way."""
    errors: list[BaseException] = []

    def loop(k: int) -> None:
        try:
            for i in range(30):
                assert quiet_client.submit(square, k * 100 + i).result(timeout=TIMEOUT) == (k * 100 + i) ** 2
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    assert not errors
    assert not any(thread.is_alive() for thread in threads)


def test_an_idle_io_thread_sleeps_until_its_tick(quiet_client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """The I/O thread sleeps in epoll until its next tick (every 0.1 s). Its timeout was once cut down to whole
    milliseconds: in the last millisecond before each tick it polled with 0 and looped until the tick (about a
    hundred loops per tick), holding the socket's lock meanwhile so that a submitting thread found it taken. Counted
    here by its looks at the clock while the client is idle for a second."""
    from scaler.client import connection as connection_module

    io_thread = quiet_client._connection.io_thread
    looks = [0]

    class CountingTime:
        def __getattr__(self, name: str) -> Any:
            return getattr(time, name)

        def monotonic(self) -> float:
            if threading.get_ident() == io_thread:
                looks[0] += 1
            return time.monotonic()

    monkeypatch.setattr(connection_module, "time", CountingTime())
    time.sleep(1.0)
    monkeypatch.undo()
    # About 10 ticks, a few looks each (and the odd heartbeat); a loop spinning to each tick makes it hundreds.
    assert looks[0] < 150, f"the idle I/O thread looked at the clock {looks[0]} times in a second"
