"""scaler.joblib (scaler.integrations.joblib) on real processes: joblib.Parallel and scikit-learn's GridSearchCV run
their batches as tasks of a scheduler with two workers; the backend's client, n_jobs=-1 (the workers the scheduler
states to a client), failures, nesting."""

from __future__ import annotations

import os
import time
from typing import Any

import joblib
import pytest
from joblib import Parallel, delayed

from scaler import Client
from scaler.joblib import ScalerBackend, register_scaler
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module", autouse=True)
def _registered() -> None:
    register_scaler()


def square_and_pid(i: int) -> tuple[int, int]:
    return i * i, os.getpid()


def fail_on_three(i: int) -> int:
    if i == 3:
        raise ValueError("three is not allowed")
    time.sleep(30 if i > 3 else 0)
    return i


def nested_sums(i: int) -> tuple[int, int, list[int]]:
    """Two Parallel calls inside a task: without n_jobs (runs here) and with n_jobs=2 (nested tasks)."""
    here = Parallel()(delayed(square_and_pid)(j) for j in range(3))
    spread = Parallel(n_jobs=2)(delayed(square_and_pid)(j) for j in range(i + 1))
    return sum(value for value, _ in spread), os.getpid(), [pid for _, pid in here]


def pid_scorer(estimator: Any, X: Any, y: Any) -> float:
    return float(os.getpid())


def test_parallel_with_an_address_connects_for_the_call_only(cluster: Any) -> None:
    # n_jobs=-1 is the workers connected *now*: the combo returns before its workers joined (on a loaded machine, none
    # had: joblib then ran everything here, sequentially, as it should)
    with Client(cluster.address, timeout_seconds=15) as client:
        wait_until(lambda: client.cluster_resources(refresh=True).workers == 2, timeout=15, what="both workers")
    with joblib.parallel_config(backend="scaler", address=cluster.address) as config:
        backend = config["backend"]
        assert isinstance(backend, ScalerBackend)
        results = Parallel(n_jobs=-1)(delayed(square_and_pid)(i) for i in range(10))
        assert backend.client is None  # the client it connected was disconnected when the call ended
        assert Parallel(n_jobs=2)(delayed(pow)(i, 3) for i in range(4)) == [0, 1, 8, 27]  # and it connects again
    assert [value for value, _ in results] == [i * i for i in range(10)]
    assert os.getpid() not in {pid for _, pid in results}


def test_a_client_given_is_used_and_stays_connected(client: Client) -> None:
    with joblib.parallel_config(backend="scaler", client=client) as config:
        assert Parallel(n_jobs=2)(delayed(pow)(i, 2) for i in range(10)) == [i * i for i in range(10)]
        unordered = Parallel(n_jobs=2, return_as="generator_unordered")(delayed(pow)(i, 2) for i in range(10))
        assert sorted(unordered) == [i * i for i in range(10)]
        assert config["backend"].client is client
    assert client.submit(pow, 2, 3).result() == 8


def test_n_jobs_minus_one_is_the_number_of_workers(cluster: Any, client: Client) -> None:
    """The count comes from the scheduler, through a client (never the monitor): the backend's own, or one it
    connects for that when it has none."""
    wait_until(lambda: client.cluster_resources(refresh=True).workers == 2, timeout=15, what="both workers to join")
    backend = ScalerBackend(cluster.address)
    assert backend.effective_n_jobs(-1) == 2 and backend.client is None  # it asked through a client of its own
    assert backend.effective_n_jobs(-2) == 1
    assert backend.effective_n_jobs(5) == 5
    with joblib.parallel_config(backend="scaler", address=cluster.address):
        assert joblib.effective_n_jobs(-1) == 2
    with joblib.parallel_config(backend="scaler", client=client.options(priority=1)):
        assert joblib.effective_n_jobs(-1) == 2
    with pytest.raises(ValueError, match="no meaning"):
        backend.effective_n_jobs(0)


def test_monitor_address_is_ignored_with_a_warning(cluster: Any) -> None:
    with pytest.warns(DeprecationWarning, match="monitor_address= is ignored"):
        backend = ScalerBackend(cluster.address, monitor_address="ipc:///tmp/scaler-no-such-monitor")
    assert backend.effective_n_jobs(-1) == 2


def test_grid_search_runs_on_the_workers(client: Client) -> None:
    from sklearn.datasets import load_iris
    from sklearn.model_selection import GridSearchCV
    from sklearn.svm import SVC

    X, y = load_iris(return_X_y=True)
    grid = {"C": [0.1, 1, 10], "kernel": ["linear", "rbf"]}
    scoring = {"accuracy": "accuracy", "pid": pid_scorer}
    here = GridSearchCV(SVC(), grid, cv=3, scoring=scoring, refit="accuracy").fit(X, y)
    with joblib.parallel_config(backend="scaler", client=client):
        there = GridSearchCV(SVC(), grid, cv=3, n_jobs=-1, scoring=scoring, refit="accuracy").fit(X, y)
    assert list(there.cv_results_["mean_test_accuracy"]) == list(here.cv_results_["mean_test_accuracy"])
    assert there.best_params_ == here.best_params_
    pids = {int(pid) for split in range(3) for pid in there.cv_results_[f"split{split}_test_pid"]}
    assert os.getpid() not in pids  # every fit was scored in a worker's processor


def test_a_failing_batch_raises_and_cancels_the_others(client: Client) -> None:
    started = time.monotonic()
    with joblib.parallel_config(backend="scaler", client=client):
        with pytest.raises(ValueError, match="three is not allowed"):
            Parallel(n_jobs=2, batch_size=1)(delayed(fail_on_three)(i) for i in range(8))
        # The batches sleeping 30 s were cancelled: both workers are free again at once.
        assert Parallel(n_jobs=2)(delayed(pow)(i, 2) for i in range(4)) == [0, 1, 4, 9]
    assert time.monotonic() - started < 15


def test_parallel_inside_a_task(client: Client) -> None:
    """Four tasks on two workers each wait on nested tasks: the waits free the workers (no deadlock)."""
    with joblib.parallel_config(backend="scaler", client=client):
        results = Parallel(n_jobs=2, batch_size=1)(delayed(nested_sums)(i) for i in range(4))
    assert [total for total, _, _ in results] == [sum(j * j for j in range(i + 1)) for i in range(4)]
    for _, task_pid, pids in results:
        assert set(pids) == {task_pid}  # Parallel() without n_jobs ran in the task itself, as joblib's default


def test_the_backend_needs_a_scheduler(cluster: Any, client: Client) -> None:
    with pytest.raises(ValueError, match="needs a scheduler"):
        joblib.parallel_config(backend="scaler")
    with pytest.raises(ValueError, match="not both"):
        ScalerBackend(cluster.address, client=client)
    with pytest.raises(ValueError, match="Client settings go with address"):
        ScalerBackend(client=client, timeout_seconds=5)
