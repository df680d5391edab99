"""A worker's connection that closes is noticed at once, even when the next connection gets the same file descriptor.

The scheduler learns of a closed connection from a socket-monitor event naming a descriptor; a worker restarted
within milliseconds (scaler_cluster does that) is usually given the very same descriptor, and its hello can be read
before that event. Each round below closes the worker holding a task and connects a new one at once: the task must
reach the new worker in seconds, not at the worker timeout (set to a minute here, so that waiting for it fails).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from scaler.conformance.scheduler_checks import WORKER_NOISE, RawClient, SchedulerKit
from scaler.conformance.wire import CANCELED, SUCCESS
from tests.helpers import free_port, scheduler_command, stop_process

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 40
BURST = 3000


@pytest.fixture()
def address() -> Iterator[str]:
    address = f"tcp://127.0.0.1:{free_port()}"
    command = [*scheduler_command(address), "--worker-timeout-seconds", "60", "--client-timeout-seconds", "60"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield address
    finally:
        stop_process(process)


def busy(client: RawClient) -> None:
    """Queue a burst of heartbeats (and read no echo yet): the scheduler spends a while reading them."""
    client.sock.setsockopt(zmq.SNDHWM, 0)
    client.sock.setsockopt(zmq.RCVHWM, 0)
    for _ in range(BURST):
        client.heartbeat()


@pytest.mark.timeout(120)
def test_a_worker_replaced_at_once_is_noticed_at_once(address: str) -> None:
    kit = SchedulerKit(address, timeout=10, keys=None)
    try:
        client = kit.client()
        function = client.function()
        holder = kit.worker(capacity=1, name="reuse-0")
        for round_ in range(1, ROUNDS + 1):
            task = client.task(function, bytes([round_]))
            client.submit([task])
            [got] = holder.work()
            assert got.task_id == task.task_id
            busy(client)  # the scheduler reads a burst as the connection ends: the new hello may precede its event
            holder.close()  # no disconnect: the connection just ends
            holder = kit.worker(capacity=1, name=f"reuse-{round_}")  # at once, likely on the same descriptor
            [again] = holder.work(timeout=5)  # well before the 60 s worker timeout
            assert again.task_id == task.task_id, f"round {round_}"
            holder.answer([(task.task_id, SUCCESS, b"done")])
            assert client.results([task.task_id]) == {task.task_id: (SUCCESS, b"done")}
    finally:
        kit.close()


@pytest.mark.timeout(120)
def test_a_client_replaced_at_once_is_noticed_at_once(address: str) -> None:
    """The same for clients: the tasks of a client whose connection ended are cancelled at once (the worker is told),
    although the next client's connection may have the same descriptor."""
    kit = SchedulerKit(address, timeout=10, keys=None)
    try:
        worker = kit.worker(capacity=1, name="reuse-worker")
        flooder = kit.client("flooder")
        for round_ in range(ROUNDS // 4):
            client = kit.client(f"reuse-client-{round_}")
            task = client.task(client.function(), b"p")
            client.submit([task])
            [got] = worker.accept(worker.expect("dispatchTasks", ignore=(*WORKER_NOISE, "freeObjects")))
            assert got.task_id == task.task_id
            busy(flooder)
            client.close()
            kit.client(f"reuse-client-{round_}-next")  # at once, likely on the same descriptor
            cancel = worker.expect("cancelTasks", timeout=5)  # well before the 60 s client timeout
            assert cancel.ids("ids") == [task.task_id], f"round {round_}"
            worker.answer([(task.task_id, CANCELED, b"")])
    finally:
        kit.close()
