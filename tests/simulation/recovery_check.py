"""What a scheduler's recovery from its journal must rebuild (ADR 0023), checked against the core that crashed: for
tests/unit/test_scheduler_replay.py and the fault simulation's scheduler crashes (tests/simulation/sim.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from scaler.core.scheduler import SchedulerCore
from scaler.core.scheduler.events import JournalEnded, JournalEntry, JournalMessage, JournalResult
from scaler.core.scheduler.tasks import TaskState
from scaler.protocol.messages import SubmitTasks
from scaler.protocol.records import FLAG_SILENT


def snapshot(core: SchedulerCore, journal: Sequence[JournalEntry] | None = None) -> dict[str, Any]:
    """What a recovery must rebuild: open client sessions, tasks (assigned ones read as queued: no worker is left),
    objects put by clients (not the results kept for waiting tasks, told apart by the task ids `journal`, else the
    core's own, holds; pins are checked apart), what waits for each client."""
    state = {TaskState.ASSIGNED: TaskState.QUEUED}
    submitted = {
        i
        for e in (core.journal if journal is None else journal)
        if isinstance(e, JournalMessage) and isinstance(e.message, SubmitTasks)
        for i in e.message.task_ids
    }
    kept_results = submitted | set(core.tasks)  # object ids that are task ids: results kept for waiting tasks
    return {
        "clients": sorted((c.identity, c.name, c.prefix) for c in core.clients.values()),
        "tasks": sorted(
            (t.task_id, t.function_id, t.client.identity, state.get(t.state, t.state), t.waiting_on)
            for t in core.tasks.values()
        ),
        "objects": sorted(
            (o.object_id, o.owner.identity, bytes(o.payload), o.released)  # type: ignore[call-overload]
            for o in core.objects.values()
            if o.object_id not in kept_results and not o.owner.gone  # (kept for its tasks cancelled at workers)
        ),
        "held": sorted((c.identity, tuple(i for r in c.held for i in r.task_ids)) for c in core.clients.values()),
        "keyed": [(name, bytes(payload)) for name, payload in core.keyed.items()],  # type: ignore[call-overload]  # in order: the oldest go first
    }


def assert_recovers(
    recovered: SchedulerCore, crashed: SchedulerCore, where: str = "", journal: Sequence[JournalEntry] | None = None
) -> None:
    """`recovered` holds what `crashed` did, as far as the journal said: the same sessions and objects; the same
    tasks, where any ran at a worker is queued again and any being cancelled there ended; and, beyond those, tasks
    that ended while others waited on them (their results were kept, not journaled): those are back, to run again
    without sending their results, and those that waited on them wait again."""
    journal = crashed.journal if journal is None else journal  # (the recovered core's own holds only held results)
    got, want = snapshot(recovered, journal), snapshot(crashed, journal)
    assert got["clients"] == want["clients"], where
    assert got["keyed"] == want["keyed"], f"{where}: the results kept by key"  # (journaled before anything was sent)
    # being cancelled at a worker: ended (with those waiting on them, as the cancel's outcome will end them)
    cancelled = [t for t in crashed.tasks.values() if t.state == TaskState.CANCELING]
    ending: set[int] = set()
    while cancelled:
        task = cancelled.pop()
        ending.add(task.task_id)
        cancelled += [d for d in task.dependents or () if d.state == TaskState.WAITING]
    # run again after an earlier restart for tasks that waited on them, which ended since: not needed any more, so not
    # brought back (recovery.replay drops them; the crashed core would have run them for nobody)
    entries = journal
    ended = {i for e in entries if isinstance(e, JournalEnded) for i in e.ids}
    ended.update(i for e in entries if isinstance(e, JournalResult) for i in e.results.task_ids)
    reruns = {t.task_id: t for t in crashed.tasks.values() if t.flags & FLAG_SILENT and t.task_id in ended}
    while True:
        idle = [
            i
            for i, t in reruns.items()
            if i not in ending
            and not any(d.state == TaskState.WAITING and d.task_id not in ending for d in t.dependents or ())
        ]
        if not idle:
            break
        ending.update(idle)
    pinned = {ref for t in crashed.tasks.values() if t.task_id not in ending for ref in t.references()}
    want["objects"] = [o for o in want["objects"] if not o[3] or o[0] in pinned]  # (freed, kept for those only)
    silent = [t for t in recovered.tasks.values() if t.flags & FLAG_SILENT]
    needed = {ref for task in silent for ref in task.references()}  # what the tasks that run again need
    extra = [o for o in got["objects"] if o not in want["objects"] and o[0] in needed and o[3]]  # (freed)
    assert [o for o in got["objects"] if o not in extra] == want["objects"], where
    pins = Counter(ref for task in recovered.tasks.values() for ref in task.references())
    for obj in recovered.objects.values():  # each pinned by the tasks that need it, no more
        assert obj.refs == pins[obj.object_id], f"{where}: {obj!r} pinned by {pins[obj.object_id]}"
    wanted = {t[0]: t for t in want["tasks"] if t[0] not in ending}
    tasks = {t[0]: t for t in got["tasks"]}
    for task_id, task in tasks.items():
        if task_id not in wanted:
            assert recovered.tasks[task_id].flags & FLAG_SILENT, f"{where}: task {task_id:#x} came back"
            continue
        other = wanted[task_id]
        assert task[1:3] == other[1:3], where
        if task[3:] != other[3:]:  # it waits again on a task that runs again
            assert task[3] == TaskState.WAITING and other[3] in (TaskState.QUEUED, TaskState.WAITING), where
            assert any(recovered.tasks[d].flags & FLAG_SILENT for d in _waits_on(recovered, task_id)), where
    assert wanted.keys() <= tasks.keys(), f"{where}: lost {sorted(wanted.keys() - tasks.keys())}"


def _waits_on(core: SchedulerCore, task_id: int) -> list[int]:
    return [t.task_id for t in core.tasks.values() if any(d.task_id == task_id for d in t.dependents or ())]
