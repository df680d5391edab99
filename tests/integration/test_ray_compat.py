"""scaler.compat.ray (scaler.integrations.ray) on real processes: Ray-style code (remote functions, get, put, wait,
cancel) against a scheduler with two workers, and against the local cluster init() starts."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import scaler.compat.ray as ray
from scaler import Client, MissingCapabilityError
from tests.helpers import my_descendants, wait_until

pytestmark = pytest.mark.timeout(60)


@ray.remote
def square(x: int) -> int:
    return x * x


@ray.remote
def add(a: int, b: int = 0, *, profiling: int = 0) -> int:
    return a + b + profiling


@ray.remote
def slow(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@ray.remote
def fail() -> None:
    raise KeyError("no such key")


@ray.remote(num_returns=2)  # type: ignore[untyped-decorator]  # ray.remote(...) with options is typed Any
def split(x: int) -> tuple[int, int]:
    return x, -x


@ray.remote
def total_of_refs(items: list[Any]) -> float:
    refs = [item for item in items if isinstance(item, ray.ObjectRef)]  # refs inside a list arrive as refs, as in Ray
    got: list[float] = ray.get(refs)
    rest: list[float] = [item for item in items if not isinstance(item, ray.ObjectRef)]
    return sum(got) + sum(rest)


@ray.remote
def length(items: list[int]) -> int:
    return len(items)


@ray.remote
def fibonacci(n: int) -> int:
    if n < 2:
        return n
    return sum(ray.get([fibonacci.remote(n - 1), fibonacci.remote(n - 2)]))


@ray.remote
def fail_once(marker: str) -> str:
    if not os.path.exists(marker):
        Path(marker).touch()
        raise RuntimeError("first run fails")
    return "second run"


def ray_in_a_plain_task() -> str:
    """A task submitted with a Client, not through the Ray API: ray.* in it cannot know which cluster to use."""
    try:
        ray.put(1)
    except RuntimeError as exc:
        return str(exc)
    return "no error"


@pytest.fixture()
def session(cluster: Any) -> Iterator[Any]:
    context = ray.init(address=cluster.address, timeout_seconds=15)
    try:
        yield context
    finally:
        ray.shutdown()


def test_remote_functions_and_get(session: Any) -> None:
    assert ray.is_initialized()
    assert ray.get(square.remote(7)) == 49
    assert ray.get([square.remote(i) for i in range(5)]) == [0, 1, 4, 9, 16]
    assert ray.get(add.remote(1, b=2, profiling=3)) == 6  # no keyword is taken by Scaler's submit()
    with pytest.raises(TypeError, match=r"square.remote\(\.\.\.\)"):
        square(3)
    with pytest.raises(ValueError, match="ObjectRef or a list"):
        ray.get(3)


def test_refs_as_arguments_are_resolved_without_blocking_the_caller(session: Any) -> None:
    first = slow.remote(1.0)
    chained = add.remote(first, b=square.remote(3))  # waits for `first` in the cluster's time, not ours
    last = add.remote(chained, 1)
    assert ray.wait([first, chained, last], timeout=0) == ([], [first, chained, last])  # .remote() did not wait
    assert ray.get(last) == 11.0
    assert ray.get(add.remote(first, 1)) == 2.0  # a finished ref as an argument
    put = ray.put(list(range(1000)))
    assert ray.get(put) == list(range(1000))
    assert ray.get(length.remote(put)) == 1000
    pending = slow.remote(0.5)
    assert ray.get(total_of_refs.remote([square.remote(2), pending, 3])) == 7.5  # refs in a list arrive finished


def test_num_returns(session: Any) -> None:
    positive, negative = split.remote(5)
    assert ray.get([positive, negative]) == [5, -5]
    assert ray.get(add.remote(positive, negative)) == 0
    three = square.options(num_returns=3).remote(2)
    with pytest.raises(ValueError, match="num_returns=3"):
        ray.get(three[0])


def test_wait(session: Any) -> None:
    refs = [slow.remote(3.0), square.remote(2), square.remote(3)]
    ready, not_ready = ray.wait(refs, num_returns=2, timeout=20)
    assert ready == refs[1:] and not_ready == refs[:1]  # in the order given
    ready, not_ready = ray.wait(refs, num_returns=3, timeout=0.2)
    assert ready == refs[1:] and not_ready == refs[:1]  # the timeout came first
    ray.cancel(refs[0])
    with pytest.raises(ValueError, match="num_returns"):
        ray.wait(refs, num_returns=4)
    with pytest.raises(ValueError, match="distinct"):
        ray.wait([refs[1], refs[1]])
    with pytest.raises(TypeError, match="list of ObjectRefs"):
        ray.wait(refs[1])


def test_cancel(session: Any) -> None:
    running = slow.remote(30)
    waiting = add.remote(running, 1)  # not submitted yet: it waits for `running`
    ray.cancel(waiting)
    ray.cancel(running)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(running, timeout=10)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(waiting, timeout=10)
    downstream = add.remote(running, 1)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(downstream, timeout=10)
    with pytest.raises(TypeError, match="ObjectRef of a task"):
        ray.cancel(ray.put(1))


def test_errors_and_timeouts(session: Any, tmp_path: Path) -> None:
    failed = fail.remote()
    with pytest.raises(KeyError, match="no such key"):
        ray.get(failed)
    with pytest.raises(KeyError, match="no such key"):
        ray.get(add.remote(failed, 1))  # a task whose argument failed fails the same way
    sleeper = slow.remote(1.0)
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(sleeper, timeout=0.1)
    assert ray.get(sleeper, timeout=20) == 1.0  # the timeout did not stop it
    marker = str(tmp_path / "ran-once")
    assert ray.get(fail_once.options(max_retries=1, retry_exceptions=True).remote(marker)) == "second run"


class NeedsTwo(Exception):
    def __init__(self, a: int, b: int) -> None:  # (a class RayTaskError cannot derive an instance of)
        super().__init__(f"{a} and {b}")


@ray.remote
def fail_with(kind: str) -> None:
    if kind == "os":
        raise FileNotFoundError(2, "No such file", "/nowhere")
    raise NeedsTwo(1, 2)


def test_a_tasks_exception_is_a_ray_task_error_and_its_own_class_as_in_ray(session: Any) -> None:
    """Ray scripts catch `ray.exceptions.RayTaskError` (issue 29: it raised AttributeError while handling the real
    error) or the task's own class; `.cause` is the exception itself."""
    try:
        ray.get(fail.remote())
    except ray.exceptions.RayTaskError as exc:
        assert isinstance(exc, KeyError) and isinstance(exc, ray.exceptions.RayError)
        assert type(exc).__name__ == "RayTaskError(KeyError)"
        assert isinstance(exc.cause, KeyError) and exc.cause.args == ("no such key",)
        assert "fail" in exc.function_name and "no such key" in str(exc) and "raise KeyError" in exc.traceback_str
    else:
        raise AssertionError("no RayTaskError")
    with pytest.raises(OSError) as info:  # an OSError's attributes read through
        ray.get(fail_with.remote("os"))
    assert isinstance(info.value, ray.exceptions.RayTaskError)
    assert info.value.errno == 2 and info.value.filename == "/nowhere"
    with pytest.raises(ray.exceptions.RayTaskError) as plain:  # no class of both can be made: a RayTaskError alone
        ray.get(fail_with.remote("two"))
    assert isinstance(plain.value.cause, NeedsTwo) and "1 and 2" in str(plain.value)
    with pytest.raises(KeyError):  # through a task whose argument failed
        ray.get(add.remote(fail.remote(), 1))
    for name in ("GetTimeoutError", "TaskCancelledError", "WorkerCrashedError", "ObjectLostError", "RaySystemError"):
        assert issubclass(getattr(ray.exceptions, name), ray.exceptions.RayError)


