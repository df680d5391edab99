"""A client made inside a task is named nested-<pid>-<n> (the processor's pid), others client-<pid>-<n> (issue 25
item 4), and the scheduler's status splits each client's open tasks into queued and assigned. A real cluster."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.io.sockets import connect_subscriber
from scaler.monitor.top import next_status
from scaler.protocol.messages import ClientStatus
from tests.helpers import free_address


def wait_for_file(path: str) -> int:
    deadline = time.monotonic() + 30
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)
    return os.getpid()


def parent(clnt: Client, path: str) -> tuple[str, int]:
    """The name of the nested client this task got, and the pid of the processor that ran it."""
    clnt.submit(wait_for_file, path).result()
    return clnt._connection.core.name, os.getpid()


@pytest.mark.timeout(60)
def test_a_client_made_inside_a_task_is_named_nested_and_its_tasks_at_workers_are_assigned() -> None:
    with SchedulerClusterCombo(
        address=free_address(),
        n_workers=1,
        max_processors_per_worker=2,
        heartbeat_interval_seconds=0.5,
        logging_level="ERROR",
    ) as combo:
        with Client(address=combo.address, timeout_seconds=30) as c, tempfile.TemporaryDirectory() as folder:
            mine = c._connection.core.name
            assert mine.startswith(f"client-{os.getpid()}-")
            stop = str(Path(folder) / "stop")
            sock = connect_subscriber(combo.monitor_address)
            try:
                future = c.submit(parent, c, stop)
                rows: dict[str, ClientStatus] = {}
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:  # until the nested client's child runs
                    status = next_status(sock, 500)
                    rows = {r.name: r for r in status.clients} if status is not None else rows
                    if any(n.startswith("nested-") and r.assigned == 1 for n, r in rows.items()):
                        break
                nested = [r for n, r in rows.items() if n.startswith("nested-")]
                assert len(nested) == 1 and (nested[0].tasks, nested[0].assigned) == (1, 1), rows
                assert (rows[mine].tasks, rows[mine].assigned) == (1, 1), rows
            finally:
                Path(stop).touch()
                sock.close()
            name, pid = future.result(timeout=30)
            assert name == nested[0].name and name.startswith(f"nested-{pid}-"), (name, pid)
