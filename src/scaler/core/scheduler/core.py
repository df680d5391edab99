"""SchedulerCore: the whole scheduling logic as a synchronous state machine.

`feed(event)` records what happened (a decoded message, a tick of time, an undeliverable peer);
`flush()` places ready tasks on workers and returns every command to carry out, in order.
`handle(event)` is both. The core never awaits, never reads the clock, never touches a socket.
"""

from __future__ import annotations

import math
from collections import Counter

from scaler.core.common import unreachable
from scaler.core.fair import FairQueue
from scaler.core.limiter import LogLimiter, peer_label
from scaler.core.scheduler import views
from scaler.core.scheduler.config import SchedulerConfig
from scaler.core.scheduler.events import (
    Command,
    Event,
    Forbidden,
    Log,
    Malformed,
    PeerKey,
    Received,
    Revoked,
    Send,
    Stop,
    Tick,
    Undeliverable,
)
from scaler.core.scheduler.fleet_size import with_workers
from scaler.core.scheduler.hello import PEER_KIND_NAMES, refusal
from scaler.core.scheduler.monitoring import (
    ENDED_INDEX,
    ENDED_NAMES,
    FunctionStats,
    FunctionTable,
    PeriodLog,
    next_sample_every,
)
from scaler.core.scheduler.names import WorkerNames
from scaler.core.scheduler.needs import Need, NeedTable
from scaler.core.scheduler.objects import StoredObject
from scaler.core.scheduler.placement import (
    FAIR_QUEUE_US,
    UNKNOWN_TASK_US,
    Lane,
    lone_worker,
    plan_ask_back,
    plan_fair,
    plan_level,
    plan_rebalance,
)
from scaler.core.scheduler.prefixes import Prefixes
from scaler.core.scheduler.sessions import ClientSession, WorkerSession
from scaler.core.scheduler.tasks import STATE_NAMES, TRANSITION_TABLE, Task, TaskEvent, TaskState
from scaler.protocol.capabilities import missing_text
from scaler.protocol.records import (
    DEFAULT_OPTIONS,
    FLAG_SILENT,
    FLAG_STREAM_OUTPUT,
    ID_COUNTER_MASK,
    ID_PREFIX_SHIFT,
    MESSAGE_NAMES,
    OUTPUT_ERROR,
    RETRIABLE_STATUSES,
    BalanceRequest,
    BalanceResponse,
    CancelTasks,
    DepartedWorker,
    Disconnect,
    DispatchTasks,
    Error,
    ErrorCode,
    FreeObjects,
    Heartbeat,
    HeartbeatEcho,
    Hello,
    Message,
    OutputRecord,
    Payload,
    PeerKind,
    PutObjects,
    Refused,
    Shutdown,
    ShutdownRequest,
    Status,
    SubmitTasks,
    TaskEvents,
    TaskFailure,
    TaskOutput,
    TaskResults,
    TasksStarted,
    TaskStatus,
    Welcome,
)

_EMPTY = b""
# Printed output (characters) waiting for one client's next flush; more is dropped, with a warning.
MAX_PENDING_OUTPUT = 4 << 20
_WAITING, _QUEUED, _ASSIGNED, _ENDED = TaskState.WAITING, TaskState.QUEUED, TaskState.ASSIGNED, TaskState.ENDED
_CANCELING = TaskState.CANCELING  # the hot paths' constants
_ENDS = [row[TaskEvent.END] for row in TRANSITION_TABLE]  # what each state ends in (None: it cannot end)
# The moves the hot paths make inline (_on_submit: a new task made ready; _dispatch: assigned), as the table says.
assert (
    TRANSITION_TABLE[_WAITING][TaskEvent.READY] == _QUEUED and TRANSITION_TABLE[_QUEUED][TaskEvent.ASSIGN] == _ASSIGNED
)
assert all(new in (None, _ENDED) for new in _ENDS)
_SMOOTHING = 0.25  # of the moving average of a client's task run time


