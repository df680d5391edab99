"""What the conformance kit's worker-manager checks found in the scheduler's core (core/scheduler/managers.py), kept as
tests. Events in, commands out.

- A worker whose hello names a unit the scheduler already stopped got tasks (its unit forgotten, it counted as an
  ordinary worker) while its manager was stopping it: a task started there would be lost or run twice. Now it gets
  none (manager_stopped_unit_gets_no_task).
- A request refused from a manager was logged as from "peer M|...", without the manager's name.
"""

from __future__ import annotations

import math

from scaler.core.scheduler import Command
from scaler.protocol.messages import DispatchTasks, Hello, ManagerReport, PeerKind, ScaleUnits, SubmitTasks
from tests.unit.scheduler_driver import Driver, logs, of_type, ok, submit, tid

C, M, W1 = b"c1", b"m1", b"w1"
P = 1
F = tid(P, 1)
GPU = "gpu"


def t(n: int) -> int:
    return tid(P, n + 1)


def gpu_tasks(*numbers: int) -> SubmitTasks:
    batch = submit(*((t(n), F, [b"x"]) for n in numbers))
    batch.requirements = [[GPU]]
    batch.requirement_index = None
    return batch


def with_manager(start_timeout_ms: int = 60_000, idle_ms: int = 60_000) -> Driver:
    d = Driver()
    assert d.client(C) == P
    d.put(C, (F, b"<function>"))
    d.recv(M, Hello(PeerKind.MANAGER, "gpus", capabilities=[GPU]))
    d.recv(M, ManagerReport(max_units=4, slots_per_worker=2, idle_ms=idle_ms, start_timeout_ms=start_timeout_ms))
    return d


def orders(commands: list[Command]) -> list[ScaleUnits]:
    return [m for peer, m in of_type(commands, ScaleUnits) if peer == M]


def unit_worker(d: Driver, unit: str) -> list[Command]:
    return d.recv(W1, Hello(PeerKind.WORKER, "w1", queue_capacity=2, capabilities=[GPU], unit=unit))


def test_the_worker_of_a_unit_given_up_gets_no_task_when_it_connects_after_all() -> None:
    d = with_manager(start_timeout_ms=500)
    d.recv(C, gpu_tasks(1))
    [start] = orders(d.tick(0.3))
    assert start.start == ["gpus-1"]
    [stop] = orders(d.tick(1.05))
    assert stop.stop == ["gpus-1"] and "did not connect within 0.5s" in stop.reason
    commands = unit_worker(d, "gpus-1")  # the job started just as it was cancelled
    assert of_type(commands, DispatchTasks) == []
    assert d.core.workers[W1].held_until == math.inf and W1 not in d.core.managers.policy.workers
    assert of_type(d.tick(1.3), DispatchTasks) == []


def test_a_worker_of_a_drained_and_stopped_unit_that_says_hello_again_gets_no_task() -> None:
    d = with_manager(idle_ms=300)
    d.recv(C, gpu_tasks(1))
    d.tick(0.3)
    unit_worker(d, "gpus-1")
    d.recv(W1, ok(t(1)))
    now, stopped = 0.3, False
    while not stopped and now < 5:
        now = round(now + 0.25, 2)
        stopped = any(o.stop == ["gpus-1"] for o in orders(d.tick(now)))
    assert stopped
    assert of_type(unit_worker(d, "gpus-1"), DispatchTasks) == []  # hello again, naming its stopped unit
    commands = d.recv(C, gpu_tasks(2))
    assert of_type(commands, DispatchTasks) == []
    [start] = orders(d.tick(now + 0.25))  # new work asks for a new unit: the held-back worker counts no room
    assert start.start == ["gpus-2"]


def test_a_request_refused_from_a_manager_names_the_manager_in_the_log() -> None:
    d = with_manager()
    texts = [log.text for log in logs(d.recv(M, gpu_tasks(7)))]
    assert any("refused a request from worker manager gpus" in text for text in texts), texts
