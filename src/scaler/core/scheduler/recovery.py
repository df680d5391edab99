"""A scheduler's recovery after a restart (ADR 0023): what its journal holds, fed again to a new SchedulerCore, and
which of the journal's entries are still needed to do that again (compaction keeps only those).

The journal holds, in the order the core emitted them (SchedulerCore.journal): client sessions opened and ended, each
client's work as it was taken (submitTasks, putObjects, cancelTasks, freeObjects), the results sent to it (ended) and
those held for it while it was away. Replay restores the sessions still open, feeds their work to the core as it came
(no worker is connected: every task is queued, or waits on another), then lets go of what ended: a task whose result
went to its client is dropped, unless a task still waiting needs its result (that was not kept: it runs again, its
result not sent again); a held result is held again, its task dropped. Work of a session that ended is not replayed.

Pure, like the core. Python 3.9 (the scheduler runs on PyPy).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from scaler.core.scheduler.events import (
    JournalEnded,
    JournalEntry,
    JournalMessage,
    JournalResult,
    JournalSession,
    PeerKey,
    Received,
)
from scaler.core.scheduler.tasks import TaskState
from scaler.protocol.records import (
    FLAG_SILENT,
    CancelTasks,
    FreeObjects,
    PeerKind,
    PutObjects,
    SubmitTasks,
    TaskStatus,
)

if TYPE_CHECKING:
    from scaler.core.scheduler.core import SchedulerCore
    from scaler.core.scheduler.sessions import ClientSession
    from scaler.core.scheduler.tasks import Task


class Replayed:
    """What a replay rebuilt: the sessions, tasks and held results, and the entries compaction keeps (`kept`, their
    indices in the order given)."""

    __slots__ = ("ended", "held", "kept", "sessions", "tasks")

    def __init__(self, sessions: int, tasks: int, held: int, ended: int, kept: list[int]) -> None:
        self.sessions = sessions
        self.tasks = tasks  # tasks the core holds after the replay
        self.held = held  # results held for clients not back yet
        self.ended = ended  # tasks the journal's work brought back that had ended (dropped)
        self.kept = kept

    def __repr__(self) -> str:
        return (
            f"<Replayed {self.sessions} sessions, {self.tasks} tasks, {self.held} held results, "
            f"{self.ended} ended, {len(self.kept)} entries kept>"
        )


def open_sessions(entries: Sequence[JournalEntry]) -> dict[bytes, int]:
    """The sessions open at the end of `entries`: each one's peer, and the index of the entry that opened it."""
    opened: dict[bytes, int] = {}
    for index, entry in enumerate(entries):
        if type(entry) is JournalSession:
            if entry.prefix:
                opened[entry.peer] = index
            else:
                opened.pop(entry.peer, None)
    return opened


def replay(core: SchedulerCore, now: float, entries: Sequence[JournalEntry]) -> Replayed:
    """Rebuild `core` (new, serving nobody) at `now` from `entries`, the journal's in the order written. What the
    replay makes the core emit (its journal, its messages) is dropped: it was written and sent before."""
    opened = open_sessions(entries)
    clients: dict[bytes, ClientSession] = {}
    silenced: dict[int, Task] = {}  # ended, kept for a task waiting on it: they run again, their result not sent
    ended = 0
    for index, entry in enumerate(entries):
        start = opened.get(entry.peer)
        if start is not None and index >= start:  # (not a session that ended, nor an earlier one of the same peer)
            ended += _apply(core, now, entry, index == start, clients, silenced)
    # The ended tasks go, but for those a task still waits on (their results were not kept: they run again, for it).
    # Decided at the end, not as each ended: what the journal holds after one (a task that refers to it, then the
    # end of that) decides, so that the entries compaction keeps decide alike.
    while silenced:
        idle = [task for task in silenced.values() if core.tasks.get(task.task_id) is not task or not _awaited(task)]
        if not idle:
            break
        for task in idle:
            del silenced[task.task_id]
            if core.tasks.get(task.task_id) is task:  # (not ended meanwhile: cancelled, or with what it waited on)
                _drop(core, task)
    core.flush()  # dropped: messages sent before (no worker is connected, every client is awaited)
    # what the replay fed was journaled before; the results the flush held for clients not back were not
    core.journal = [entry for entry in core.journal if type(entry) is JournalResult]
    held = sum(len(results.task_ids) for client in clients.values() for results in client.held)
    return Replayed(len(clients), len(core.tasks), held, ended, _kept(core, entries, opened, clients))


