"""Task options with real processes: client.options(timeout=..., retries=..., priority=...) and Client's defaults.

The timeout is enforced by the worker (it stops the processor running the task), retries by the scheduler, the
priority orders one client's ready tasks.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.errors import TaskFailedError, TaskMemoryError, TaskTimeoutError
from tests.helpers import free_address

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def one_worker() -> Iterator[SchedulerClusterCombo]:
    """One worker with one processor: tasks run one at a time, in the order the scheduler sends them."""
    combo = SchedulerClusterCombo(
        address=free_address(),
        n_workers=1,
        per_worker_queue_size=1,
        max_processors_per_worker=1,
        heartbeat_interval_seconds=0.5,
        logging_level="WARNING",
    )
    try:
        yield combo
    finally:
        combo.shutdown()


def sleep_forever() -> None:
    while True:
        time.sleep(1)


def pid() -> int:
    return os.getpid()


def fail_until(counter: str, successes_after: int) -> str:
    """Raises until it has run `successes_after` times (counting runs in a file), then returns."""
    path = Path(counter)
    runs = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(runs))
    if runs <= successes_after:
        raise ValueError(f"run {runs} fails")
    return f"run {runs} succeeds"


def record(log: str, label: str) -> str:
    with open(log, "a") as out:
        out.write(label + "\n")
    return label


def test_a_task_that_never_returns_times_out_and_the_worker_runs_the_next(one_worker: SchedulerClusterCombo) -> None:
    with Client(one_worker.address) as client:
        before = client.submit(pid).result(timeout=30)
        started = time.monotonic()
        future = client.options(timeout=2).submit(sleep_forever)
        with pytest.raises(TaskTimeoutError) as error:
            future.result(timeout=10)
        assert isinstance(error.value, TimeoutError) and isinstance(error.value, TaskFailedError)
        assert f"task {future.task_id:#x} ran longer than its timeout of 2s" in str(error.value)
        assert 2 <= time.monotonic() - started < 10
        after = client.submit(pid).result(timeout=30)  # a new processor runs it
        assert after != before


def test_retries_run_a_failing_task_again_and_give_its_own_last_error(
    one_worker: SchedulerClusterCombo, tmp_path: Path
) -> None:
    with Client(one_worker.address) as client:
        assert client.options(retries=2).submit(fail_until, str(tmp_path / "a"), 2).result(timeout=30) == (
            "run 3 succeeds"
        )
        with pytest.raises(ValueError, match="run 2 fails"):  # the task's own exception, from its last run
            client.options(retries=1).submit(fail_until, str(tmp_path / "b"), 5).result(timeout=30)
        assert (tmp_path / "b").read_text() == "2"
        with pytest.raises(ValueError, match="run 1 fails"):  # no retries unless asked
            client.submit(fail_until, str(tmp_path / "c"), 1).result(timeout=30)
        results = client.options(retries=1).map(fail_until, [(str(tmp_path / f"m{i}"), 1) for i in range(5)])
        assert results == ["run 2 succeeds"] * 5


def test_client_defaults_apply_unless_options_change_them(one_worker: SchedulerClusterCombo, tmp_path: Path) -> None:
    with Client(one_worker.address, task_retries=1) as client:
        assert client.submit(fail_until, str(tmp_path / "a"), 1).result(timeout=30) == "run 2 succeeds"
        with pytest.raises(ValueError, match="run 1 fails"):
            client.options(retries=0).submit(fail_until, str(tmp_path / "b"), 1).result(timeout=30)
        view = client.options(timeout=5)
        assert repr(view) == f"<Client {one_worker.address} with timeout=5s retries=1 priority=0>"
        assert view.get({"x": (fail_until, str(tmp_path / "g"), 1)}, keys=["x"]) == {"x": "run 2 succeeds"}


def test_higher_priority_tasks_run_first_among_one_clients_ready_tasks(
    one_worker: SchedulerClusterCombo, tmp_path: Path
) -> None:
    log = str(tmp_path / "order")
    with Client(one_worker.address) as client:
        gate = client.submit(time.sleep, 1.0)  # holds the only processor (queue of 1) while the rest queue up
        time.sleep(0.3)
        low = [client.submit(record, log, f"low{i}") for i in range(3)]
        high = [client.options(priority=5).submit(record, log, f"high{i}") for i in range(3)]
        for future in [gate, *low, *high]:
            future.result(timeout=30)
    order = Path(log).read_text().split()
    # The worker's queue holds one task: low0 may have gone to it before the high ones were submitted.
    assert order[order.index("high0") : order.index("high0") + 3] == ["high0", "high1", "high2"]
    assert order.index("high2") < order.index("low2")


def test_bad_options_are_refused_where_they_are_given(one_worker: SchedulerClusterCombo) -> None:
    with Client(one_worker.address) as client:
        for bad in ({"timeout": 0}, {"timeout": -1}, {"timeout": "5"}, {"retries": -1}, {"retries": 256}):
            with pytest.raises(ValueError, match="must be"):
                client.options(**bad)
        with pytest.raises(ValueError, match="priority must be a whole number"):
            client.options(priority=2**40)
        with pytest.raises(ValueError, match="retries must be"):
            # a call mypy refuses, made anyway: the run-time check is what is tested
            Client(one_worker.address, task_retries=1.5)  # type: ignore[arg-type]


def test_dask_style_keywords_get_a_clear_error_at_submit(one_worker: SchedulerClusterCombo) -> None:
    def inc(x: int) -> int:
        return x + 1

    def takes_retries(x: int, retries: int) -> int:
        return x + retries

    with Client(one_worker.address) as client:
        with pytest.raises(TypeError, match=r"does not take retries.*client\.options\(retries=2\)\.submit"):
            client.submit(inc, 1, retries=2)
        assert client.submit(takes_retries, 1, retries=2).result(timeout=30) == 3  # the function's own keyword
        # the advice for each is one that works (issue 29: pure= was advised as client.options(pure=False))
        with pytest.raises(TypeError, match=r"for pure: leave it out") as pure:
            client.submit(inc, 1, pure=False)
        assert "options(pure" not in str(pure.value)
        with pytest.raises(TypeError, match=r"client\.options\(idempotency_key='inc-1'\)"):
            client.submit(inc, 1, key="inc-1")
        assert client.options(idempotency_key="inc-1").submit(inc, 1).result(timeout=30) == 2
        with pytest.raises(TypeError, match=r"for workers: Scaler places tasks itself.*capabilities=\[NAME\]"):
            client.submit(inc, 1, workers=["w1"])


# ----------------------------------------------------------------------------------------------- memory limit
def hog(megabytes: int) -> int:
    """Hold `megabytes` of memory, touched, and wait: the worker's memory limit stops it."""
    block = bytearray(megabytes << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    time.sleep(30)
    return len(block)


def test_a_processor_over_the_memory_limit_is_stopped_and_its_task_fails_naming_the_limit() -> None:
    with (
        SchedulerClusterCombo(
            address=free_address(),
            n_workers=1,
            memory_limit="300M",
            heartbeat_interval_seconds=0.5,
            logging_level="ERROR",
        ) as combo,
        Client(combo.address) as client,
    ):
        started = time.monotonic()
        with pytest.raises(TaskMemoryError) as error:
            client.submit(hog, 600).result(timeout=30)
        assert isinstance(error.value, MemoryError)
        assert "over the worker's memory limit of 300 MiB (scaler_cluster --memory-limit)" in str(error.value)
        assert time.monotonic() - started < 20
        assert client.submit(pid).result(timeout=30) > 0  # the worker goes on, on a new processor
        with pytest.raises(TaskMemoryError):  # not retried forever: one run unless it has retries
            client.options(retries=1).submit(hog, 600).result(timeout=60)


def test_a_bad_memory_limit_is_refused_where_it_is_given() -> None:
    with pytest.raises(ValueError, match="like 512M or 4G"):
        SchedulerClusterCombo(address=free_address(), n_workers=0, memory_limit="lots")
