"""Objects held by the scheduler: client objects (functions, send_object, graph literals) and task results
other tasks still need. Reference-counted by unfinished tasks; freed when released and unreferenced.

ObjectStore holds them by id and is where they come and go: put by their client, kept as a result for the tasks
that wait on it, released, dropped (the workers that were sent one are told to free it). Tasks pin and unpin them
(dependencies.link, SchedulerCore._release). Pure; no I/O. Python 3.9 (the scheduler runs on PyPy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scaler.protocol.records import ID_COUNTER_MASK, ID_PREFIX_SHIFT, Payload

if TYPE_CHECKING:
    from collections.abc import Callable

    from scaler.core.scheduler.config import SchedulerConfig
    from scaler.core.scheduler.monitoring import FunctionTable
    from scaler.core.scheduler.prefixes import Prefixes
    from scaler.core.scheduler.sessions import ClientSession, WorkerSession
    from scaler.core.scheduler.tasks import Task
    from scaler.protocol.records import PutObjects


class StoredObject:
    __slots__ = ("holders", "name", "object_id", "owner", "payload", "refs", "released")

    def __init__(self, object_id: int, owner: ClientSession, payload: Payload, name: str, released: bool) -> None:
        self.object_id = object_id
        self.owner = owner
        self.payload = payload
        self.name = name
        self.refs = 0  # unfinished tasks that need it
        self.released = released  # its owner no longer needs it: drop it once refs reaches 0
        self.holders: set[bytes] = set()  # identities of workers that were sent it

    @property
    def droppable(self) -> bool:
        return self.released and self.refs <= 0

    def __repr__(self) -> str:
        return f"<Object {self.object_id:#x} {len(self.payload)}B refs={self.refs} released={self.released}>"


class ObjectStore:
    """The objects by id (`objects`: SchedulerCore.objects is the same dict, which its hot paths read). Dropping one
    forgets its function counters (`functions`), frees its client's prefix once nothing of a gone client remains
    (`prefixes`), and fills the free outboxes of the workers that hold it (`workers`; `post` marks such an outbox for
    the next flush)."""

    __slots__ = ("functions", "limit", "objects", "post", "prefixes", "workers")

    def __init__(
        self,
        config: SchedulerConfig,
        functions: FunctionTable,
        prefixes: Prefixes,
        workers: dict[bytes, WorkerSession],
        post: Callable[[WorkerSession], None],
    ) -> None:
        self.objects: dict[int, StoredObject] = {}
        self.limit = config.max_payload_bytes
        self.functions = functions
        self.prefixes = prefixes
        self.workers = workers
        self.post = post

    def put(self, client: ClientSession, message: PutObjects, tasks: dict[int, Task]) -> tuple[list[int], list[int]]:
        """Store `client`'s objects; returns those refused, for the core to tell it: (ids not its own, with counter 0,
        or in use by an object or one of `tasks`; ids whose payload is over the limit)."""
        bad = []
        too_large = []
        limit = self.limit
        for k, object_id in enumerate(message.object_ids):
            if len(message.payloads[k]) > limit:
                too_large.append(object_id)
                continue
            if (
                object_id >> ID_PREFIX_SHIFT != client.prefix
                or not object_id & ID_COUNTER_MASK
                or object_id in self.objects
                or object_id in tasks
            ):
                if not (
                    client.recovered and object_id >> ID_PREFIX_SHIFT == client.prefix and object_id & ID_COUNTER_MASK
                ):
                    bad.append(object_id)  # (else sent again after the scheduler's restart, and held already)
                continue
            name = message.names[k] if message.names else ""
            self.objects[object_id] = StoredObject(object_id, client, message.payloads[k], name, released=False)
            client.objects.add(object_id)
        return bad, too_large

    def free(self, client: ClientSession, ids: list[int]) -> None:
        """`client` no longer needs these objects of its own: each goes once no unfinished task needs it."""
        for object_id in ids:
            obj = self.objects.get(object_id)
            if obj is not None and obj.owner is client:
                obj.released = True
                if obj.droppable:
                    self.drop(obj)

    def release_all(self, client: ClientSession) -> None:
        """`client` is gone: its objects go once no unfinished task needs them."""
        for oid in list(client.objects):
            obj = self.objects.get(oid)
            if obj is not None:
                obj.released = True
                if obj.droppable:
                    self.drop(obj)

    def keep(self, task: Task, payload: Payload, refs: int) -> None:
        """Keep the result of `task` for the `refs` tasks still waiting on it (released: it goes after them)."""
        obj = StoredObject(task.task_id, task.client, payload, "", released=True)
        obj.refs = refs
        self.objects[task.task_id] = obj
        task.client.objects.add(task.task_id)

    def drop(self, obj: StoredObject) -> None:
        """Forget `obj` (released, and no unfinished task needs it): the workers that hold it are told to free it."""
        del self.objects[obj.object_id]
        self.functions.by_id.pop(obj.object_id, None)
        obj.owner.objects.discard(obj.object_id)
        if obj.owner.gone:
            self.prefixes.reclaim(obj.owner)
        for identity in obj.holders:
            worker = self.workers.get(identity)
            if worker is not None:
                worker.objects.discard(obj.object_id)
                worker.free_outbox.append(obj.object_id)
                self.post(worker)

    def forget_holder(self, worker: WorkerSession) -> None:
        """`worker` is gone: the objects it was sent are no longer held there."""
        for oid in worker.objects:
            obj = self.objects.get(oid)
            if obj is not None:
                obj.holders.discard(worker.identity)

    def compact(self) -> None:
        """Let go of room kept from a burst (SchedulerCore.compact)."""
        self.objects = dict(self.objects)
