"""A deterministic simulation of one SchedulerCore with hundreds of workers and several clients.

Everything runs on a fake clock in whole milliseconds, from one seeded random generator: the same seed replays
the same run exactly. The scheduler is the real core; clients use the real ClientCore. A share of the workers
(SimConfig.agent_rate) is the real AgentCore with simulated processors (sim_agent.py, which checks the agent's
validate() after every event); the others are small models of an agent (a queue, a few slots, heartbeats, answers
to cancel and balance requests).

Faults are injected while the run lasts: workers killed mid-task (their connection closes), workers that hang
(silent, found by heartbeat timeout only), workers that stall longer than the timeout and come back, workers
that disconnect and rejoin, workers that crash-loop (killed soon after each start, restarted under the same name),
slow workers, tasks whose processor crashes, clients that vanish, cancels, and balance requests answered partially.
With SimConfig.scheduler_stalls, the scheduler itself stalls (a loaded host, a SIGSTOP): messages wait for it, agents
give their sessions up and say hello again; it then catches up as its shell does, a bounded read at a time with a
flush after each (its tick after the first), so it may dispatch to a session whose agent already gave it up.
Some tasks carry options: retries (run again when they raise or time out) and a timeout the workers enforce.

Like the scheduler's shell, the simulation reads submits and results from their frames (encoded, then decoded: the
record fed is the one decode gives, checked equal to what was encoded). Some client waves go out one task per message
so that lone submits happen.

Every task whose id is a multiple of 3 is flagged stream output: the simulated workers print a line for it before its
result, and send the text of the error a task raised before that result (taskOutput). The scheduler's status is taken
every simulated second, as the shell does; with SimConfig.monitored, a monitor subscribes from the start.

Checked as it runs: validate() after every flush (with its check that every function's tasks submitted = ended + in
flight); a worker is never given a task twice, never beyond its
capacity, always holds the objects its task needs, and is never told to free an object one of its tasks needs; a
task never runs twice unless the worker of its earlier run was lost (or that run crashed, or failed with retries
left); every attempt the scheduler charges is for a run that may have started (a worker started it, or an agent
handed it to a processor): a task never fails for losses of workers that never started it; results go to the
task's own client, at most once; printed output goes only to the client of a flagged task and never after its result,
and a flagged task that succeeded on simulated workers only got its output first; monitored statuses hold the error
texts their workers sent, bounded and sampled records. Checked at the end: every task of a client that stayed ended
exactly once, with a plausible outcome; nothing is left in the scheduler; workers still in a session hold no objects.
"""

from __future__ import annotations

import copy
import dataclasses
import heapq
import random
import zlib
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from scaler.core.client.session import (
    CancelRequest,
    ClientCore,
    Closed,
    Completed,
    Connected,
    FreeRequest,
    NewObject,
    NewTask,
    Rejected,
    Resumed,
)
from scaler.core.client.session import Send as ClientSend
from scaler.core.scheduler import (
    Command,
    Event,
    Received,
    SchedulerConfig,
    SchedulerCore,
    Send,
    Tick,
    Undeliverable,
)
from scaler.core.scheduler.events import JournalEntry
from scaler.core.scheduler.monitoring import ENDED, MAX_EVENTS, MAX_FAILURES, STARTED
from scaler.core.scheduler.recovery import replay
from scaler.core.scheduler.sessions import WorkerSession
from scaler.core.worker.agent import AgentCore
from scaler.protocol.messages import (
    FLAG_SILENT,
    FLAG_STREAM_OUTPUT,
    ID_COUNTER_MASK,
    ID_PREFIX_SHIFT,
    OUTPUT_ERROR,
    OUTPUT_STDOUT,
    RETRIABLE_STATUSES,
    BalanceRequest,
    BalanceResponse,
    CancelTasks,
    Disconnect,
    DispatchTasks,
    Error,
    ErrorCode,
    FreeObjects,
    Heartbeat,
    Hello,
    Message,
    Payload,
    PeerKind,
    PutObjects,
    Status,
    SubmitTasks,
    TaskOutput,
    TaskResults,
    TasksStarted,
    TaskStatus,
    Welcome,
    decode,
    encode,
)
from scaler.protocol.records import TaskOptions
from tests.helpers import payload_bytes
from tests.simulation.model import (
    CRASHES,
    CRASHES_ONCE,
    OK,
    RAISES,
    TICK_MS,
    Run,
    SimulationError,
    WorkTask,
    behaviour,
    needs,
)
from tests.simulation.recovery_check import assert_recovers
from tests.simulation.sim_agent import AgentWorker

SCHEDULER_BATCH_MS = 5  # messages reaching the scheduler within this much time are fed in one batch
DRAIN_LIMIT = 64  # catching up after a stall: messages fed per flush, as the scheduler's shell reads them
STATUS_MS = 1000  # how often the scheduler's status is taken, as its shell does


# With SimConfig.capabilities: what each worker offers and what each task requires, from their names and ids (no draw
# from the generator). Every worker offers payload=python, some gpu, some region=eu; most tasks require only
# payload=python, some gpu too, some gpu in region eu, and a few tpu, which no worker offers: those fail.
UNOFFERED = "tpu"
_REQUIREMENTS: tuple[list[str], ...] = (
    ["payload=python"],
    ["payload=python", "gpu"],
    ["payload=python", "gpu", "region=eu"],
    ["payload=python", UNOFFERED],
    [],
)


def worker_capabilities(name: str) -> list[str]:
    code = zlib.crc32(name.encode())
    return ["payload=python", *(["gpu"] if code % 3 == 0 else []), *(["region=eu"] if code % 2 else [])]


def task_requirement(task_id: int) -> int:
    """The index in _REQUIREMENTS of what this task requires."""
    roll = (task_id * 2654435761) % 1000
    return 0 if roll < 650 else 1 if roll < 800 else 2 if roll < 900 else 3 if roll < 930 else 4


def _plain(message: Message) -> Message:
    """A copy of a message with its payloads as bytes (what came over a socket and what a core holds compare)."""
    plain = copy.copy(message)
    if hasattr(plain, "payloads"):
        plain.payloads = [payload_bytes(p) for p in plain.payloads]
    return plain


def streams_output(task_id: int) -> bool:
    """Whether a client submits this task flagged stream output (from its id: no draw from the generator)."""
    return task_id % 3 == 0


