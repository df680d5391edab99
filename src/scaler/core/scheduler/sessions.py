"""The scheduler's view of each connected client and worker. Pure records; no I/O."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from scaler.core.outbox import OutputColumns, ResultColumns
from scaler.protocol.records import Heartbeat, TaskResults

if TYPE_CHECKING:
    from scaler.core.scheduler.tasks import Task


class ClientSession:
    __slots__ = (
        "awaiting",
        "completed",
        "gone",
        "held",
        "identity",
        "key",
        "last_seen",
        "messages_received",
        "messages_sent",
        "name",
        "objects",
        "outbox",
        "output",
        "prefix",
        "recovered",
        "started_at",
        "task_count",
        "task_us",
    )

    def __init__(self, identity: bytes, name: str, prefix: int, now: float, key: bytes | None = None) -> None:
        self.identity = identity
        self.name = name
        self.prefix = prefix
        self.key = key  # the public key (Z85) its connection authenticated with; None without keys
        self.gone = False  # the session ended; its id prefix is reused once nothing of it remains
        self.last_seen = now
        self.task_count = 0  # unfinished tasks
        # How long one of its tasks takes on a worker, in µs (a moving average; negative: not known yet). Measured by
        # SchedulerCore._measure from when results come; what fair placement charges it per task.
        self.task_us = -1.0
        self.started_at = -1.0  # while task_us is not known: when a worker first said it started one of its tasks
        self.completed = 0
        self.objects: set[int] = set()  # ids of objects it owns
        self.outbox = ResultColumns()  # its results, sent at the next flush
        self.output = OutputColumns()  # its tasks' printed output, sent at the next flush before the results
        # Messages of this session each way, heartbeats and echoes excluded: compared when the client's connection is
        # made again after a reset, so a message lost in it ends the session (docs/protocol.md "Connection resets").
        self.messages_received = 0
        self.messages_sent = 0  # the welcome included
        # Restored from the journal after a restart (SchedulerCore.restore_client): ids it sends again that the
        # scheduler holds are ignored, not refused. `awaiting`: its client has not come back yet; what is for it
        # (output) waits in its outbox until it does; its results are held (`held`, batches the journal keeps: a
        # second restart does not compute them again), sent before anything else when it resumes.
        self.recovered = False
        self.awaiting = False
        self.held: list[TaskResults] = []

    def __repr__(self) -> str:
        state = " awaiting its client" if self.awaiting else ""
        return f"<Client {self.name} prefix={self.prefix} tasks={self.task_count}{state}>"


class WorkerSession:
    __slots__ = (
        "allowance_peak",
        "assigned",
        "balance_pending",
        "cancel_outbox",
        "capabilities",
        "capacity",
        "completed",
        "echoed_at",
        "free_outbox",
        "heartbeat",
        "heartbeat_at",
        "heartbeat_sent",
        "held_until",
        "identity",
        "key",
        "last_seen",
        "mark",
        "messages_received",
        "messages_sent",
        "name",
        "objects",
        "prefix",
        "record",
    )

    def __init__(
        self,
        identity: bytes,
        name: str,
        capacity: int,
        now: float,
        prefix: int = 0,
        key: bytes | None = None,
        capabilities: frozenset[str] = frozenset(),
    ) -> None:
        self.identity = identity
        self.capabilities = capabilities  # what it offers (its hello); interned (scaler.core.scheduler.needs.Offers)
        self.name = name
        self.prefix = prefix
        self.key = key
        self.capacity = capacity
        self.last_seen = now
        self.assigned: dict[int, Task] = {}  # insertion order: the last ones are the likeliest still queued
        self.objects: set[int] = set()  # objects it holds (sent to it and not freed)
        self.balance_pending = False
        self.completed = 0
        self.heartbeat = Heartbeat()
        self.heartbeat_at = now  # when its last heartbeat came (its session's start before the first)
        self.heartbeat_sent = 0  # tasks assigned to it when its last heartbeat came (Status: one moment per row)
        self.echoed_at = -math.inf  # when its heartbeat was last answered (SessionLifecycle.on_worker_heartbeat)
        self.cancel_outbox: list[int] = []
        self.free_outbox: list[int] = []
        self.mark = now  # since when its latest results were worked on: its last results, or its first task since idle
        self.allowance_peak = 0  # the most waiting tasks it ever reported (the invariants' bound)
        self.held_until = 0.0  # lost repeatedly: no new tasks before this time
        self.record: WorkerName | None = None  # its name's, which counts it; None: it shares another key's name
        self.messages_received = 0  # as ClientSession's: checked after a connection reset (heartbeat.resumed)
        self.messages_sent = 0

    @property
    def limit(self) -> int:
        """Most tasks it may be assigned now: its queue capacity, plus the tasks it said wait on nested tasks
        (those hold no queue place: a deep recursion must never run out of room for the tasks it waits on)."""
        return self.capacity + self.heartbeat.waiting_tasks

    def __repr__(self) -> str:
        return f"<Worker {self.name} assigned={len(self.assigned)}/{self.capacity}>"


class WorkerName:
    """What the scheduler remembers of one worker name: the key it is bound to (the public key of the first session
    that joined with it; None without keys), how many sessions have it now, when it was lost lately (within the loss
    window) and until when it is held back. Kept while a session has the name or a loss or a hold is remembered, then
    forgotten, binding and all (names.WorkerNames): as many records as live sessions and remembered
    losses, no more."""

    __slots__ = ("held_until", "key", "losses", "sessions")

    def __init__(self, key: bytes | None) -> None:
        self.key = key
        self.sessions = 0
        self.losses: list[float] = []
        self.held_until = 0.0

    def __repr__(self) -> str:
        return f"<WorkerName sessions={self.sessions} losses={len(self.losses)} held_until={self.held_until}>"
