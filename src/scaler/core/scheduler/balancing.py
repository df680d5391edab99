"""Queued tasks given back: workers are asked for tasks they hold but have not started, and give back those still
not started (balanceResponse), which wait again at the front of their queues. Asked by a balancing pass, for idle
workers (rebalance, at most once per balance interval: ADR 0011), and by fair placement while tasks of several
clients wait, for the work queued past FAIR_QUEUE_US (ask_back_queued). A task is never in two places: one asked
for stays on its worker until the worker gives it back.

Balancing is a component of a SchedulerCore that reads and changes the core's state as the core's own methods would;
whom to ask for what is the pure plans' (placement.plan_rebalance, plan_ask_back). Pure, like the core. Python 3.9
(the scheduler runs on PyPy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scaler.core.scheduler.placement import plan_ask_back, plan_rebalance
from scaler.core.scheduler.tasks import TaskEvent, TaskState
from scaler.protocol.records import BalanceRequest, BalanceResponse, TaskStatus

if TYPE_CHECKING:
    from scaler.core.scheduler.core import SchedulerCore
    from scaler.core.scheduler.sessions import WorkerSession

_EMPTY = b""


class Balancing:
    __slots__ = ("core",)

    def __init__(self, core: SchedulerCore) -> None:
        self.core = core

    def rebalance(self) -> None:
        """Ask busy workers for queued tasks that idle ones (not held back) could run (plan_rebalance)."""
        core = self.core
        core._balance_due = False
        core._last_balance = core.now
        for worker, ids in plan_rebalance([w for w in core.workers.values() if w.held_until <= core.now]):
            worker.balance_pending = True
            core._send(worker.identity, BalanceRequest(ids))

    def ask_back_queued(self) -> None:
        """Tasks wait in the ready queue while several clients have work: ask each worker (without a request
        pending) to give back the tasks it has not started beyond FAIR_QUEUE_US of work, except, while only one
        client's tasks wait, that client's (they would only come back to wait in its place). The worker gives back
        those it has not started (balanceResponse); they wait first in their clients' lanes, and go out again
        fairly."""
        core = self.core
        core._last_ask_back = core.now
        queue = core.needs.first_waiting()
        if queue is None:
            return
        # One client waiting: its own tasks stay (they would only come back to wait in its place). Several: any may
        # go back, or a client whose tasks fill the workers would keep the turn it cannot take.
        keep = queue.peek().client if queue.owners() < 2 else None
        for worker, ids in plan_ask_back(core.workers.values(), core._task_cost, keep):
            worker.balance_pending = True
            core._send(worker.identity, BalanceRequest(ids))

    def on_balance_response(self, worker: WorkerSession, message: BalanceResponse) -> None:
        """The tasks `worker` gives back: those cancelled meanwhile end, the others wait at the front of their
        queues."""
        core = self.core
        worker.balance_pending = False
        returned = []
        for task_id in message.ids:
            task = worker.assigned.pop(task_id, None)
            if task is None:
                continue
            task.worker = None
            if task.state == TaskState.CANCELING:
                core._end(task, TaskStatus.CANCELED, _EMPTY, worker=worker)
            else:
                core._move(task, TaskEvent.REQUEUE)
                returned.append(task)
        if core._log.error_texts:
            core._log.forget_texts(message.ids)
        core.needs.requeue_front(returned)
