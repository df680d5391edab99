"""Scaling on the real SchedulerCore (its WorkerManagers and the policy, core/scheduler/scaling.py) in the fault
simulation's world (sim.py: fake clock, one seeded generator, the simulated workers and ClientCore clients).

Fake worker managers are peers: they say hello (kind manager), send managerReport, and carry out scaleUnits. A unit
they are asked to start comes up after a random delay as simulated workers that name it in their hello; some never
come up (the policy gives them up), some fail to start (reported ended at once), and a few end on their own after a
while (a Slurm job killed: its workers die mid-task). Clients submit bursty, sawtooth and steady loads.

Checked, besides everything sim.py checks (validate() after every flush, no task run twice while its earlier run is
live, results once and right): every task ends exactly once with its own result; a task is charged an attempt only
for a worker of a unit that ended on its own (never because of scaling); no worker holds a task when its unit is
stopped (drained first); scale events (units started + stopped) stay within a bound stated per load; at the end no
unit beyond min_units. Measured and printed (pytest -s): the time to the first result and the slot-seconds the
units' workers were up beyond the work itself (the ideal: slots busy exactly while there is work).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

import pytest

from scaler.core.client.session import NewObject, NewTask
from scaler.core.scheduler import SchedulerConfig
from scaler.core.scheduler.sessions import WorkerSession
from scaler.core.scheduler.tasks import Task
from scaler.protocol.messages import (
    FLAG_STREAM_OUTPUT,
    Error,
    Heartbeat,
    Hello,
    ManagerReport,
    Message,
    PeerKind,
    ScaleUnits,
    TaskResults,
    TaskStatus,
    Welcome,
)
from scaler.protocol.records import TaskOptions
from tests.simulation.model import OK
from tests.simulation.sim import SimClient, SimConfig, Simulation, SimWorker, TaskInfo, streams_output
from tests.simulation.sim_agent import AgentWorker

pytestmark = pytest.mark.timeout(60)

SEEDS = [int(s) for s in os.environ.get("SCALER_SIM_SEEDS", "").split(",") if s] or [3, 17, 29]


@dataclass(frozen=True)
class ManagerPlan:
    name: str
    max_units: int
    idle_ms: int
    start_timeout_ms: int
    delay_ms: tuple[int, int]  # a unit comes up after a delay drawn from this range
    never: float  # the share of units that never come up (given up by the policy at start_timeout)
    fails: float = 0.0  # the share that fail to start (reported ended, no worker ever connects)
    killed: float = 0.0  # the share that end on their own a while after they came up (their workers die)
    tier: int = 0
    min_units: int = 0
    workers_per_unit: int = 1
    slots_per_worker: int = 1
    queue_capacity: int = 2  # each worker's (its slots and what waits on it)

    def report(self, units: list[str], ended: list[str], reason: str) -> ManagerReport:
        return ManagerReport(
            min_units=self.min_units,
            max_units=self.max_units,
            workers_per_unit=self.workers_per_unit,
            slots_per_worker=self.slots_per_worker,
            tier=self.tier,
            idle_ms=self.idle_ms,
            start_timeout_ms=self.start_timeout_ms,
            units=units,
            ended=ended,
            reason=reason,
        )


def local(max_units: int = 8, **more: Any) -> ManagerPlan:
    return ManagerPlan("local", max_units, 5_000, 10_000, (300, 2_000), never=0.05, fails=0.03, killed=0.1, **more)


def slurm(max_units: int = 8, **more: Any) -> ManagerPlan:
    return ManagerPlan("slurm", max_units, 20_000, 60_000, (5_000, 30_000), 0.15, 0.05, 0.15, tier=1, **more)


Wave = tuple[int, int, int]  # (when in ms, tasks, each one's duration in ms)


# ----------------------------------------------------------------------------------------------- peers
class FakeManager:
    """A worker manager peer: units as groups of simulated workers, started after a delay (or never)."""

    def __init__(self, sim: ScalingSimulation, plan: ManagerPlan) -> None:
        self.sim = sim
        self.plan = plan
        self.peer = b"manager-" + plan.name.encode()
        self.closed = self.deaf = False
        self.units: dict[str, list[SimWorker]] = {}  # asked for and not ended: its workers once it came up
        self.orders: list[ScaleUnits] = []
        sim.peers[self.peer] = self  # type: ignore[assignment]  # (a peer sim.py's routing delivers to, like the others)

    def send(self, message: Message) -> None:
        self.sim.send_to_scheduler(self.peer, message)

    def start(self) -> None:
        self.send(Hello(PeerKind.MANAGER, self.plan.name, capabilities=["payload=python"]))
        self.sim.after(1_000, self.heartbeat)

    def heartbeat(self) -> None:
        self.send(Heartbeat())
        if self.sim.finished_at is None:
            self.sim.after(1_000, self.heartbeat)

    def deliver(self, message: Message, _: object) -> None:
        if isinstance(message, Welcome):
            self.send(self.plan.report(list(self.units), [], ""))
        elif isinstance(message, ScaleUnits):
            self.orders.append(message)
            rng = self.sim.rng
            for unit in message.start:
                self.units[unit] = []
                roll = rng.random()
                delay = rng.randrange(*self.plan.delay_ms)
                if roll < self.plan.fails:
                    self.sim.failed_units[unit] = True
                    self.sim.after(delay, self._end, unit, "exit code 1")
                elif roll >= self.plan.fails + self.plan.never:
                    self.sim.after(delay, self._up, unit)
            for unit in message.stop:
                self.sim.after(rng.randrange(20, 500), self._stop, unit)
        elif isinstance(message, Error):
            self.sim.fail(f"manager {self.plan.name} got an error: {message}")

    def _up(self, unit: str) -> None:
        if unit not in self.units:
            return  # stopped before it came up
        sim, plan = self.sim, self.plan
        for k in range(plan.workers_per_unit):
            worker = SimWorker(sim, f"{unit}.{k}".encode(), plan.queue_capacity, plan.slots_per_worker)
            worker.unit = unit
            sim.up_since[worker.peer] = sim.now
            sim.workers.append(worker)
            self.units[unit].append(worker)
            worker.start()
        if sim.rng.random() < plan.killed:
            sim.after(sim.rng.randrange(2_000, 20_000), self._kill, unit)

    def _kill(self, unit: str) -> None:
        """The resource manager ends the unit (a time limit, a node lost): its workers die, whatever they run."""
        if unit not in self.units:
            return
        for worker in self.units[unit]:
            self.sim.killed.add(worker.peer)
            self.sim.down(worker)
            worker.kill()
        self._end(unit, "killed by its resource manager")

    def _stop(self, unit: str) -> None:
        for worker in self.units.get(unit, []):
            if worker.queue or worker.running:
                self.sim.fail(f"unit {unit} stopped while {worker.peer!r} holds tasks")
            self.sim.down(worker)
            worker.disconnect(rejoin=False)
        self._end(unit, "stopped")

    def _end(self, unit: str, reason: str) -> None:
        if self.units.pop(unit, None) is not None:
            self.send(self.plan.report(list(self.units), [unit], f"{unit}: {reason}"))


class LoadClient(SimClient):
    """Submits its waves at their times: tasks of one function that succeed after their duration."""

    def __init__(self, sim: ScalingSimulation, peer: bytes, waves: list[Wave]) -> None:
        super().__init__(sim, peer)
        self.load = waves
        self.first_submit: int | None = None
        self.first_result: int | None = None

    def _connected(self, prefix: int) -> None:
        self.state = "connected"
        self.sim.client_by_prefix[prefix] = self
        (self.function_id,) = self.core.mint(1)
        self._submit([NewObject(self.function_id, b"function", "f")])
        for when, count, duration in self.load:
            self.sim.at(max(when, self.sim.now + 1), self.submit_load, count, duration)

    def submit_load(self, count: int, duration: int) -> None:
        requests = []
        for task_id in self.core.mint(count):
            payload = b"%d:%d" % (duration, OK)
            flags = FLAG_STREAM_OUTPUT if streams_output(task_id) else 0  # (as sim.py's clients: checked there)
            requests.append(NewTask(task_id, self.function_id, flags, (0,), None, (payload,), TaskOptions()))
            self.tasks[task_id] = TaskInfo(OK, ())
            self.open.add(task_id)
        self._submit(requests)
        self.wave += 1
        if self.first_submit is None:
            self.first_submit = self.sim.now

    def _completed(self, results: TaskResults) -> None:
        if self.first_result is None:
            self.first_result = self.sim.now
        super()._completed(results)


# ----------------------------------------------------------------------------------------------- the simulation
class ScalingSimulation(Simulation):
    def __init__(self, seed: int, waves: list[Wave], plans: list[ManagerPlan]) -> None:
        scheduler = SchedulerConfig(
            worker_timeout_seconds=3.0, client_timeout_seconds=30.0, max_task_retries=3, balance_interval_seconds=0.2
        )
        config = SimConfig(
            seed=seed,
            workers=0,
            clients=0,
            waves=len(waves),
            vanish_clients=0,
            time_limit_ms=600_000,
            scheduler=scheduler,
        )
        super().__init__(config)
        self.waves = waves
        self.plans = plans
        self.managers: list[FakeManager] = []
        self.killed: set[bytes] = set()  # workers of units that ended on their own
        self.up_since: dict[bytes, int] = {}  # worker -> when its unit came up (it costs from then)
        self.slot_ms = 0  # slots x ms the units' workers were up
        self.failed_units: dict[str, bool] = {}  # units that failed to start (reported ended, never came up)
        self.most_units = 0  # the most units the policy had at once (asked for or running), after any flush
        charge = self.core._retry_or_fail

        def no_charge_for_scaling(task: Task, reason: str, worker: WorkerSession | None = None) -> bool:
            if worker is None or worker.identity not in self.killed:
                self.fail(f"task {task.task_id:#x} charged an attempt ({reason}), not for a unit that ended by itself")
            return charge(task, reason, worker)

        self.core._retry_or_fail = no_charge_for_scaling  # type: ignore[method-assign]

    def setup(self) -> None:
        client = LoadClient(self, b"load", self.waves)
        self.clients.append(client)
        self.at(0, client.start)
        for plan in self.plans:
            manager = FakeManager(self, plan)
            self.managers.append(manager)
            self.at(0, manager.start)
        self.at(0, self._tick)

    def _flush_core(self) -> list[Any]:
        commands = super()._flush_core()
        self.most_units = max(self.most_units, len(self.core.managers.policy.units))
        return commands

    def down(self, worker: SimWorker | AgentWorker) -> None:
        since = self.up_since.pop(worker.peer, None)
        if since is not None:
            self.slot_ms += (self.now - since) * worker.slots

    def _check_sent(self, peer: bytes, message: Message, target: Any) -> None:
        if isinstance(message, ScaleUnits) and isinstance(target, FakeManager):
            for unit in message.stop:
                for worker in target.units.get(unit, []):
                    session = self.core.workers.get(worker.peer)
                    if session is not None and session.assigned:
                        self.fail(f"unit {unit} stopped while {worker.peer!r} holds {sorted(session.assigned)}")
            return
        super()._check_sent(peer, message, target)

    def _finished(self) -> bool:
        policy = self.core.managers.policy
        return super()._finished() and all(
            len(m.units) <= m.plan.min_units and len(policy.managers[m.plan.name].units) <= m.plan.min_units
            for m in self.managers
        )

    # ------------------------------------------------------------------------------------------- figures
    def scale_events(self) -> int:
        return sum(len(order.start) + len(order.stop) for m in self.managers for order in m.orders)

    def figures(self) -> dict[str, float]:
        for worker in self.workers:
            self.down(worker)
        client = self.clients[0]
        assert isinstance(client, LoadClient) and client.first_result is not None and client.first_submit is not None
        work_ms = sum(count * duration for _, count, duration in self.waves)
        return {
            "first_result_s": (client.first_result - client.first_submit) / 1000,
            "ideal_first_s": min(duration for _, _, duration in self.waves) / 1000,
            "work_s": work_ms / 1000,
            "slot_s": self.slot_ms / 1000,
            "wasted_s": (self.slot_ms - work_ms) / 1000,
            "scale_events": self.scale_events(),
        }


def simulate(seed: int, waves: list[Wave], plans: list[ManagerPlan]) -> ScalingSimulation:
    sim = ScalingSimulation(seed, waves, plans)
    try:
        sim.run()
    except AssertionError as exc:
        raise AssertionError(f"seed={seed} (replay: SCALER_SIM_SEEDS={seed})\n{exc}") from exc
    return sim


def check(sim: ScalingSimulation, base_events: int) -> dict[str, float]:
    """What every load must show; `base_events`: the scale events the load may cost when every unit comes up."""
    figures = sim.figures()
    print(f"seed={sim.config.seed}: {figures}")
    client = sim.clients[0]
    assert len(client.tasks) == sum(count for _, count, _ in sim.waves)
    assert set(client.results.values()) == {1}, "a task did not end exactly once"  # (check_outcomes: each one's own)
    assert set(client.status.values()) == {TaskStatus.SUCCESS}
    for task_id, runs in sim.runs.items():
        if len(runs) > 1:
            assert all(run.peer in sim.killed for run in runs[:-1]), f"task {task_id:#x} ran {len(runs)} times"
    policy = sim.core.managers.policy
    assert sim.scale_events() == policy.started + policy.stopped
    # every unit that never came up, failed to start or was killed costs a start and (at most) a stop more
    lost_units = policy.given_up + sum(1 for m in sim.managers for o in m.orders for u in o.start if _killed(sim, u))
    assert sim.scale_events() <= base_events + 2 * lost_units, (sim.scale_events(), base_events, lost_units)
    assert all(len(manager.units) <= manager.plan.min_units for manager in sim.managers)
    connected = [w for w in sim.workers if w.state == "connected" and w.peer in sim.core.workers]
    assert len(connected) <= sum(m.plan.min_units * m.plan.workers_per_unit for m in sim.managers)
    return figures


def _killed(sim: ScalingSimulation, unit: str) -> bool:
    return any(peer.decode().startswith(unit + ".") for peer in sim.killed)


# ----------------------------------------------------------------------------------------------- loads
BURSTY: list[Wave] = [(0, 300, 250), (60_000, 300, 250), (120_000, 300, 250)]  # three bursts, 60 s apart
# three teeth of 30 s: 1, 2, ... 8 tasks every 0.5 s, then 15 s of nothing
SAWTOOTH: list[Wave] = [(tooth * 45_000 + k * 500, 1 + k // 8, 200) for tooth in range(3) for k in range(60)]
STEADY: list[Wave] = [(k * 250, 2, 400) for k in range(480)]  # 8 tasks/s of 0.4 s for 120 s: about 3.2 slots busy


@pytest.mark.parametrize("seed", SEEDS)
def test_bursty_load_nothing_lost_nothing_twice(seed: int) -> None:
    sim = simulate(seed, BURSTY, [local()])
    figures = check(sim, base_events=3 * 2 * 8)  # each burst may bring all 8 units and retire them
    assert figures["first_result_s"] < 3.0


@pytest.mark.parametrize("seed", SEEDS)
def test_sawtooth_load_over_two_tiers(seed: int) -> None:
    sim = simulate(seed, SAWTOOTH, [local(4), slurm(8)])
    check(sim, base_events=3 * 2 * 12)


@pytest.mark.parametrize("seed", SEEDS)
def test_steady_load_does_not_flap(seed: int) -> None:
    sim = simulate(seed, STEADY, [local()])
    check(sim, base_events=2 * 8)  # up once to what the load needs, down once at the end


@pytest.mark.parametrize("seed", SEEDS)
def test_a_slow_queue_is_never_over_asked(seed: int) -> None:
    """Units of a Slurm-like manager take 5-30 s (some never come): 3 long tasks ask for 3 units, and for another
    only when one is given up, failed or was killed, however many ticks pass while they come."""
    sim = simulate(seed, [(0, 3, 50_000)], [slurm(8, min_units=0)])
    check(sim, base_events=2 * 3)
    assert sim.most_units <= 3


@pytest.mark.parametrize("seed", SEEDS)
def test_work_arriving_as_units_drain(seed: int) -> None:
    """Tasks of 3 s every 8.5 s to units that retire after 5 s idle: work comes just as idle units are drained (kept
    by an undrain, or new units asked for while others drain); none is on a unit when it is stopped."""
    waves: list[Wave] = [(0, 16, 500)] + [(8_500 * k + 50 * (k % 5), 8, 3_000) for k in range(1, 12)]
    sim = simulate(seed, waves, [local()])
    check(sim, base_events=12 * 2 * 8)


def test_every_kind_of_unit_fault_happens_somewhere() -> None:
    """Over the seeds, units never come up (given up), fail to start, and are killed mid-task (their tasks run again,
    charged an attempt): the checks above saw each case."""
    given_up = failed = killed = charged = 0
    plans = [replace(local(4), never=0.15, fails=0.1, killed=0.3), replace(slurm(8), killed=0.3)]
    for seed in SEEDS:
        sim = simulate(seed, SAWTOOTH, plans)
        check(sim, base_events=3 * 2 * 12)
        given_up += sim.core.managers.policy.given_up
        failed += sum(1 for m in sim.managers for o in m.orders for u in o.start if sim.failed_units.get(u))
        killed += len(sim.killed)
        charged += sim.charged
    assert given_up > failed > 0 and killed > 0 and charged > 0, (given_up, failed, killed, charged)


SHORT: list[Wave] = [(k * 30_000, 1_000, 5) for k in range(3)]  # three bursts of 1,000 tasks of 5 ms (5 s of work)


@pytest.mark.parametrize("seed", SEEDS)
def test_short_tasks_of_a_known_function_ask_for_few_units(seed: int) -> None:
    """The first burst's tasks are of a function whose duration is not known yet: each counts as a slot, so all 8 units
    come. The later bursts: a unit or two, not 8 again."""
    sim = simulate(seed, SHORT, [local(queue_capacity=20)])
    check(sim, base_events=2 * 8 + 2 * 2 * 2)