class SchedulerCore:
    def __init__(self, config: SchedulerConfig | None = None) -> None:
        self.config = config or SchedulerConfig()
        self.tasks: dict[int, Task] = {}
        # Tasks ready to be placed, taken client by client in turns; may hold tasks that ended meanwhile (skipped).
        # Within a client, higher priority first (Client.options(priority=...)). The tasks of a split need (one that
        # not every connected worker offers) wait in that need's own queue instead (scaler.core.scheduler.needs).
        # Tasks ready to be placed wait in ready queues, taken client by client in turns, by time (FairQueue, cost:
        # _task_cost); within a client, higher priority first (Client.options(priority=...)). One queue is shared by
        # the needs every connected worker offers; the others (split) have one each (scaler.core.scheduler.needs). A
        # queue may hold tasks that ended meanwhile (skipped).
        self.needs = NeedTable(self._task_cost)
        self.busy_clients = 0  # clients with unfinished tasks: from two on, placement is fair (_place_fairly)
        # Tasks waiting on nested tasks, as the workers' heartbeats last said: while there are any, placement is by
        # turns only (the nested tasks must reach workers whatever their queues hold; _place)
        self.waiting_total = 0
        self.clients: dict[bytes, ClientSession] = {}
        self.workers: dict[bytes, WorkerSession] = {}
        self.objects: dict[int, StoredObject] = {}
        self.state_counts = [0] * len(STATE_NAMES)
        self.received: Counter[str] = Counter()
        self.sent: Counter[str] = Counter()
        self.dropped = 0
        self.refused = 0  # messages and hellos refused for their key (the shell adds refused handshakes)
        self.stale_results = 0
        self.now = 0.0
        self.prefixes = Prefixes()  # the sessions' id prefixes: fresh, or free again
        self._limiter = LogLimiter()  # repeated warnings per peer: a few per window, then a summary
        self._out: list[Command] = []
        # sessions with something in their outboxes, in the order they got it (dicts: deterministic order)
        self._dirty_workers: dict[WorkerSession, None] = {}
        self._dirty_clients: dict[ClientSession, None] = {}
        self._balance_due = False
        self._last_balance = -math.inf
        self._last_ask_back = -math.inf  # the last pass of _ask_back_queued (one per balance interval at most)
        # The oldest last_seen of the workers and of the clients at the last walk over them (last_seen only moves
        # forward, and a new session starts at now): a tick walks them again only once one of these is past its
        # timeout, since no session can be before (the same subtraction as the walk's, so exactly).
        self.oldest_seen = (-math.inf, -math.inf)
        self._stopped = False
        self.names = WorkerNames(self.config)  # the key each worker name is bound to, its losses and holds
        # For monitors: counters by function, always; the status period's records only while `monitored` (the shell
        # sets it while a monitor subscribes). status() takes the period's records.
        self.functions = FunctionTable()
        self.monitored = False
        self._log = PeriodLog()
        self._ended_at_status = 0  # tasks ended before the last status (how many the next period samples)
        self.output_dropped = 0  # pieces of printed output dropped: too much waited for their client

    # ------------------------------------------------------------------------------------------- entry points
    def handle(self, event: Event) -> list[Command]:
        self.feed(event)
        return self.flush()

    def feed(self, event: Event) -> None:
        if self._stopped:
            return
        self.now = max(self.now, event.now)
        # isinstance chains, not `match` (the scheduler's modules run on Python 3.9 for PyPy; and they are faster on
        # CPython): mypy narrows them alike, and unreachable() in the last branch keeps the check that every kind of
        # event is handled.
        if isinstance(event, Received):
            self._on_received(event.peer, event.message, event.key)
        elif isinstance(event, Tick):
            self._on_tick()
        elif isinstance(event, Malformed):
            self._on_malformed(event)
        elif isinstance(event, Undeliverable):
            self._on_undeliverable(event.peer, event.reason)
        elif isinstance(event, Forbidden):
            self._on_forbidden(event.peer, event.public, event.reason)
        elif isinstance(event, Revoked):
            self._on_revoked(event.keys)
        else:
            unreachable(event)

    def _on_malformed(self, event: Malformed) -> None:
        self.dropped += 1
        if self._limiter.allow(self.now, "malformed message", event.peer):
            code = ErrorCode.BAD_REQUEST if event.unexpected else ErrorCode.MALFORMED
            self._send(event.peer, Error(code, event.reason))
            self._out.append(Log.warning(f"dropped a message from {self._label(event.peer)}: {event.reason}"))

    def flush(self) -> list[Command]:
        if not self._stopped:
            self._place()
            counts = self.state_counts
            # Balancing moves queued tasks from a busy worker to an idle one: it needs two tasks out at least. At most
            # one pass per interval, however many workers drain meanwhile (ADR 0011).
            if (
                self._balance_due
                and self.now - self._last_balance >= self.config.balance_interval_seconds
                and counts[TaskState.QUEUED] == 0
                and counts[TaskState.ASSIGNED] + counts[TaskState.CANCELING] >= 2
            ):
                self._balance()
            self._flush_outboxes()
        out, self._out = self._out, []
        sent = self.sent
        for command in out:
            if type(command) is Send:
                sent[MESSAGE_NAMES[type(command.message)]] += 1
        return out

    # ------------------------------------------------------------------------------------------- dispatching
    def _on_received(self, peer: bytes, message: Message, key: PeerKey | None) -> None:
        self.received[MESSAGE_NAMES[type(message)]] += 1
        if isinstance(message, Hello):
            self._on_hello(peer, message, key)
            return
        public = key.public if key is not None else None
        client = self.clients.get(peer)
        if client is not None:
            if client.key != public:
                self._wrong_key(peer, key)
                return
            client.last_seen = self.now
            self._on_client_message(client, message)
            return
        worker = self.workers.get(peer)
        if worker is not None:
            if worker.key != public:
                self._wrong_key(peer, key)
                return
            worker.last_seen = self.now
            self._on_worker_message(worker, message)
            return
        if not isinstance(message, Disconnect):
            self.dropped += 1
            # One answer is enough for a peer to say hello again; a flood of them gets a few per window.
            if self._limiter.allow(self.now, "message without a session", peer):
                self._send(peer, Error(ErrorCode.NOT_CONNECTED, "no session: send hello first"))

    def _on_client_message(self, client: ClientSession, message: Message) -> None:
        if type(message) is not Heartbeat:
            client.messages_received += 1
        # the common ones first
        if isinstance(message, SubmitTasks):
            self._on_submit(client, message)
        elif isinstance(message, Heartbeat):
            if not message.resumed:
                self._send(client.identity, with_workers(HeartbeatEcho(), self.workers.values(), self.now))
            else:
                self._resumed(client, message)
        elif isinstance(message, PutObjects):
            self._on_put_objects(client, message)
        elif isinstance(message, CancelTasks):
            self._on_cancel(client, message)
        elif isinstance(message, FreeObjects):
            self._on_free_objects(client, message)
        elif isinstance(message, Disconnect):
            self._client_gone(client, f"disconnected{': ' + message.reason if message.reason else ''}")
        elif isinstance(message, ShutdownRequest):
            self._on_shutdown_request(client, message)
        else:
            self._bad_request(client.identity, f"a client may not send {MESSAGE_NAMES[type(message)]}")

    def _resumed(self, session: ClientSession | WorkerSession, message: Heartbeat) -> bool:
        """A peer's connection closed and was made again, and its session went on (the probe reached the new
        connection). Messages in flight at the reset may be lost: what the peer says it sent must be what came, and
        the echo says what was sent to it, for the peer to check (docs/protocol.md section 10). False: something was
        lost, so the session must end at once (the caller ends it; the peer is told here) instead of leaving a
        future, or a task, waiting for ever on it."""
        if message.sent == session.messages_received:
            self._send(session.identity, HeartbeatEcho(resumed=True, sent=session.messages_sent))
            return True
        reason = (
            f"its connection was reset and messages were lost (it sent {message.sent}, "
            f"{session.messages_received} came)"
        )
        if isinstance(session, ClientSession):
            self._client_gone(session, reason)
        else:
            self._worker_lost(session, reason, count_attempt=True)
        self._send(session.identity, Error(ErrorCode.NOT_CONNECTED, f"session ended: {reason}"))
        return False

    def _on_worker_message(self, worker: WorkerSession, message: Message) -> None:
        if type(message) is not Heartbeat:
            worker.messages_received += 1
        if isinstance(message, TaskResults):
            self._on_results(worker, message)
        elif isinstance(message, Heartbeat):
            self._on_worker_heartbeat(worker, message)
        elif isinstance(message, TasksStarted):
            assigned = worker.assigned
            for task_id in message.ids:
                task = assigned.get(task_id)
                if task is not None:
                    task.started = True
                    if task.client.started_at < 0 and task.client.task_us < 0:
                        task.client.started_at = self.now  # how long its tasks take: at least since then
            if self.monitored:
                self._monitor_starts(worker, message.ids)
        elif isinstance(message, TaskOutput):
            self._on_task_output(worker, message)
        elif isinstance(message, BalanceResponse):
            self._on_balance_response(worker, message)
        elif isinstance(message, Disconnect):
            reason = f"disconnected{': ' + message.reason if message.reason else ''}"
            self._worker_lost(worker, reason, count_attempt=False)
        else:
            self._bad_request(worker.identity, f"a worker may not send {MESSAGE_NAMES[type(message)]}")

    def _send(self, peer: bytes, message: Message) -> None:
        self._out.append(Send(peer, message))
        if type(message) is not HeartbeatEcho:
            session = self.clients.get(peer) or self.workers.get(peer)
            if session is not None:
                session.messages_sent += 1

    def _label(self, peer: bytes) -> str:
        """Who `peer` is, for a log line: its session, if it has one, and its routing id's kind|host|pid, never the
        id's secret part (scaler.core.limiter.peer_label)."""
        client = self.clients.get(peer)
        if client is not None:
            return peer_label(peer, f"client {client.name}")
        worker = self.workers.get(peer)
        return peer_label(peer, f"worker {worker.name}" if worker is not None else "")

    def _warn(self, kind: str, peer: bytes, text: str) -> None:
        """A warning about `peer`, rate-limited per peer and kind (LogLimiter)."""
        if self._limiter.allow(self.now, kind, peer):
            self._out.append(Log.warning(text))

    def _info(self, kind: str, peer: bytes, text: str) -> None:
        if self._limiter.allow(self.now, kind, peer):
            self._out.append(Log.info(text))

    def _bad_request(self, peer: bytes, text: str, ids: list[int] | None = None) -> None:
        self.dropped += 1
        self._send(peer, Error(ErrorCode.BAD_REQUEST, text, ids or []))  # its ids fail futures: always answered
        self._warn("refused request", peer, f"refused a request from {self._label(peer)}: {text}")

    def _too_large(self, peer: bytes, what: str, ids: list[int]) -> None:
        self.dropped += 1
        limit = self.config.max_payload_bytes
        text = (
            f"{len(ids)} {what} carry a payload of more than {limit:,} bytes, this scheduler's limit per payload "
            "(scaler_scheduler --max-payload-bytes)"
        )
        self._send(peer, Error(ErrorCode.TOO_LARGE, text, ids))
        self._warn("payload too large", peer, f"refused {what} from {self._label(peer)}: {text}")

    # ------------------------------------------------------------------------------------------- keys
    def _wrong_key(self, peer: bytes, key: PeerKey | None) -> None:
        """A message for a session that was opened with another key (or none): its connection is not that session's.
        Dropped without an answer (the answer would go to whoever holds the routing id now)."""
        self.refused += 1
        self.dropped += 1
        self._warn(
            "message with another key",
            peer,
            f"dropped a message for {self._label(peer)}: it came with {key!r}, not the key of that session",
        )

    def _on_forbidden(self, peer: bytes, public: bytes, reason: str) -> None:
        self.refused += 1
        self.dropped += 1
        who = self._label(peer)  # before its session ends
        for sessions in (self.clients, self.workers):
            session = sessions.get(peer)
            if session is not None and session.key == public:
                self._end_session(session, reason)
        if self._limiter.allow(self.now, "refused key", peer):
            self._send(peer, Refused(reason, key_problem=True))
            self._out.append(Log.warning(f"refused a message from {who}: {reason}"))

    def _on_revoked(self, keys: frozenset[bytes]) -> None:
        sessions: list[ClientSession | WorkerSession] = [*self.clients.values(), *self.workers.values()]
        for session in sessions:
            if session.key is not None and session.key in keys:
                reason = "its key was removed from the authorized keys"
                self._send(session.identity, Refused(reason, key_problem=True))
                self._end_session(session, reason)
        self.names.forget_keys(keys)

    def _end_session(self, session: ClientSession | WorkerSession, reason: str) -> None:
        if isinstance(session, ClientSession):
            self._client_gone(session, reason)
        else:
            self._worker_lost(session, reason, count_attempt=False)

    # ------------------------------------------------------------------------------------------- sessions
    def _on_hello(self, peer: bytes, hello: Hello, key: PeerKey | None) -> None:
        current = self.clients.get(peer) or self.workers.get(peer)
        refused = refusal(hello, key, (current.key,) if current is not None else None, self.names)
        if refused is not None:
            self.refused += refused.counted
            self._refuse_hello(peer, hello, refused.reason, refused.key_problem, key)
            return
        kind = PEER_KIND_NAMES[hello.kind]
        public = key.public if key is not None else None
        if peer in self.clients:
            self._client_gone(self.clients[peer], "it said hello again")
        if peer in self.workers:
            self._worker_lost(self.workers[peer], "it said hello again", count_attempt=False)
        prefix = self.prefixes.take()
        if prefix is None:
            self._refuse_hello(peer, hello, "this scheduler has as many sessions open as it can hold (2**24 - 1)")
            return
        name = hello.name or f"unnamed-{kind}-{prefix}"
        who = f"{kind} {name}" + (f" (key {key.name})" if key is not None else "")
        if hello.kind == PeerKind.CLIENT:
            self.clients[peer] = ClientSession(peer, name, prefix, self.now, public)
            self._info("session", peer, f"{who} connected")
            timeout = self.config.client_timeout_seconds
        else:
            caps = self.needs.offer(frozenset(hello.capabilities))
            worker = self.workers[peer] = WorkerSession(
                peer, name, hello.queue_capacity, self.now, prefix, public, caps
            )
            worker.held_until = self.names.join(worker)
            held = f"; held back for {worker.held_until - self.now:.0f}s" if worker.held_until > self.now else ""
            offers = f"; capabilities: {', '.join(sorted(caps))}" if caps else ""
            self._info("session", peer, f"{who} joined (queue capacity {hello.queue_capacity}{offers}){held}")
            self._balance_due = True
            timeout = self.config.worker_timeout_seconds
        limit = self.config.max_payload_bytes
        welcome = Welcome(prefix, self.config.name, self.config.protected, int(timeout * 1000), max_payload_bytes=limit)
        if hello.kind == PeerKind.CLIENT:  # the workers that may take its tasks (fleet_size.py)
            welcome = with_workers(welcome, self.workers.values(), self.now)
        self._send(peer, welcome)

    def _refuse_hello(
        self, peer: bytes, hello: Hello, reason: str, key_problem: bool = False, key: PeerKey | None = None
    ) -> None:
        if self._limiter.allow(self.now, "refused hello", peer):
            self._send(peer, Refused(reason, key_problem=key_problem))
            kind = PEER_KIND_NAMES.get(hello.kind, hello.kind.name.lower())
            who = f"{kind} {hello.name!r}" + (f" (key {key.name})" if key is not None else "")
            self._out.append(Log.warning(f"refused {who}: {reason}"))

    def _reclaim(self, client: ClientSession) -> None:
        """A gone client's prefix is free again once none of its tasks or objects remains: no id it minted can
        then be confused with one a new session mints (a worker's late result for a task of an ended session finds
        no task, since tasks are looked up in the worker session they were assigned to)."""
        if client.gone and not client.task_count and not client.objects and client.prefix:
            self.prefixes.release(client.prefix)
            client.prefix = 0

    def _on_worker_heartbeat(self, worker: WorkerSession, message: Heartbeat) -> None:
        if message.resumed:  # answered always (outside the echo's rate limit), or the session ends
            if not self._resumed(worker, message):
                return
            worker.echoed_at = self.now
        self.waiting_total += message.waiting_tasks - worker.heartbeat.waiting_tasks
        worker.heartbeat = message
        worker.heartbeat_sent = len(worker.assigned)  # what the scheduler had sent it, at the heartbeat's moment
        worker.heartbeat_at = self.now
        worker.allowance_peak = max(worker.allowance_peak, message.waiting_tasks)
        # Answered at most once per quarter of the worker timeout (the echo is most of an idle fleet's cost: one send
        # and one TCP write per worker): workers beat every quarter at most (Welcome.peerTimeoutMs), so one still
        # hears from the scheduler at least every half of the timeout after which it gives its session up.
        if self.now - worker.echoed_at >= self.config.worker_timeout_seconds / 4:
            worker.echoed_at = self.now
            self._send(worker.identity, HeartbeatEcho())

    def _on_undeliverable(self, peer: bytes, reason: str) -> None:
        if peer in self.workers:
            self._worker_lost(self.workers[peer], reason, count_attempt=True)
        elif peer in self.clients:
            self._client_gone(self.clients[peer], reason)

    def _on_tick(self) -> None:
        now = self.now
        oldest_worker, oldest_client = self.oldest_seen
        config = self.config
        if now - oldest_worker > config.worker_timeout_seconds or now - oldest_client > config.client_timeout_seconds:
            self._time_out_silent(now)
        if now - self._last_balance >= self.config.balance_interval_seconds:
            self._balance_due = True
        if self.names.lost:
            self.names.prune(now)
        self.needs.prune()
        for line in self._limiter.summary(now, self._label):
            self._out.append(Log.warning(line))

    def _time_out_silent(self, now: float) -> None:
        """End the sessions silent longer than their timeout, and note the oldest last_seen of those left."""
        worker_timeout, client_timeout = self.config.worker_timeout_seconds, self.config.client_timeout_seconds
        for worker in [w for w in self.workers.values() if now - w.last_seen > worker_timeout]:
            silence = now - worker.last_seen
            self._worker_lost(worker, f"no heartbeat for {silence:.1f}s", count_attempt=True)
        for client in [c for c in self.clients.values() if now - c.last_seen > client_timeout]:
            self._client_gone(client, f"no heartbeat for {now - client.last_seen:.1f}s")
        self.oldest_seen = (
            min((w.last_seen for w in self.workers.values()), default=now),  # now: a session that starts later
            min((c.last_seen for c in self.clients.values()), default=now),
        )

    def _on_shutdown_request(self, client: ClientSession, message: ShutdownRequest) -> None:
        if self.config.protected:
            text = "the scheduler runs in protected mode and refuses to shut down; start it unprotected to allow this"
            self._send(client.identity, Error(ErrorCode.PROTECTED, text))
            self._out.append(Log.warning(f"refused a shutdown request from client {client.name} (protected mode)"))
            return
        reason = f"shutdown requested by client {client.name}"
        self._out.append(Log.info(reason))
        self.stop(reason)

    def stop(self, reason: str) -> None:
        """Tell every peer the scheduler stops, then emit Stop. Later events are ignored."""
        self._flush_outboxes()
        for peer in [*self.workers, *self.clients]:
            self._send(peer, Shutdown(reason))
        self._out.append(Stop(reason))
        self._stopped = True

    def _worker_lost(self, worker: WorkerSession, reason: str, count_attempt: bool) -> None:
        del self.workers[worker.identity]
        self.waiting_total -= worker.heartbeat.waiting_tasks
        if worker.prefix:  # a worker mints no ids: its prefix is free at once
            self.prefixes.release(worker.prefix)
            worker.prefix = 0
        tasks = list(worker.assigned.values())
        worker.assigned.clear()
        if self._log.error_texts:
            self._log.forget_texts([task.task_id for task in tasks])
        if self.monitored:
            self._log.departure(worker.name, reason, count_attempt, int(self.now * 1e6))
        for oid in worker.objects:
            obj = self.objects.get(oid)
            if obj is not None:
                obj.holders.discard(worker.identity)
        # Only tasks its agent said it handed to a processor (tasksStarted) may have started: they count an
        # attempt; the others never ran and go back untouched.
        requeued = []
        for task in tasks:
            task.worker = None
            if task.state == TaskState.CANCELING:
                self._end(task, TaskStatus.CANCELED, _EMPTY, worker=worker)
            elif count_attempt and task.started:
                if self._retry_or_fail(task, f"worker {worker.name} was lost ({reason})", worker):
                    requeued.append(task)
            else:
                self._move(task, TaskEvent.REQUEUE)
                requeued.append(task)
        self.needs.withdraw(worker.capabilities)
        self.needs.requeue_front(requeued)  # in their original order, ahead of everything else
        self._info(
            "session",
            worker.identity,
            f"worker {worker.name} left ({reason}); {len(tasks)} of its tasks go back to the queue",
        )
        self._balance_due = True
        self._leave_name(worker, count_attempt)

    def _leave_name(self, worker: WorkerSession, count_attempt: bool) -> None:
        """A worker session ended: its name's record no longer counts it; a loss (not a goodbye) may hold it back."""
        record = worker.record
        hold = self.names.leave(worker, self.now if count_attempt else None)
        if not hold or record is None:
            return
        minutes = self.config.loss_window_seconds / 60
        self._out.append(
            Log.warning(
                f"worker {worker.name} was lost {len(record.losses)} times in {minutes:g} min: no new tasks for it for "
                f"{hold:g}s if it comes back (its tasks that had not started were not charged an attempt)"
            )
        )
        for other in self.workers.values():  # another session of the same name, already back
            if other.record is record:
                other.held_until = record.held_until

    def _client_gone(self, client: ClientSession, reason: str) -> None:
        del self.clients[client.identity]
        client.gone = True
        client.output.take()  # printed output nobody will read
        mine = [t for t in self.tasks.values() if t.client is client]
        for task in mine:
            self._cancel(task)
        for oid in list(client.objects):
            obj = self.objects.get(oid)
            if obj is not None:
                obj.released = True
                if obj.droppable:
                    self._drop_object(obj)
        self._info(
            "session", client.identity, f"client {client.name} left ({reason}); {len(mine)} unfinished tasks cancelled"
        )
        self._reclaim(client)

    # ------------------------------------------------------------------------------------------- tasks
    def _on_submit(self, client: ClientSession, batch: SubmitTasks) -> None:
        bad_ids: list[int] = []
        too_large: list[int] = []
        shared_ids: dict[int, int] = {}
        limit = self.config.max_payload_bytes
        oversized = bool(batch.payloads) and max(map(len, batch.payloads)) > limit
        options = batch.options()
        refused: list[int] = []  # their function ids
        needs, problems = self.needs.batch(batch.requirements)
        index = batch.requirement_index
        invalid: list[int] = []  # tasks whose requirement is not valid
        need = self._filed(needs, 0) if index is None else None
        tasks, objects, prefix, counts = self.tasks, self.objects, client.prefix, self.state_counts
        ready: list[Task] = []  # the tasks made ready: queued once the batch is read (nothing reads a queue before)
        for k, (task_id, function_id, flags, refs, kws, pays) in enumerate(batch.split()):
            if oversized and any(len(p) > limit for p in pays):
                too_large.append(task_id)
                refused.append(function_id)
                continue
            if index is not None:
                need = self._filed(needs, index[k])
            if need is None:
                invalid.append(task_id)
                refused.append(function_id)
                continue
            if (
                task_id >> ID_PREFIX_SHIFT != prefix
                or not task_id & ID_COUNTER_MASK
                or task_id in tasks
                or task_id in objects
            ):
                bad_ids.append(task_id)
                refused.append(function_id)
                continue
            function_id = shared_ids.setdefault(function_id, function_id)  # one int object per function
            task = Task(
                task_id,
                client,
                function_id,
                flags,
                refs,
                kws,
                pays,
                need,
                options[k] if options is not None else DEFAULT_OPTIONS,
            )
            need.tasks += 1
            tasks[task_id] = task
            if not client.task_count:
                self.busy_clients += 1
            client.task_count += 1
            function = objects.get(function_id) if not any(refs) else None
            if function is not None and function.owner is client:  # the common case: only its function, the
                function.refs += 1  # client's, is referenced (_link, inline): WAITING -> READY -> QUEUED at once
                counts[_QUEUED] += 1
                need.queued += 1
                task.state = _QUEUED
                ready.append(task)
            else:
                counts[_WAITING] += 1
                if self._link(task):
                    ready.append(task)
        self.needs.extend_ready(ready)
        self._count_submitted(batch.function_ids, refused)
        if refused:
            self._refuse_tasks(client, bad_ids, too_large, invalid, problems)

    def _filed(self, needs: list[Need | frozenset[str] | None], index: int) -> Need | None:
        """The Need of a batch's requirement `index` (NeedTable.batch), filed when a task first has it."""
        need = needs[index]
        if isinstance(need, frozenset):
            need = needs[index] = self.needs.of(need)
        return need

    def _refuse_tasks(
        self, client: ClientSession, bad_ids: list[int], too_large: list[int], invalid: list[int], problems: set[str]
    ) -> None:
        """Tell `client` which tasks of its submitTasks were refused, and why."""
        if bad_ids:
            text = f"{len(bad_ids)} task ids are not this session's, have counter 0 or are already in use"
            self._bad_request(client.identity, text, bad_ids)
        if too_large:
            self._too_large(client.identity, "tasks", too_large)
        if invalid:
            text = f"{len(invalid)} tasks require capabilities that are not valid: " + "; ".join(sorted(problems))
            self._bad_request(client.identity, text, invalid)

    def _count_submitted(self, function_ids: list[int], refused: list[int]) -> None:
        """Count a batch's tasks by function: one pass in C over its column, not a lookup per task."""
        n = len(function_ids)
        if n and not refused and function_ids.count(function_ids[0]) == n:  # one function (a map, a lone task)
            self.function_stats(function_ids[0]).submitted += n
            return
        counts = Counter(function_ids)
        counts.subtract(refused)
        for function_id, count in counts.items():
            if count:
                self.function_stats(function_id).submitted += count

    def _link(self, task: Task) -> bool:
        """Pin the objects the new task needs and wait for the tasks it needs; True if nothing is missing: it is then
        QUEUED, for the caller to append to its ready queue (_on_submit, which does the common case, only the
        function referenced, itself)."""
        client = task.client
        objects, deps = [], []
        for ref in task.references():  # check every reference before pinning any
            obj = self.objects.get(ref)
            if obj is not None and obj.owner is client:
                objects.append(obj)
                continue
            dep = self.tasks.get(ref)
            if dep is not None and dep.client is client and dep is not task:
                deps.append(dep)
                continue
            what = "function" if ref == task.function_id else "argument"
            text = f"the task's {what} refers to object or task {ref:#x}, which this client does not have"
            self._end(task, TaskStatus.FAILED, text.encode(), pinned=False)
            return False
        for obj in objects:
            obj.refs += 1
        for dep in deps:
            if dep.dependents is None:
                dep.dependents = []
            dep.dependents.append(task)
            task.waiting_on += 1
        if task.waiting_on == 0:
            self._move(task, TaskEvent.READY)
            return True
        return False

    def _on_cancel(self, client: ClientSession, message: CancelTasks) -> None:
        for task_id in message.ids:
            task = self.tasks.get(task_id)
            if task is not None and task.client is client:
                self._cancel(task)

    def _cancel(self, task: Task) -> None:
        if task.state in (TaskState.WAITING, TaskState.QUEUED):
            self._end(task, TaskStatus.CANCELED, _EMPTY)
        elif task.state == TaskState.ASSIGNED:
            assert task.worker is not None
            self._move(task, TaskEvent.CANCEL_REMOTE)
            task.worker.cancel_outbox.append(task.task_id)
            self._dirty_workers[task.worker] = None

    def _on_results(self, worker: WorkerSession, message: TaskResults) -> None:
        durations, peaks, cpu_times = message.durations_us, message.peak_memory, message.cpu_times_us
        statuses, payloads, limit = message.statuses, message.payloads, self.config.max_payload_bytes
        assigned = worker.assigned
        span = self._span(worker, len(message.task_ids))
        measured: ClientSession | None = None  # the client last charged `span`: a batch is mostly one client's
        completed = 0
        profiled = durations is not None or peaks is not None or cpu_times is not None
        for k, task_id in enumerate(message.task_ids):
            task = assigned.pop(task_id, None)
            if task is None:
                self.stale_results += 1  # cancelled, balanced away or re-run elsewhere meanwhile
                continue
            task.worker = None
            completed += 1
            status = statuses[k]
            if task.state == _CANCELING:
                self._end(task, TaskStatus.CANCELED, _EMPTY, worker=worker)
            elif status == TaskStatus.CRASHED:
                reason = bytes(payloads[k]).decode(errors="replace")  # type: ignore[call-overload]
                if self._retry_or_fail(task, reason or f"worker {worker.name} crashed running it", worker):
                    task.need.ready.appendleft(task)
            elif task.failures < task.options.retries and status in RETRIABLE_STATUSES:
                if self._log.error_texts:
                    self._log.forget_texts([task_id])  # the failure of a run that goes again
                task.failures += 1
                self._move(task, TaskEvent.REQUEUE)
                task.need.ready.append(task)  # behind the client's other ready tasks of its priority, as a new run
                what = TaskStatus(status).name.lower().replace("_", " ")
                retry = f"retry {task.failures} of {task.options.retries}"
                self._info(
                    "retry", task.client.identity, f"task {task.task_id:#x} ended {what} on {worker.name}: {retry}"
                )
            else:
                if task.client is not measured:
                    measured = task.client
                    self._measure(measured, span)
                payload = payloads[k]
                if len(payload) > limit:
                    status, payload = TaskStatus.FAILED, self._result_too_large(task, worker, len(payload))
                if not profiled:
                    self._end(task, status, payload, worker=worker)
                    continue
                duration = durations[k] if durations is not None else 0
                peak = peaks[k] if peaks is not None else 0
                cpu = cpu_times[k] if cpu_times is not None else 0
                self._end(task, status, payload, duration, peak, cpu_us=cpu, worker=worker)
        worker.completed += completed
        if not assigned:
            self._balance_due = True

    def _span(self, worker: WorkerSession, count: int) -> float:
        """How long each of `count` results that came now took on their worker, in µs: the time since its previous
        results (or since it got its first task after being idle), shared among them."""
        span = (self.now - worker.mark) * 1e6 / count
        worker.mark = self.now
        return span

    @staticmethod
    def _measure(client: ClientSession, span_us: float) -> None:
        """Count one measured run of `client`'s tasks in its moving average (ClientSession.task_us)."""
        estimate = client.task_us
        client.task_us = span_us if estimate < 0 else estimate + (span_us - estimate) * _SMOOTHING

    def _task_cost(self, task: Task) -> float:
        """What a task is charged in the ready queue and counts for in a worker's fair share, in µs: its client's
        measured task run time (1 µs at least); before one is known, UNKNOWN_TASK_US, or how long its first task
        reported started has been running if longer (it has not ended: a run takes that long at least)."""
        client = task.client
        estimate = client.task_us
        if estimate >= 0:
            return max(estimate, 1.0)
        if client.started_at < 0:
            return UNKNOWN_TASK_US
        return max(UNKNOWN_TASK_US, (self.now - client.started_at) * 1e6)

    def _result_too_large(self, task: Task, worker: WorkerSession, size: int) -> bytes:
        limit = self.config.max_payload_bytes
        text = (
            f"the result of task {task.task_id:#x} is {size:,} bytes, more than this scheduler's limit of {limit:,} "
            "bytes per payload (scaler_scheduler --max-payload-bytes)"
        )
        self._warn("payload too large", worker.identity, f"worker {worker.name} sent a result too large: {text}")
        return text.encode()

    def _retry_or_fail(self, task: Task, reason: str, worker: WorkerSession | None = None) -> bool:
        """Count an attempt; True if the task should run again (the caller queues it), False if it failed."""
        task.attempts += 1
        if task.attempts > self.config.max_task_retries:
            text = f"task {task.task_id:#x} was not completed: {reason}; it was tried {task.attempts} times, giving up"
            self._out.append(Log.warning(text))
            self._end(task, TaskStatus.FAILED, text.encode(), worker=worker)
            return False
        self._move(task, TaskEvent.REQUEUE)
        return True

    def _on_balance_response(self, worker: WorkerSession, message: BalanceResponse) -> None:
        worker.balance_pending = False
        returned = []
        for task_id in message.ids:
            task = worker.assigned.pop(task_id, None)
            if task is None:
                continue
            task.worker = None
            if task.state == TaskState.CANCELING:
                self._end(task, TaskStatus.CANCELED, _EMPTY, worker=worker)
            else:
                self._move(task, TaskEvent.REQUEUE)
                returned.append(task)
        if self._log.error_texts:
            self._log.forget_texts(message.ids)
        self.needs.requeue_front(returned)

    def _move(self, task: Task, event: int) -> None:
        """Task.move, inline (every task moves four times at least), keeping the counts by state."""
        old = task.state
        new = TRANSITION_TABLE[old][event]
        if new is None:
            raise task.no_transition(event)
        counts = self.state_counts
        counts[old] -= 1
        if old == _QUEUED:
            task.need.queued -= 1
        elif new == _QUEUED:
            task.started = False
            task.need.queued += 1
        task.state = new
        if new != _ENDED:
            counts[new] += 1

    def _end(
        self,
        first: Task,
        status: int,
        payload: Payload,
        duration_us: int = 0,
        peak: int = 0,
        pinned: bool = True,
        cpu_us: int = 0,
        worker: WorkerSession | None = None,
    ) -> None:
        """End a task (and, if it did not succeed, the tasks waiting on it, with the same outcome).

        pinned=False: `first` never pinned the objects it refers to (it was refused while being linked).
        worker: the worker that held `first` and reported its end, for monitors."""
        by_id, tasks, counts = self.functions.by_id, self.tasks, self.state_counts
        index = ENDED_INDEX[status]  # the tasks ended by outcome are the functions' counts (SchedulerCore.ended)
        text: str | None = None  # of a failure, for monitors: the same for the dependents
        pending = [first]
        while pending:
            task = pending.pop()
            old = task.state  # _move(task, TaskEvent.END), inline
            if old == _QUEUED:
                task.need.queued -= 1
            elif _ENDS[old] is None:
                raise task.no_transition(TaskEvent.END)
            counts[old] -= 1
            task.state = _ENDED
            del tasks[task.task_id]
            task.need.tasks -= 1
            if task.worker is not None:
                task.worker.assigned.pop(task.task_id, None)
                task.worker = None
            client = task.client
            client.task_count -= 1
            if not client.task_count:
                self.busy_clients -= 1
            client.completed += 1
            if client.gone:
                self._reclaim(client)
            stats = by_id.get(task.function_id) or self.function_stats(task.function_id)
            stats.ended[index] += 1
            if duration_us and status <= TaskStatus.ERROR:
                stats.ran(duration_us)
            if self.monitored:
                reporter = worker if task is first else None  # the dependents were not assigned
                name, time_us = reporter.name if reporter is not None else None, int(self.now * 1e6)
                text = self._log.ended(
                    task.task_id, status, payload, stats.name, name, time_us, duration_us, peak, text
                )
            if not task.flags & FLAG_SILENT and self.clients.get(client.identity) is client:
                client.outbox.add(task.task_id, status, payload, duration_us, peak, cpu_us)
                self._dirty_clients[client] = None
            if task.dependents:
                self._ended_dependents(task, status, payload, pending)
            if pinned or task is not first:
                self._release(task)
            duration_us = peak = cpu_us = 0

    def _ended_dependents(self, task: Task, status: int, payload: Payload, pending: list[Task]) -> None:
        """`task`, which other tasks wait on, ended: its result is kept for them (_keep_result), or, if it did not
        succeed, those still waiting end alike (added to `pending`, _end's)."""
        dependents = task.dependents
        assert dependents is not None
        task.dependents = None
        if status == TaskStatus.SUCCESS:
            self._keep_result(task, payload, dependents)
        else:
            pending.extend([d for d in dependents if d.state == _WAITING])

    def _keep_result(self, task: Task, payload: Payload, dependents: list[Task]) -> None:
        """Keep the result of `task` as an object for those of its dependents still waiting (if none is, nothing is
        kept), and queue each that awaited only this result. One pass over the dependents."""
        waiting = 0
        for dep in dependents:
            if dep.state != _WAITING:
                continue  # ended meanwhile (cancelled, or failed by another of its arguments)
            waiting += 1
            dep.waiting_on -= 1
            if dep.waiting_on == 0:
                self._move(dep, TaskEvent.READY)
                dep.need.ready.append(dep)
        if waiting:
            obj = StoredObject(task.task_id, task.client, payload, "", released=True)
            obj.refs = waiting
            self.objects[task.task_id] = obj
            task.client.objects.add(task.task_id)

    def _release(self, task: Task) -> None:
        for ref in task.references() if any(task.arg_refs) else (task.function_id,):
            obj = self.objects.get(ref)
            if obj is not None and obj.owner is task.client:
                obj.refs -= 1
                if obj.refs <= 0 and obj.released:  # obj.droppable, inline
                    self._drop_object(obj)

    # ------------------------------------------------------------------------------------------- output, monitors
    def _on_task_output(self, worker: WorkerSession, message: TaskOutput) -> None:
        """Printed output goes to the task's client (tasks flagged stream output), before the task's result; monitors
        keep a bounded part of it, and error texts until their results come, while they subscribe. Pieces of tasks
        the worker does not hold (ended, cancelled, moved meanwhile) are ignored."""
        assigned, monitored, log = worker.assigned, self.monitored, self._log
        task_ids, streams, texts = message.task_ids, message.streams, message.texts
        if not len(task_ids) == len(streams) == len(texts):  # the codecs check it; as zip(strict=True) did
            raise ValueError(f"taskOutput: {len(task_ids)} ids, {len(streams)} streams, {len(texts)} texts")
        for task_id, stream, text in zip(task_ids, streams, texts):
            task = assigned.get(task_id)
            if task is None:
                continue
            if stream == OUTPUT_ERROR:
                if monitored:
                    log.error_text(task_id, text)
                continue
            if task.flags & FLAG_STREAM_OUTPUT:
                self._forward_output(task, stream, text)
            if monitored:
                name = self.function_stats(task.function_id).name
                log.output(task_id, name, worker.name, stream, text, int(self.now * 1e6))

    def _forward_output(self, task: Task, stream: int, text: str) -> None:
        client = task.client
        if self.clients.get(client.identity) is not client:
            return
        output = client.output
        if output.chars + len(text) > MAX_PENDING_OUTPUT:
            self.output_dropped += 1
            self._warn(
                "output dropped",
                client.identity,
                f"dropped printed output of task {task.task_id:#x} for client {client.name}: more than "
                f"{MAX_PENDING_OUTPUT:,} characters of output wait for it",
            )
            return
        output.add(task.task_id, stream, text)
        self._dirty_clients[client] = None

    def function_stats(self, function_id: int) -> FunctionStats:
        """The counters of a task's function (FunctionTable). The hot paths try functions.by_id first, inline."""
        functions = self.functions
        return functions.by_id.get(function_id) or functions.of(function_id, self.objects.get(function_id), self.now)

    def _monitor_starts(self, worker: WorkerSession, ids: list[int]) -> None:
        log, assigned, time_us = self._log, worker.assigned, int(self.now * 1e6)
        for task_id in ids:
            task = assigned.get(task_id)
            if task is not None:
                log.started(task_id, self.function_stats(task.function_id).name, worker.name, time_us)

    # ------------------------------------------------------------------------------------------- objects
    def _on_put_objects(self, client: ClientSession, message: PutObjects) -> None:
        bad = []
        too_large = []
        limit = self.config.max_payload_bytes
        for k, object_id in enumerate(message.object_ids):
            if len(message.payloads[k]) > limit:
                too_large.append(object_id)
                continue
            if (
                object_id >> ID_PREFIX_SHIFT != client.prefix
                or not object_id & ID_COUNTER_MASK
                or object_id in self.objects
                or object_id in self.tasks
            ):
                bad.append(object_id)
                continue
            name = message.names[k] if message.names else ""
            self.objects[object_id] = StoredObject(object_id, client, message.payloads[k], name, released=False)
            client.objects.add(object_id)
        if bad:
            text = f"{len(bad)} object ids are not this session's, have counter 0 or are already in use"
            self._bad_request(client.identity, text, bad)
        if too_large:
            self._too_large(client.identity, "objects", too_large)

    def _on_free_objects(self, client: ClientSession, message: FreeObjects) -> None:
        for object_id in message.ids:
            obj = self.objects.get(object_id)
            if obj is not None and obj.owner is client:
                obj.released = True
                if obj.droppable:
                    self._drop_object(obj)

    def _drop_object(self, obj: StoredObject) -> None:
        del self.objects[obj.object_id]
        self.functions.by_id.pop(obj.object_id, None)
        obj.owner.objects.discard(obj.object_id)
        if obj.owner.gone:
            self._reclaim(obj.owner)
        for identity in obj.holders:
            worker = self.workers.get(identity)
            if worker is not None:
                worker.objects.discard(obj.object_id)
                worker.free_outbox.append(obj.object_id)
                self._dirty_workers[worker] = None

    # ------------------------------------------------------------------------------------------- placement
    def _place(self) -> None:
        """Give ready tasks to workers that can run them, by a pure plan over a snapshot of the open workers
        (scaler.core.scheduler.placement): levelled (one client has work: plan_level) or fair (several: plan_fair),
        the shared queue's tasks (of the needs every connected worker offers) first, then each split need's. A lone
        task goes to the least loaded worker that can run it (lone_worker: one pass). Split needs no connected worker
        offers fail their queued tasks after the grace period (_unplaced). When every worker offers what every task
        requires (the common case), no need is split: this is placement without capabilities, decision for decision.
        """
        queued = self.state_counts[TaskState.QUEUED]
        if not queued:
            self.needs.clear()
            return
        split = [need for need in self.needs.split if need.queued] if self.needs.split else []
        fair = self.busy_clients > 1 and not self.waiting_total
        if queued == 1 and not fair:  # the common lone task
            lone = split[0] if split else None
            worker = lone_worker(self.workers.values(), lone.caps if lone is not None else None, self.now)
            if worker is not None:
                if lone is not None:
                    lone.since = None
                self._dispatch(worker, _take(self.needs.ready if lone is None else lone.queue, 1))
            elif lone is not None:
                self._unplaced(lone)
            return
        now = self.now
        workers = [w for w in self.workers.values() if len(w.assigned) < w.limit and w.held_until <= now]
        caps = [w.capabilities for w in workers]
        lanes: list[Lane] = [(None, queued - sum(need.queued for need in split))]
        lanes.extend((need.caps, need.queued) for need in split)
        if fair:
            self._place_fairly(workers, caps, lanes, split)
            return
        plan = plan_level(
            [len(w.assigned) for w in workers], [w.limit for w in workers], caps, lanes, self.config.placement_grain
        )
        for lane, grants in enumerate(plan):
            need = split[lane - 1] if lane else None
            if grants is None:
                assert need is not None  # the shared lane always has grants (none without open workers)
                self._unplaced(need)
                continue
            if need is not None:
                need.since = None
            queue = need.queue if need is not None else self.needs.ready
            for index, count in grants:
                self._dispatch(workers[index], _take(queue, count))

    def _place_fairly(
        self, workers: list[WorkerSession], caps: list[frozenset[str]], lanes: list[Lane], split: list[Need]
    ) -> None:
        """Placement while several clients have unfinished tasks: each open worker, the least loaded first
        (plan_fair), is given tasks (whoever's the ready queue says: the client charged least time) while the work it
        holds stays under FAIR_QUEUE_US, one task at least if it holds none (_fill). Queued work on workers thus
        stays short, so a client that comes waits for the tasks running now, not behind another client's backlog;
        tasks already queued beyond that are asked back (_ask_back_queued)."""
        loads = [self._load_us(w) for w in workers]
        for lane, visits in enumerate(plan_fair(loads, caps, lanes)):
            need = split[lane - 1] if lane else None
            if visits is None:
                assert need is not None
                self._unplaced(need)
                continue
            if need is not None:
                need.since = None
            queue = need.queue if need is not None else self.needs.ready
            for index in visits:
                loads[index] = self._fill(workers[index], loads[index], queue)
        if self.state_counts[_QUEUED] and self.now - self._last_ask_back >= self.config.balance_interval_seconds:
            self._ask_back_queued()

    def _load_us(self, worker: WorkerSession) -> float:
        """The estimated work `worker` holds (task_cost of its tasks), counted up to just past FAIR_QUEUE_US."""
        load = 0.0
        for task in worker.assigned.values():
            load += self._task_cost(task)
            if load > FAIR_QUEUE_US:
                break
        return load

    def _fill(self, worker: WorkerSession, load: float, queue: FairQueue[Task]) -> float:
        """Give `worker` tasks of `queue` in its order while its work stays under FAIR_QUEUE_US (one task at least
        if it holds none) and it has room; returns its load then."""
        chosen: list[Task] = []
        room = worker.limit - len(worker.assigned)
        holds = bool(worker.assigned)
        while len(chosen) < room and queue:
            task = queue.peek()
            if task.state != _QUEUED:
                queue.popleft()  # ended while queued: skipped
                continue
            cost = self._task_cost(task)
            if (holds or chosen) and load + cost > FAIR_QUEUE_US:
                break
            chosen.append(queue.popleft())
            load += cost
        if chosen:
            self._dispatch(worker, chosen)
        return load

    def _ask_back_queued(self) -> None:
        """Tasks wait in the ready queue while several clients have work: ask each worker (without a request
        pending) to give back the tasks it has not started beyond FAIR_QUEUE_US of work, except, while only one
        client's tasks wait, that client's (they would only come back to wait in its place). The worker gives back
        those it has not started (balanceResponse); they wait first in their clients' lanes, and go out again
        fairly."""
        self._last_ask_back = self.now
        queue = self.needs.first_waiting()
        if queue is None:
            return
        # One client waiting: its own tasks stay (they would only come back to wait in its place). Several: any may
        # go back, or a client whose tasks fill the workers would keep the turn it cannot take.
        keep = queue.peek().client if queue.owners() < 2 else None
        for worker, ids in plan_ask_back(self.workers.values(), self._task_cost, keep):
            worker.balance_pending = True
            self._send(worker.identity, BalanceRequest(ids))

    def _unplaced(self, need: Need) -> None:
        """No open worker can take `need`'s queued tasks now. If workers are connected and none offers every
        capability it requires, its queued tasks fail once that has lasted the grace period (with no worker at all,
        they wait: nothing is known about what will join)."""
        if not self.workers:
            need.since = None
            return
        self.needs.offers.check(need)
        if need.offered:
            need.since = None
            return
        if need.since is None:
            need.since = self.now
        if self.now - need.since < self.config.capability_grace_seconds:
            return
        need.since = None
        text = missing_text(need.caps, self.needs.offers.counts)
        payload = text.encode()
        queue, failed, client = need.queue, 0, b""
        while queue:
            task = queue.popleft()
            if task.state == _QUEUED:
                failed += 1
                client = task.client.identity
                self._end(task, TaskStatus.FAILED, payload)
        if failed:  # rate-limited per client (of the last one failed): a client may keep submitting such tasks
            self._warn("missing capabilities", client, f"{failed} tasks failed: {text}")

    def _dispatch(self, worker: WorkerSession, chosen: list[Task]) -> None:
        """Assign `worker` the `chosen` tasks (queued ones, taken from their ready queue: _take, _fill) and send
        them, after the objects they refer to that it does not hold yet."""
        if not chosen:
            return
        ids: list[int] = []
        function_ids: list[int] = []
        flags = bytearray()
        arg_counts: list[int] = []
        arg_refs: list[int] = []
        keywords: list[str] | None = None
        payloads: list[Payload] = []
        put_ids: list[int] = []
        timeouts: list[int] | None = None
        held, assigned, objects = worker.objects, worker.assigned, self.objects
        if not assigned:
            worker.mark = self.now
        for task in chosen:
            task.need.queued -= 1  # QUEUED -> ASSIGNED (TRANSITION_TABLE; _move, inline: the counts after the loop)
            task.state = _ASSIGNED
            task.worker = worker
            task_id, refs = task.task_id, task.arg_refs
            assigned[task_id] = task
            for ref in (task.function_id, *refs) if any(refs) else (task.function_id,):
                if ref not in held and ref:
                    put_ids.append(ref)
                    held.add(ref)
                    objects[ref].holders.add(worker.identity)
            if task.keywords is not None and keywords is None:
                keywords = [""] * len(arg_refs)
            if keywords is not None:
                keywords.extend(task.keywords or ("",) * len(refs))
            if task.options.timeout_ms and timeouts is None:
                timeouts = [0] * len(ids)
            if timeouts is not None:
                timeouts.append(task.options.timeout_ms)
            ids.append(task_id)
            function_ids.append(task.function_id)
            flags.append(task.flags)
            arg_counts.append(len(refs))
            arg_refs.extend(refs)
            payloads.extend(task.payloads)
        counts = self.state_counts
        counts[_QUEUED] -= len(chosen)
        counts[_ASSIGNED] += len(chosen)
        if put_ids:
            self._send(worker.identity, PutObjects(put_ids, [objects[ref].payload for ref in put_ids]))
        message = DispatchTasks(ids, function_ids, bytes(flags), arg_counts, arg_refs, keywords, payloads, timeouts)
        self._send(worker.identity, message)

    def _balance(self) -> None:
        self._balance_due = False
        self._last_balance = self.now
        for worker, ids in plan_rebalance([w for w in self.workers.values() if w.held_until <= self.now]):
            worker.balance_pending = True
            self._send(worker.identity, BalanceRequest(ids))

    def _flush_outboxes(self) -> None:
        """Send what accumulated for the sessions that have something (not a walk over every session)."""
        workers, clients = self._dirty_workers, self._dirty_clients
        if workers:
            self._dirty_workers = {}
        if clients:
            self._dirty_clients = {}
        for worker in workers:
            if self.workers.get(worker.identity) is not worker:
                continue  # lost meanwhile: nothing to tell it
            if worker.cancel_outbox:
                self._send(worker.identity, CancelTasks(worker.cancel_outbox))
                worker.cancel_outbox = []
            if worker.free_outbox:
                self._send(worker.identity, FreeObjects(worker.free_outbox))
                worker.free_outbox = []
        for client in clients:
            if self.clients.get(client.identity) is not client:
                continue  # gone meanwhile
            output = client.output.take()
            if output is not None:  # before the results: a task's output arrives before its result
                self._send(client.identity, output)
            results = client.outbox.take()
            if results is not None:
                self._send(client.identity, results)

    def compact(self) -> None:
        """Let go of room kept from a burst: a dict keeps its table when emptied (after 200,000 tasks, 10 MiB). For
        the shell, when it gives memory back; changes no state."""
        self.tasks = dict(self.tasks)
        self.objects = dict(self.objects)

    # ------------------------------------------------------------------------------------------- queries
    @property
    def ended(self) -> Counter[str]:
        """Tasks ended since the start by outcome (success, error, canceled, failed): the functions' counts summed."""
        return Counter({name: n for name, n in zip(ENDED_NAMES, self.functions.ended()) if n})

    def status(self) -> Status:
        """A snapshot for the monitor socket (scaler.core.scheduler.views.status); takes the status period's records."""
        return views.status(self)

    def end_period(self) -> tuple[TaskEvents, list[TaskFailure], list[OutputRecord], list[DepartedWorker]]:
        """End the status period: note the functions' activity (and forget idle ones over the bound), take the
        period's records and start the next. status() does it; the shell calls it alone when no monitor subscribes,
        so that building no status leaves the core as building one would."""
        self.functions.end_period(self.now)
        return self._take_period()

    def _take_period(self) -> tuple[TaskEvents, list[TaskFailure], list[OutputRecord], list[DepartedWorker]]:
        """The status period's records (empty unless monitored); the next period draws one task in k, k from how
        many tasks ended in this one (monitoring.next_sample_every)."""
        ended = sum(self.functions.ended())
        log, self._log = self._log, PeriodLog(next_sample_every(ended - self._ended_at_status))
        self._ended_at_status = ended
        if not self.monitored:
            return TaskEvents(), [], [], []
        self._log.carry(log)  # error texts wait for their results, kept starts for their ends, across periods
        return log.taken_events(), log.failures, log.outputs, log.departed

    def explain(self, task_id: int) -> str:
        """Why a task is where it is, in words (scaler.core.scheduler.views.explain)."""
        return views.explain(self, task_id)

    def validate(self) -> None:
        """Check every invariant; raise InvariantError on the first broken one (scaler.core.scheduler.views)."""
        views.validate(self)


def _take(queue: FairQueue[Task], count: int) -> list[Task]:
    """The next `count` queued tasks of a ready queue, taken in its order (ended ones met on the way are dropped);
    fewer if it runs out."""
    chosen: list[Task] = []
    while queue:
        for task in queue.popmany(count - len(chosen)):
            if task.state == _QUEUED:
                chosen.append(task)
        if len(chosen) == count:
            break
    return chosen
