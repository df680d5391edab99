"""A worker of the simulation made of the real AgentCore: what the Python agent decides, under the simulation's faults
and clock. Its processors are simulated: they take RunTasks, run their tasks one after another for the time each
task says, answer Discard, drop objects, and die when a task crashes or the agent kills them. AgentCore.validate()
runs after every event.

Checked besides the simulation's own checks: the scheduler never dispatches a task the agent holds, never beyond
its capacity, never frees an object a held task needs; the agent never fails a task for an object it was not sent
(whichever session the task came in); a processor never starts a task without the objects it needs, and every start
is a run the simulation accounts for; at the end, an agent still in its session holds no
task and no object, in itself or in its processors.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scaler.core.common import unreachable
from scaler.core.scheduler import Log
from scaler.core.scheduler.sessions import WorkerSession
from scaler.core.worker import messages as pm
from scaler.core.worker.agent import (
    AgentCommand,
    AgentConfig,
    AgentCore,
    AgentEvent,
    FromProcessor,
    FromScheduler,
    KillIfRunning,
    KillProcessor,
    ProcessorExited,
    SchedulerLink,
    Started,
    StartProcessor,
    Stop,
    StopRequested,
    Tick,
    ToProcessor,
    ToScheduler,
)
from scaler.protocol.messages import DispatchTasks, FreeObjects, Message, Payload, TaskResults, TaskStatus, Welcome
from tests.helpers import payload_bytes
from tests.simulation.model import CRASHES, CRASHES_ONCE, RAISES, TICK_MS, WorkTask, behaviour

if TYPE_CHECKING:
    from tests.simulation.sim import Simulation

PIPE_MS = 1  # between the agent and a processor, each way


class SimProcessor:
    def __init__(self, worker: AgentWorker, number: int) -> None:
        self.worker = worker
        self.number = number
        self.alive = True
        self.window: deque[tuple[pm.ProcessorTask, tuple[Payload, ...]]] = deque()
        self.objects: dict[int, Payload] = {}
        self.running = 0  # the task it runs, 0 between tasks

    def receive(self, message: pm.ToProcessor) -> None:
        if not self.alive:
            return
        if isinstance(message, pm.RunTasks):
            self.objects.update(zip(message.object_ids, message.payloads, strict=False))
            position = len(message.object_ids)
            for task in message.tasks:
                inline = task[3].count(0)
                self.window.append((task, tuple(message.payloads[position : position + inline])))
                position += inline
            self._next()
        elif isinstance(message, pm.Discard):
            wanted = set(message.task_ids)
            removed = [item[0][0] for item in self.window if item[0][0] in wanted]
            self.window = deque(item for item in self.window if item[0][0] not in wanted)
            if message.confirm:
                self.worker.from_processor(pm.Discarded(removed, message.task_ids), self.number)
        elif isinstance(message, pm.DropObjects):
            for object_id in message.object_ids:
                self.objects.pop(object_id, None)
        elif isinstance(message, pm.Exit):
            self.alive = False
            self.worker.exited(self.number, 0, 0)

    def _next(self) -> None:
        if self.running or not self.window or not self.alive:
            return
        (task_id, function_id, _, refs, _), payloads = self.window.popleft()
        worker, sim = self.worker, self.worker.sim
        for ref in (function_id, *refs):
            if ref and ref not in self.objects:
                sim.fail(f"task {task_id:#x} starts in processor {self.number} of {worker.peer!r} without {ref:#x}")
        payload = payload_bytes(payloads[0]) if payloads else b""
        task = WorkTask(task_id, function_id, refs, payload, worker.sessions.get(task_id))
        sim.run_starts(worker, task)
        self.running = task_id
        duration, _ = behaviour(payload)
        sim.after(duration * worker.speed, self._finish, task, duration * worker.speed)

    def _finish(self, task: WorkTask, duration_ms: int) -> None:
        """A processor is a process of its own: it carries on while its agent stalls (the agent hears later)."""
        if not self.alive or self.running != task.task_id:
            return
        sim = self.worker.sim
        self.running = 0
        _, outcome = behaviour(task.payload)
        if outcome == CRASHES or (outcome == CRASHES_ONCE and task.task_id not in sim.crashed_once):
            sim.crashed_once.add(task.task_id)
            assert task.run is not None
            task.run.crashed = True
            self.die(task.task_id)
            return
        if outcome == RAISES:
            status, result = TaskStatus.ERROR, b"raised:%x" % task.task_id
        else:
            status, result = TaskStatus.SUCCESS, b"ok:%x" % task.task_id
        results = pm.Results([task.task_id], bytes([status]), [duration_ms * 1000], [0], [result])
        self.worker.from_processor(results, self.number)
        self._next()

    def die(self, running: int) -> None:
        """The process dies (a crash, or killed by the agent): the agent hears of it through its exit."""
        self.alive = False
        self.worker.exited(self.number, -9, running)


class AgentWorker:
    """Stands where a SimWorker stands in the simulation (same faults, same checks), with the real AgentCore inside.
    It has one processor to begin with, like the Python agent; `slots` only bounds how many it may start."""

    def __init__(self, sim: Simulation, peer: bytes, capacity: int, slots: int) -> None:
        self.sim = sim
        self.peer = peer
        self.capacity = capacity
        self.slots = slots
        self.speed = 1
        self.state = "off"  # off, connecting, connected, stalled, closed, hung, gone
        self.closed = False
        self.deaf = False
        self.losses = 0
        self.deferred: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
        self.sessions: dict[int, WorkerSession | None] = {}  # the scheduler's session each task was dispatched in
        self.processors: dict[int, SimProcessor] = {}
        self.warnings: list[str] = []  # what the agent logged at WARNING or above
        self.name = peer.split(b"~")[0].decode()  # a crash-looping worker's incarnations share its name
        self.core = self._new_core()
        sim.peers[peer] = self

    def _new_core(self) -> AgentCore:
        config = AgentConfig(
            name=self.name,
            queue_capacity=self.capacity,
            heartbeat_interval_seconds=0.5,
            max_processors=2 + self.slots,
        )
        return self.sim.agent_core(config)

    @property
    def objects(self) -> dict[int, Payload]:
        return self.core.objects

    # ------------------------------------------------------------------------------------------- events
    def feed(self, event: AgentEvent) -> None:
        if self.state in ("closed", "hung", "gone", "off") or self.core.stopped:
            return
        commands = self.core.handle(event)
        self.core.validate()
        self._do(commands)

    def _feed_later(self, make: Callable[..., AgentEvent], *args: Any) -> None:
        if self._defer(self._feed_later, make, *args):
            return
        self.feed(make(self.sim.now / 1000, *args))

    def _defer(self, action: Callable[..., None], *args: Any) -> bool:
        if self.state == "stalled":
            self.deferred.append((action, args))
            return True
        return False

    def from_processor(self, message: pm.FromProcessor, number: int) -> None:
        self.sim.after(PIPE_MS, self._feed_later, FromProcessor, number, message)

    def exited(self, number: int, exit_code: int, running: int) -> None:
        self.sim.after(PIPE_MS, self._feed_later, ProcessorExited, number, exit_code, running)

    def start(self) -> None:
        self.state = "connecting"
        self.feed(Started(self.sim.now / 1000))
        self.sim.after(1 + self.sim.rng.randrange(TICK_MS), self.tick)

    def tick(self) -> None:
        """The shell's tick; a stalled agent misses its ticks (one comes once it resumes)."""
        if self.state in ("closed", "hung", "gone") or self.core.stopped:
            return
        if self.state != "stalled":
            self.feed(Tick(self.sim.now / 1000))
        self.sim.after(TICK_MS, self.tick)

    def deliver(self, message: Message, session: WorkerSession | None) -> None:
        if self._defer(self.deliver, message, session) or self.state in ("closed", "hung", "gone", "off"):
            return
        if isinstance(message, DispatchTasks):
            if not self.core.connected:
                self.sim.stale_dispatches += 1  # to the session its hello ends (it stalled, or the scheduler did)
            self._check_dispatch(message, session)
        elif isinstance(message, FreeObjects):
            self._check_free(message.ids)
        elif isinstance(message, Welcome):
            self.state = "connected"
        self.feed(FromScheduler(self.sim.now / 1000, message))
        if len(self.core.tasks) > self.capacity:
            self.sim.fail(f"agent {self.peer!r} holds {len(self.core.tasks)} > {self.capacity} tasks")

    def _check_dispatch(self, message: DispatchTasks, session: WorkerSession | None) -> None:
        for task_id in message.task_ids:
            if task_id in self.core.tasks:
                self.sim.fail(f"task {task_id:#x} dispatched twice to {self.peer!r}")
            self.sessions[task_id] = session

    def _check_results(self, message: TaskResults) -> None:
        for task_id, status, payload in zip(message.task_ids, message.statuses, message.payloads, strict=True):
            text = payload_bytes(payload)
            if status == TaskStatus.FAILED and text.endswith(b"was not sent to this worker"):
                self.sim.fail(f"agent {self.peer!r} failed task {task_id:#x}: {text.decode()}")

    def _check_free(self, ids: list[int]) -> None:
        for object_id in ids:
            users = [t.task_id for t in self.core.tasks.values() if object_id in (t.function_id, *t.arg_refs)]
            if users:
                self.sim.fail(f"object {object_id:#x} freed on {self.peer!r} while tasks {users} need it")

    # ------------------------------------------------------------------------------------------- commands
    def _do(self, commands: list[AgentCommand]) -> None:
        for command in commands:
            match command:
                case ToScheduler():
                    if isinstance(command.message, TaskResults):
                        self._check_results(command.message)
                    self.sim.send_to_scheduler(self.peer, command.message)
                case ToProcessor():
                    if isinstance(command.message, pm.RunTasks):  # the agent says these may have started
                        self.sim.handed.update(task[0] for task in command.message.tasks)
                    processor = self.processors.get(command.processor)
                    if processor is not None:
                        self.sim.after(PIPE_MS, processor.receive, command.message)
                case StartProcessor():
                    self.processors[command.processor] = SimProcessor(self, command.processor)
                    self.sim.after(5 + self.sim.rng.randrange(20), self._ready, command.processor)
                case KillProcessor() | KillIfRunning():
                    self._kill(command)
                case Log():
                    if command.level >= logging.WARNING:
                        self.warnings.append(command.text)
                case Stop():
                    self.state = "gone"
                case _:
                    unreachable(command)

    def _kill(self, command: KillProcessor | KillIfRunning) -> None:
        if isinstance(command, KillProcessor):
            processor = self.processors.pop(command.processor, None)
            if processor is not None:
                processor.alive = False  # killed and forgotten, as the shell does: no exit to hear of
            return
        processor = self.processors.get(command.processor)
        if processor is not None and processor.alive and processor.running == command.task_id:
            processor.die(command.task_id)

    def _ready(self, number: int) -> None:
        processor = self.processors.get(number)
        if processor is not None and processor.alive:
            self._feed_later(FromProcessor, number, pm.Ready(number))

    # ------------------------------------------------------------------------------------------- faults
    def kill(self) -> None:
        """The agent process dies: its connection closes, its processors die with it."""
        self.state, self.closed, self.deaf = "closed", True, True
        self.losses += 1
        for processor in self.processors.values():
            processor.alive = False

    def hang(self) -> None:
        """The machine vanishes from the network: silence, found only by heartbeat timeout."""
        self.state, self.deaf = "hung", True
        self.losses += 1

    def stall(self, duration: int) -> None:
        """The agent pauses longer than the timeout (its processors carry on), then catches up."""
        if self.state != "connected":
            return
        self.state = "stalled"
        self.sim.after(duration, self.resume)

    def resume(self) -> None:
        self.state = "connected"
        deferred, self.deferred = self.deferred, []
        for action, args in deferred:
            action(*args)

    def link_down(self, now: float) -> None:
        """Its connection to the scheduler closed (the scheduler died)."""
        if self.state in ("connected", "connecting", "stalled"):
            self._feed_later(SchedulerLink, False)

    def link_up(self, now: float) -> None:
        if self.state in ("connected", "connecting", "stalled"):
            self._feed_later(SchedulerLink, True)

    def disconnect(self, rejoin: bool) -> None:
        """Stops politely (SIGTERM: it says disconnect); maybe a new agent comes back later under the same name."""
        if self.state not in ("connected", "connecting"):
            return
        self.feed(StopRequested(self.sim.now / 1000, "maintenance"))
        self.processors.clear()
        self.losses += 1
        self.state = "gone"
        if rejoin:
            self.sim.after(1_000 + self.sim.rng.randrange(3_000), self._rejoin)

    def _rejoin(self) -> None:
        self.core = self._new_core()
        self.state = "off"
        self.start()

    # ------------------------------------------------------------------------------------------- checks
    def final_checks(self, in_session: bool) -> None:
        if not in_session:
            return
        if self.core.tasks:
            self.sim.fail(f"agent {self.peer!r} still holds tasks {sorted(self.core.tasks)}")
        for processor in self.processors.values():
            if processor.alive and processor.objects:
                held = sorted(processor.objects)
                self.sim.fail(f"processor {processor.number} of {self.peer!r} still holds objects {held}")