def test_option_warnings_point_at_the_users_line(session: Any) -> None:
    with pytest.warns(UserWarning, match="max_calls") as caught:
        square.options(max_calls=3)
    assert caught[0].filename == __file__, caught[0].filename


def test_remote_functions_call_remote_functions(session: Any) -> None:
    assert ray.get(fibonacci.remote(7), timeout=40) == 13


def test_cluster_resources_and_a_task_not_submitted_through_the_ray_api(session: Any, client: Client) -> None:
    wait_until(lambda: ray.cluster_resources() == {"CPU": 2.0}, timeout=15, what="two workers, one task each")
    said = client.submit(ray_in_a_plain_task).result(timeout=30)
    assert "not submitted through scaler.compat.ray" in said  # it knows it runs in a task (scaler.task_context)


def test_what_is_not_supported_says_so(session: Any) -> None:
    with pytest.raises(NotImplementedError, match="actors"):

        @ray.remote
        class Counter:
            pass

    with pytest.raises(NotImplementedError, match="actors"):
        ray.get_actor("counter")
    with pytest.raises(AttributeError, match="offers init, remote"):
        ray.available_resources()
    with pytest.raises(ValueError, match="invalid option keyword"):
        square.options(num_cpu=1)
    with pytest.warns(UserWarning, match="num_cpus"):
        assert ray.get(square.options(num_cpus=2).remote(3)) == 9
    # num_gpus= is a capability the task requires: no worker of this cluster offers it, so it fails at once
    started = time.monotonic()
    with pytest.raises(MissingCapabilityError, match="gpu"):
        ray.get(square.options(num_gpus=1).remote(3), timeout=30)
    assert time.monotonic() - started < 10
    with pytest.raises(ValueError, match="num_gpus must be a number >= 0"):
        square.options(num_gpus="one")
    with pytest.raises(ValueError, match="resources must be a dict"):
        square.options(resources=["licence"])


def test_num_gpus_and_resources_are_capabilities_of_the_local_cluster() -> None:
    with ray.init(num_cpus=1, num_gpus=1, resources={"licence": 2, "unused": 0}) as context:
        assert context.combo is not None
        assert ray.get(square.options(num_gpus=0.5, resources={"licence": 1}).remote(5), timeout=30) == 25
        assert ray.get(square.options(resources={"unused": 0}).remote(6), timeout=30) == 36  # 0: not required
        with pytest.raises(MissingCapabilityError, match="unused"):  # offered with amount 0: not at all
            ray.get(square.options(resources={"unused": 1}).remote(7), timeout=30)


def test_init_and_shutdown(cluster: Any, client: Client) -> None:
    assert not ray.is_initialized()
    ray.init(client=client)
    try:
        with pytest.raises(RuntimeError, match="already"):
            ray.init(address=cluster.address)
        assert ray.init(ignore_reinit_error=True).client is client
        assert ray.get(square.remote(4)) == 16
    finally:
        ray.shutdown()
    assert not ray.is_initialized()
    assert client.submit(pow, 2, 5).result() == 32  # a client given to init() stays connected
    with pytest.raises(ValueError, match="tcp://HOST:PORT"):
        ray.init(address="auto")


def test_a_local_cluster(cluster: Any) -> None:
    before = {process.pid for process in my_descendants()}
    with ray.init(num_cpus=1) as context:
        assert context.combo is not None
        assert ray.get(square.remote(9), timeout=30) == 81
    assert not ray.is_initialized()
    wait_until(lambda: not {p.pid for p in my_descendants()} - before, timeout=10, what="the local cluster to stop")
