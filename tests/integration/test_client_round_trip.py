"""The client's short way for a lone round trip (one task submitted, its result waited for, nothing else pending):
the submitting thread sends the task itself (Connection.submit_task) and the waiting thread reads its result itself
(Connection.wait_alone), so the client's I/O thread takes no part. These tests check that the short way is taken,
and that whatever else happens meanwhile (other messages, time-outs, cancellation, profiling, callbacks) still
ends every future right and leaves the client working."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest

from scaler import Client
from scaler.core.client.session import NewTask

TIMEOUT = 30
pytestmark = pytest.mark.timeout(120)


def square(x: int) -> int:
    return x * x


def sleep_and_return(seconds: float, value: Any) -> Any:
    time.sleep(seconds)
    return value


def fail(text: str) -> None:
    raise KeyError(text)


class RecordingDeque(deque):  # type: ignore[type-arg]
    """The connection's request queue, remembering every task that went through it."""

    def __init__(self) -> None:
        super().__init__()
        self.tasks = 0

    def append(self, item: Any) -> None:
        if isinstance(item, NewTask):
            self.tasks += 1
        super().append(item)

    def extend(self, items: Any) -> None:
        items = list(items)
        self.tasks += sum(isinstance(item, NewTask) for item in items)
        super().extend(items)


@pytest.fixture()
def quiet_client(cluster: object) -> Iterator[Client]:
    c = Client(address=cluster.address, timeout_seconds=TIMEOUT)  # type: ignore[attr-defined]
    try:
        assert c.submit(square, 1).result(timeout=TIMEOUT) == 1  # the function has reached the scheduler
        yield c
    finally:
        c.disconnect()


def test_lone_tasks_are_sent_by_the_submitting_thread(quiet_client: Client) -> None:
    connection = quiet_client._connection
    connection._requests = recording = RecordingDeque()
    for i in range(20):
        assert quiet_client.submit(square, i).result(timeout=TIMEOUT) == i * i
    # The I/O thread holds the socket for some microseconds every tick (heartbeats): a submit meeting it then goes
    # the usual way, which is right too. Most must go straight.
    assert recording.tasks <= 5, f"{recording.tasks} of 20 lone tasks went through the I/O thread"


def test_tasks_of_a_burst_go_through_the_io_thread_in_batches(quiet_client: Client) -> None:
    connection = quiet_client._connection
    connection._requests = recording = RecordingDeque()
    # A slow task keeps a result pending while the burst is submitted, so no task of the burst is ever a lone one,
    # however loaded the machine: with quick tasks only, a result could come back between two submits (a submitting
    # thread preempted for a round trip), and the next task would then rightly go straight (3 runs in 6 failed so).
    slow = quiet_client.submit(sleep_and_return, 1.0, "slow")  # alone: straight, or queued if the I/O thread was busy
    before = recording.tasks
    futures = [quiet_client.submit(square, i) for i in range(50)]
    assert [f.result(timeout=TIMEOUT) for f in futures] == [i * i for i in range(50)]
    assert slow.result(timeout=TIMEOUT) == "slow"
    assert recording.tasks - before == 50  # every task of the burst went through the I/O thread


def test_the_waiting_thread_reads_its_lone_result(quiet_client: Client) -> None:
    """A done-callback runs in the thread that ends the future: here the one waiting in result()."""
    me = threading.get_ident()
    ran_in: list[int] = []
    for i in range(20):
        future = quiet_client.submit(sleep_and_return, 0.01, i)
        future.add_done_callback(lambda _: ran_in.append(threading.get_ident()))
        assert future.result(timeout=TIMEOUT) == i
    assert len(ran_in) == 20
    # A tick of the I/O thread may meet the result first (it then ends the future, which is right too).
    assert ran_in.count(me) >= 15, f"only {ran_in.count(me)} of 20 results were read by the waiting thread"


def test_a_lone_failure_raises_in_the_waiting_thread(quiet_client: Client) -> None:
    with pytest.raises(KeyError, match="lone"):
        quiet_client.submit(fail, "lone").result(timeout=TIMEOUT)
    assert quiet_client.submit(square, 4).result(timeout=TIMEOUT) == 16


def test_a_lone_wait_that_times_out_leaves_the_result_to_the_io_thread(quiet_client: Client) -> None:
    future = quiet_client.submit(sleep_and_return, 0.5, "late")
    with pytest.raises(concurrent.futures.TimeoutError):
        future.result(timeout=0.05)
    done, _ = concurrent.futures.wait([future], timeout=TIMEOUT)  # waits on the future, not on the socket
    assert done == {future}
    assert future.result() == "late"
    assert quiet_client.submit(square, 5).result(timeout=TIMEOUT) == 25


def test_cancel_from_another_thread_ends_a_lone_wait(quiet_client: Client) -> None:
    future = quiet_client.submit(sleep_and_return, 10, "never")
    timer = threading.Timer(0.2, future.cancel)
    timer.start()
    try:
        with pytest.raises(concurrent.futures.CancelledError):
            future.result(timeout=TIMEOUT)
    finally:
        timer.cancel()
    assert quiet_client.submit(square, 6).result(timeout=TIMEOUT) == 36


def test_other_messages_during_a_lone_wait_reach_the_session(cluster: object) -> None:
    """Heartbeat echoes read by the waiting thread go to the I/O thread: without them this client would think the
    scheduler silent after a second and fail the task."""
    address = cluster.address  # type: ignore[attr-defined]
    with Client(address=address, timeout_seconds=1, heartbeat_interval_seconds=0.1) as client:
        assert client.submit(sleep_and_return, 2.5, "kept").result(timeout=TIMEOUT) == "kept"
        assert client.submit(square, 7).result(timeout=TIMEOUT) == 49


def test_a_profiled_lone_task_keeps_its_profiling(quiet_client: Client) -> None:
    future = quiet_client.submit(sleep_and_return, 0.01, "p", profiling=True)
    assert future.result(timeout=TIMEOUT) == "p"
    assert future.profiling_info().duration_us >= 10_000


def test_a_callback_run_by_the_waiting_thread_may_wait_on_another_task(quiet_client: Client) -> None:
    got: list[object] = []

    def callback(_: object) -> None:
        got.append(quiet_client.submit(square, 8).result(timeout=TIMEOUT))

    future = quiet_client.submit(sleep_and_return, 0.05, "first")
    future.add_done_callback(callback)
    assert future.result(timeout=TIMEOUT) == "first"
    deadline = time.monotonic() + TIMEOUT
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    assert got == [64]


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
