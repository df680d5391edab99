"""AgentCore under random sequences of events (Hypothesis stateful testing).

The machine plays the scheduler and the processors: lone tasks, round trips of lone tasks, batches, results,
deaths, blocks, cancels, balance requests. After every event AgentCore.validate() checks the agent's invariants (every
task in one place and in the state that place means, cancels and give-backs only for tasks in processors, ...).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from scaler.core.worker import messages as pm
from scaler.core.worker.agent import (
    BLOCKED,
    READY,
    STARTING,
    AgentCommand,
    AgentConfig,
    AgentCore,
    FromProcessor,
    FromScheduler,
    ProcessorExited,
    Started,
    StartProcessor,
    Tick,
)
from scaler.protocol.messages import (
    FLAG_PROFILING,
    BalanceRequest,
    CancelTasks,
    FreeObjects,
    PutObjects,
    TaskStatus,
    Welcome,
)
from tests.unit.scheduler_driver import dispatch, tid

FUNCTIONS = [tid(1, 1), tid(1, 2)]
CLIENTS = [1, 2]


class AgentMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.core = AgentCore(AgentConfig(name="w", queue_capacity=16, max_processors=3))
        self.now = 0.0
        self.counters = dict.fromkeys(CLIENTS, 0)
        self.starting: set[int] = set()  # processors asked to start, not yet ready

    # ------------------------------------------------------------------------------------------- helpers
    def apply(self, commands: list[AgentCommand]) -> None:
        for command in commands:
            if isinstance(command, StartProcessor):
                self.starting.add(command.processor)

    def feed(self, event: Any) -> None:
        self.apply(self.core.handle(event))
        self.core.validate()

    def mint(self, client: int) -> int:
        self.counters[client] += 1
        return tid(client, 100 + self.counters[client])

    # ------------------------------------------------------------------------------------------- rules
    @initialize()
    def start(self) -> None:
        self.feed(Started(self.now))
        self.feed(FromScheduler(self.now, Welcome(7, "sched")))
        self.feed(FromScheduler(self.now, PutObjects(FUNCTIONS, [b"f1", b"f2"])))

    @rule(processor=st.sampled_from([0, 1, 2, 3]))
    def processor_ready(self, processor: int) -> None:
        if processor in self.starting:
            self.starting.discard(processor)
            self.feed(FromProcessor(self.now, processor, pm.Ready(1000 + processor)))

    @rule(
        client=st.sampled_from(CLIENTS),
        function=st.sampled_from(FUNCTIONS),
        args=st.integers(0, 2),
        profiled=st.booleans(),
    )
    def lone_task(self, client: int, function: int, args: int, profiled: bool) -> None:
        self.now += 0.001
        task_id = self.mint(client)
        payloads = [b"arg%d" % k for k in range(args)]
        flags = FLAG_PROFILING if profiled else 0
        self.feed(FromScheduler(self.now, dispatch((task_id, function, payloads), flags=flags)))

    @rule(client=st.sampled_from(CLIENTS), function=st.sampled_from(FUNCTIONS), count=st.integers(1, 4))
    def round_trips(self, client: int, function: int, count: int) -> None:
        """Lone tasks each answered before the next comes (a client's round trips)."""
        for _ in range(count):
            self.lone_task(client, function, 1, False)
            active = self.core.active
            if active is not None and self.core.processors[active].window:
                task_id = next(iter(self.core.processors[active].window))
                self.now += 0.0001
                result = pm.Results([task_id], bytes([TaskStatus.SUCCESS]), [50], [0], [b"r"])
                self.feed(FromProcessor(self.now, active, result))

    @rule(client=st.sampled_from(CLIENTS), count=st.integers(2, 3))
    def batch_of_tasks(self, client: int, count: int) -> None:
        self.now += 0.001
        specs = [(self.mint(client), FUNCTIONS[0], [b"x"]) for _ in range(count)]
        self.feed(FromScheduler(self.now, dispatch(*specs)))

    @rule(data=st.data(), duration=st.sampled_from([5, 100, 5000]))
    def processor_finishes_one(self, data: st.DataObject, duration: int) -> None:
        busy = [p for p, slot in self.core.processors.items() if slot.window]
        if not busy:
            return
        processor = data.draw(st.sampled_from(busy))
        task_id = next(iter(self.core.processors[processor].window))
        self.now += duration / 1e6
        result = pm.Results([task_id], bytes([TaskStatus.SUCCESS]), [duration], [0], [b"r"])
        self.feed(FromProcessor(self.now, processor, result))

    @rule(data=st.data())
    def processor_blocks(self, data: st.DataObject) -> None:
        running = [(p, next(iter(s.window))) for p, s in self.core.processors.items() if s.window and s.state == READY]
        if not running:
            return
        processor, task_id = data.draw(st.sampled_from(running))
        slot = self.core.processors[processor]
        self.feed(FromProcessor(self.now, processor, pm.Blocked(slot.epoch + 1, [task_id])))

    @rule(data=st.data())
    def processor_unblocks(self, data: st.DataObject) -> None:
        blocked = [p for p, s in self.core.processors.items() if s.state == BLOCKED]
        if blocked:
            self.feed(FromProcessor(self.now, data.draw(st.sampled_from(blocked)), pm.Unblocked()))

    @rule(data=st.data())
    def processor_dies(self, data: st.DataObject) -> None:
        alive = sorted(self.core.processors)
        if not alive:
            return
        processor = data.draw(st.sampled_from(alive))
        slot = self.core.processors[processor]
        running = next(iter(slot.window), 0) if slot.state != STARTING else 0
        self.starting.discard(processor)
        self.feed(ProcessorExited(self.now, processor, -9, running))

    @rule(data=st.data())
    def scheduler_cancels(self, data: st.DataObject) -> None:
        if self.core.tasks:
            self.feed(FromScheduler(self.now, CancelTasks([data.draw(st.sampled_from(sorted(self.core.tasks)))])))

    @rule(data=st.data())
    def scheduler_balances(self, data: st.DataObject) -> None:
        if self.core.tasks:
            self.feed(FromScheduler(self.now, BalanceRequest([data.draw(st.sampled_from(sorted(self.core.tasks)))])))

    @rule(data=st.data())
    def processor_confirms_discards(self, data: st.DataObject) -> None:
        """Answer a Discard(confirm=True) as a processor that had started only the first task of its window."""
        for processor, slot in self.core.processors.items():
            asked = sorted(self.core._canceling | self.core._giving_back)
            mine = [i for i in asked if i in slot.window]
            if mine:
                first = next(iter(slot.window))
                removed = [i for i in mine if i != first]
                self.feed(FromProcessor(self.now, processor, pm.Discarded(removed, mine)))
                return

    @rule(function=st.sampled_from(FUNCTIONS))
    def scheduler_frees_and_resends_a_function(self, function: int) -> None:
        self.feed(FromScheduler(self.now, FreeObjects([function])))
        self.feed(FromScheduler(self.now, PutObjects([function], [b"f"])))

    @rule(seconds=st.sampled_from([0.05, 1.0]))
    def tick(self, seconds: float) -> None:
        self.now += seconds
        self.feed(Tick(self.now))


TestAgentStateful = AgentMachine.TestCase
TestAgentStateful.settings = settings(
    max_examples=300, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
