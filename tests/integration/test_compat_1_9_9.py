"""Drop-in for scaler 1.9.9 (issue 15): what programs written for it rely on, against real processes on loopback.

get(block=False) gives futures, graph values may be object references, 1.9.9's exception types still catch our
errors, profiling answers 1.9.9's names with a CPU time measured on the worker, submit checks the call, a combo
without an address picks a free port, a future runs from submit, a program that starts a combo stays quiet, and
scaler.Cluster and scaler.Scheduler are processes that run workers and a scheduler.
"""

from __future__ import annotations

import functools
import graphlib
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import scaler
from scaler import Client, SchedulerClusterCombo
from scaler.errors import ConnectionFailedError, TaskFailedError
from tests.helpers import Graph

TIMEOUT = 20


def inc(i: int) -> int:
    return i + 1


def add(a: Any, b: Any) -> Any:
    return a + b


def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def spin(seconds: float) -> float:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
    return seconds


def keyword_only(a: int, *, c: int, d: int = 0) -> tuple[int, int, int]:
    return a, c, d


def needs_two(a: int, b: int, c: int = 0) -> tuple[int, int, int]:
    return a, b, c


def takes_profiling(x: int, profiling: bool = False) -> tuple[int, bool]:
    return x, profiling


def injecting(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A decorator that supplies an argument itself: the wrapped function's signature is not the call's."""

    @functools.wraps(fn)
    def wrapper(*args: Any) -> Any:
        return fn(*args, 100)

    return wrapper


@injecting
def injected(a: int, extra: int) -> int:
    return a + extra


@pytest.fixture(scope="module")
def cluster() -> Iterator[SchedulerClusterCombo]:
    """A combo started the 1.9.9 way: no address (a free port), workers only."""
    combo = SchedulerClusterCombo(n_workers=2, heartbeat_interval_seconds=0.5, worker_timeout_seconds=3)
    try:
        yield combo
    finally:
        combo.shutdown()


@pytest.fixture()
def client(cluster: SchedulerClusterCombo) -> Iterator[Client]:
    with Client(cluster.address, timeout_seconds=15) as c:
        yield c


def test_a_combo_without_an_address_listens_on_a_free_local_port(cluster: SchedulerClusterCombo) -> None:
    assert cluster.address.startswith("tcp://127.0.0.1:")
    assert cluster.get_address() == cluster.address
    assert int(cluster.address.rsplit(":", 1)[1]) > 0


def test_the_positional_order_of_1_9_9_means_workers(client: Client) -> None:
    # 1.9.9 took n_workers first; the signature types only today's order (address first): run time accepts both
    with SchedulerClusterCombo(1) as combo, Client(combo.address, timeout_seconds=15) as other:  # type: ignore[arg-type]
        assert combo.address.startswith("tcp://127.0.0.1:")
        assert other.submit(inc, 1).result(timeout=TIMEOUT) == 2


def test_get_without_blocking_returns_futures_by_key_in_the_keys_order(client: Client) -> None:
    graph: Graph = {"a": 2, "b": 2, "c": (inc, "a"), "d": (add, "a", "b"), "e": (add, "d", "c")}
    futures = client.get(graph, ["e", "a", "c"], block=False)
    assert list(futures) == ["e", "a", "c"]
    assert {key: future.result(timeout=TIMEOUT) for key, future in futures.items()} == {"e": 7, "a": 2, "c": 3}
    assert client.get(graph, ["e"]) == {"e": 7}  # block=True stays the default
    with pytest.raises(TypeError, match="block=True only"):
        client.get(graph, ["e"], block=False, timeout=5)


def test_an_object_reference_as_a_graph_value_reaches_the_task_as_the_object(client: Client) -> None:
    ref = client.send_object(5, name="five")
    graph: Graph = {"a": 2, "b": ref, "c": (inc, "a"), "d": (add, "a", "b"), "e": (add, "d", "c"), "alias": "b"}
    assert client.get(graph, keys=["e", "d", "c"]) == {"e": 10, "d": 7, "c": 3}
    assert client.get({"x": ref, "y": (inc, "x")}, keys=["y"]) == {"y": 6}
    assert client.get({"b": ref, "twice": (add, "b", "b")}, keys=["twice"]) == {"twice": 10}
    # the reference stays the client's: the graphs did not free the object it refers to
    assert client.submit(inc, ref).result(timeout=TIMEOUT) == 6


def test_duplicate_keys_and_cycles_raise_what_1_9_9_raised(client: Client) -> None:
    graph: Graph = {"a": 2, "c": (inc, "a")}
    with pytest.raises(KeyError, match=r"duplicate key detected in argument keys: \['c'\]"):
        client.get(graph, keys=["c", "a", "c"])
    with pytest.raises(graphlib.CycleError) as cycle:
        client.get({"b": (inc, "c"), "c": (inc, "b")}, ["b", "c"])
    assert isinstance(cycle.value, ValueError) and set(cycle.value.args[1]) == {"b", "c"}


def test_a_refused_shutdown_is_a_value_error_as_in_1_9_9(client: Client) -> None:
    with pytest.raises(ValueError, match="protected"):
        client.shutdown()


def test_a_lost_scheduler_is_a_timeout_error_as_in_1_9_9() -> None:
    combo = SchedulerClusterCombo(n_workers=0)
    try:
        with Client(combo.address, timeout_seconds=15) as client:
            pending = client.submit(nap, 5)  # no workers: it waits in the scheduler
            combo._scheduler.kill()
            with pytest.raises(TimeoutError) as lost:
                pending.result(timeout=TIMEOUT)
            assert isinstance(lost.value, ConnectionFailedError)
    finally:
        combo.shutdown()


def test_profiling_answers_1_9_9_names_with_cpu_time_from_the_worker(client: Client) -> None:
    busy = client.submit(spin, 0.4, profiling=True)
    idle = client.submit(nap, 0.4, profiling=True)
    busy.result(timeout=TIMEOUT)
    idle.result(timeout=TIMEOUT)
    busy_info, idle_info = busy.profiling_info(), idle.profiling_info()
    assert busy_info.cpu_time_s >= 0.35 and busy_info.cpu_time_us >= 350_000
    assert idle_info.cpu_time_s < 0.2 <= idle_info.duration_s
    assert idle_info.duration_s == idle_info.duration_us / 1e6
    assert busy_info.memory_peak == busy_info.peak_memory >= 0


def test_submit_refuses_a_call_the_function_would_refuse(client: Client) -> None:
    with pytest.raises(TypeError, match=r"needs_two\(\) missing a required argument: 'b'"):
        client.submit(needs_two, 1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'e'"):
        client.submit(needs_two, 1, 2, e=3)
    with pytest.raises(TypeError, match="too many positional arguments"):
        client.submit(needs_two, 1, 2, 3, 4)
    with pytest.raises(TypeError, match="missing a required argument: 'c'"):
        client.submit(keyword_only, 1)
    assert client.submit(needs_two, 1, c=4, b=2).result(timeout=TIMEOUT) == (1, 2, 4)
    assert client.submit(functools.partial(needs_two, 5), 6).result(timeout=TIMEOUT) == (5, 6, 0)
    # what scaler 1.9.9 refused and we allow: keyword-only arguments
    assert client.submit(keyword_only, 1, c=4, d=6).result(timeout=TIMEOUT) == (1, 4, 6)
    # builtins without a readable signature, and decorators that supply arguments, run as written
    assert client.submit(max, 3, 9).result(timeout=TIMEOUT) == 9
    assert client.submit(injected, 1).result(timeout=TIMEOUT) == 101
    # the reserved keyword and the Dask-keyword advice still come first
    assert client.submit(takes_profiling, 1, profiling=True).result(timeout=TIMEOUT) == (1, False)
    with pytest.raises(TypeError, match=r"client\.options"):
        client.submit(needs_two, 1, 2, retries=2)


def test_a_future_runs_from_submit_until_it_ends_and_can_be_cancelled_meanwhile(client: Client) -> None:
    done = client.submit(nap, 0.2)
    assert done.running() and not done.done()
    assert done.result(timeout=TIMEOUT) == 0.2
    assert not done.running() and done.done() and not done.cancel()

    slow = client.submit(nap, 30)
    assert slow.running()
    assert slow.cancel() and slow.cancelled() and slow.done() and not slow.running()

    graph_future = client.submit_graph({"a": 1, "b": (nap, 0.1)}, ["b"])[0]
    assert graph_future.running()
    graph_future.result(timeout=TIMEOUT)
    assert not graph_future.running()


def test_failures_of_1_9_9_tests_map_onto_task_failed_error(client: Client) -> None:
    ref = client.send_object(0.1)
    client.clear()
    with pytest.raises(TaskFailedError):  # 1.9.9's MissingObjects
        client.submit(nap, ref).result(timeout=TIMEOUT)


def test_a_program_that_starts_a_combo_prints_only_its_own_output() -> None:
    script = textwrap.dedent(
        """
        from scaler import Client, SchedulerClusterCombo

        with SchedulerClusterCombo(n_workers=1) as cluster:
            with Client(cluster.address) as client:
                print("sum:", client.submit(sum, [1, 2, 3]).result())
                print("done")
        """
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["sum: 6", "done"]
    assert "[INFO]" not in run.stderr


class _Address:
    """1.9.9's ZMQConfig, as far as Cluster and Scheduler use it."""

    def __init__(self, address: str) -> None:
        self.address = address

    def to_address(self) -> str:
        return self.address


def _stop(*processes: Any) -> None:
    for process in processes:
        if process.pid is None:
            continue
        process.terminate()
        process.join(10)
        if process.is_alive():
            process.kill()
            process.join(5)


def test_a_cluster_joins_a_combo_with_no_workers_named_as_1_9_9_named_them() -> None:
    with SchedulerClusterCombo(
        n_workers=0, logging_level="WARNING", load_balance_seconds=1, death_timeout_seconds=30
    ) as combo:
        assert isinstance(combo._cluster, scaler.Cluster) and combo._cluster._death_timeout_seconds == 30
        cluster = scaler.Cluster(
            address=_Address(combo.address),
            worker_io_threads=1,
            worker_names=["alpha", "beta"],
            heartbeat_interval_seconds=0.5,
            task_timeout_seconds=0,
            death_timeout_seconds=20,
            garbage_collect_interval_seconds=30,
            trim_memory_threshold_bytes=1 << 30,
            hard_processor_suspend=False,
            event_loop="builtin",
            logging_paths=("/dev/stderr",),
            logging_level="WARNING",
            logging_config_file=None,
        )
        assert isinstance(cluster._address, _Address) and cluster._address.to_address() == combo.address
        try:
            cluster.start()
            with Client(combo.address, timeout_seconds=15) as client:
                assert client.submit(inc, 41).result(timeout=TIMEOUT) == 42
        finally:
            _stop(cluster)
        assert cluster.exitcode == 0  # SIGTERM stopped the workers, then the cluster, cleanly


def test_a_scheduler_process_serves_a_cluster_process() -> None:
    from tests.helpers import free_address

    address = free_address()
    scheduler = scaler.Scheduler(
        address=address,
        monitor_address=None,
        io_threads=1,
        max_number_of_tasks_waiting=-1,
        per_worker_queue_size=1000,
        client_timeout_seconds=60,
        worker_timeout_seconds=10,
        object_retention_seconds=60,
        load_balance_seconds=1,
        load_balance_trigger_times=2,
        protected=True,
        event_loop="builtin",
        logging_path=("/dev/stderr",),
        logging_config_file=None,
        logging_level="WARNING",
        cpu="none",
    )
    cluster = scaler.Cluster(address, worker_names=["w0"], logging_paths=("/dev/stderr",), logging_level="WARNING")
    try:
        scheduler.start()
        cluster.start()
        with Client(address, timeout_seconds=15) as client:
            assert client.submit(inc, 1).result(timeout=TIMEOUT) == 2
    finally:
        _stop(cluster, scheduler)
    assert cluster.exitcode == 0 and scheduler.exitcode == 0


def test_cluster_and_scheduler_refuse_what_they_cannot_run() -> None:
    with pytest.raises(TypeError, match="worker_names"):
        scaler.Cluster("tcp://127.0.0.1:2345")
    with pytest.raises(ValueError):
        scaler.Cluster("nowhere", worker_names=["a"])
    with pytest.raises(ValueError):
        scaler.Scheduler("tcp://127.0.0.1:2345", worker_timeout_seconds=0)
