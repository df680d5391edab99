"""Starting, connecting to and stopping clusters: connection failures, protected and unprotected shutdown,
uvloop, and SchedulerClusterCombo leaving no process behind."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.errors import ClientClosedError, ConnectionFailedError
from tests.helpers import combo_cluster, combo_processes, fibonacci, free_address, wait_until

TIMEOUT = 20
FAST: dict[str, Any] = {"heartbeat_interval_seconds": 0.5, "worker_timeout_seconds": 3, "logging_level": "WARNING"}


def square(x: int) -> int:
    return x * x


def running(processes: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                out.append(process)
        except psutil.Error:
            continue
    return out


def wait_for_workers(combo: SchedulerClusterCombo, n_workers: int) -> list[psutil.Process]:
    """Wait until the scheduler, the cluster, n agents and n processors run; return them all."""
    wait_until(lambda: len(combo_processes(combo)) >= 2 + 2 * n_workers, timeout=15, what=f"{n_workers} workers")
    return combo_processes(combo)


@pytest.fixture()
def unprotected() -> Iterator[SchedulerClusterCombo]:
    combo = SchedulerClusterCombo(address=free_address(), n_workers=2, protected=False, **FAST)
    try:
        yield combo
    finally:
        combo.shutdown()


# ----------------------------------------------------------------------------------------------- connecting
def test_no_scheduler_raises_connection_failed_within_the_timeout() -> None:
    start = time.monotonic()
    with pytest.raises(ConnectionFailedError) as caught:
        Client(address=free_address(), timeout_seconds=1.5)
    elapsed = time.monotonic() - start
    assert 1.0 <= elapsed < 15, f"took {elapsed:.1f}s for a 1.5s timeout"  # the point: its own timeout, generously
    assert "tcp://127.0.0.1" in str(caught.value)


def test_connection_failed_is_also_a_connection_error() -> None:
    with pytest.raises(ConnectionError):
        Client(address=free_address(), timeout_seconds=0.5)


@pytest.mark.parametrize("address", ["127.0.0.1:2345", "http://127.0.0.1:2345", "tcp://127.0.0.1", "tcp://:99999"])
def test_a_malformed_address_raises_value_error_at_once(address: str) -> None:
    start = time.monotonic()
    with pytest.raises(ValueError):
        Client(address=address, timeout_seconds=10)
    assert time.monotonic() - start < 5  # the point: refused at once (milliseconds), not after the 10 s timeout


def test_combo_on_a_port_in_use_raises_a_clear_error() -> None:
    combo = SchedulerClusterCombo(address=free_address(), n_workers=0, logging_level="ERROR")
    try:
        with pytest.raises(RuntimeError, match=combo.address):
            SchedulerClusterCombo(address=combo.address, n_workers=1, logging_level="CRITICAL")
    finally:
        combo.shutdown()


def test_a_client_whose_scheduler_goes_away_fails_its_futures() -> None:
    combo = SchedulerClusterCombo(address=free_address(), n_workers=1, **FAST)
    try:
        client = Client(address=combo.address, timeout_seconds=3, heartbeat_interval_seconds=0.5)
        assert client.submit(square, 2).result(timeout=TIMEOUT) == 4
        pending = client.submit(time.sleep, 30)
        combo.shutdown()
        with pytest.raises((ConnectionFailedError, ClientClosedError)):
            pending.result(timeout=TIMEOUT)
        with pytest.raises((ConnectionFailedError, ClientClosedError)):
            client.submit(square, 2)
        client.disconnect()
    finally:
        combo.shutdown()


# ----------------------------------------------------------------------------------------------- shutdown
def test_unprotected_shutdown_answers_the_client_every_time() -> None:
    """Regression: the scheduler process used to exit before its Shutdown message left (one time in three)."""
    for _ in range(10):
        combo = SchedulerClusterCombo(address=free_address(), n_workers=2, protected=False, **FAST)
        try:
            client = Client(address=combo.address, timeout_seconds=3)
            assert client.submit(square, 2).result(timeout=TIMEOUT) == 4
            client.shutdown()  # ConnectionFailedError "did not answer the shutdown request" when the answer is lost
        finally:
            combo.shutdown()


def test_unprotected_client_shutdown_stops_scheduler_and_workers(unprotected: SchedulerClusterCombo) -> None:
    processes = wait_for_workers(unprotected, 2)
    client = Client(address=unprotected.address, timeout_seconds=5)
    assert client.submit(square, 3).result(timeout=TIMEOUT) == 9
    client.shutdown()
    wait_until(lambda: not running(processes), timeout=15, what="scheduler, workers and processors to exit")
    assert not unprotected._scheduler.is_alive()
    assert unprotected._scheduler.exitcode == 0
    assert combo_cluster(unprotected).exitcode == 0


def test_a_client_that_shut_the_cluster_down_is_closed(unprotected: SchedulerClusterCombo) -> None:
    client = Client(address=unprotected.address, timeout_seconds=5)
    client.shutdown()
    # errors.ClientClosedError: "The client was disconnected (or shut down) and cannot be used any more."
    with pytest.raises(ClientClosedError):
        client.submit(square, 3)


def test_unprotected_shutdown_fails_the_other_clients_futures(unprotected: SchedulerClusterCombo) -> None:
    other = Client(address=unprotected.address, timeout_seconds=5)
    pending = other.submit(time.sleep, 30)
    Client(address=unprotected.address, timeout_seconds=5).shutdown()
    with pytest.raises(ConnectionFailedError):
        pending.result(timeout=TIMEOUT)
    other.disconnect()


def test_combo_shutdown_leaves_no_child_processes() -> None:
    combo = SchedulerClusterCombo(address=free_address(), n_workers=3, **FAST)
    processes = wait_for_workers(combo, 3)
    with Client(address=combo.address, timeout_seconds=TIMEOUT) as client:
        assert client.map(square, [(i,) for i in range(20)]) == [i * i for i in range(20)]
        pending = client.submit(time.sleep, 60)  # a busy processor must not survive the shutdown either
        start = time.monotonic()
        combo.shutdown()
        elapsed = time.monotonic() - start
        assert not running(processes), f"left behind: {running(processes)}"
        assert elapsed < 30, f"shutdown took {elapsed:.1f}s"  # the point: it did not wait for the 60 s task
        pending.cancel()
    combo.shutdown()  # twice is fine


def test_combo_as_a_context_manager() -> None:
    with SchedulerClusterCombo(address=free_address(), n_workers=1, **FAST) as combo:
        processes = wait_for_workers(combo, 1)
        with Client(address=combo.address, timeout_seconds=TIMEOUT) as client:
            assert client.submit(square, 5).result(timeout=TIMEOUT) == 25
    wait_until(lambda: not running(processes), timeout=10, what="the combo's processes to exit")


# ----------------------------------------------------------------------------------------------- event loops
def test_uvloop_cluster_serves_submit_map_graph_and_nesting() -> None:
    pytest.importorskip("uvloop")
    with SchedulerClusterCombo(address=free_address(), n_workers=2, event_loop="uvloop", **FAST) as combo:
        with Client(address=combo.address, timeout_seconds=TIMEOUT) as client:
            assert client.submit(square, 4).result(timeout=TIMEOUT) == 16
            assert client.map(square, [(i,) for i in range(500)]) == [i * i for i in range(500)]
            assert client.get({"a": 2, "b": (square, "a")}, keys=["b"]) == {"b": 4}
            assert client.submit(fibonacci, client, 6).result(timeout=TIMEOUT) == 8


def test_an_ipc_address_serves_like_a_tcp_one(tmp_path: Path) -> None:
    """README: on one machine, an ipc:// address works wherever a tcp:// one does (nested clients included)."""
    address = f"ipc://{tmp_path}/scheduler.sock"
    with SchedulerClusterCombo(address=address, n_workers=2, **FAST) as combo:
        assert combo.monitor_address == f"{address}_monitor"
        with Client(address=address, timeout_seconds=TIMEOUT) as client:
            assert client.submit(square, 4).result(timeout=TIMEOUT) == 16
            assert client.map(square, [(i,) for i in range(500)]) == [i * i for i in range(500)]
            assert client.submit(fibonacci, client, 6).result(timeout=TIMEOUT) == 8


