"""Idempotent-keyed tasks with real processes (issue 28): client.options(idempotency_key=...). A task sent with the key
of a result the scheduler keeps gets that result and does not run, from any client of the same credentials; a map's
tasks are keyed f"{key}/{i}"; a failure is not kept; with --journal, a kept result survives `kill -9` of the scheduler
and is never computed again. Each run of a task leaves a mark, so runs are counted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scaler import Client, SchedulerClusterCombo
from tests.helpers import free_address, stop_process, wait_until
from tests.integration.test_client_faults import docs_example
from tests.integration.test_scheduler_journal_restart import journaled_cluster, marked

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def combo() -> Iterator[SchedulerClusterCombo]:
    cluster = SchedulerClusterCombo(address=free_address(), n_workers=2, logging_level="WARNING")
    try:
        yield cluster
    finally:
        cluster.shutdown()


def fails(folder: str, i: int) -> int:
    marked(folder, i)
    raise ValueError(f"task {i} fails")


def runs(folder: Path) -> int:
    return len(os.listdir(folder))


def test_a_second_task_with_a_kept_key_gets_the_first_result_and_does_not_run(
    combo: SchedulerClusterCombo, tmp_path: Path
) -> None:
    with Client(combo.address) as client:
        report = client.options(idempotency_key="report-2026-12")
        assert report.submit(marked, str(tmp_path), 7).result(timeout=30) == 21
        assert runs(tmp_path) == 1
        # the same key, other arguments: the key names the work, its kept result comes back, nothing runs
        assert report.submit(marked, str(tmp_path), 8).result(timeout=30) == 21
        assert runs(tmp_path) == 1
        assert "idempotency_key='report-2026-12'" in repr(report)
    with Client(combo.address) as again:  # another client (the script run again): the same
        assert again.options(idempotency_key="report-2026-12").submit(marked, str(tmp_path), 7).result(30) == 21
    assert runs(tmp_path) == 1


def test_a_keyed_map_run_again_computes_nothing_again(combo: SchedulerClusterCombo, tmp_path: Path) -> None:
    items = list(range(40))
    with Client(combo.address) as client:
        assert client.options(idempotency_key="squares").map(marked, [(str(tmp_path), i) for i in items]) == [
            i * 3 for i in items
        ]
    assert runs(tmp_path) == len(items)
    with Client(combo.address) as client:  # each task is keyed "squares/i": the same 40 results, no run
        again = client.options(idempotency_key="squares").map(marked, [(str(tmp_path), i) for i in items])
        # a longer map under the same key runs only its new tasks
        longer = client.options(idempotency_key="squares").map(marked, [(str(tmp_path), i) for i in range(50)])
    assert again == [i * 3 for i in items] and longer == [i * 3 for i in range(50)]
    assert runs(tmp_path) == 50


def test_a_failure_is_not_kept_the_key_runs_again(combo: SchedulerClusterCombo, tmp_path: Path) -> None:
    with Client(combo.address) as client:
        keyed = client.options(idempotency_key="flaky")
        with pytest.raises(ValueError, match="task 1 fails"):  # (the task's own exception)
            keyed.submit(fails, str(tmp_path), 1).result(timeout=30)
        assert keyed.submit(marked, str(tmp_path), 2).result(timeout=30) == 6  # ran: nothing was kept
    assert runs(tmp_path) == 2


def test_bad_keys_are_refused_where_they_are_given(combo: SchedulerClusterCombo) -> None:
    with Client(combo.address) as client:
        for bad in ("", 7, b"bytes"):
            with pytest.raises(ValueError, match="idempotency_key must be a non-empty str"):
                client.options(idempotency_key=bad)
        with pytest.raises(ValueError, match="at most 800 bytes"):
            client.options(idempotency_key="x" * 801)
        with pytest.raises(ValueError, match="an executor's tasks cannot share one idempotency_key"):
            client.options(idempotency_key="k").get_executor()
        assert "idempotency_key" not in repr(client.options(idempotency_key="k").options(idempotency_key=None))


def test_a_kept_result_survives_kill_9_of_a_journaled_scheduler_and_is_never_computed_again(tmp_path: Path) -> None:
    """Keyed tasks, `kill -9` of the --journal scheduler at 30 %, the same command 1 s later: every future completes
    right; then the same keyed map from a new client (the script run again) computes nothing again."""
    address, marks, command, scheduler, cluster = journaled_cluster(tmp_path)
    tasks = 400
    arguments = [(str(marks), i) for i in range(tasks)]
    try:
        with Client(address) as client:
            futures = [  # keyed as map keys its tasks
                client.options(idempotency_key=f"nightly/{i}").submit(marked, *a) for i, a in enumerate(arguments)
            ]
            wait_until(lambda: sum(f.done() for f in futures) >= tasks * 0.3, timeout=60, what="30 % done")
            scheduler.send_signal(signal.SIGKILL)
            scheduler.wait(10)
            time.sleep(1.0)
            scheduler = subprocess.Popen(command)  # the same command again
            assert [f.result(timeout=60) for f in futures] == [i * 3 for i in range(tasks)]  # none raises
        first = runs(marks)
        assert tasks <= first <= tasks + 20, first  # (at most what was running)
        with Client(address) as client:  # the same keys, as map's f"{key}/{i}": all kept, none runs
            assert client.options(idempotency_key="nightly").map(marked, arguments) == [i * 3 for i in range(tasks)]
        assert runs(marks) == first
    finally:
        stop_process(cluster)
        stop_process(scheduler)


def test_the_docs_example_runs_as_written(combo: SchedulerClusterCombo) -> None:
    """docs/guide/options.md's idempotent-keyed example against a real cluster (only the address changes), twice: the
    second run computes nothing."""
    source = docs_example("### Idempotent-keyed tasks").replace("tcp://127.0.0.1:2345", combo.address)
    outputs = [
        subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=60, check=True).stdout
        for _ in range(2)
    ]
    results = "report for 2026-11\nreport for 2026-11\n['report for 2026-10', 'report for 2026-11']\n"
    assert outputs == [results + "3\n", results + "0\n"]
