"""AgentCore: a worker agent's state machine. It holds the tasks the scheduler gave this worker, feeds them to
its processor (the process that runs user code), coalesces results, heartbeats, gives tasks back when the
scheduler balances, and restarts or adds processors when one dies or blocks on nested tasks.

Pure: events in, commands out; no sockets, no clock, no processes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter

from scaler.core.capabilities import worker_capabilities
from scaler.core.common import InvariantError, Log, Send, unreachable
from scaler.core.common import Stop as Stop  # (the process must stop, with an exit code)
from scaler.core.fair import FairQueue
from scaler.core.outbox import MeasuredResultColumns, OutputColumns
from scaler.core.worker import messages as pm
from scaler.core.worker.states import (
    ENDED,
    IN_SESSION,
    SESSION_TRANSITIONS,
    AgentTask,
    ProcessorSlot,
    ProcessorState,
    ProcessorStep,
    SessionState,
    SessionStep,
    TaskState,
    TaskStep,
)
from scaler.protocol.records import (
    FLAG_PROFILING,
    BalanceRequest,
    BalanceResponse,
    CancelTasks,
    Disconnect,
    DispatchTasks,
    Error,
    ErrorCode,
    FreeObjects,
    Heartbeat,
    HeartbeatEcho,
    Hello,
    Message,
    Payload,
    PeerKind,
    PutObjects,
    Refused,
    Shutdown,
    TasksStarted,
    TaskStatus,
    Welcome,
)


@dataclass(frozen=True)
class AgentConfig:
    name: str = "worker"
    hostname: str = ""
    pid: int = 0
    queue_capacity: int = 1000
    heartbeat_interval_seconds: float = 2.0
    # Give up (and exit) when the scheduler has been silent this long.
    scheduler_timeout_seconds: float = 300.0
    # Most processors alive at once (more than one only while tasks wait on nested tasks).
    max_processors: int = 16
    # A processor is given about this much work (by recent run times) at once; between 1 and max_window tasks.
    window_seconds: float = 0.002
    max_window: int = 64
    # A processor whose memory (RSS) goes over this is stopped, and the task it runs ends overMemory (0: no limit).
    memory_limit_bytes: int = 0
    # What it offers beyond payload=python (scaler_cluster --capability): tasks requiring them may run here.
    capabilities: tuple[str, ...] = ()
    # The unit a worker manager started it in (scaler_cluster --unit), said in its hello; "" when started by hand.
    unit: str = ""
    # Stop when the scheduler stops cleanly (scaler_cluster --exit-with-scheduler), instead of waiting for it to come
    # back (saying hello until one answers, at most scheduler_timeout_seconds). A client's shutdown always stops it.
    exit_with_scheduler: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "capabilities", worker_capabilities(self.capabilities)[1:])  # checked, no repeats

    @property
    def offered(self) -> tuple[str, ...]:
        """What its hello advertises: payload=python, then its capabilities."""
        return worker_capabilities(self.capabilities)


# ---------------------------------------------------------------------------------------------- events
@dataclass(frozen=True, slots=True)
class Started:
    now: float


@dataclass(frozen=True, slots=True)
class FromScheduler:
    now: float
    message: Message


@dataclass(frozen=True, slots=True)
class FromProcessor:
    now: float
    processor: int
    message: pm.FromProcessor


@dataclass(frozen=True, slots=True)
class ProcessorExited:
    now: float
    processor: int
    exit_code: int | None
    running_task: int = 0  # the task it had started and not finished when it died (0: none)


@dataclass(frozen=True, slots=True)
class Tick:
    now: float
    cpu_percent: float = 0.0
    rss_bytes: int = 0
    processor_cpu_percent: float = 0.0
    processor_rss_bytes: int = 0
    # (processor, its RSS in bytes) for each live processor, when the agent has a memory limit (else empty)
    processor_rss: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class StopRequested:
    now: float
    reason: str


@dataclass(frozen=True, slots=True)
class SchedulerLink:
    """The connection to the scheduler closed (up=False: its process died, or the network reset it) or is back."""

    now: float
    up: bool


AgentEvent = Started | FromScheduler | FromProcessor | ProcessorExited | Tick | StopRequested | SchedulerLink


# ---------------------------------------------------------------------------------------------- commands
ToScheduler = Send  # a message for the scheduler (the agent's one peer): scaler.core.common.Send


@dataclass(frozen=True, slots=True)
class ToProcessor:
    processor: int
    message: pm.ToProcessor


@dataclass(frozen=True, slots=True)
class StartProcessor:
    processor: int


@dataclass(frozen=True, slots=True)
class KillProcessor:
    processor: int


@dataclass(frozen=True, slots=True)
class KillIfRunning:
    """Kill the processor if it is running this task now (a cancelled task that had started)."""

    processor: int
    task_id: int


AgentCommand = ToScheduler | ToProcessor | StartProcessor | KillProcessor | KillIfRunning | Stop | Log


# ---------------------------------------------------------------------------------------------- state
QUEUED, IN_PROCESSOR, GONE = TaskState.QUEUED, TaskState.IN_PROCESSOR, TaskState.GONE
TO_PROCESSOR, BACK, LEAVE = TaskStep.TO_PROCESSOR, TaskStep.BACK, TaskStep.LEAVE  # (names: no enum lookup per task)
STARTING, READY, BLOCKED = ProcessorState.STARTING, ProcessorState.READY, ProcessorState.BLOCKED
HELLO_RETRY_SECONDS = 10.0  # say hello again if no welcome came for this long (a second hello ends the first)
# The connection to the scheduler closed and did not come back within this long: its session is gone (a scheduler
# that restarts on the same address knows nothing of it either). Stop its work, and say hello until one answers.
LINK_GRACE_SECONDS = 2.0
# While this agent's tasks take less than this on average, it tells the scheduler which tasks it handed to a processor
# one flush late (the next event, at worst the next tick, 0.1 s), and only of those still running then: most have sent
# their result by then, which says more, and a round trip is spared a message (about 10 % of it). Otherwise, and
# while run times are unknown (a new agent), at once: a task that kills its agent as soon as it starts is then charged
# an attempt on every fresh agent it reaches, so it cannot take workers down forever.
EAGER_NOTICE_ABOVE_US = 1000.0
DEATHS_WITHOUT_PROGRESS = 3  # a processor dying this often outside any task: blame the task it was given first
# What only a session's scheduler sends about its tasks and objects. Between a hello and its welcome such messages
# belong to the session the hello ends, and are dropped: a scheduler that stalled past our timeout may still send them
# (it read our heartbeats before our hello), trusting objects we have forgotten, to tasks it re-queues at our hello.
SESSION_WORK = (DispatchTasks, PutObjects, FreeObjects, CancelTasks, BalanceRequest)


# The client a task is queued for (AgentTask.owner), read without a call into Python: once per task queued.
_owner: Callable[[AgentTask], int] = attrgetter("owner")


class AgentCore:
    def __init__(self, config: AgentConfig | None = None) -> None:
        self.config = config or AgentConfig()
        self.queue: FairQueue[AgentTask] = FairQueue(_owner)  # clients take turns; may hold gone tasks (skipped)
        self.queued = 0
        self.tasks: dict[int, AgentTask] = {}
        self.objects: dict[int, Payload] = {}
        self.processors: dict[int, ProcessorSlot] = {}
        self.active: int | None = None  # the processor new tasks go to
        # Its session with the scheduler: changed only by _move_session (SESSION_TRANSITIONS), which keeps the two
        # flags read on every event: connected (in a session: welcomed, not lost since) and stopped.
        self.session = SessionState.NEW
        self.connected = False
        self.stopped = False
        self.mean_duration_us = 0.0
        self._window = 1  # tasks a processor is given at once: _window_size(), kept as the mean run time changes
        self._window_us = self.config.window_seconds * 1e6
        self._max_window = max(1, self.config.max_window)
        self.max_payload_bytes = 0  # the scheduler's limit per payload, from its welcome (0: none stated)
        self.lag_us = 0
        self.completed = 0
        self._next_processor = 0
        self._start_failures = 0
        self.heartbeat_interval = self.config.heartbeat_interval_seconds
        self._last_heard = 0.0
        self._last_heartbeat = -1e18
        self._heartbeat_sent_at = 0.0
        self._echo_awaited = False
        self._hello_sent_at = 0.0
        self._deaths_without_progress = 0
        self._said_all_blocked = False  # the "all processors blocked" warning is given once per episode
        self._waiting_said = 0  # waiting tasks in our latest heartbeat
        self._canceling: set[int] = set()  # tasks in a processor asked to be discarded because they were cancelled
        self._giving_back: set[int] = set()  # tasks in a processor asked to be discarded, for the scheduler
        self._out: list[AgentCommand] = []
        self._results = MeasuredResultColumns()  # sent to the scheduler at the next flush
        self._output = OutputColumns()  # pieces of text tasks wrote: sent at the next flush, before the results
        # Tasks handed to processors at this flush (tasksStarted), and those of the flush before that have not left
        # since (a task leaving drops out: its result said more), told at this flush if still in a processor. Ordered
        # sets (dicts), so that a round trip's result, leaving, spares the next flush a look at its task.
        self._started: dict[int, None] = {}
        self._started_late: dict[int, None] = {}
        # Messages of this session each way, heartbeats, echoes and the hello excluded (the welcome included): after a
        # connection reset, both sides check that nothing was lost (docs/protocol.md "Connection resets").
        self.messages_sent = 0
        self.messages_received = 0
        self._link_down_since: float | None = None  # when the connection to the scheduler closed, while it is
        self._peer_timeout = 0.0  # the scheduler declares us lost after this much silence (its welcome says)
        self._now = 0.0  # the time of the latest event: when a timed task handed to a processor now started

    # ------------------------------------------------------------------------------------------- entry points
    def handle(self, event: AgentEvent) -> list[AgentCommand]:
        self.feed(event)
        return self.flush()

    def feed(self, event: AgentEvent) -> None:
        if self.stopped:
            return
        self._now = event.now
        # isinstance chains, as in the scheduler's and the client's cores (the scheduler's run on Python 3.9): one
        # dispatch style in every core; unreachable() keeps mypy's check that every kind of event is handled
        if isinstance(event, FromProcessor):
            self._on_processor(event.processor, event.message)
        elif isinstance(event, FromScheduler):
            self._last_heard = event.now
            if type(event.message) is not HeartbeatEcho:
                self.messages_received += 1  # (a welcome starts the count again)
            if self.connected or not isinstance(event.message, SESSION_WORK):  # else: of the session we ended
                self._on_scheduler(event.now, event.message)
        elif isinstance(event, Tick):
            self._on_tick(event)
        elif isinstance(event, ProcessorExited):
            self._on_processor_exit(event.processor, event.exit_code, event.running_task)
        elif isinstance(event, Started):
            self._last_heard = event.now
            self._send_hello(event.now)
            self._start_processor()
        elif isinstance(event, StopRequested):
            self._to_scheduler(Disconnect(event.reason))
            self._stop(event.reason)
        elif isinstance(event, SchedulerLink):
            if event.up and self._link_down_since is not None and self.connected:
                self._move_session(SessionStep.RECONNECTED)
                self._last_heartbeat = -1e18  # at the next tick
            self._link_down_since = None if event.up else (self._link_down_since or event.now)
        else:
            unreachable(event)

    def flush(self) -> list[AgentCommand]:
        # Nothing new starts while the connection to the scheduler is closed: its results could not be delivered, and
        # if the scheduler died (it restarts), the session is lost with them and they would run again.
        if self.queued and not self.stopped and self._link_down_since is None:
            self._feed_processor()
        if self._started or self._started_late:
            self._tell_started()
        output = self._output.take() if self._output.ids else None  # (no call on an empty flush)
        if output is not None:  # before the results: a task's output reaches its client before its result
            self._to_scheduler(output)
        results = self._results.take() if self._results.ids else None
        if results is not None:
            self._to_scheduler(results)
        out, self._out = self._out, []
        return out

    def _tell_started(self) -> None:
        """The scheduler charges an attempt only to tasks that may have started, should this worker be lost: tell it
        which were handed to processors (see EAGER_NOTICE_ABOVE_US for when)."""
        late, started = self._started_late, self._started
        due: list[int] = []
        if late:
            tasks = self.tasks
            for task_id in late:
                task = tasks.get(task_id)
                if task is not None and task.state is IN_PROCESSOR:
                    due.append(task_id)
            late.clear()
        if 0 < self.mean_duration_us < EAGER_NOTICE_ABOVE_US:
            self._started_late, self._started = started, late  # (the two change places: none made per flush)
        elif started:
            due += started
            started.clear()
        if due:
            self._to_scheduler(TasksStarted(due))

    # ------------------------------------------------------------------------------------------- scheduler
    def _hello(self) -> Hello:
        c = self.config
        return Hello(
            PeerKind.WORKER,
            c.name,
            c.hostname,
            c.pid,
            int(c.heartbeat_interval_seconds * 1000),
            c.queue_capacity,
            capabilities=list(c.offered),
            unit=c.unit,
        )

    def _on_scheduler(self, now: float, message: Message) -> None:
        if isinstance(message, DispatchTasks):
            self._on_dispatch(message)
        elif isinstance(message, PutObjects):
            for object_id, payload in zip(message.object_ids, message.payloads, strict=False):
                self.objects[object_id] = payload
        elif isinstance(message, FreeObjects):
            self._on_free(message.ids)
        elif isinstance(message, CancelTasks):
            self._on_cancel(message.ids)
        elif isinstance(message, BalanceRequest):
            self._on_balance_request(message.ids)
        elif isinstance(message, HeartbeatEcho):
            self._on_echo(now, message)
        elif isinstance(message, Welcome):
            self._on_welcome(message)
        elif isinstance(message, Shutdown):  # it is going: nothing more for it (the shell does not wait to send)
            self._on_shutdown(now, message)
        elif isinstance(message, Refused):
            self._stop(f"the scheduler refused this worker: {message.reason}", exit_code=1)
        elif isinstance(message, Error):
            self._on_error(now, message)
        # nothing else reaches a worker (decode refuses what workers never accept)

    def _on_echo(self, now: float, echo: HeartbeatEcho) -> None:
        if self._echo_awaited:  # the scheduler also sends echoes unasked, to probe connections
            self._echo_awaited = False
            self.lag_us = max(0, int((now - self._heartbeat_sent_at) * 1e6))
        if echo.resumed and echo.sent != self.messages_received and self.connected:
            # Something the scheduler sent was lost in the reset (a dispatch, say): this session cannot be trusted.
            self._lose_session(
                now,
                f"messages from the scheduler were lost in a connection reset (it sent {echo.sent}, "
                f"{self.messages_received} came); saying hello again",
            )

    def _on_welcome(self, message: Welcome) -> None:
        self._move_session(SessionStep.WELCOME)
        self._forget_session()
        self.messages_received = 1  # a new session: the welcome is its first message
        self._peer_timeout = message.peer_timeout_ms / 1000
        self.max_payload_bytes = message.max_payload_bytes
        if message.peer_timeout_ms:  # beat often enough for the scheduler's patience
            self.heartbeat_interval = min(self.config.heartbeat_interval_seconds, message.peer_timeout_ms / 4000)
        offered = ", ".join(self.config.offered)
        self._out.append(Log.info(f"connected to scheduler {message.scheduler_name}, offering {offered}"))

    def _on_error(self, now: float, message: Error) -> None:
        if message.code == ErrorCode.NOT_CONNECTED:
            # The scheduler lost our session (it restarted, or declared us dead): it re-runs our tasks elsewhere.
            # Several messages in flight bring several such errors: say hello once.
            if self.connected:
                self._lose_session(now, "the scheduler lost this worker's session; saying hello again")
        else:
            self._out.append(Log.warning(f"the scheduler refused a message: {message.message}"))

    def _move_session(self, step: SessionStep) -> None:
        """The one way the session changes: by SESSION_TRANSITIONS (any other change is a bug: InvariantError)."""
        after = SESSION_TRANSITIONS.get((self.session, step))
        if after is None:
            raise InvariantError(f"the session cannot take {step.value} while {self.session.value}")
        self.session = after
        self.connected = after in IN_SESSION
        self.stopped = after in ENDED

    def _on_shutdown(self, now: float, message: Shutdown) -> None:
        """The scheduler stops. Only it (a signal: workers_stay): wait for it to come back, saying hello until one
        answers, at most scheduler_timeout_seconds; the cluster (a client's shutdown request), or told to: stop."""
        if not message.workers_stay or self.config.exit_with_scheduler:
            self._stop(f"the scheduler is shutting down ({message.reason})", step=SessionStep.BYE)
            return
        if not self.connected:  # no session to lose: its hello is on its way already
            return
        timeout = self.config.scheduler_timeout_seconds
        self._lose_session(
            now,
            f"the scheduler is stopping ({message.reason}): this worker stays and says hello until a scheduler "
            f"answers at its address, for at most {timeout:g}s (scaler_cluster --death-timeout-seconds; "
            "--exit-with-scheduler to stop with it)",
        )

    def _lose_session(self, now: float, why: str) -> None:
        """The session is surely gone: say why, drop what it held, and say hello for a new one."""
        self._move_session(SessionStep.LOST)
        self._out.append(Log.warning(why))
        self._forget_session()
        self._send_hello(now)

    def _forget_session(self) -> None:
        """A new session starts with nothing: whatever we held belonged to the old one (the scheduler re-queued
        its tasks and forgot which objects we had). A processor still holding tasks of the old session is replaced:
        their results would be dropped, the scheduler runs them again, and a processor blocked in their nested waits
        would otherwise run the re-runs inside those waits, on the same stack, the old waits ending only after
        them."""
        dropped = self.queued
        self._drop_all_queued()
        # Answers not yet sent belong to the old session too: sent after the new hello, they would land in the new
        # one (where the same task ids may be dispatched again). The scheduler already ended or re-queued them.
        self._results.clear()
        self._output.clear()
        self._started, self._started_late = {}, {}
        for task in list(self.tasks.values()):
            self._leave(task)  # results of tasks running now would be stale
        for slot in [slot for slot in self.processors.values() if slot.window]:
            held = len(slot.window)
            tasks, run = ("tasks", "run") if held > 1 else ("task", "runs")
            text = f"it held {held} {tasks} of the previous session, which {run} again"
            self._out.append(Log.warning(f"processor {slot.processor} is replaced: {text}"))
            self._out.append(KillProcessor(slot.processor))
            del self.processors[slot.processor]
            if self.active == slot.processor:
                self.active = None
            if not any(other.state != BLOCKED for other in self.processors.values()):
                self._start_processor()
        self.objects.clear()
        for slot in self.processors.values():
            if slot.objects and slot.state != STARTING:
                self._out.append(ToProcessor(slot.processor, pm.DropObjects(sorted(slot.objects))))
            slot.objects.clear()
        if dropped:
            self._out.append(Log.warning(f"{dropped} queued tasks of the previous session dropped"))

    def _send_hello(self, now: float) -> None:
        self._move_session(SessionStep.HELLO)
        self._hello_sent_at = now
        self.messages_sent = 0  # a new session counts from here
        self._to_scheduler(self._hello())

    def _to_scheduler(self, message: Message) -> None:
        """Every message to the scheduler goes here: the session counts them (not heartbeats or the hello)."""
        if type(message) is not Heartbeat and type(message) is not Hello:
            self.messages_sent += 1
        self._out.append(ToScheduler(message))

    def _on_dispatch(self, batch: DispatchTasks) -> None:
        tasks, append, timeouts = self.tasks, self.queue.append, batch.timeouts_ms
        queued = self.queued
        for k, split in enumerate(batch.split()):  # (id, function id, flags, refs, keywords, payloads), as AgentTask
            task_id = split[0]
            if task_id in tasks:
                continue  # a duplicate dispatch: the scheduler already gave us this one
            task = tasks[task_id] = AgentTask(*split, timeouts[k] if timeouts else 0)
            append(task)
            queued += 1
        self.queued = queued

    def _on_free(self, ids: list[int]) -> None:
        for object_id in ids:
            self.objects.pop(object_id, None)
        for slot in self.processors.values():
            held = [i for i in ids if i in slot.objects]
            if held:
                slot.objects.difference_update(held)
                if slot.state != STARTING:
                    self._out.append(ToProcessor(slot.processor, pm.DropObjects(held)))

    def _on_cancel(self, ids: list[int]) -> None:
        """Queued tasks end cancelled now; tasks a processor holds are discarded if they have not started, and
        their processor is killed if they are running (Discarded tells which)."""
        in_processors = []
        for task in [self.tasks[i] for i in ids if i in self.tasks]:
            if task.state == QUEUED:
                self.queued -= 1  # (the queue skips it when it meets it)
                self._end(task, TaskStatus.CANCELED, b"")
            elif task.state == IN_PROCESSOR:
                self._canceling.add(task.task_id)
                in_processors.append(task)
        self._discard(in_processors)

    def _on_balance_request(self, ids: list[int]) -> None:
        """Queued tasks go back at once; those handed to a processor but not started follow once it confirms."""
        self._to_scheduler(BalanceResponse(self._take_queued(ids)))
        in_processors = []
        for task_id in ids:
            task = self.tasks.get(task_id)
            if task is not None and task.state == IN_PROCESSOR and task_id not in self._canceling:
                self._giving_back.add(task_id)
                in_processors.append(task)
        self._discard(in_processors)

    def _discard(self, tasks: list[AgentTask]) -> None:
        by_processor: dict[int, list[int]] = {}
        for task in tasks:
            by_processor.setdefault(task.processor, []).append(task.task_id)
        for processor, task_ids in by_processor.items():
            if processor in self.processors:
                self._out.append(ToProcessor(processor, pm.Discard(task_ids, confirm=True)))

    def _on_discarded(self, slot: ProcessorSlot, removed: list[int], requested: list[int]) -> None:
        given_back = []
        for task_id in removed:
            task = slot.window.pop(task_id, None)
            if task_id == slot.timed:
                slot.timed = 0
            if task is None or task.state == GONE:
                continue
            if task_id in self._canceling:
                self._end(task, TaskStatus.CANCELED, b"")
            else:
                self._leave(task)
                given_back.append(task_id)
        gone = set(removed)
        for task_id in requested:
            self._giving_back.discard(task_id)
            if task_id in self._canceling:
                if task_id not in gone and task_id in slot.window:  # it has started: stop it the hard way
                    self._out.append(KillIfRunning(slot.processor, task_id))
                else:
                    self._canceling.discard(task_id)
        if given_back:
            self._to_scheduler(BalanceResponse(given_back))

    def _take_queued(self, ids: list[int]) -> list[int]:
        given = []
        for task_id in ids:
            task = self.tasks.get(task_id)
            if task is not None and task.state == QUEUED:
                self._unqueue(task)
                given.append(task_id)
        return given

    def _unqueue(self, task: AgentTask) -> None:
        """A queued task leaves (the queue skips it when it meets it)."""
        self.queued -= 1
        self._leave(task)

    def _leave(self, task: AgentTask) -> None:
        """The one way a task leaves this agent: ended, given back, or dropped with its session."""
        task_id = task.task_id
        del self.tasks[task_id]
        task.move(LEAVE)
        if self._canceling:  # (both are empty but while tasks are cancelled or balanced: no call then)
            self._canceling.discard(task_id)
        if self._giving_back:
            self._giving_back.discard(task_id)
        if self._started_late:
            self._started_late.pop(task_id, None)

    def _end(
        self, task: AgentTask, status: int, payload: Payload, duration_us: int = 0, peak: int = 0, cpu_us: int = 0
    ) -> None:
        """The task leaves with an outcome, which goes to the scheduler with the next flush (a result or an exception
        over the scheduler's payload limit as a failure that says so)."""
        self._leave(task)
        limit = self.max_payload_bytes
        if limit and len(payload) > limit and status in (TaskStatus.SUCCESS, TaskStatus.ERROR):
            what = "result" if status == TaskStatus.SUCCESS else "exception"
            text = (
                f"the {what} of task {task.task_id:#x} is {len(payload):,} bytes once serialized, more than the "
                f"scheduler's limit of {limit:,} bytes per payload (scaler_scheduler --max-payload-bytes)"
            )
            self._out.append(Log.warning(text))
            status, payload = TaskStatus.FAILED, text.encode()
        self._results.add(task.task_id, status, payload, duration_us, peak, cpu_us, task.flags & FLAG_PROFILING)

    def _requeue(self, tasks: list[AgentTask]) -> None:
        """Tasks a processor gave up without a result (it blocked before starting them, or died) go back to the
        front of the queue, in their order; those meanwhile cancelled end cancelled, and those meanwhile asked back
        by the scheduler go back to it."""
        again, given_back = [], []
        for task in tasks:
            if task.task_id in self._canceling:
                self._end(task, TaskStatus.CANCELED, b"")
            elif task.task_id in self._giving_back:
                self._leave(task)
                given_back.append(task.task_id)
            else:
                task.move(BACK)
                again.append(task)
        self.queued += len(again)
        self.queue.extendleft(again)
        if given_back:
            self._to_scheduler(BalanceResponse(given_back))

    def _drop_all_queued(self) -> None:
        for task in self.queue:
            if task.state == QUEUED:
                self._unqueue(task)
        self.queue.clear()

    def _on_tick(self, tick: Tick) -> None:
        now = tick.now
        silent = now - self._last_heard
        if silent > self.config.scheduler_timeout_seconds:
            self._stop(f"the scheduler has been silent for {silent:.0f}s", exit_code=1)
            return
        lost = self._session_lost(now)
        if lost:
            self._lose_session(
                now, f"{lost}: its session is gone; stopping its work and saying hello until one answers"
            )
        for slot in [s for s in self.processors.values() if s.timed and now >= s.window[s.timed].deadline]:
            task = slot.window[slot.timed]
            text = (
                f"task {task.task_id:#x} ran longer than its timeout of {task.timeout_ms / 1000:g}s; its processor "
                "was stopped"
            )
            self._replace(slot, [task], TaskStatus.TIMED_OUT, text)
        memory_limit = self.config.memory_limit_bytes
        for processor, rss in tick.processor_rss:
            over = self.processors.get(processor) if memory_limit and rss > memory_limit else None
            if over is not None:
                self._over_memory(over, rss)
        waiting = self._waiting_tasks()
        # The scheduler leaves room for waiting tasks on top of our queue capacity, and does not count them as work
        # we hold (fair placement between clients): tell it at the next tick when their number changes, not at the
        # next heartbeat.
        soon = self.connected and waiting != self._waiting_said
        if now - self._last_heartbeat >= self.heartbeat_interval or soon:
            self._last_heartbeat = now
            self._waiting_said = waiting
            self._heartbeat_sent_at = now
            if not self.connected:
                if now - self._hello_sent_at >= HELLO_RETRY_SECONDS:  # the first one may have been lost
                    self._send_hello(now)
                return
            heartbeat = Heartbeat(
                cpu_percent=tick.cpu_percent,
                rss_bytes=tick.rss_bytes,
                lag_us=self.lag_us,
                queued=self.queued,
                running=sum(len(s.window) for s in self.processors.values()),
                processor_cpu_percent=tick.processor_cpu_percent,
                processor_rss_bytes=tick.processor_rss_bytes,
                processors=len(self.processors),
                blocked_processors=sum(1 for s in self.processors.values() if s.state == BLOCKED),
                waiting_tasks=waiting,
                resumed=self.session is SessionState.RESUMING,
                sent=self.messages_sent if self.session is SessionState.RESUMING else 0,
            )
            if self.session is SessionState.RESUMING:
                self._move_session(SessionStep.RESUMED)
            self._to_scheduler(heartbeat)
            self._echo_awaited = True

    def reachable(self) -> bool:
        """In a session whose connection is up: worth waiting a moment, when stopping, for the last messages to go."""
        return self.connected and self._link_down_since is None

    def _session_lost(self, now: float) -> str:
        """Why the scheduler's session is surely gone (then nothing we run for it can be delivered), or ""."""
        if not self.connected:
            return ""
        down = self._link_down_since
        if down is not None and now - down > LINK_GRACE_SECONDS:
            return f"the connection to the scheduler closed {now - down:.0f}s ago"
        silent = now - self._last_heard
        if self._peer_timeout and silent > self._peer_timeout:
            return f"the scheduler has been silent for {silent:.0f}s, past its {self._peer_timeout:g}s worker timeout"
        return ""

    def _waiting_tasks(self) -> int:
        return sum(len(slot.waiting) for slot in self.processors.values() if slot.state == BLOCKED)

    def _stop(self, reason: str, exit_code: int = 0, step: SessionStep = SessionStep.STOP) -> None:
        # A worker that fails says why at ERROR: shown even when only warnings are (scaler_cluster -ll WARNING).
        self._out.append(Log(logging.ERROR if exit_code else logging.INFO, f"stopping: {reason}"))
        for processor in list(self.processors):
            self._out.append(KillProcessor(processor))
        self.processors.clear()
        self.active = None
        self._drop_all_queued()  # a stopped agent holds nothing: the scheduler runs its tasks elsewhere
        for task in list(self.tasks.values()):
            self._leave(task)
        self._out.append(Stop(reason, exit_code))
        self._move_session(step)

    def _over_memory(self, slot: ProcessorSlot, rss: int) -> None:
        """The processor uses more memory than allowed: its running task (if blocked, the tasks waiting in it) ends
        overMemory; an idle one is only replaced (memory kept from earlier tasks or objects)."""
        limit = self.config.memory_limit_bytes
        used = f"{_size(rss)}, over the worker's memory limit of {_size(limit)} (scaler_cluster --memory-limit)"
        if slot.state == BLOCKED:
            running = [task for task in slot.window.values() if task.task_id in slot.waiting]
        else:
            running = [next(iter(slot.window.values()))] if slot.window else []
        ids = ", ".join(f"{task.task_id:#x}" for task in running)
        text = f"the processor running task {ids} used {used}; it was stopped" if running else ""
        if not running:
            self._out.append(Log.warning(f"processor {slot.processor} used {used} between tasks; replacing it"))
        self._replace(slot, running, TaskStatus.OVER_MEMORY, text)

    def _replace(self, slot: ProcessorSlot, ended: list[AgentTask], status: TaskStatus, text: str) -> None:
        """Stop a processor now: the `ended` tasks end with `status` and `text`, the rest of its window runs again
        (elsewhere), and a new processor starts if no other one can take work."""
        del self.processors[slot.processor]
        if self.active == slot.processor:
            self.active = None
        self._out.append(KillProcessor(slot.processor))
        again = []
        for task in slot.window.values():
            if task.state == GONE:
                continue
            if task in ended and task.task_id not in self._canceling:
                self._out.append(Log.warning(text))
                self._end(task, status, text.encode())
            else:
                again.append(task)
        self._requeue(again)
        if not any(other.state != BLOCKED for other in self.processors.values()):
            self._start_processor()

    # ------------------------------------------------------------------------------------------- processors
    def _start_processor(self) -> int:
        processor = self._next_processor
        self._next_processor += 1
        self.processors[processor] = ProcessorSlot(processor)
        self._out.append(StartProcessor(processor))
        return processor

    def _on_processor(self, processor: int, message: pm.FromProcessor) -> None:
        slot = self.processors.get(processor)
        if slot is None:
            return
        if isinstance(message, pm.Results):
            self._on_processor_results(slot, message)
        elif isinstance(message, pm.Ready):
            slot.move(ProcessorStep.READY)
            self._start_failures = 0
        elif isinstance(message, pm.Blocked):
            self._on_blocked(slot, message.epoch, message.waiting)
        elif isinstance(message, pm.Unblocked):
            slot.move(ProcessorStep.UNBLOCKED)
            self._out.append(ToProcessor(slot.processor, pm.Resume()))
        elif isinstance(message, pm.Discarded):
            self._on_discarded(slot, message.removed, message.requested)
        elif isinstance(message, pm.Output):
            self._on_output(slot, message)

    def _on_processor_results(self, slot: ProcessorSlot, message: pm.Results) -> None:
        self._deaths_without_progress = 0
        window, timed, end = slot.window, slot.timed, self._end
        statuses, durations, peaks = message.statuses, message.durations_us, message.peak_memory
        payloads, cpu_times = message.payloads, message.cpu_times_us
        mean, completed = self.mean_duration_us, 0
        for k, task_id in enumerate(message.task_ids):
            task = window.pop(task_id, None)
            if task is None:
                continue
            if task_id == timed:
                slot.timed = 0
            duration = durations[k]
            mean += (duration - mean) * 0.2
            completed += 1
            if task.state is GONE:
                continue  # our session was lost meanwhile: nobody waits for it
            end(task, statuses[k], payloads[k], duration, peaks[k], cpu_times[k] if cpu_times is not None else 0)
        if completed:
            self.mean_duration_us = mean
            self.completed += completed
            self._window = self._window_size()
        if not window and slot.processor != self.active and slot.state == READY:
            self._retire(slot)

    def _on_output(self, slot: ProcessorSlot, message: pm.Output) -> None:
        """Text tasks of this processor wrote (their output, or the error one raised): it goes to the scheduler
        with the next flush, before any result of that flush; a task no longer held here (its session was lost)
        has nobody to read it."""
        window, output = slot.window, self._output
        for task_id, stream, text in zip(message.task_ids, message.streams, message.texts, strict=False):
            task = window.get(task_id)
            if task is not None and task.state != GONE:
                output.add(task_id, stream, text)

    def _retire(self, slot: ProcessorSlot) -> None:
        """A processor that finished its blocked task while another one took over: keep one spare at most."""
        spares = [s for s in self.processors.values() if s.processor != self.active and not s.window]
        if len(spares) > 1:
            del self.processors[slot.processor]
            self._out.append(ToProcessor(slot.processor, pm.Exit("no longer needed")))

    def _on_blocked(self, slot: ProcessorSlot, epoch: int, waiting: list[int]) -> None:
        """Its running task waits on nested tasks (`waiting`: that one and, if it ran inside another task's
        wait, the tasks below it). Every other task of its window goes to another processor (the blocked one
        forgot them, and is told to discard them before it is told to resume)."""
        slot.move(ProcessorStep.BLOCKED)
        slot.epoch = epoch
        slot.waiting = set(waiting)
        back = [task for task in slot.window.values() if task.task_id not in slot.waiting]
        for task in back:
            del slot.window[task.task_id]
        if back:
            self._out.append(ToProcessor(slot.processor, pm.Discard([t.task_id for t in back])))
        self._requeue([task for task in back if task.state != GONE])
        if self.active == slot.processor:
            self.active = None

    def _on_processor_exit(self, processor: int, exit_code: int | None, running_task: int) -> None:
        """The task it was running is reported crashed; the rest of its window (not started, or finished with
        results that died with it) runs again."""
        slot = self.processors.pop(processor, None)
        if slot is None:
            return
        if self.active == processor:
            self.active = None
        again: list[AgentTask] = []
        if not running_task and slot.window:
            # It died between tasks (receiving one, say): harmless once, a loop if it always happens.
            self._deaths_without_progress += 1
            if self._deaths_without_progress >= DEATHS_WITHOUT_PROGRESS:
                running_task = next(iter(slot.window))
                self._deaths_without_progress = 0
        for task in slot.window.values():
            if task.state == GONE:
                continue
            if task.task_id == running_task and task.task_id not in self._canceling:
                text = f"the processor running this task died (exit code {exit_code})"
                self._out.append(Log.warning(f"task {task.task_id:#x}: {text}"))
                self._end(task, TaskStatus.CRASHED, text.encode())
            else:
                again.append(task)  # not started, finished with a result that died with it, or being cancelled
        self._requeue(again)
        if slot.state == STARTING:
            self._start_failures += 1
            self._out.append(Log.warning(f"processor {processor} died while starting (exit code {exit_code})"))
            if self._start_failures >= 3:
                self._stop("processors keep dying while starting", exit_code=1)
                return
        if not any(s.state != BLOCKED for s in self.processors.values()):
            self._start_processor()  # keep one processor warm

    def _pick_active(self) -> ProcessorSlot | None:
        """There is no active processor: a free one becomes it; else a helper (_pick_helper) or none for now (one is
        starting, or starts)."""
        for slot in self.processors.values():
            if slot.state == READY and not slot.window:
                self.active = slot.processor
                self._said_all_blocked = False
                return slot
        if any(s.state == STARTING for s in self.processors.values()):
            return None
        if len(self.processors) >= self.config.max_processors:
            return self._pick_helper()
        self._start_processor()
        return None

    def _pick_helper(self) -> ProcessorSlot | None:
        """No processor is free and no more may start: a blocked one runs tasks inside its wait (the least deep
        one), so that nested tasks never wait for a processor that only their own results would free."""
        helpers = [slot for slot in self.processors.values() if slot.idle_in_wait()]
        if not helpers:
            return None
        if not self._said_all_blocked:
            self._said_all_blocked = True
            self._out.append(
                Log.info(
                    f"all {len(self.processors)} processors are taken, {len(helpers)} of them blocked in nested "
                    f"waits: {self.queued} tasks now run inside those waits (a waiting task resumes once the task "
                    "running inside its wait ends)"
                )
            )
        return min(helpers, key=lambda slot: len(slot.waiting))

    def _feed_processor(self) -> None:
        """Hand queued tasks to the active processor, as many as its window has room for, in one RunTasks (the objects
        they need and it lacks first). One pass over the queue; per task, only what the task itself needs. Called by
        flush while tasks are queued (their count is kept here, and written back once)."""
        queued = self.queued
        active = self.active
        slot = self.processors[active] if active is not None else self._pick_active()
        if slot is None or slot.state is STARTING or slot.timed:
            return  # a timed task runs alone: its processor takes nothing more until it ends
        window, waiting = slot.window, slot.waiting
        help_epoch = slot.epoch if slot.state is BLOCKED else 0  # see _pick_helper
        room = self._window - len(window) + (len(waiting) if help_epoch else 0)
        if room <= 0:
            return
        object_ids: list[int] = []
        object_payloads: list[Payload] = []
        tasks: list[pm.ProcessorTask] = []
        payloads: list[Payload] = []
        queue, held, started, processor = self.queue, slot.objects, self._started, slot.processor
        while room and queued:
            task = queue.popleft()
            if task.state is not QUEUED:
                continue
            timeout_ms = task.timeout_ms
            if timeout_ms and (tasks or not all(task_id in waiting for task_id in window)):
                queue.appendleft(task)  # it waits for a processor with nothing else to run
                break
            queued -= 1
            task_id, function_id, arg_refs = task.task_id, task.function_id, task.arg_refs
            if function_id not in held or any(arg_refs):  # objects to send first (or missing)
                missing = self._send_objects(slot, task, object_ids, object_payloads)
                if missing is not None:
                    self._end(task, TaskStatus.FAILED, f"object {missing:#x} was not sent to this worker".encode())
                    continue
            task.move(TO_PROCESSOR)
            task.processor = processor
            window[task_id] = task
            tasks.append((task_id, function_id, task.flags, arg_refs, task.keywords))
            payloads += task.payloads
            started[task_id] = None
            room -= 1
            if timeout_ms:  # alone in the window (but for tasks waiting below it): it starts now
                task.deadline = self._now + timeout_ms / 1000
                slot.timed = task_id
                room = 0
        self.queued = queued
        if tasks or object_ids:
            if object_payloads:
                payloads[:0] = object_payloads  # objects first
            self._out.append(ToProcessor(processor, pm.RunTasks(object_ids, tasks, payloads, help_epoch)))

    def _send_objects(
        self, slot: ProcessorSlot, task: AgentTask, ids: list[int], payloads: list[Payload]
    ) -> int | None:
        for ref in (task.function_id, *task.arg_refs):
            if ref and ref not in slot.objects:
                payload = self.objects.get(ref)
                if payload is None:
                    return ref
                slot.objects.add(ref)
                ids.append(ref)
                payloads.append(payload)
        return None

    # ------------------------------------------------------------------------------------------- queries
    def validate(self) -> None:
        """Check every invariant; raise InvariantError on the first broken one. For tests (after every event) and
        SCALER_DEBUG (after every flush): messages are only built for a broken invariant, so it costs little."""
        queued = [task for task in self.queue if task.state == QUEUED]
        _check(self.queued == len(queued) == len({id(t) for t in queued}), "{} queued, not so", self.queued)
        held: dict[int, AgentTask] = {task.task_id: task for task in queued}
        for slot in self.processors.values():
            _check(slot.state != STARTING or not slot.window, "{!r} is starting and holds tasks", slot)
            timed = slot.window.get(slot.timed) if slot.timed else None
            _check(not slot.timed or (timed is not None and timed.timeout_ms > 0), "{!r}: timed task gone", slot)
            number = slot.processor
            for task_id, task in slot.window.items():
                if task.state == GONE and task.task_id == task_id:
                    continue  # left (its session ended); its result, if one comes, is dropped
                ok = task.task_id == task_id and task.state == IN_PROCESSOR and task.processor == number
                if not ok or task_id in held:
                    raise InvariantError(f"{task!r} is filed wrongly in {slot!r}, or in two places")
                held[task_id] = task
        _check(held.keys() == self.tasks.keys(), "held {} but filed {}", held.keys(), self.tasks.keys())
        if any(held[task_id] is not task for task_id, task in self.tasks.items()):
            raise InvariantError("a task held is not the task filed under its id")
        in_processors = {task_id for task_id, task in held.items() if task.state == IN_PROCESSOR}
        _check(not self._started, "{} tasks started but not told between flushes", len(self._started))
        _check(self._started_late.keys() <= held.keys(), "told late of {}: not held", self._started_late.keys())
        _check(self._canceling <= in_processors, "cancelling {}: not running", self._canceling - in_processors)
        _check(self._giving_back <= in_processors, "giving back {}: not running", self._giving_back - in_processors)
        if self.active is not None:
            active = self.processors.get(self.active)
            _check(active is not None and active.state != BLOCKED, "the active processor is {!r}", active)
        _check(len(self.processors) <= self.config.max_processors, "{} processors", len(self.processors))
        _check(self._window == self._window_size(), "a window of {}, not {}", self._window, self._window_size())
        self._results.validate()
        self._output.validate()
        self._validate_session()

    def _validate_session(self) -> None:
        session = self.session
        _check(self.connected == (session in IN_SESSION), "connected={} in session state {}", self.connected, session)
        _check(self.stopped == (session in ENDED), "stopped={} in session state {}", self.stopped, session)
        _check(not self.stopped or not self.processors, "a stopped agent still has processors")
        if session is SessionState.NEW or session is SessionState.GREETING:  # no session: nothing of one is held
            held = len(self.tasks) + len(self.objects) + self.queued + len(self._results.ids) + len(self._output.ids)
            _check(not held, "{} tasks, objects or results held outside a session ({})", held, session)

    def _window_size(self) -> int:
        """max(1, min(max_window, window_seconds / mean run time)); 1 while run times are unknown."""
        mean = self.mean_duration_us
        if mean <= 0:
            return 1  # run times unknown: a task given to the processor can no longer be balanced away
        by_time = int(self._window_us / mean)
        return 1 if by_time < 1 else by_time if by_time < self._max_window else self._max_window


def _size(count: int) -> str:
    """Bytes in words: 1.5 GiB, 300 MiB, 12 KiB."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift:
            return f"{count / (1 << shift):.3g} {unit}"
    return f"{count} bytes"


def _check(condition: bool, text: str, *values: object) -> None:
    """Raise InvariantError(text.format(*values)) unless `condition`: the text is built only then."""
    if not condition:
        raise InvariantError(text.format(*values))