@dataclass(frozen=True)
class SimConfig:
    seed: int
    workers: int = 200
    clients: int = 5
    waves: int = 5  # per client
    wave_size: tuple[int, int] = (50, 400)
    fault_window_ms: int = 12_000  # faults happen before this time; afterwards the run settles
    time_limit_ms: int = 180_000
    kill_rate: float = 0.04  # fraction of workers for each fault kind
    hang_rate: float = 0.03
    stall_rate: float = 0.03
    disconnect_rate: float = 0.04
    slow_rate: float = 0.10
    crashloop_rate: float = 0.02  # workers killed soon after each start, then restarted under the same name
    late_rate: float = 0.10  # workers that join during the run
    vanish_clients: int = 1
    # (when, how long) in ms: the scheduler stalls, reading and sending nothing (a loaded host, a SIGSTOP)
    scheduler_stalls: tuple[tuple[int, int], ...] = ()
    # (when, how long) in ms: the scheduler process dies (kill -9) and the same command starts it again that much
    # later, from its journal (Simulation._crash); with any, the scheduler keeps a journal (config.journaled)
    scheduler_crashes: tuple[tuple[int, int], ...] = ()
    # Whether a worker forgets the tasks it holds when a welcome opens a new session (see SimWorker.deliver).
    worker_forgets_on_welcome: bool = True
    # The share of workers that are the real AgentCore with simulated processors (sim_agent.py); the others are
    # the small model below.
    agent_rate: float = 0.25
    lone_rate: float = 0.3  # the share of client waves sent one task per message (lone submits)
    retry_rate: float = 0.15  # the share of tasks submitted with retries (1 or 2)
    timeout_rate: float = 0.05  # the share of tasks submitted with a timeout (some run longer)
    keyed_rate: float = 0.1  # the share of tasks submitted with an idempotency key (each its own)
    through_codec: bool = True  # encode and decode submits and results on their way in, as the shell reads them
    monitored: bool = False  # a monitor subscribes: the core records task events, failures, output, departures
    capabilities: bool = False  # workers offer capabilities, tasks require some (worker_capabilities above)
    scheduler: SchedulerConfig = field(
        default_factory=lambda: SchedulerConfig(
            worker_timeout_seconds=3.0, client_timeout_seconds=8.0, max_task_retries=3, balance_interval_seconds=0.2
        )
    )


@dataclass
class TaskInfo:
    outcome: int
    parents: tuple[int, ...]
    silent: bool = False  # like a graph's intermediate node: its result is never sent to the client
    cancel_requested: bool = False
    retries: int = 0
    key: str = ""  # its idempotency key, if any
    timeout_ms: int = 0
    printed: int = 0  # pieces of its output its client got


