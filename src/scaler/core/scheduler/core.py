"""SchedulerCore: the scheduler as a synchronous state machine; here, its entry points and the path of a task (submit,
placement, dispatch, results, end), the hot path, kept in one class.

`feed(event)` records what happened (a decoded message, a tick of time, an undeliverable peer);
`flush()` places ready tasks on workers and returns every command to carry out, in order.
`handle(event)` is both. The core never awaits, never reads the clock, never touches a socket.

The other concerns live in their own modules, as components the core holds and hands their events to (sessions
opened and ended: lifecycle; objects; printed output: output; tasks asked back from workers: balancing) or as
functions of the core (tasks waiting on tasks: dependencies; what it says about peers: notices; views).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from functools import partial

from scaler.core.common import unreachable
from scaler.core.fair import FairQueue
from scaler.core.limiter import LogLimiter
from scaler.core.scheduler import dependencies, keyed, notices, views
from scaler.core.scheduler.balancing import Balancing
from scaler.core.scheduler.config import SchedulerConfig
from scaler.core.scheduler.events import (
    Command,
    Event,
    Forbidden,
    JournalEnded,
    JournalEntry,
    JournalKeyed,
    JournalMessage,
    JournalResult,
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
from scaler.core.scheduler.keyed import KeyedResults, Name
from scaler.core.scheduler.lifecycle import SessionLifecycle
from scaler.core.scheduler.managers import WorkerManagers
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
from scaler.core.scheduler.objects import ObjectStore
from scaler.core.scheduler.output import OutputRelay
from scaler.core.scheduler.placement import (
    FAIR_LINGER_SECONDS,
    FAIR_QUEUE_US,
    UNKNOWN_TASK_US,
    Lane,
    lone_worker,
    plan_fair,
    plan_level,
)
from scaler.core.scheduler.prefixes import Prefixes
from scaler.core.scheduler.sessions import ClientSession, WorkerSession
from scaler.core.scheduler.tasks import STATE_NAMES, TRANSITION_TABLE, Task, TaskEvent, TaskState
from scaler.protocol.capabilities import missing_text
from scaler.protocol.records import (
    DEFAULT_OPTIONS,
    FLAG_REPORT_END,
    FLAG_SILENT,
    ID_COUNTER_MASK,
    ID_PREFIX_SHIFT,
    MESSAGE_NAMES,
    RETRIABLE_STATUSES,
    BalanceResponse,
    CancelTasks,
    DepartedWorker,
    Disconnect,
    DispatchTasks,
    Error,
    ErrorCode,
    ExplainTasks,
    FreeObjects,
    Heartbeat,
    HeartbeatEcho,
    Hello,
    Message,
    OutputRecord,
    Payload,
    PutObjects,
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
)

_EMPTY = b""
_WAITING, _QUEUED, _ASSIGNED, _ENDED = TaskState.WAITING, TaskState.QUEUED, TaskState.ASSIGNED, TaskState.ENDED
_CANCELING = TaskState.CANCELING  # the hot paths' constants
_ENDS = [row[TaskEvent.END] for row in TRANSITION_TABLE]  # what each state ends in (None: it cannot end)
# The moves the hot paths make inline (_on_submit: a new task made ready; _dispatch: assigned), as the table says.
assert (
    TRANSITION_TABLE[_WAITING][TaskEvent.READY] == _QUEUED and TRANSITION_TABLE[_QUEUED][TaskEvent.ASSIGN] == _ASSIGNED
)
assert all(new in (None, _ENDED) for new in _ENDS)
_SMOOTHING = 0.25  # of the moving average of a client's task run time
# A client's messages a journaled scheduler writes to its journal (what recovery.replay feeds a new core again)
_JOURNALED = frozenset({SubmitTasks, PutObjects, CancelTasks, FreeObjects})


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
        self.fair_until = -1.0  # ...and stays fair until then, once several were busy at once (FAIR_LINGER_SECONDS)
        # Tasks waiting on nested tasks, as the workers' heartbeats last said: while there are any, placement is by
        # turns only (the nested tasks must reach workers whatever their queues hold; _place)
        self.waiting_total = 0
        self.clients: dict[bytes, ClientSession] = {}
        self.workers: dict[bytes, WorkerSession] = {}
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
        # With a journal (config.journaled): client sessions opened and ended, their work taken, results sent or held
        # for them, since the shell last took them; the shell writes them before it sends the flush's messages (ADR
        # 0023; recovery.replay reads them back).
        self._journaled = self.config.journaled
        self.journal: list[JournalEntry] = []
        # (After a restart.) Tasks run again only for the tasks waiting on them: their clients have their results
        # (scaler.core.scheduler.recovery); nothing of them goes to their clients.
        self.reruns: set[int] = set()
        # Idempotent-keyed tasks (scaler.core.scheduler.keyed): the results kept by key, and the key of each keyed task
        # not ended that has none kept yet
        self.keyed = KeyedResults(self.config.keyed_results_bytes)
        self.keyed_tasks: dict[int, Name] = {}
        # sessions with something in their outboxes, in the order they got it (dicts: deterministic order)
        self._dirty_workers: dict[WorkerSession, None] = {}
        self._dirty_clients: dict[ClientSession, None] = {}
        self._balance_due = False
        self._last_balance = -math.inf
        self._last_ask_back = -math.inf  # the last pass of Balancing.ask_back_queued (one per balance interval at most)
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
        # The objects, by id: the store's dict, which the hot paths read as self.objects (one lookup less).
        self.object_store = ObjectStore(self.config, self.functions, self.prefixes, self.workers, self._post)
        self.objects = self.object_store.objects
        self.output = OutputRelay(self)  # printed output on its way to clients
        self.lifecycle = SessionLifecycle(self)  # sessions opened, kept and ended
        self.balancing = Balancing(self)  # queued tasks asked back from workers
        self.managers = WorkerManagers(self)  # worker managers, and the scaling policy they carry out

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
            self._on_received(event.peer, event.message, event.key, event.raw)
        elif isinstance(event, Tick):
            self._on_tick()
        elif isinstance(event, Malformed):
            self._on_malformed(event)
        elif isinstance(event, Undeliverable):
            self.lifecycle.on_undeliverable(event.peer, event.reason)
        elif isinstance(event, Forbidden):
            self.lifecycle.on_forbidden(event.peer, event.public, event.reason)
        elif isinstance(event, Revoked):
            self.lifecycle.on_revoked(event.keys)
        else:
            unreachable(event)

    def _on_malformed(self, event: Malformed) -> None:
        self.dropped += 1
        if self._limiter.allow(self.now, "malformed message", event.peer):
            code = ErrorCode.BAD_REQUEST if event.unexpected else ErrorCode.MALFORMED
            self._send(event.peer, Error(code, event.reason))
            self._out.append(Log.warning(f"dropped a message from {notices.label(self, event.peer)}: {event.reason}"))

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
                self.balancing.rebalance()
            self._flush_outboxes()
        out, self._out = self._out, []
        sent = self.sent
        for command in out:
            if type(command) is Send:
                sent[MESSAGE_NAMES[type(command.message)]] += 1
        return out

    # ------------------------------------------------------------------------------------------- dispatching
    def _on_received(
        self, peer: bytes, message: Message, key: PeerKey | None, raw: Sequence[Payload] | None = None
    ) -> None:
        self.received[MESSAGE_NAMES[type(message)]] += 1
        if isinstance(message, Hello):
            self.lifecycle.on_hello(peer, message, key)
            return
        public = key.public if key is not None else None
        client = self.clients.get(peer)
        if client is not None:
            if client.key != public:
                self.lifecycle.wrong_key(peer, key)
                return
            client.last_seen = self.now
            if self._journaled and type(message) in _JOURNALED:  # before it is handled: replayed in this order
                if client.outbox.ids and not client.awaiting:  # results of this flush go first: the journal says
                    # they ended before it came (a replay, whose clients are not back, holds them till they end)
                    self._flush_client(client)
                self.journal.append(JournalMessage(peer, message, raw))
            self._on_client_message(client, message)
            return
        worker = self.workers.get(peer)
        if worker is not None:
            if worker.key != public:
                self.lifecycle.wrong_key(peer, key)
                return
            worker.last_seen = self.now
            self._on_worker_message(worker, message)
            return
        manager = self.managers.sessions.get(peer)
        if manager is not None:
            if manager.key != public:
                self.lifecycle.wrong_key(peer, key)
            else:
                self.managers.on_message(manager, message)
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
            if message.idempotency_keys is not None:
                keyed.admit(self, client, message)
        elif isinstance(message, Heartbeat):
            if not message.resumed:
                self._send(client.identity, with_workers(HeartbeatEcho(), self.workers.values(), self.now))
            else:
                self.lifecycle.resumed(client, message)
        elif isinstance(message, PutObjects):
            bad_ids, large = self.object_store.put(client, message, self.tasks)
            notices.refuse_objects(self, client, bad_ids, large)
        elif isinstance(message, CancelTasks):
            self._on_cancel(client, message)
        elif isinstance(message, FreeObjects):
            self.object_store.free(client, message.ids)
        elif isinstance(message, Disconnect):
            self.lifecycle.client_gone(client, f"disconnected{': ' + message.reason if message.reason else ''}")
        elif isinstance(message, ShutdownRequest):
            self.lifecycle.on_shutdown_request(client, message)
        elif isinstance(message, ExplainTasks):
            views.answer_explain(self, client, message.ids)
        else:
            notices.bad_request(self, client.identity, f"a client may not send {MESSAGE_NAMES[type(message)]}")

    def _on_worker_message(self, worker: WorkerSession, message: Message) -> None:
        if type(message) is not Heartbeat:
            worker.messages_received += 1
        if isinstance(message, TaskResults):
            self._on_results(worker, message)
        elif isinstance(message, Heartbeat):
            self.lifecycle.on_worker_heartbeat(worker, message)
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
            self.output.on_task_output(worker, message)
        elif isinstance(message, BalanceResponse):
            self.balancing.on_balance_response(worker, message)
        elif isinstance(message, Disconnect):
            reason = f"disconnected{': ' + message.reason if message.reason else ''}"
            self.lifecycle.worker_lost(worker, reason, count_attempt=False)
        else:
            notices.bad_request(self, worker.identity, f"a worker may not send {MESSAGE_NAMES[type(message)]}")

    def _send(self, peer: bytes, message: Message) -> None:
        self._out.append(Send(peer, message))
        if type(message) is not HeartbeatEcho:
            session = self.clients.get(peer) or self.workers.get(peer)
            if session is not None:
                session.messages_sent += 1

    def _post(self, worker: WorkerSession) -> None:
        """`worker`'s cancel or free outbox has something for the next flush (_flush_outboxes)."""
        self._dirty_workers[worker] = None

    def _on_tick(self) -> None:
        now = self.now
        oldest_worker, oldest_client = self.oldest_seen
        config = self.config
        if now - oldest_worker > config.worker_timeout_seconds or now - oldest_client > config.client_timeout_seconds:
            self.lifecycle.time_out_silent(now)
        if now - self._last_balance >= self.config.balance_interval_seconds:
            self._balance_due = True
        if self.names.lost:
            self.names.prune(now)
        self.needs.prune()
        if self.managers.sessions:
            self.managers.tick()
        for line in self._limiter.summary(now, partial(notices.label, self)):
            self._out.append(Log.warning(line))

    def restore_client(
        self, now: float, identity: bytes, name: str, prefix: int, key: bytes | None = None
    ) -> ClientSession:
        """A client session the journal holds, restored at `now`, before anything is served (the shell's recovery,
        ADR 0023): the client resumes it when it comes back (a resumed heartbeat from `identity`); meanwhile what is
        for it waits, and it is let go client_timeout_seconds after `now` like any silent client."""
        self.now = max(self.now, now)
        self.prefixes.claim(prefix)
        client = self.clients[identity] = ClientSession(identity, name, prefix, self.now, key)
        client.recovered = client.awaiting = True
        self.oldest_seen = (self.oldest_seen[0], min(self.oldest_seen[1], self.now))
        return client

    def stop(self, reason: str, workers_stay: bool = False) -> None:
        """Tell every peer the scheduler stops, then emit Stop. Later events are ignored. workers_stay: only the
        scheduler stops (a signal), and its workers keep running and say hello until a scheduler answers again (and,
        with a journal, its clients wait for it: their sessions stay in the journal); else (a client's shutdown
        request) the cluster ends with it."""
        self._flush_outboxes()
        for peer in self.workers:
            self._send(peer, Shutdown(reason, workers_stay))
        comes_back = workers_stay and self._journaled  # its clients' sessions stay in the journal: they wait for it
        for peer in self.clients:
            self._send(peer, Shutdown(reason, comes_back))
        self._out.append(Stop(reason))
        self._stopped = True

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
                if not (client.recovered and task_id >> ID_PREFIX_SHIFT == prefix and task_id & ID_COUNTER_MASK):
                    bad_ids.append(task_id)
                elif task_id in self.reruns:  # run again for others, and its client lacks its result after all
                    self.reruns.discard(task_id)
                    tasks[task_id].flags = flags
                # (else sent again after the scheduler's restart, and held already: ignored)
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
            if function is not None and function.owner is client:  # the common case: only its function, the client's,
                function.refs += 1  # is referenced (dependencies.link, inline): WAITING -> READY -> QUEUED at once
                counts[_QUEUED] += 1
                need.queued += 1
                task.state = _QUEUED
                ready.append(task)
            else:
                counts[_WAITING] += 1
                if dependencies.link(self, task):
                    ready.append(task)
        self.needs.extend_ready(ready)
        self._count_submitted(batch.function_ids, refused, needs, index)
        if refused:
            notices.refuse_tasks(self, client, bad_ids, too_large, invalid, problems)

    def _filed(self, needs: list[Need | frozenset[str] | None], index: int) -> Need | None:
        """The Need of a batch's requirement `index` (NeedTable.batch), filed when a task first has it."""
        need = needs[index]
        if isinstance(need, frozenset):
            need = needs[index] = self.needs.of(need)
        return need

    def _count_submitted(
        self,
        function_ids: list[int],
        refused: list[int],
        needs: list[Need | frozenset[str] | None],
        index: list[int] | None,
    ) -> None:
        """Count a batch's tasks by function: one pass in C over its column, not a lookup per task. And note each
        function on the need of its tasks (Need.functions: the scaling policy's estimate of the work of a need)."""
        n = len(function_ids)
        only = needs[0] if index is None else None  # the one need of the batch's tasks
        if n and not refused and function_ids.count(function_ids[0]) == n:  # one function (a map, a lone task)
            stats = self.function_stats(function_ids[0])
            stats.submitted += n
            if isinstance(only, Need):
                only.functions[stats] = None
        else:
            counts = Counter(function_ids)
            counts.subtract(refused)
            for function_id, count in counts.items():
                if count:
                    stats = self.function_stats(function_id)
                    stats.submitted += count
                    if isinstance(only, Need):
                        only.functions[stats] = None
        if index is not None:
            for function_id, k in set(zip(function_ids, index)):
                need = needs[k]
                if isinstance(need, Need):
                    need.functions[self.function_stats(function_id)] = None

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
            self._post(task.worker)

    def _on_results(self, worker: WorkerSession, message: TaskResults) -> None:
        durations, peaks, cpu_times = message.durations_us, message.peak_memory, message.cpu_times_us
        statuses, payloads, limit = message.statuses, message.payloads, self.config.max_payload_bytes
        assigned = worker.assigned
        span = self._span(worker, len(message.task_ids))
        measured: ClientSession | None = None  # the client last charged `span`: a batch is mostly one client's
        measured_function = 0  # and the function (0 is never an id)
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
                notices.info(
                    self,
                    "retry",
                    task.client.identity,
                    f"task {task.task_id:#x} ended {what} on {worker.name}: {retry}",
                )
            else:
                if task.client is not measured or task.function_id != measured_function:
                    self._measure(task, span, measured, measured_function)
                    measured, measured_function = task.client, task.function_id
                payload = payloads[k]
                if len(payload) > limit or self.keyed_tasks:
                    status, payload = self._checked_result(task, worker, status, payload)
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

    def _checked_result(self, task: Task, worker: WorkerSession, status: int, payload: Payload) -> tuple[int, Payload]:
        """The outcome a worker's result gives `task`: a failure if it is over the payload limit; for a keyed task
        that succeeded, the result kept under its key (this one, kept and journaled now, unless a run of the same key
        was kept first: then that one, so that a key delivers one result)."""
        size = len(payload)
        if size > self.config.max_payload_bytes:
            return TaskStatus.FAILED, notices.result_too_large(self, task, worker, size)
        name = self.keyed_tasks.pop(task.task_id, None)
        if name is None or status != TaskStatus.SUCCESS:
            return status, payload
        earlier = self.keyed.keep(name, payload)
        if earlier is not None:
            return status, earlier
        if self._journaled:
            self.journal.append(JournalKeyed(name[0], name[1], payload))
        return status, payload

    def _span(self, worker: WorkerSession, count: int) -> float:
        """How long each of `count` results that came now took on their worker, in µs: the time since its previous
        results (or since it got its first task after being idle), shared among them."""
        span = (self.now - worker.mark) * 1e6 / count
        worker.mark = self.now
        return span

    def _measure(self, task: Task, span_us: float, client: ClientSession | None, function_id: int) -> None:
        """Count one measured run of a task in the moving averages of its client (ClientSession.task_us), unless it is
        `client`, and of its function (FunctionStats.span_us), unless it is `function_id`: those `span_us` counted
        already."""
        if task.client is not client:
            estimate = task.client.task_us
            task.client.task_us = span_us if estimate < 0 else estimate + (span_us - estimate) * _SMOOTHING
        if task.function_id != function_id:
            stats = self.functions.by_id.get(task.function_id) or self.function_stats(task.function_id)
            estimate = stats.span_us
            stats.span_us = span_us if estimate < 0 else estimate + (span_us - estimate) * _SMOOTHING

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
            self.busy_clients -= not client.task_count  # (its last unfinished task)
            client.completed += 1
            if client.gone:
                self.prefixes.reclaim(client)
            stats = by_id.get(task.function_id) or self.function_stats(task.function_id)
            stats.ended[index] += 1
            if duration_us and status <= TaskStatus.ERROR:
                stats.ran(duration_us)
            if self.monitored:  # (the dependents were not assigned: reported by no worker)
                text = self._log_end(task, first, worker, status, payload, stats.name, duration_us, peak, text)
            if not task.flags & FLAG_SILENT and self.clients.get(client.identity) is client:
                client.outbox.add(task.task_id, status, payload, duration_us, peak, cpu_us)
                self._dirty_clients[client] = None
            elif task.flags & FLAG_SILENT and (self._journaled or task.flags & FLAG_REPORT_END):
                self._silent_end(task, status)
            if task.dependents:
                dependencies.ended_dependents(self, task, status, payload, pending)
            if pinned or task is not first:
                self._release(task)
            duration_us = peak = cpu_us = 0

    def _log_end(
        self,
        task: Task,
        first: Task,
        worker: WorkerSession | None,
        status: int,
        payload: Payload,
        name: str,
        duration_us: int,
        peak: int,
        text: str | None,
    ) -> str | None:
        """(A monitor subscribes.) Record a task's end for the status period (reported by `worker` if it is `first`:
        the tasks ended with it were not assigned); its failure's text, if any."""
        worker_name = worker.name if worker is not None and task is first else None
        return self._log.ended(
            task.task_id, status, payload, name, worker_name, int(self.now * 1e6), duration_us, peak, text
        )

    def _silent_end(self, task: Task, status: int) -> None:
        """(A journaled scheduler, or a task flagged FLAG_REPORT_END.) A silent task ended: its client is told so,
        without its result (a journaled client then forgets the task, and does not send it again after a restart; the
        journal marks it ended; a graph's progress counts it), unless it was run again after a restart only for the
        tasks waiting on it (recovery: its client has its result)."""
        reruns = self.reruns
        if reruns and task.task_id in reruns:
            reruns.discard(task.task_id)
            return
        client = task.client
        if self.clients.get(client.identity) is client:
            client.outbox.add(task.task_id, status, _EMPTY)
            self._dirty_clients[client] = None

    def _release(self, task: Task) -> None:
        if self.keyed_tasks:  # (a keyed task that ended without a result kept: cancelled, failed, ...)
            self.keyed_tasks.pop(task.task_id, None)
        for ref in task.references() if any(task.arg_refs) else (task.function_id,):
            obj = self.objects.get(ref)
            if obj is not None and obj.owner is task.client:
                obj.refs -= 1
                if obj.refs <= 0 and obj.released:  # obj.droppable, inline
                    self.object_store.drop(obj)

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
        busy = self.busy_clients
        if busy > 1:
            self.fair_until = self.now + FAIR_LINGER_SECONDS
        fair = (busy > 1 or (busy == 1 and self.now < self.fair_until)) and not self.waiting_total
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
        tasks already queued beyond that are asked back (Balancing.ask_back_queued)."""
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
            self.balancing.ask_back_queued()

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

    def _unplaced(self, need: Need) -> None:
        """No open worker can take `need`'s queued tasks now. If workers are connected and none offers every
        capability it requires, its queued tasks fail once that has lasted the grace period (with no worker at all,
        they wait: nothing is known about what will join)."""
        if not self.workers:
            need.since = None
            return
        self.needs.offers.check(need)
        if need.offered or self.managers.serves(need.caps):  # (or a worker manager can bring a worker for it)
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
            notices.warn(self, "missing capabilities", client, f"{failed} tasks failed: {text}")

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
            if self.clients.get(client.identity) is client:  # (not gone meanwhile)
                self._flush_client(client)

    def _flush_client(self, client: ClientSession) -> None:
        if client.awaiting:  # not back after a restart yet: its results wait for it in the journal (resumed)
            self._hold(client)
            return
        output = client.output.take()
        if output is not None:  # before the results: a task's output arrives before its result
            self._send(client.identity, output)
        results = client.outbox.take()
        if results is not None:
            if self._journaled:
                self.journal.append(JournalEnded(client.identity, results.task_ids, results.statuses))
            self._send(client.identity, results)

    def _hold(self, client: ClientSession) -> None:
        """(A restored session whose client is not back.) Its new results are held, and journaled: a second restart
        before it comes back must not compute them again."""
        results = client.outbox.take()
        if results is not None:
            client.held.append(results)
            if self._journaled:
                self.journal.append(JournalResult(client.identity, results))

    def send_held(self, client: ClientSession) -> None:
        """A restored session's client is back: what waited for it goes first (before the echo that has it send its
        unfinished work again, which would compute these again)."""
        output = client.output.take()
        if output is not None:
            self._send(client.identity, output)
        held, client.held = client.held, []
        results = client.outbox.take()
        if results is not None:
            held.append(results)
        for results in held:
            if self._journaled:
                self.journal.append(JournalEnded(client.identity, results.task_ids, results.statuses))
            self._send(client.identity, results)

    def compact(self) -> None:
        """Let go of room kept from a burst: a dict keeps its table when emptied (after 200,000 tasks, 10 MiB). For
        the shell, when it gives memory back; changes no state."""
        self.tasks = dict(self.tasks)
        self.object_store.compact()
        self.objects = self.object_store.objects

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