def test_an_unknown_event_loop_is_refused() -> None:
    with pytest.raises(ValueError):
        SchedulerClusterCombo(address=free_address(), n_workers=1, event_loop="no-such-loop")


@pytest.mark.parametrize("value", [0, -1, 2.5, "4", True])
def test_a_bad_processor_limit_is_refused_before_anything_starts(value: object) -> None:
    with pytest.raises(ValueError, match="max_processors_per_worker"):
        # a call mypy refuses, made anyway: the run-time check is what is tested
        SchedulerClusterCombo(address=free_address(), n_workers=1, max_processors_per_worker=value)  # type: ignore[arg-type]


def _collector_settings() -> tuple[tuple[int, int, int], int]:
    import gc

    return gc.get_threshold(), gc.get_freeze_count()


def test_user_code_runs_with_the_interpreters_own_garbage_collector_settings() -> None:
    """The agent tunes its collector for its own short-lived objects; the processors it forks must not keep that."""
    import gc

    from scaler import Client, SchedulerClusterCombo
    from tests.helpers import free_address

    address = free_address()
    cluster = SchedulerClusterCombo(address=address, n_workers=1, logging_level="WARNING")
    try:
        with Client(address=address, timeout_seconds=20) as client:
            thresholds, frozen = client.submit(_collector_settings).result(timeout=20)
    finally:
        cluster.shutdown()
    assert thresholds == gc.get_threshold()
    assert frozen == 0


