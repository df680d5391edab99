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