def _apply(
    core: SchedulerCore,
    now: float,
    entry: JournalEntry,
    opening: bool,
    clients: dict[bytes, ClientSession],
    silenced: dict[int, Task],
) -> int:
    """Feed one entry of an open session to `core`; how many tasks it ended."""
    peer = entry.peer
    if type(entry) is JournalSession:
        if opening:
            clients[peer] = core.restore_client(now, peer, entry.name, entry.prefix, entry.key)
    elif type(entry) is JournalMessage:
        client = clients[peer]
        key = PeerKey(PeerKind.CLIENT, client.name, client.key) if client.key is not None else None
        message = entry.message
        if silenced and type(message) is CancelTasks:  # a cancel that came after its task ended changed nothing
            message = CancelTasks([task_id for task_id in message.ids if task_id not in silenced])
        core.feed(Received(now, peer, message, key))
    elif type(entry) is JournalEnded:
        return _forget(core, clients[peer], entry.ids, silenced)
    elif type(entry) is JournalResult:
        client = clients[peer]
        count = _forget(core, client, entry.results.task_ids, silenced)
        client.held.append(entry.results)
        return count
    return 0


def _forget(core: SchedulerCore, client: ClientSession, ids: Sequence[int], silenced: dict[int, Task]) -> int:
    """Tasks `ids` of `client` ended for it: silence them (replay drops them at the end, but for those a task then
    waits on), and take their results out of what waits for it. How many there were."""
    count = 0
    tasks = core.tasks
    for task_id in ids:
        task = tasks.get(task_id)
        if task is None or task.client is not client or task_id in silenced:
            continue
        count += 1
        task.flags |= FLAG_SILENT  # dropped at the end, unless a task then waits on it (replay)
        silenced[task_id] = task
    gone = set(ids)
    outbox = client.outbox
    if outbox.ids and not gone.isdisjoint(outbox.ids):
        results = outbox.take()
        assert results is not None
        durations, peaks, cpu = results.durations_us, results.peak_memory, results.cpu_times_us
        for k, task_id in enumerate(results.task_ids):
            if task_id not in gone:
                profile = (durations[k], peaks[k], cpu[k]) if durations and peaks and cpu else (0, 0, 0)
                outbox.add(task_id, results.statuses[k], results.payloads[k], *profile)
    client.held = [r for r in client.held if gone.isdisjoint(r.task_ids)]
    return count


def _awaited(task: Task) -> bool:
    return any(d.state == TaskState.WAITING for d in task.dependents or ())


def _drop(core: SchedulerCore, task: Task) -> None:
    """End `task` without a result for its client (it had one)."""
    task.flags |= FLAG_SILENT
    core._end(task, TaskStatus.SUCCESS, b"")


def _kept(
    core: SchedulerCore, entries: Sequence[JournalEntry], opened: dict[bytes, int], clients: dict[bytes, ClientSession]
) -> list[int]:
    """The entries that rebuild the same state again: the open sessions; the work that brought a task or an object
    the core still holds (with the rest of that message's); and what names any id those bring (cancels, frees,
    ended results: they end again what they ended); the held results still held."""
    live_tasks, live_objects = core.tasks, core.objects
    held = {id(results) for client in clients.values() for results in client.held}
    kept: list[int] = []
    brought: set[int] = set()
    later: list[tuple[int, Sequence[int]]] = []  # cancels, frees, ended results
    for index, entry in enumerate(entries):
        start = opened.get(entry.peer)
        if start is None or index < start:
            continue
        if type(entry) is JournalSession:
            if index == start:
                kept.append(index)
        elif type(entry) is JournalResult:
            if id(entry.results) in held:
                kept.append(index)
        elif type(entry) is JournalEnded:
            later.append((index, entry.ids))
        elif type(entry) is JournalMessage:
            message = entry.message
            if isinstance(message, (SubmitTasks, PutObjects)):
                submit = isinstance(message, SubmitTasks)
                ids = message.task_ids if isinstance(message, SubmitTasks) else message.object_ids
                if any(i in (live_tasks if submit else live_objects) for i in ids):
                    kept.append(index)
                    brought.update(ids)
            elif type(message) is CancelTasks or type(message) is FreeObjects:
                later.append((index, message.ids))
    kept += [index for index, ids in later if not brought.isdisjoint(ids)]
    kept.sort()
    return kept
