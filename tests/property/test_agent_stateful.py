"""AgentCore under random sequences of events (Hypothesis stateful testing), with its lone-task fast path.

The machine plays the scheduler and the processors. Every lone task (one task, arguments inline) is first offered to
AgentCore.forward_dispatch, as the agent's shell does. The same dispatch also goes through the slow path (fed as a
DispatchTasks, then flushed) on a copy of the core taken just before, and:
- if the core forwards, both copies must end in the same state, the slow path having sent exactly the RunTasks that
  forward_dispatch returned and nothing else;
- if it refuses, it must not have changed anything, and the message then takes the slow path on the core itself.
After each step the agent's bookkeeping must agree with itself (every task in one place), and every RunTasks sent to a
processor must carry objects the processor holds or is sent with it.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from scaler.core.worker import messages as pm
from scaler.core.worker.agent import (
    QUEUED,
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
    LoneTask,
    PutObjects,
    TaskStatus,
    Welcome,
)
from tests.unit.scheduler_driver import dispatch, tid

FUNCTIONS = [tid(1, 1), tid(1, 2)]
CLIENTS = [1, 2]


def state(core: AgentCore) -> dict[str, Any]:
    """Everything the agent's behaviour depends on (the queue by its QUEUED entries: gone ones are dropped lazily)."""
    return {
        "tasks": {
            i: (
                t.function_id,
                t.flags,
                t.arg_refs,
                t.keywords,
                tuple(bytes(p) for p in t.payloads),
                t.state,
                t.processor,
            )
            for i, t in core.tasks.items()
        },
        "queue": [t.task_id for t in core.queue if t.state == QUEUED],
        "queued": core.queued,
        "processors": {
            p: (s.state, list(s.window), sorted(s.objects), s.epoch, sorted(s.waiting))
            for p, s in core.processors.items()
        },
        "active": core.active,
        "objects": sorted(core.objects),
        "figures": (core.mean_duration_us, core.completed, core.lag_us, core.connected, core.stopped),
        "private": (
            core._last_heard,
            core._said_all_blocked,
            sorted(core._canceling),
            sorted(core._giving_back),
            core._results_ids,
            bytes(core._results_statuses),
            core._deaths_without_progress,
            core._next_processor,
        ),
    }


class AgentMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.core = AgentCore(AgentConfig(name="w", queue_capacity=16, max_processors=3))
        self.now = 0.0
        self.counters = dict.fromkeys(CLIENTS, 0)
        self.starting: set[int] = set()  # processors asked to start, not yet ready
        self.forwarded = 0

    # ------------------------------------------------------------------------------------------- helpers
    def apply(self, commands: list[AgentCommand]) -> None:
        for command in commands:
            if isinstance(command, StartProcessor):
                self.starting.add(command.processor)

    def feed(self, event: Any) -> None:
        self.apply(self.core.handle(event))

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
        fast=st.booleans(),
    )
    def lone_task(self, client: int, function: int, args: int, profiled: bool, fast: bool) -> None:
        self.now += 0.001
        task_id = self.mint(client)
        payloads = tuple(b"arg%d" % k for k in range(args))
        flags = FLAG_PROFILING if profiled else 0
        message = dispatch((task_id, function, list(payloads)), flags=flags)
        if not fast:
            self.feed(FromScheduler(self.now, message))
            return
        before = copy.deepcopy(self.core)
        lone = LoneTask(b"", task_id, function, flags, [len(p) for p in payloads])
        command = self.core.forward_dispatch(self.now, lone, payloads)
        if command is None:
            assert state(self.core) == state(before), "a refused forward changed the core"
            self.feed(FromScheduler(self.now, message))
            return
        self.forwarded += 1
        slow = before.handle(FromScheduler(self.now, message))
        assert slow == [command], (slow, command)
        assert state(self.core) == state(before)

    @rule(client=st.sampled_from(CLIENTS), function=st.sampled_from(FUNCTIONS), count=st.integers(1, 4))
    def round_trips(self, client: int, function: int, count: int) -> None:
        """Lone tasks each answered before the next comes (what forwarding is for)."""
        for _ in range(count):
            self.lone_task(client, function, 1, False, True)
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
        running = [
            (p, next(iter(s.window))) for p, s in self.core.processors.items() if s.window and s.state == "ready"
        ]
        if not running:
            return
        processor, task_id = data.draw(st.sampled_from(running))
        slot = self.core.processors[processor]
        self.feed(FromProcessor(self.now, processor, pm.Blocked(slot.epoch + 1, [task_id])))

    @rule(data=st.data())
    def processor_unblocks(self, data: st.DataObject) -> None:
        blocked = [p for p, s in self.core.processors.items() if s.state == "blocked"]
        if blocked:
            self.feed(FromProcessor(self.now, data.draw(st.sampled_from(blocked)), pm.Unblocked()))

    @rule(data=st.data())
    def processor_dies(self, data: st.DataObject) -> None:
        alive = sorted(self.core.processors)
        if not alive:
            return
        processor = data.draw(st.sampled_from(alive))
        slot = self.core.processors[processor]
        running = next(iter(slot.window), 0) if slot.state != "starting" else 0
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

    # ------------------------------------------------------------------------------------------- checks
    @invariant()
    def bookkeeping_agrees_with_itself(self) -> None:
        """While the agent runs. A stopped agent (here: processors kept dying while starting) forgets its processors
        and exits, ignoring every later event; the scheduler re-runs what it held."""
        core = self.core
        if core.stopped:
            return
        queued = [task for task in core.queue if task.state == QUEUED]
        assert core.queued == len(queued)
        held = {i for slot in core.processors.values() for i, task in slot.window.items() if task.state != 2}
        assert {t.task_id for t in queued} | held == set(core.tasks)

    @precondition(lambda self: self.forwarded > 0)
    @invariant()
    def forwarded_tasks_went_to_ready_processors(self) -> None:
        for slot in self.core.processors.values():
            if slot.state == "starting":
                assert not slot.window


TestAgentForwarding = AgentMachine.TestCase
TestAgentForwarding.settings = settings(
    max_examples=300, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def test_the_machine_forwards_at_all() -> None:
    """The fast path must be taken in these runs, or the test above would check nothing."""
    machine = AgentMachine()
    machine.start()
    machine.processor_ready(0)
    for _ in range(5):
        machine.lone_task(1, FUNCTIONS[0], 1, False, True)
        task_id = next(iter(machine.core.processors[0].window))
        machine.feed(FromProcessor(machine.now, 0, pm.Results([task_id], b"\x00", [10], [0], [b"r"])))
    assert machine.forwarded >= 3, machine.forwarded
