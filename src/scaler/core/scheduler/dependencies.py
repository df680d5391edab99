"""Tasks that refer to other tasks (graphs): a new task is linked to the objects and the tasks it refers to, and waits
for those tasks; when one ends, its result is kept as an object for those still waiting on it, or, if it did not
succeed, they end alike.

Functions of a SchedulerCore that change it as its own methods would, apart from the normal path (a task that refers
only to its client's function: SchedulerCore._on_submit queues it inline). Pure, like the core. Python 3.9 (the
scheduler runs on PyPy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scaler.core.scheduler.tasks import TaskEvent, TaskState
from scaler.protocol.records import Payload, TaskStatus

if TYPE_CHECKING:
    from scaler.core.scheduler.core import SchedulerCore
    from scaler.core.scheduler.objects import StoredObject
    from scaler.core.scheduler.tasks import Task


def link(core: SchedulerCore, task: Task) -> bool:
    """Pin the objects the new task needs and wait for the tasks it needs; True if nothing is missing: it is then
    QUEUED, for the caller to append to its ready queue (SchedulerCore._on_submit, which does the common case, only
    the function referenced, itself)."""
    client = task.client
    objects: list[StoredObject] = []
    deps: list[Task] = []
    for ref in task.references():  # check every reference before pinning any
        obj = core.objects.get(ref)
        if obj is not None and obj.owner is client:
            objects.append(obj)
            continue
        dep = core.tasks.get(ref)
        if dep is not None and dep.client is client and dep is not task:
            deps.append(dep)
            continue
        what = "function" if ref == task.function_id else "argument"
        text = f"the task's {what} refers to object or task {ref:#x}, which this client does not have"
        core._end(task, TaskStatus.FAILED, text.encode(), pinned=False)
        return False
    for obj in objects:
        obj.refs += 1
    for dep in deps:
        if dep.dependents is None:
            dep.dependents = []
        dep.dependents.append(task)
        task.waiting_on += 1
    if task.waiting_on == 0:
        core._move(task, TaskEvent.READY)
        return True
    return False


def ended_dependents(core: SchedulerCore, task: Task, status: int, payload: Payload, pending: list[Task]) -> None:
    """`task`, which other tasks wait on, ended: its result is kept for them (_keep_result), or, if it did not
    succeed, those still waiting end alike (added to `pending`, SchedulerCore._end's)."""
    dependents = task.dependents
    assert dependents is not None
    task.dependents = None
    if status == TaskStatus.SUCCESS:
        _keep_result(core, task, payload, dependents)
    else:
        pending.extend([d for d in dependents if d.state == TaskState.WAITING])


def _keep_result(core: SchedulerCore, task: Task, payload: Payload, dependents: list[Task]) -> None:
    """Keep the result of `task` as an object for those of its dependents still waiting (if none is, nothing is
    kept), and queue each that awaited only this result. One pass over the dependents."""
    waiting = 0
    for dep in dependents:
        if dep.state != TaskState.WAITING:
            continue  # ended meanwhile (cancelled, or failed by another of its arguments)
        waiting += 1
        dep.waiting_on -= 1
        if dep.waiting_on == 0:
            core._move(dep, TaskEvent.READY)
            dep.need.ready.append(dep)
    if waiting:
        core.object_store.keep(task, payload, waiting)
