"""client.explain(future): "why is my task waiting?" asked of a real scheduler over ZeroMQ (explainTasks and
taskExplanations, docs/protocol.md section 6), as the task moves from queued to a worker to done."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from scaler import Client
from tests.helpers import running_scheduler, sleep_and_return, stop_process, wait_until
from tests.integration.test_client_faults import docs_example

pytestmark = pytest.mark.timeout(90)


def test_explain_follows_a_task_from_the_queue_to_a_worker_to_its_end() -> None:
    with running_scheduler() as address, Client(address, timeout_seconds=20) as client:
        future = client.submit(sleep_and_return, 1.5, 7)
        text = client.explain(future)
        assert text == f"task {future.task_id:#x} is queued: no worker is connected", text
        gpu = client.options(capabilities=["gpu"]).submit(sleep_and_return, 0, 1)
        cancelled = client.submit(sleep_and_return, 0, 2)
        cancelled.cancel()
        with Client(address, timeout_seconds=20) as other:  # another client's task: nothing to say about it
            assert "is not in the scheduler" in other.explain(future)
        worker = subprocess.Popen([sys.executable, "-m", "scaler.entry_points.cluster", "-n", "1", address])
        try:
            wait_until(lambda: "was sent to worker" in client.explain(future), timeout=30, what="the task at a worker")
            assert client.explain(future).endswith("(attempt 1)")
            assert future.result(timeout=30) == 7
            texts = client.explain([future, gpu, cancelled])
            assert texts[0] == f"task {future.task_id:#x} is done"
            assert gpu.done() and "missing capabilities" in texts[1], texts  # no worker offers gpu, no manager could
            assert texts[2] == f"task {cancelled.task_id:#x} was cancelled"
        finally:
            stop_process(worker)
        with pytest.raises(TypeError, match="future of this client"):
            client.explain(42)  # type: ignore[call-overload]
        with pytest.raises(ValueError, match="timeout"):
            client.explain(future, timeout=-1)


def test_explain_of_many_tasks_goes_in_several_messages_and_keeps_their_order() -> None:
    with running_scheduler() as address, Client(address, timeout_seconds=20) as client:
        futures = [client.submit(sleep_and_return, 0, i) for i in range(2500)]  # MAX_EXPLAINED is 1024
        texts = client.explain(futures)
        assert len(texts) == 2500
        assert all(text == f"task {f.task_id:#x} is queued: no worker is connected" for f, text in zip(futures, texts))
        client.clear()


def test_the_docs_example_runs_as_written() -> None:
    """docs/guide/tasks.md's explain example, against a real scheduler (only the address changes)."""
    source = docs_example("### explain")
    with running_scheduler() as address:
        script = source.replace("tcp://127.0.0.1:2345", address)
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert re.fullmatch(r"task 0x[0-9a-f]+ is queued: no worker is connected\n", out.stdout), out.stdout
