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
    JournalKeyed,
    JournalMessage,
    JournalResult,
    JournalSession,
    PeerKey,
    Received,
)
from scaler.core.scheduler.keyed import Name
from scaler.core.scheduler.tasks import TaskState
from scaler.protocol.records import (
    FLAG_SILENT,
    FLAG_STREAM_OUTPUT,
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

    __slots__ = ("ended", "held", "kept", "keyed", "sessions", "tasks")

    def __init__(self, sessions: int, tasks: int, held: int, ended: int, kept: list[int], keyed: int = 0) -> None:
        self.sessions = sessions
        self.tasks = tasks  # tasks the core holds after the replay
        self.held = held  # results held for clients not back yet
        self.ended = ended  # tasks the journal's work brought back that had ended (dropped)
        self.kept = kept
        self.keyed = keyed  # results kept by key (idempotent-keyed tasks)

    def summary(self) -> str:
        """What came back, for monitors (Status.recovered): "" if nothing did."""
        if not (self.sessions or self.tasks or self.held or self.keyed):
            return ""
        sessions = f"{self.sessions:,} client session{'' if self.sessions == 1 else 's'}"
        keyed = f", {self.keyed:,} results kept by key" if self.keyed else ""
        return f"{sessions}, {self.tasks:,} tasks, {self.held:,} held results{keyed}"

    def __repr__(self) -> str:
        return (
            f"<Replayed {self.sessions} sessions, {self.tasks} tasks, {self.held} held results, "
            f"{self.keyed} results kept by key, {self.ended} ended, {len(self.kept)} entries kept>"
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


Current = list[tuple[int, JournalEntry, bool]]  # (index, entry, whether it opens its session)


def current_entries(entries: Sequence[JournalEntry]) -> Current:
    """The entries of the sessions open at the end, each from its opening on (not a session that ended, nor an
    earlier one of the same peer), and the results kept by key (of no session): their indices, and whether each opens
    its session."""
    opened = open_sessions(entries)
    return [
        (index, entry, index == start)
        for index, entry in enumerate(entries)
        if ((start := opened.get(entry.peer)) is not None and index >= start) or type(entry) is JournalKeyed
    ]


def replay(core: SchedulerCore, now: float, entries: Sequence[JournalEntry]) -> Replayed:
    """Rebuild `core` (new, serving nobody) at `now` from `entries`, the journal's in the order written. What the
    replay makes the core emit (its journal, its messages) is dropped: it was written and sent before."""
    current = current_entries(entries)
    ended_as = _ended_as(current)
    clients: dict[bytes, ClientSession] = {}
    silenced: dict[int, Task] = {}  # ended, kept for a task waiting on it: they run again, their result not sent
    ended = 0
    for _, entry, opening in current:
        ended += _apply(core, now, entry, opening, clients, silenced, ended_as)
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
    for task in list(silenced.values()):  # a keyed one's result is kept: given to them, not computed again
        name = core.keyed_tasks.get(task.task_id)
        kept = core.keyed.get(name) if name is not None else None
        if kept is not None and core.tasks.get(task.task_id) is task:
            del silenced[task.task_id]
            core.reruns.add(task.task_id)  # (nothing of it goes to its client: _silent_end)
            core._end(task, TaskStatus.SUCCESS, kept)
    core.reruns.update(silenced)  # (decided now: the ended tasks kept for the tasks waiting on them)
    core.flush()  # dropped: messages sent before (no worker is connected, every client is awaited)
    # what the replay fed was journaled before; the results the flush held for clients not back were not
    core.journal = [entry for entry in core.journal if type(entry) is JournalResult]
    held = sum(len(results.task_ids) for client in clients.values() for results in client.held)
    return Replayed(len(clients), len(core.tasks), held, ended, _kept(current, *live_ids(core)), len(core.keyed))


def _apply(
    core: SchedulerCore,
    now: float,
    entry: JournalEntry,
    opening: bool,
    clients: dict[bytes, ClientSession],
    silenced: dict[int, Task],
    ended_as: dict[int, int],
) -> int:
    """Feed one entry of an open session to `core`; how many tasks it ended."""
    peer = entry.peer
    if type(entry) is JournalKeyed:
        core.keyed.keep((entry.namespace, entry.key), entry.payload)
    elif type(entry) is JournalSession:
        if opening:
            clients[peer] = core.restore_client(now, peer, entry.name, entry.prefix, entry.key)
    elif type(entry) is JournalMessage:
        client = clients[peer]
        key = PeerKey(PeerKind.CLIENT, client.name, client.key) if client.key is not None else None
        message = entry.message
        if type(message) is CancelTasks:  # one that came after its task ended, or too late to stop it, changed nothing
            cancelled = TaskStatus.CANCELED
            ids = [i for i in message.ids if i not in silenced and ended_as.get(i, cancelled) == cancelled]
            message = CancelTasks(ids)
        elif silenced and type(message) is SubmitTasks:
            _sent_again(message, silenced)
        core.feed(Received(now, peer, message, key))
    elif type(entry) is JournalEnded:
        return _forget(core, clients[peer], entry.ids, silenced)
    elif type(entry) is JournalResult:
        client = clients[peer]
        count = _forget(core, client, entry.results.task_ids, silenced)
        client.held.append(entry.results)
        return count
    return 0


def _ended_as(current: Current) -> dict[int, int]:
    """How each task of the open sessions last ended for its client (the results sent, and held): a task it asked to
    cancel that ended otherwise was not stopped in time (it was running, and completed)."""
    ended: dict[int, int] = {}
    for _, entry, _ in current:
        if type(entry) is JournalEnded:
            ended.update(zip(entry.ids, entry.statuses))
        elif type(entry) is JournalResult:
            ended.update(zip(entry.results.task_ids, entry.results.statuses))
    return ended


def _sent_again(message: SubmitTasks, silenced: dict[int, Task]) -> None:
    """A restored session's client sent again a task that had ended (its result had not reached it: lost in a
    restart). The scheduler then held nothing of it, and took it as a new task: so does the replay, unless a task
    still waited on it (then its result was kept, and the resend was ignored). A task waiting on it that ended too
    and is sent again with it does not count (it had ended: nothing waited)."""
    resent = {task_id for task_id in message.task_ids if task_id in silenced}
    for k, task_id in enumerate(message.task_ids):
        task = silenced.get(task_id)
        if task is None:
            continue
        if not any(d.state == TaskState.WAITING and d.task_id not in resent for d in task.dependents or ()):
            del silenced[task_id]
            task.flags = message.flags[k]


def _forget(core: SchedulerCore, client: ClientSession, ids: Sequence[int], silenced: dict[int, Task]) -> int:
    """Tasks `ids` of `client` ended for it: silence them (replay drops them at the end, but for those a task then
    waits on), and take their results out of what waits for it. How many there were."""
    count = 0
    tasks = core.tasks
    for task_id in ids:
        task = tasks.get(task_id)
        if task is None or task.client is not client:
            continue
        count += task_id not in silenced  # (ended again, after its client sent it again: silenced again)
        # dropped at the end, unless a task then waits on it (replay); its client has its result and saw its output
        task.flags = (task.flags | FLAG_SILENT) & ~FLAG_STREAM_OUTPUT
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
    """End `task` without a result for its client (it had one), nor a word of its end."""
    task.flags |= FLAG_SILENT
    core.keyed_tasks.pop(task.task_id, None)  # (its result, if kept, is in the journal: not this empty one)
    core.reruns.add(task.task_id)  # (which _end consumes)
    core._end(task, TaskStatus.SUCCESS, b"")


def live_ids(core: SchedulerCore) -> tuple[set[int], set[tuple[int, ...]], set[Name]]:
    """What of `core` a compaction keeps the entries of: the ids of the tasks and objects it holds (a result kept
    for the tasks waiting on it is an object with its task's id: that task's submit is needed again, to run it again
    for them), the result batches held for clients not back, and the names of the results kept by key."""
    live = set(core.tasks)
    live.update(core.objects)
    held = {tuple(results.task_ids) for client in core.clients.values() for results in client.held}
    return live, held, core.keyed.names()


def kept_entries(
    entries: Sequence[JournalEntry], live: set[int], held: set[tuple[int, ...]], keyed: set[Name] | None = None
) -> list[int]:
    """The entries that rebuild the same state again (their indices, in order): the open sessions; the work that
    brought a task or an object `live` names (with the rest of that message's), and what that work refers to, again
    and again (a task that runs again for those waiting on it needs its own arguments); what names any id those
    bring (cancels, frees, ended results: they end again what they ended); the result batches `held` names; the last
    result kept under each name `keyed` holds. (live_ids: of a core, after a replay or while serving.)"""
    return _kept(current_entries(entries), live, held, keyed or set())


def _kept(current: Current, live: set[int], held: set[tuple[int, ...]], keyed: set[Name]) -> list[int]:
    kept, brought = _kept_work(current, set(live))
    keyed = set(keyed)
    for index, entry, _ in reversed(current):  # the last result kept under each name (one before it was let go)
        if type(entry) is JournalKeyed and (entry.namespace, entry.key) in keyed:
            keyed.discard((entry.namespace, entry.key))
            kept.append(index)
    for index, entry, opening in current:
        if type(entry) is JournalSession:
            if opening:
                kept.append(index)
        elif type(entry) is JournalResult:
            if tuple(entry.results.task_ids) in held:
                kept.append(index)
        elif type(entry) is JournalEnded:
            if not brought.isdisjoint(entry.ids):
                kept.append(index)
        elif type(entry) is JournalMessage:
            message = entry.message
            if (type(message) is CancelTasks or type(message) is FreeObjects) and not brought.isdisjoint(message.ids):
                kept.append(index)
    kept.sort()
    return kept


def _kept_work(current: Current, needed: set[int]) -> tuple[list[int], set[int]]:
    """The submits and puts that bring an id `needed` names, and what those refer to, again and again; and the ids
    they bring."""
    kept: list[int] = []
    brought: set[int] = set()
    for index, entry, _ in reversed(current):  # last first: work refers only to what came before it
        if type(entry) is not JournalMessage:
            continue
        message = entry.message
        if isinstance(message, SubmitTasks):
            if not needed.isdisjoint(message.task_ids):
                kept.append(index)
                brought.update(message.task_ids)
                needed.update(message.function_ids)
                needed.update(message.arg_refs)
        elif isinstance(message, PutObjects):
            if not needed.isdisjoint(message.object_ids):
                kept.append(index)
                brought.update(message.object_ids)
    return kept, brought