class Simulation:
    def __init__(
        self,
        config: SimConfig,
        trace: bool = False,
        core: type[SchedulerCore] = SchedulerCore,
        agent: type[AgentCore] = AgentCore,
    ) -> None:
        if config.scheduler_crashes and not config.scheduler.journaled:
            config = dataclasses.replace(config, scheduler=dataclasses.replace(config.scheduler, journaled=True))
        self.config = config
        self.rng = random.Random(config.seed)
        self.core_type = core
        self.core = core(config.scheduler)
        self.core.monitored = config.monitored
        self.statuses = 0
        # task id -> the error text a simulated worker last sent for it, and that worker's name
        self.error_texts: dict[int, tuple[str, str]] = {}
        self.started_shown: set[int] = set()  # tasks whose start a status showed and no end yet
        self.agent_core = agent  # what an AgentWorker runs
        self.now = 0  # ms
        self._events: list[tuple[int, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        self._link_clock: dict[tuple[bytes, bool], int] = {}  # FIFO per link and direction
        self._to_scheduler: list[Event] = []  # what reached the scheduler since its last flush
        self.scheduler_stalled = False  # it reads nothing (SimConfig.scheduler_stalls)
        self.stale_dispatches = 0  # dispatches that reached an agent awaiting the welcome of its new hello
        self.peers: dict[bytes, SimWorker | AgentWorker | SimClient] = {}
        self.workers: list[SimWorker | AgentWorker] = []
        self.clients: list[SimClient] = []
        self.runs: dict[int, list[Run]] = {}
        self.crashed_once: set[int] = set()
        self.client_by_prefix: dict[int, SimClient] = {}
        self.flushes = 0
        self.decoded = 0  # submits and results fed as decode read them from their frames
        self.trace: list[str] | None = [] if trace else None
        self.finished_at: int | None = None
        # How often each task may have started: started by a simulated worker, or handed to a processor by an agent.
        # The scheduler may charge a task an attempt only for a run counted here.
        self.handed: Counter[int] = Counter()
        self.charged = 0
        self.held_names: set[str] = set()  # worker names the scheduler held back at some point
        self.offered: dict[bytes, frozenset[str]] = {}  # with capabilities: what each worker peer said it offers
        # The scheduler's journal (SimConfig.scheduler_crashes): the entries of every flush, as the shell writes them
        # before the flush's sends; compacted at each restart, as the shell does.
        self.journal: list[JournalEntry] = []
        self.epoch = 0  # scheduler processes started: what one sent, or was sent, dies with it
        self.scheduler_down = False
        self.waiting_for_scheduler: list[tuple[bytes, Message]] = []  # sent while it is down: queued by ZeroMQ
        self.crashes = self.recovered_tasks = 0
        self.again_after_restart = 0  # dispatches of tasks whose clients had their results (after a restart)
        self.duplicates = 0  # results a client got a second time (after a restart), and dropped as the shell does
        self._spy_on_charges()

    def _spy_on_charges(self) -> None:
        charge = self.core._retry_or_fail

        def checked_charge(task: Any, reason: str, worker: WorkerSession | None = None) -> bool:
            if task.attempts + 1 > self.handed[task.task_id]:
                self.fail(
                    f"task {task.task_id:#x} charged attempt {task.attempts + 1} ({reason}), but it may have started "
                    f"only {self.handed[task.task_id]} times"
                )
            self.charged += 1
            return charge(task, reason, worker)

        # a spy wrapped around the core's own method (mypy refuses assigning to a method)
        self.core._retry_or_fail = checked_charge  # type: ignore[method-assign]

    # ------------------------------------------------------------------------------------------- clock
    def at(self, when: int, action: Callable[..., None], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._events, (when, self._seq, action, args))

    def after(self, delay: int, action: Callable[..., None], *args: Any) -> None:
        self.at(self.now + max(1, delay), action, *args)

    def latency(self, peer: bytes, to_scheduler: bool) -> int:
        when = self.now + 1 + self.rng.randrange(4)
        if to_scheduler:
            when = -(-when // SCHEDULER_BATCH_MS) * SCHEDULER_BATCH_MS
        key = (peer, to_scheduler)
        when = max(when, self._link_clock.get(key, 0))
        self._link_clock[key] = when
        return when

    # ------------------------------------------------------------------------------------------- scheduler side
    def send_to_scheduler(self, peer: bytes, message: Message, before: Message | None = None) -> None:
        """`message` reaches the scheduler after a link's latency; `before` (printed output), just ahead of it."""
        if self.config.capabilities:
            self._dress(peer, message)
        if isinstance(message, TaskResults):  # a failed run of a task with retries may be followed by another
            for task_id, status in zip(message.task_ids, message.statuses, strict=True):
                if status in RETRIABLE_STATUSES and self.runs.get(task_id):
                    self.runs[task_id][-1].failed = True
        when = self.latency(peer, True)
        if before is not None:
            self.at(when, self._arrive, peer, before, self.epoch)
        self.at(when, self._arrive, peer, message, self.epoch)

    def _dress(self, peer: bytes, message: Message) -> None:
        """Give a worker's hello its capabilities, a submit its tasks' requirements (as the real peers do)."""
        if isinstance(message, Hello) and message.kind == PeerKind.WORKER:
            message.capabilities = worker_capabilities(message.name)
            self.offered[peer] = frozenset(message.capabilities)
        elif isinstance(message, SubmitTasks) and message.task_ids:
            index = [task_requirement(task_id) for task_id in message.task_ids]
            message.requirements = [list(r) for r in _REQUIREMENTS]
            message.requirement_index = index

    def _arrive(self, peer: bytes, message: Message, epoch: int = 0) -> None:
        if epoch != self.epoch:
            return  # sent to a scheduler process that died since: lost with it
        if self.scheduler_down:
            self.waiting_for_scheduler.append((peer, message))  # the peer's socket keeps it for the next one
            return
        self._to_scheduler.append(Received(self.now / 1000, peer, message))

    def _status(self) -> None:
        """The shell's status, once a second: check what a monitor would read."""
        self._check_status(self.core.status())
        self.statuses += 1
        if self.finished_at is None:
            self.after(STATUS_MS, self._status)

    def _check_status(self, status: Status) -> None:
        running = sum(f.running for f in status.functions)
        if running != sum(len(w.assigned) for w in self.core.workers.values()):
            self.fail(f"the status says {running} tasks run, the workers hold others")
        events = status.events
        if not self.core.monitored:
            if events.task_ids or status.failures or status.outputs or status.departed:
                self.fail("recorded for monitors while none subscribes")
            return
        if len(events.task_ids) > MAX_EVENTS or len(status.failures) > MAX_FAILURES:
            self.fail(f"{len(events.task_ids)} events, {len(status.failures)} failures in one status")
        # A task not drawn this period may still show its end: its start was kept in an earlier one (PeriodLog.carry).
        for task_id, kind in zip(events.task_ids, events.kinds):
            drawn = not (task_id & ID_COUNTER_MASK) % events.sample_every
            if not drawn and not (kind == ENDED and task_id in self.started_shown):
                self.fail(f"an event of task {task_id:#x}, not drawn (one in {events.sample_every})")
            if kind == STARTED:
                self.started_shown.add(task_id)
            else:
                self.started_shown.discard(task_id)
        for failure in status.failures:
            worker, sent = self.error_texts.get(failure.task_id, ("", ""))
            if failure.status == TaskStatus.ERROR and worker and failure.worker == worker and failure.text != sent:
                self.fail(
                    f"failure of {failure.task_id:#x} on {worker} shows {failure.text!r}, its worker sent {sent!r}"
                )

    def _tick(self) -> None:
        self._to_scheduler.append(Tick(self.now / 1000))
        self.held_names.update(name for name, record in self.core.names.lost.items() if record.held_until)
        if self.finished_at is None:
            self.after(TICK_MS, self._tick)

    def _flush(self) -> None:
        """Feed what arrived (submits and results read from their frames as the shell reads them), flush once (like
        one wake-up of the shell), and deliver the commands."""
        now = self.now / 1000
        for event in self._to_scheduler:
            if self.config.through_codec and isinstance(event, Received):
                event = self._read(event)
            self.core.feed(event)
        self._to_scheduler.clear()
        commands = self._flush_core()
        while True:
            unreachable = self._route(commands)
            if not unreachable:
                break
            for peer in unreachable:
                self.core.feed(Undeliverable(now, peer))
            commands = self._flush_core()

    def _read(self, event: Received) -> Received:
        """A submit or result as the shell reads it: encoded, then decoded; the event carries the record read."""
        message = event.message
        if not isinstance(message, (SubmitTasks, TaskResults)):
            return event
        came = decode(encode(message))
        if _plain(came) != _plain(message):
            self.fail(f"decode read {came!r:.300} from the frames of {message!r:.300}")
        self.decoded += 1
        return Received(event.now, event.peer, came, event.key)

    def _flush_core(self) -> list[Command]:
        commands = self.core.flush()
        self.flushes += 1
        self.core.validate()
        if self.core.journal:  # written before the flush's sends
            self.journal += self.core.journal
            self.core.journal = []
        return commands

    def _route(self, commands: list[Command]) -> list[bytes]:
        unreachable: list[bytes] = []
        for command in commands:
            if not isinstance(command, Send):
                continue
            peer, message = command.peer, command.message
            if self.trace is not None:
                self.trace.append(f"{self.now} {peer!r} {message!r}")
            target = self.peers.get(peer)
            if target is None:
                continue
            if target.closed:
                if peer not in unreachable:
                    unreachable.append(peer)
                continue
            if target.deaf:
                continue
            self._check_sent(peer, message, target)
            extra = self.core.workers.get(peer) if isinstance(message, DispatchTasks) else None
            self.at(self.latency(peer, False), self._deliver, self.epoch, target, message, extra)
        return unreachable

    def _deliver(
        self, epoch: int, target: SimWorker | AgentWorker | SimClient, message: Message, extra: WorkerSession | None
    ) -> None:
        if epoch == self.epoch:  # (what a scheduler that died since sent, and was not read yet, is lost)
            target.deliver(message, extra)

    def _check_sent(self, peer: bytes, message: Message, target: SimWorker | AgentWorker | SimClient) -> None:
        """No dispatch of a task whose client already has its result; results only to the client of the task."""
        if isinstance(message, DispatchTasks):
            for task_id in message.task_ids:
                if self.config.capabilities:
                    required = _REQUIREMENTS[task_requirement(task_id)]
                    if not set(required) <= self.offered[peer]:
                        self.fail(f"task {task_id:#x} requires {required}, dispatched to {peer!r}, which cannot run it")
                owner = self.client_by_prefix.get(task_id >> ID_PREFIX_SHIFT)
                info = owner.tasks.get(task_id) if owner is not None else None
                if info is not None and info.key and self.core.keyed.get((b"", info.key)) is not None:
                    self.fail(f"keyed task {task_id:#x} dispatched to {peer!r} while its key's result is kept")
                if owner is not None and (owner.results[task_id] or task_id in owner.silent_ended) and self.crashes:
                    # after a restart: run again for tasks waiting on it, or sent again by its client while its result
                    # was on the way (the resend crossed it; at least once, and its client keeps the first result)
                    self.again_after_restart += 1
                elif owner is not None and owner.results[task_id]:
                    self.fail(f"task {task_id:#x} dispatched to {peer!r} after its client got its result")
        elif isinstance(message, TaskResults) and isinstance(target, SimClient):
            for task_id in message.task_ids:
                if task_id not in target.tasks:
                    self.fail(f"result of task {task_id:#x} sent to client {peer!r}, which did not submit it")

    # ------------------------------------------------------------------------------------------- running
    def fail(self, text: str) -> NoReturn:
        raise SimulationError(f"t={self.now}ms: {text}")

    def setup(self) -> None:
        c, rng = self.config, self.rng
        for n in range(c.workers):
            kind = AgentWorker if rng.random() < c.agent_rate else SimWorker
            worker = kind(self, f"w{n}".encode(), capacity=rng.randint(1, 8), slots=rng.choice((1, 1, 2)))
            if rng.random() < c.slow_rate:
                worker.speed = rng.choice((5, 10, 20))
            start = rng.randrange(c.fault_window_ms) if rng.random() < c.late_rate else rng.randrange(300)
            self.at(start, worker.start)
            if rng.random() < c.crashloop_rate:
                self.at(start + rng.randrange(200, 800), self._crash_loop, worker, 0)
            else:
                self._plan_worker_fault(worker)
            self.workers.append(worker)
        for n in range(c.clients):
            client = SimClient(self, f"c{n}".encode())
            self.at(rng.randrange(200), client.start)
            self.clients.append(client)
        for client in rng.sample(self.clients, min(c.vanish_clients, len(self.clients))):
            self.at(rng.randrange(300, 3_000), client.vanish, rng.random() < 0.5)  # while its work is in flight
        self.at(0, self._tick)
        self.at(STATUS_MS, self._status)
        for when, duration in c.scheduler_stalls:
            self.at(when, self._stall_scheduler, duration)
        for when, duration in c.scheduler_crashes:
            self.at(when, self._crash, duration)

    def _stall_scheduler(self, duration: int) -> None:
        self.scheduler_stalled = True
        self.after(duration, self._catch_up)

    def _catch_up(self) -> None:
        """The stall ends: what waited is read as the shell reads it, DRAIN_LIMIT messages then a flush, stamped with
        the time they are read; the ticks missed are one tick, after the first read (its timer was due meanwhile)."""
        self.scheduler_stalled = False
        now = self.now / 1000
        backlog: list[Event] = [dataclasses.replace(e, now=now) for e in self._to_scheduler if not isinstance(e, Tick)]
        reads: list[list[Event]] = [backlog[k : k + DRAIN_LIMIT] for k in range(0, len(backlog), DRAIN_LIMIT)]
        reads.insert(1, [Tick(now)])
        for read in reads:
            self._to_scheduler = read
            self._flush()

    def _crash(self, down_ms: int) -> None:
        """The scheduler process dies (kill -9): what it read and did not handle, what it sent and nobody read yet,
        die with it; every connection to it closes. The same command starts it again `down_ms` later (_restart)."""
        if self.scheduler_down:
            return
        self.crashes += 1
        self.epoch += 1
        self.scheduler_down = self.scheduler_stalled = True
        self._to_scheduler.clear()
        now = self.now / 1000
        for peer in self.peers.values():
            peer.link_down(now)
        self.after(down_ms, self._restart)

    def _restart(self) -> None:
        """The same command again: a new core rebuilt from the journal (checked against the one that died, as far as
        the journal holds it), the journal compacted to what is still needed, then the peers reconnect: what their
        sockets kept for it first, then their link comes back (clients resume, workers say hello again)."""
        crashed, now = self.core, self.now / 1000
        self.core = self.core_type(self.config.scheduler)
        self.core.monitored = self.config.monitored
        done = replay(self.core, now, self.journal)
        self.core.validate()
        assert_recovers(self.core, crashed, f"t={self.now}ms, restart {self.crashes}", self.journal)
        self.journal = [self.journal[i] for i in done.kept] + self.core.journal
        self.core.journal = []
        self.recovered_tasks += done.tasks
        self._spy_on_charges()
        self.scheduler_down = self.scheduler_stalled = False
        waiting, self.waiting_for_scheduler = self.waiting_for_scheduler, []
        self._to_scheduler = [Received(now, peer, message) for peer, message in waiting]
        for peer in list(self.peers.values()):
            peer.link_up(now)

    def _plan_worker_fault(self, worker: SimWorker | AgentWorker) -> None:
        c, rng = self.config, self.rng
        roll = rng.random()
        when = rng.randrange(500, c.fault_window_ms)
        for rate, action, args in (
            (c.kill_rate, worker.kill, ()),
            (c.hang_rate, worker.hang, ()),
            (c.stall_rate, worker.stall, (rng.randrange(4_000, 8_000),)),
            (c.disconnect_rate, worker.disconnect, (rng.random() < 0.6,)),
        ):
            if roll < rate:
                self.at(when, action, *args)
                return
            roll -= rate

    def _crash_loop(self, worker: SimWorker | AgentWorker, incarnation: int) -> None:
        """Killed soon after it started; a new process under the same name comes back a little later (as
        scaler_cluster restarts a worker), until the fault window ends: then it stays up."""
        worker.kill()
        if self.now >= self.config.fault_window_ms:
            return
        rng = self.rng
        again = type(worker)(self, worker.peer.split(b"~")[0] + b"~%d" % (incarnation + 1), worker.capacity, 1)
        self.workers.append(again)
        start = self.now + rng.randrange(200, 600)
        self.at(start, again.start)
        self.at(start + rng.randrange(300, 900), self._crash_loop, again, incarnation + 1)

    def run(self) -> None:
        self.setup()
        events = self._events
        while events:
            now = events[0][0]
            if now > self.config.time_limit_ms:
                self.fail(f"not finished within {self.config.time_limit_ms}ms:\n" + self.stuck())
            self.now = now
            while events and events[0][0] == now:
                _, _, action, args = heapq.heappop(events)
                action(*args)
            if self._to_scheduler and not self.scheduler_stalled:
                self._flush()
            if self.finished_at is None and self._finished():
                self.finished_at = now
                self.at(now + 2_000, lambda: None)  # let frees and late messages land, then stop
            if self.finished_at is not None and now >= self.finished_at + 2_000:
                break
        self.final_checks()

    def _finished(self) -> bool:
        return (
            all(c.state in ("done", "vanished") for c in self.clients)
            and not self.core.tasks
            and not self.core.clients
            and not self.scheduler_down
        )

    def stuck(self) -> str:
        lines = [f"clients: {[(c.peer, c.state, len(c.open)) for c in self.clients]}"]
        lines += [self.core.explain(t) for t in list(self.core.tasks)[:10]]
        return "\n".join(lines)

    # ------------------------------------------------------------------------------------------- checks
    def run_starts(self, worker: SimWorker | AgentWorker, task: WorkTask) -> None:
        runs = self.runs.setdefault(task.task_id, [])
        owner = self.client_by_prefix.get(task.task_id >> ID_PREFIX_SHIFT)
        if self.crashes and owner is not None and (owner.results[task.task_id] or task.task_id in owner.silent_ended):
            runs.clear()  # its client sent it again after a restart, its result on the way: a new run (at least once)
        mine_lost = self.core.workers.get(worker.peer) is not task.session
        for earlier in runs:
            earlier_lost = self.core.workers.get(earlier.peer) is not earlier.session
            if not (earlier.crashed or earlier.failed or earlier_lost or mine_lost):
                self.fail(f"task {task.task_id:#x} runs on {worker.peer!r} while its run on {earlier.peer!r} is live")
        task.run = Run(worker.peer, task.session)
        runs.append(task.run)

    def final_checks(self) -> None:
        if self.core.tasks or self.core.clients or self.core.objects:
            left = f"{len(self.core.tasks)} tasks, {len(self.core.objects)} objects"
            self.fail(f"left in the scheduler: {left}\n" + self.stuck())
        for client in self.clients:
            client.check_outcomes()
        for worker in self.workers:
            in_session = worker.state == "connected" and worker.peer in self.core.workers  # not yet told it is lost
            if in_session and worker.objects:
                self.fail(f"worker {worker.peer!r} still holds objects {sorted(worker.objects)} nobody needs")
            if isinstance(worker, AgentWorker):
                worker.final_checks(in_session)

    def summary(self) -> dict[str, int]:
        ended: Counter[str] = Counter()
        for client in self.clients:
            for status in client.status.values():
                ended[TaskStatus(status).name.lower()] += 1
        return {
            "tasks": sum(len(c.tasks) for c in self.clients),
            "runs": sum(len(r) for r in self.runs.values()),
            "flushes": self.flushes,
            "sim_ms": self.now,
            "workers_lost": sum(1 for w in self.workers if w.losses),
            "charged": self.charged,
            "held_back": len(self.held_names),
            **ended,
        }


# ----------------------------------------------------------------------------------------------- workers
class SimWorker:
    def __init__(self, sim: Simulation, peer: bytes, capacity: int, slots: int) -> None:
        self.sim = sim
        self.peer = peer
        self.capacity = capacity
        self.slots = slots
        self.speed = 1
        self.state = "off"  # off, connecting, connected, stalled, closed, hung, gone
        self.closed = False  # its socket is gone: the scheduler's sends fail
        self.deaf = False  # it receives nothing (hung, or not started)
        self.queue: deque[WorkTask] = deque()
        self.running: dict[int, WorkTask] = {}
        self.objects: dict[int, bytes] = {}
        self.deferred: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
        self.losses = 0
        self.name = peer.split(b"~")[0].decode()  # a crash-looping worker's incarnations share its name
        self.unit = ""  # the worker manager's unit it belongs to (test_scaling_simulation), said in its hello
        sim.peers[peer] = self

    def send(self, message: Message) -> None:
        self.sim.send_to_scheduler(self.peer, message)

    def _hello(self) -> Hello:
        caps = ["payload=python"]
        return Hello(PeerKind.WORKER, self.name, queue_capacity=self.capacity, capabilities=caps, unit=self.unit)

    def start(self) -> None:
        self.state = "connecting"
        self.send(self._hello())
        self.sim.after(1 + self.sim.rng.randrange(1000), self.heartbeat)

    def heartbeat(self) -> None:
        if self._defer(self.heartbeat):
            return
        if self.state in ("closed", "hung", "gone"):
            return
        if self.state == "connected":
            self.send(Heartbeat(queued=len(self.queue), running=len(self.running)))
        self.sim.after(1000, self.heartbeat)

    def _defer(self, action: Callable[..., None], *args: Any) -> bool:
        if self.state == "stalled":
            self.deferred.append((action, args))
            return True
        return False

    # ------------------------------------------------------------------------------------------- messages
    def deliver(self, message: Message, session: WorkerSession | None) -> None:
        if self._defer(self.deliver, message, session):
            return
        if self.state in ("closed", "hung", "gone", "off"):
            return
        if isinstance(message, DispatchTasks):
            self._on_dispatch(message, session)
        elif isinstance(message, PutObjects):
            # the model keeps the payloads as they came (bytes on this in-process path; Payload in the type)
            self.objects.update(zip(message.object_ids, message.payloads, strict=True))  # type: ignore[arg-type]
        elif isinstance(message, FreeObjects):
            self._on_free(message.ids)
        elif isinstance(message, CancelTasks):
            self._on_cancel(message.ids)
        elif isinstance(message, BalanceRequest):
            self._on_balance(message.ids)
        elif isinstance(message, Welcome):
            # A welcome opens a new session, and a hello closes the previous one: its tasks went back to the
            # scheduler's queue, and the scheduler believes the new session holds no object. (docs/protocol.md's
            # checklist does not say so; see worker_forgets_on_welcome.)
            if self.sim.config.worker_forgets_on_welcome:
                self._drop_tasks()
                self.objects.clear()
            self.state = "connected"
        elif isinstance(message, Error) and message.code == ErrorCode.NOT_CONNECTED:
            self._reset()
            self.state = "connecting"
            self.send(self._hello())
        elif isinstance(message, Error):
            self.sim.fail(f"worker {self.peer!r} got an error: {message}")
        self._run_next()

    def _on_dispatch(self, message: DispatchTasks, session: WorkerSession | None) -> None:
        position = pay = 0
        for k, task_id in enumerate(message.task_ids):
            refs = tuple(message.arg_refs[position : position + message.arg_counts[k]])
            position += len(refs)
            inline = refs.count(0)
            payload = payload_bytes(message.payloads[pay]) if inline else b""
            pay += inline
            if task_id in self.running or any(t.task_id == task_id for t in self.queue):
                self.sim.fail(f"task {task_id:#x} dispatched twice to {self.peer!r}")
            timeout = message.timeouts_ms[k] if message.timeouts_ms else 0
            task = WorkTask(task_id, message.function_ids[k], refs, payload, session, timeout_ms=timeout)
            task.flags = message.flags[k]
            self.queue.append(task)
        if len(self.queue) + len(self.running) > self.capacity:
            self.sim.fail(f"worker {self.peer!r} holds {len(self.queue) + len(self.running)} > {self.capacity} tasks")

    def _on_free(self, ids: list[int]) -> None:
        for object_id in ids:
            users = [t.task_id for t in (*self.queue, *self.running.values()) if needs(t, object_id)]
            if users:
                self.sim.fail(f"object {object_id:#x} freed on {self.peer!r} while tasks {users} need it")
            self.objects.pop(object_id, None)

    def _on_cancel(self, ids: list[int]) -> None:
        wanted = set(ids)
        cancelled = [t for t in self.queue if t.task_id in wanted]
        if cancelled:
            self.queue = deque(t for t in self.queue if t.task_id not in wanted)
            n = len(cancelled)
            self.send(TaskResults([t.task_id for t in cancelled], bytes([TaskStatus.CANCELED] * n), [b""] * n))

    def _on_balance(self, ids: list[int]) -> None:
        """Answered partly: a real agent may have started some meanwhile. Like the Python agent, it may give back
        more a little later, in a second response (tasks its processor had not started)."""
        rng = self.sim.rng
        given = self._give_back({t.task_id for t in self.queue if t.task_id in ids and rng.random() < 0.7})
        self.send(BalanceResponse(given))
        later = [t for t in ids if t not in given]
        if later and rng.random() < 0.3:
            self.sim.after(1 + rng.randrange(20), self._late_balance, later)

    def _late_balance(self, ids: list[int]) -> None:
        if self._defer(self._late_balance, ids) or self.state != "connected":
            return
        given = self._give_back(set(ids))
        if given:
            self.send(BalanceResponse(given))

    def _give_back(self, wanted: set[int]) -> list[int]:
        given = [t.task_id for t in self.queue if t.task_id in wanted]
        self.queue = deque(t for t in self.queue if t.task_id not in wanted)
        return given

    # ------------------------------------------------------------------------------------------- running tasks
    def _run_next(self) -> None:
        while self.state == "connected" and self.queue and len(self.running) < self.slots:
            task = self.queue.popleft()
            for ref in (task.function_id, *task.refs):
                if ref and ref not in self.objects:
                    self.sim.fail(f"task {task.task_id:#x} starts on {self.peer!r} without object {ref:#x}")
            self.sim.run_starts(self, task)
            self.sim.handed[task.task_id] += 1
            self.send(TasksStarted([task.task_id]))
            self.running[task.task_id] = task
            duration, _ = behaviour(task.payload)
            if task.timeout_ms and duration * self.speed > task.timeout_ms:
                self.sim.after(task.timeout_ms, self.finish, task, True)
            else:
                self.sim.after(duration * self.speed, self.finish, task)

    def finish(self, task: WorkTask, timed_out: bool = False) -> None:
        if self._defer(self.finish, task, timed_out):
            return
        if self.running.get(task.task_id) is not task:
            return  # dropped meanwhile (session lost)
        del self.running[task.task_id]
        if self.state in ("closed", "hung", "gone"):
            return
        _, outcome = behaviour(task.payload)
        if timed_out:
            self.send(TaskResults([task.task_id], bytes([TaskStatus.TIMED_OUT]), [b"timed out"]))
        elif outcome == CRASHES or (outcome == CRASHES_ONCE and task.task_id not in self.sim.crashed_once):
            self.sim.crashed_once.add(task.task_id)
            assert task.run is not None
            task.run.crashed = True
            self.send(TaskResults([task.task_id], bytes([TaskStatus.CRASHED]), [b"processor died"]))
        elif outcome == RAISES:
            output = self._output(task, f"Traceback: task {task.task_id:#x} raised on {self.peer!r}")
            result = TaskResults([task.task_id], bytes([TaskStatus.ERROR]), [b"raised:%x" % task.task_id])
            self.sim.send_to_scheduler(self.peer, result, output)
        else:
            result = TaskResults([task.task_id], bytes([TaskStatus.SUCCESS]), [b"ok:%x" % task.task_id])
            self.sim.send_to_scheduler(self.peer, result, self._output(task, None))
        self._run_next()

    def _output(self, task: WorkTask, error: str | None) -> TaskOutput | None:
        """What a worker sends before a result: the task's printed line if it is flagged, its error's text if it
        raised; in one taskOutput, on the same link (so it arrives first)."""
        pieces = [(OUTPUT_STDOUT, f"printed by {task.task_id:#x}")] if task.flags & FLAG_STREAM_OUTPUT else []
        if error is not None:
            pieces.append((OUTPUT_ERROR, error))
            self.sim.error_texts[task.task_id] = (self.name, error)
        if not pieces:
            return None
        n = len(pieces)
        return TaskOutput([task.task_id] * n, bytes(s for s, _ in pieces), [text for _, text in pieces])

    def _reset(self) -> None:
        self._drop_tasks()
        self.objects.clear()
        self.losses += 1

    def _drop_tasks(self) -> None:
        self.queue.clear()
        self.running.clear()  # their results will never be sent

    # ------------------------------------------------------------------------------------------- faults
    def kill(self) -> None:
        """The process dies mid-task: its connection closes."""
        self.state, self.closed, self.deaf = "closed", True, True
        self.losses += 1

    def hang(self) -> None:
        """The machine vanishes from the network: silence, found only by heartbeat timeout."""
        self.state, self.deaf = "hung", True
        self.losses += 1

    def stall(self, duration: int) -> None:
        """A pause longer than the timeout; then it carries on as if nothing happened."""
        if self.state != "connected":
            return
        self.state = "stalled"
        self.sim.after(duration, self.resume)

    def resume(self) -> None:
        self.state = "connected"
        deferred, self.deferred = self.deferred, []
        for action, args in deferred:
            action(*args)
        self._run_next()

    def link_down(self, now: float) -> None:
        """Its connection to the scheduler closed (the scheduler died): the session's work is dropped."""
        if self.state in ("connected", "connecting"):
            self._reset()
            self.state = "waiting"

    def link_up(self, now: float) -> None:
        """A scheduler answers at the address again: hello."""
        if self.state == "waiting":
            self.state = "connecting"
            self.send(self._hello())

    def disconnect(self, rejoin: bool) -> None:
        """Leaves politely; maybe comes back later under the same identity."""
        if self.state not in ("connected", "connecting"):
            return
        self.send(Disconnect("maintenance"))
        self._reset()
        self.state = "gone"
        if rejoin:
            self.sim.after(1_000 + self.sim.rng.randrange(3_000), self.start)


# ----------------------------------------------------------------------------------------------- clients
class SimClient:
    def __init__(self, sim: Simulation, peer: bytes) -> None:
        self.sim = sim
        self.peer = peer
        self.core = ClientCore(peer.decode(), heartbeat_interval_seconds=0.5, timeout_seconds=30.0)
        self.state = "off"  # off, connecting, connected, done, vanished
        self.closed = False
        self.deaf = False
        self.tasks: dict[int, TaskInfo] = {}
        self.open: set[int] = set()
        self.results: Counter[int] = Counter()
        self.silent_ended: set[int] = set()  # (journaled) silent tasks the scheduler said ended
        self.status: dict[int, int] = {}
        self.missing: set[int] = set()  # tasks that failed because no connected worker could run them
        self.function_id = self.data_id = 0
        self.data_freed = False
        self.wave = 0
        self.held: list[Any] = []  # requests made while its journaled scheduler is away (the shell holds them)
        sim.peers[peer] = self

    def _do(self, commands: list[Any]) -> None:
        for command in commands:
            if isinstance(command, ClientSend):
                self.sim.send_to_scheduler(self.peer, command.message)
            elif isinstance(command, Connected):
                self._connected(command.id_prefix)
            elif isinstance(command, Completed):
                self._completed(command.results)
            elif isinstance(command, Rejected):
                self.sim.fail(f"client {self.peer!r} was refused: {command.text} {command.ids}")
            elif isinstance(command, Closed) and self.state not in ("done", "vanished"):
                self.sim.fail(f"client {self.peer!r} closed: {command.reason}")
            elif isinstance(command, Resumed):
                held, self.held = self.held, []
                if held:
                    self._submit(held)

    def link_down(self, now: float) -> None:
        if self.state in ("connecting", "connected"):
            self._do(self.core.link_down(now))

    def link_up(self, now: float) -> None:
        if self.state in ("connecting", "connected"):
            self._do(self.core.link_up(now))

    def start(self) -> None:
        self.state = "connecting"
        self._do(self.core.start(self.sim.now / 1000))
        self.sim.after(500, self.heartbeat)

    def heartbeat(self) -> None:
        if self.state in ("done", "vanished"):
            return
        self._do(self.core.tick(self.sim.now / 1000))
        self.sim.after(500, self.heartbeat)

    def deliver(self, message: Message, _: object) -> None:
        if self.state in ("done", "vanished"):
            return
        if isinstance(message, TaskOutput):
            self._on_output(message)
            return
        self._do(self.core.received(self.sim.now / 1000, message))

    def _on_output(self, message: TaskOutput) -> None:
        for task_id, stream in zip(message.task_ids, message.streams, strict=True):
            info = self.tasks.get(task_id)
            if info is None or not streams_output(task_id) or stream == OUTPUT_ERROR:
                self.sim.fail(f"client {self.peer!r} got output (stream {stream}) of {task_id:#x}, not to show")
            if self.results[task_id] and not self.sim.crashes:  # (after a restart: of a run again, see _completed)
                self.sim.fail(f"client {self.peer!r} got output of {task_id:#x} after its result")
            info.printed += 1

    def _connected(self, prefix: int) -> None:
        self.state = "connected"
        self.sim.client_by_prefix[prefix] = self
        self.function_id, self.data_id = self.core.mint(2)
        self._submit([NewObject(self.function_id, b"function", "f"), NewObject(self.data_id, b"data")])
        self.sim.after(self.sim.rng.randrange(50, 500), self.submit_wave)

    def _submit(self, requests: list[Any]) -> None:
        if self.core.resuming:  # its scheduler restarts: held, sent once the session resumed (Resumed)
            self.held += requests
            return
        for message in self.core.sending(requests):  # (kept to be sent again, with a journaled scheduler)
            self.sim.send_to_scheduler(self.peer, message)

    def submit_wave(self) -> None:
        if self.state != "connected":
            return
        rng = self.sim.rng
        count = rng.randint(*self.sim.config.wave_size)
        ids = self.core.mint(count)
        requests: list[Any] = []
        for task_id in ids:
            roll = rng.random()
            outcome = OK if roll < 0.88 else RAISES if roll < 0.94 else CRASHES if roll < 0.96 else CRASHES_ONCE
            duration = rng.choice((5, 20, 50, 100, 200, 400))
            refs: list[int] = [0]
            parents: tuple[int, ...] = ()
            # After the free: a user's mistake, refused, or taken while another task still holds the object. (Not with
            # scheduler crashes: which of the two depends on timing, and a replay may judge it otherwise: ADR 0023.)
            mistakes = 0.0 if self.sim.config.scheduler_crashes else 0.02
            if rng.random() < (mistakes if self.data_freed else 0.3):
                refs.append(self.data_id)
            if requests and rng.random() < 0.25:  # a task waiting on an earlier one of this wave
                parent = rng.choice(requests).task_id
                refs.append(parent)
                parents = (parent,)
            silent = rng.random() < 0.1
            flags = (FLAG_SILENT if silent else 0) | (FLAG_STREAM_OUTPUT if streams_output(task_id) else 0)
            retries = rng.choice((1, 2)) if rng.random() < self.sim.config.retry_rate else 0
            timeout = rng.choice((30, 150)) if rng.random() < self.sim.config.timeout_rate else 0
            payload = b"%d:%d" % (duration, outcome)
            key = f"t{task_id:x}" if rng.random() < self.sim.config.keyed_rate else ""
            requests.append(
                NewTask(
                    task_id,
                    self.function_id,
                    flags,
                    tuple(refs),
                    None,
                    (payload,),
                    TaskOptions(timeout_ms=timeout, retries=retries),
                    key=key,
                )
            )
            self.tasks[task_id] = TaskInfo(outcome, parents, silent, retries=retries, timeout_ms=timeout, key=key)
            if not silent:
                self.open.add(task_id)
        if rng.random() < self.sim.config.lone_rate:
            for request in requests:  # one message per task: lone submits, which the shell may forward
                self._submit([request])
        else:
            self._submit(requests)
        self.wave += 1
        if rng.random() < 0.5:
            self.sim.after(rng.randrange(10, 2_000), self.cancel_some)
        if self.wave == 2 and not self.data_freed:
            self.data_freed = True
            self._submit([FreeRequest(self.data_id)])
        if self.wave < self.sim.config.waves:
            self.sim.after(rng.randrange(500, 3_000), self.submit_wave)

    def cancel_some(self) -> None:
        if self.state != "connected" or not self.open:
            return
        victims = self.sim.rng.sample(sorted(self.open), max(1, len(self.open) // 10))
        for task_id in victims:
            self.tasks[task_id].cancel_requested = True
        self._submit([CancelRequest(task_id) for task_id in victims])

    def _completed(self, results: TaskResults) -> None:
        for task_id, status, payload in zip(results.task_ids, results.statuses, results.payloads, strict=True):
            if task_id not in self.tasks:
                self.sim.fail(f"client {self.peer!r} got a result for {task_id:#x}, not its task")
            if not self._first(task_id, payload):
                continue
            self.results[task_id] += 1
            if self.results[task_id] > 1:
                self.sim.fail(f"task {task_id:#x} ended twice at its client")
            self.status[task_id] = status
            if status == TaskStatus.FAILED and payload_bytes(payload).startswith(b"missing capabilities:"):
                self.missing.add(task_id)
            text = payload_bytes(payload)
            if status == TaskStatus.FAILED and text.endswith(b"was not sent to this worker"):
                self.sim.fail(f"task {task_id:#x} failed at its client: {text.decode()}")
            self.open.discard(task_id)
            runs = self.sim.runs.get(task_id, [])
            simulated = bool(runs) and all(isinstance(self.sim.peers[r.peer], SimWorker) for r in runs)
            if (
                status == TaskStatus.SUCCESS
                and streams_output(task_id)
                and simulated
                and not self.tasks[task_id].printed
                and not self.sim.crashes  # (a run again after a restart for others does not stream its output)
            ):
                self.sim.fail(f"task {task_id:#x} succeeded at its client before its output came")
            if status == TaskStatus.SUCCESS and payload != b"ok:%x" % task_id:
                self.sim.fail(f"task {task_id:#x} succeeded with someone else's result {payload!r}")
        if not self.open and self.wave >= self.sim.config.waves and self.state == "connected":
            self.state = "done"
            for command in self.core.disconnect("finished"):
                if isinstance(command, ClientSend):
                    self.sim.send_to_scheduler(self.peer, command.message)

    def _first(self, task_id: int, payload: Payload) -> bool:
        """Whether this is a result to count: not a silent task's end, which a journaled scheduler says without its
        result (ClientCore forgets it; another sends nothing of it), nor, after a restart, the result of a run again
        (as the Python client does, the first result stays)."""
        if self.tasks[task_id].silent:
            if not self.sim.config.scheduler.journaled or payload_bytes(payload):
                self.sim.fail(f"client {self.peer!r} got the result of silent task {task_id:#x}")
            self.silent_ended.add(task_id)
            return False
        if self.results[task_id] and self.sim.crashes:
            self.sim.duplicates += 1
            return False
        return True

    def vanish(self, closed: bool) -> None:
        """The client process dies (its connection closes) or goes silent (the scheduler times it out)."""
        if self.state == "done":
            return
        self.state = "vanished"
        self.closed, self.deaf = closed, True

    def check_outcomes(self) -> None:
        if self.state == "vanished":
            return
        for task_id, info in self.tasks.items():
            if info.silent:
                continue
            if self.results[task_id] != 1:
                self.sim.fail(f"task {task_id:#x} of {self.peer!r} ended {self.results[task_id]} times, not once")
            status = self.status[task_id]
            lineage = self._lineage(task_id)
            if status == TaskStatus.CANCELED and not any(self.tasks[t].cancel_requested for t in lineage):
                self.sim.fail(f"task {task_id:#x} was cancelled, but nobody asked")
            if status == TaskStatus.ERROR and not any(self.tasks[t].outcome == RAISES for t in lineage):
                self.sim.fail(f"task {task_id:#x} raised, but nothing in its lineage raises")
            if status == TaskStatus.TIMED_OUT and not any(self.tasks[t].timeout_ms for t in lineage):
                self.sim.fail(f"task {task_id:#x} timed out, but nothing in its lineage has a timeout")
            runs = self.sim.runs.get(task_id, [])
            parents_raise = any(self.tasks[t].outcome == RAISES for t in lineage[1:])
            if (
                status == TaskStatus.ERROR
                and info.outcome == RAISES
                and not parents_raise
                and len(runs) <= info.retries
            ):
                self.sim.fail(f"task {task_id:#x} raised after {len(runs)} runs, but it has {info.retries} retries")
            if self.sim.config.capabilities:
                self._check_capabilities(task_id, status, lineage)
            if status == TaskStatus.SUCCESS and info.outcome in (RAISES, CRASHES):
                self.sim.fail(f"task {task_id:#x} succeeded, but it always {('raises', 'crashes')[info.outcome - 1]}")

    def _check_capabilities(self, task_id: int, status: int, lineage: list[int]) -> None:
        """A task nobody offers what it requires fails so (unless cancelled first); a task fails so only if it or a
        task it waits on requires what nobody offers."""
        unoffered = [t for t in lineage if UNOFFERED in _REQUIREMENTS[task_requirement(t)]]
        own = UNOFFERED in _REQUIREMENTS[task_requirement(task_id)]
        # (it may also end as a task it waits on did: it never ran, _check_sent sees to that)
        if own and (
            status == TaskStatus.SUCCESS
            or (status not in (TaskStatus.FAILED, TaskStatus.CANCELED) and len(lineage) == 1)
        ):
            self.sim.fail(f"task {task_id:#x} requires {UNOFFERED}, which no worker offers, but ended {status}")
        if task_id in self.missing and not unoffered:
            self.sim.fail(f"task {task_id:#x} failed for missing capabilities, but it and its lineage are runnable")

    def _lineage(self, task_id: int) -> list[int]:
        out, todo = [], [task_id]
        while todo:
            current = todo.pop()
            out.append(current)
            todo.extend(self.tasks[current].parents)
        return out