def thread_cpus(pid: int) -> dict[int, set[int]]:
    """The CPUs each thread of a process may run on."""
    return {thread.id: os.sched_getaffinity(thread.id) for thread in psutil.Process(pid).threads()}


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs Linux CPU affinity")
@pytest.mark.parametrize("choice", ["first", "auto", "none"])
def test_the_scheduler_and_its_zeromq_thread_keep_to_the_cpu_chosen(
    choice: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CPU claims of this test's own: no other scheduler holds a CPU there (a short path: the monitor's socket is there)
    runtime = Path(tempfile.mkdtemp(prefix="cpus"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    allowed = sorted(os.sched_getaffinity(0))
    scheduler_cpu: str | int = allowed[0] if choice == "first" else choice
    expected = {
        "first": {allowed[0]},
        "auto": {allowed[-1]} if len(allowed) > 1 else set(allowed),
        "none": set(allowed),
    }[choice]
    combo = SchedulerClusterCombo(address=free_address(), n_workers=1, scheduler_cpu=scheduler_cpu, **FAST)
    try:
        with Client(address=combo.address, timeout_seconds=15) as client:
            assert client.submit(square, 3).result(timeout=15) == 9  # ZeroMQ's threads have started
        threads = thread_cpus(combo._scheduler.pid)
        assert len(threads) >= 2  # the main thread and ZeroMQ's I/O thread at least
        assert all(cpus == expected for cpus in threads.values()), threads
        # the workers are not pinned
        for process in combo_processes(combo)[1:]:
            assert os.sched_getaffinity(process.pid) == set(allowed)
    finally:
        combo.shutdown()
        shutil.rmtree(runtime, ignore_errors=True)


def test_a_bad_scheduler_cpu_is_refused_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="CPU 99999 is not one this process may run on"):
        SchedulerClusterCombo(address=free_address(), n_workers=1, scheduler_cpu=99999)
