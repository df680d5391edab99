"""Idempotent-keyed tasks (Client.options(idempotency_key=...); issue 28): the results the scheduler keeps under their
tasks' keys.

A task sent with a key whose result is kept ends at once with that result, and does not run. A keyed task that
succeeds keeps its result under its key, unless one is kept already (two tasks of one key ran at the same time: the
second gets the first one's result, so one result is ever delivered for a key). Keys live in the namespace of the
client's credentials (the public key its connection authenticated with; one namespace without keys), so that a
client cannot read what another's tasks computed by guessing a key. A journaled scheduler journals each kept result
(JournalKeyed) before the result is sent: it is never computed again, across restarts.

The results kept are bounded in bytes (SchedulerConfig.keyed_results_bytes): past it, the oldest result of the
namespace that weighs the most is let go (so a client that fills the store pushes out its own results first, not
another credential's), and a task sent with such a key runs again. Pure, like the core. Python 3.9 (the scheduler runs
on PyPy).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from scaler.protocol.records import MAX_IDEMPOTENCY_KEY_BYTES, Payload, SubmitTasks, TaskStatus

if TYPE_CHECKING:
    from scaler.core.scheduler.core import SchedulerCore
    from scaler.core.scheduler.sessions import ClientSession

Name = tuple[bytes, str]  # (namespace: the client's public key or b"", the key)
OVERHEAD_BYTES = 160  # what one entry costs besides its key and payload (dict slot, tuples), roughly


class KeyedResults:
    """The results kept by key, in the order kept, within `max_bytes` (at least one is kept). Past the bound, the
    oldest result of the heaviest namespace goes first (a result heavier than what the others weigh together may so
    go at once: it is not kept)."""

    __slots__ = ("_by_namespace", "_results", "bytes", "evicted", "max_bytes", "served", "weights")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._results: OrderedDict[Name, Payload] = OrderedDict()
        self._by_namespace: dict[bytes, OrderedDict[str, None]] = {}  # each namespace's keys, oldest first
        self.weights: dict[bytes, int] = {}  # what each namespace's results weigh
        self.bytes = 0  # what the kept results weigh (keys, payloads, OVERHEAD_BYTES each)
        self.served = 0  # tasks answered from a kept result (they did not run)
        self.evicted = 0  # results let go to stay within max_bytes

    def get(self, name: Name) -> Payload | None:
        return self._results.get(name)

    def keep(self, name: Name, payload: Payload) -> Payload | None:
        """Keep `payload` under `name`, unless a result is kept there already: then that one, and nothing is kept."""
        earlier = self._results.get(name)
        if earlier is not None:
            return earlier
        namespace = name[0]
        self._results[name] = payload
        self._by_namespace.setdefault(namespace, OrderedDict())[name[1]] = None
        weight = _weight(name, payload)
        self.weights[namespace] = self.weights.get(namespace, 0) + weight
        self.bytes += weight
        while self.bytes > self.max_bytes and len(self._results) > 1:
            self._evict()
        return None

    def _evict(self) -> None:
        """Let go the oldest result of the namespace that weighs the most (ties: the first one kept)."""
        namespace = max(self.weights, key=self.weights.__getitem__)
        keys = self._by_namespace[namespace]
        key, _ = keys.popitem(last=False)
        name = (namespace, key)
        weight = _weight(name, self._results.pop(name))
        self.bytes -= weight
        self.weights[namespace] -= weight
        if not keys:
            del self._by_namespace[namespace], self.weights[namespace]
        self.evicted += 1

    def names(self) -> set[Name]:
        return set(self._results)

    def items(self) -> list[tuple[Name, Payload]]:
        return list(self._results.items())

    def __len__(self) -> int:
        return len(self._results)

    def __repr__(self) -> str:
        return f"<KeyedResults {len(self._results)} results, {self.bytes:,} of {self.max_bytes:,} bytes>"


def _weight(name: Name, payload: Payload) -> int:
    return len(name[0]) + 4 * len(name[1]) + len(payload) + OVERHEAD_BYTES


def admit(core: SchedulerCore, client: ClientSession, batch: SubmitTasks) -> None:
    """(After the core took `batch`, which has keys.) Each of its tasks with a key that the core holds now: ended at
    once with the result kept under its key, if there is one (it does not run), else its key noted, to keep its result
    (SchedulerCore._checked_result). A key over MAX_IDEMPOTENCY_KEY_BYTES fails its task, which does not run."""
    keys = batch.idempotency_keys
    assert keys is not None
    namespace = client.key or b""
    tasks, results = core.tasks, core.keyed
    for task_id, key in zip(batch.task_ids, keys):
        task = tasks.get(task_id) if key else None
        if task is None and key and client.recovered and task_id in core.objects:
            _sent_again(core, client, task_id, results.get((namespace, key)))
        if task is None or task.client is not client:  # (refused, or ended already: a task it waits on failed)
            continue
        if len(key) * 4 > MAX_IDEMPOTENCY_KEY_BYTES and len(key.encode()) > MAX_IDEMPOTENCY_KEY_BYTES:
            text = (
                f"task {task_id:#x} was not run: its idempotency key is {len(key.encode()):,} bytes in UTF-8, over the "
                f"limit of {MAX_IDEMPOTENCY_KEY_BYTES:,}"
            )
            core._end(task, TaskStatus.FAILED, text.encode())
            continue
        name = (namespace, key)
        kept = results.get(name)
        if kept is None:
            core.keyed_tasks[task_id] = name
        else:
            results.served += 1
            core._end(task, TaskStatus.SUCCESS, kept)


def _sent_again(core: SchedulerCore, client: ClientSession, task_id: int, kept: Payload | None) -> None:
    """A restored session's client sent again a keyed task whose result it lacks (lost in the restart), that ended
    while tasks waited on it: the scheduler keeps its result for them (an object its id names), and the replay did
    not run it again (its result was kept by key). The kept result goes to the client."""
    obj = core.objects[task_id]
    if kept is None or obj.owner is not client:
        return
    client.outbox.add(task_id, TaskStatus.SUCCESS, kept)
    core._dirty_clients[client] = None
