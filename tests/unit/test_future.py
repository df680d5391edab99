"""ScalerFuture on its own (no client, no I/O): what its repr tells at each stage."""

from __future__ import annotations

from scaler.client.future import ScalerFuture
from scaler.serializer import DEFAULT_SERIALIZER


def test_the_repr_names_the_task_and_its_state_like_concurrent_futures() -> None:
    future = ScalerFuture(0x10000000002, "sqrt")
    assert repr(future) == "<ScalerFuture task=0x10000000002 sqrt state=pending>"

    future._deliver(DEFAULT_SERIALIZER, DEFAULT_SERIALIZER.serialize(3.0), None)
    assert repr(future) == "<ScalerFuture task=0x10000000002 sqrt state=finished>"  # not decoded yet: type unknown
    assert future.result() == 3.0
    assert repr(future) == "<ScalerFuture task=0x10000000002 sqrt state=finished returned float>"


def test_the_repr_of_a_failed_or_cancelled_future() -> None:
    failed = ScalerFuture(7, "divide")
    failed._fail(ZeroDivisionError("division by zero"))
    assert repr(failed) == "<ScalerFuture task=0x7 divide state=finished raised ZeroDivisionError>"

    cancelled = ScalerFuture(8, "sleep")
    assert cancelled.cancel()
    assert repr(cancelled) == "<ScalerFuture task=0x8 sleep state=cancelled>"


def test_a_running_future_can_still_be_cancelled_unlike_a_stdlib_one() -> None:
    """Client.submit marks its future running (scaler 1.9.9's test_state); cancel() must keep working then."""
    import concurrent.futures

    stdlib: concurrent.futures.Future[int] = concurrent.futures.Future()
    stdlib.set_running_or_notify_cancel()
    assert stdlib.running() and not stdlib.cancel()  # what a plain Future does

    future = ScalerFuture(9, "sleep")
    future.set_running_or_notify_cancel()
    assert future.running() and not future.done()
    assert future.cancel()
    assert future.cancelled() and future.done() and not future.running()
    assert concurrent.futures.wait([future], timeout=0).done == {future}  # its waiters were told

    quietly = ScalerFuture(10, "sleep")
    quietly.set_running_or_notify_cancel()
    quietly._cancel_quietly()  # how the I/O thread ends a future the scheduler cancelled
    assert quietly.cancelled() and concurrent.futures.wait([quietly], timeout=0).done == {quietly}
