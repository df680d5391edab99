"""Deterministic simulations of the scheduler core under faults (see sim.py for what runs and what is checked).

Each seed is one whole run; a failure names its seed. To replay one: SCALER_SIM_SEEDS=1234 pytest tests/simulation
(several: SCALER_SIM_SEEDS=1,2,3).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from scaler.core.scheduler import SchedulerConfig, SchedulerCore, Send, views
from scaler.core.scheduler.balancing import Balancing
from scaler.core.scheduler.lifecycle import SessionLifecycle
from scaler.core.scheduler.needs import Need, NeedTable
from scaler.core.scheduler.sessions import WorkerSession
from scaler.core.worker.agent import AgentCore, ToScheduler
from scaler.protocol.messages import FLAG_SILENT, BalanceRequest, BalanceResponse, Payload, TaskStatus
from tests.simulation.sim import SimConfig, Simulation
from tests.simulation.sim_agent import AgentWorker

SEEDS = [int(s) for s in os.environ.get("SCALER_SIM_SEEDS", "").split(",") if s] or [11, 23, 37, 41, 59]
# Scheduler crashes: 3 seeds in the suite; all of SCALER_SIM_SEEDS when set (140 passed: $(seq -s, 1 140))
CRASH_SEEDS = SEEDS if os.environ.get("SCALER_SIM_SEEDS") else SEEDS[:3]


def simulate(config: SimConfig, **options: Any) -> Simulation:
    sim = Simulation(config, **options)
    try:
        sim.run()
    except AssertionError as exc:
        seed = config.seed
        raise AssertionError(
            f"simulation failed with seed={seed} (replay: SCALER_SIM_SEEDS={seed} pytest tests/simulation)\n{exc}"
        ) from exc
    return sim


@pytest.mark.parametrize("seed", SEEDS, ids=lambda seed: f"seed={seed}")
def test_scheduler_survives_faults(seed: int) -> None:
    workers = 150 + seed * 37 % 151  # between 150 and 300 workers
    sim = simulate(SimConfig(seed=seed, workers=workers))
    summary = sim.summary()
    print(f"seed={seed}: {summary}")
    # the run did what it was meant to: lots of work, faults that cost workers, retries, moves and cancels
    assert summary["tasks"] > 1000
    assert summary["workers_lost"] >= 5
    assert summary["runs"] > summary["tasks"]  # some tasks ran again after a loss or a crash
    assert sim.core.sent["balanceRequest"] > 0 and sim.core.received["balanceResponse"] > 0
    assert summary["canceled"] > 0 and summary["failed"] > 0 and summary["error"] > 0
    assert summary["timed_out"] > 0 and summary["charged"] > 0
    assert summary["held_back"] > 0  # crash-looping workers were held back


def test_every_kind_of_fault_happens_somewhere() -> None:
    """Over the seeds, every fault of the plan strikes, and a vanished client gets cleaned up."""
    states: set[str] = set()
    vanished = 0
    for seed in SEEDS[:3]:
        sim = simulate(SimConfig(seed=seed, workers=150, waves=2, kill_rate=0.05, hang_rate=0.05, stall_rate=0.05))
        states |= {w.state for w in sim.workers}
        vanished += sum(c.state == "vanished" for c in sim.clients)
        assert any(w.losses and w.state == "connected" for w in sim.workers)  # stalled or rejoined, and working
    assert {"closed", "hung", "connected"} <= states
    assert vanished >= 1


@pytest.mark.parametrize("seed", SEEDS[:2], ids=lambda seed: f"seed={seed}")
def test_real_agents_survive_faults(seed: int) -> None:
    """Every worker is the real AgentCore (its validate() after every event), its processors simulated: it is
    killed, hangs, stalls past the timeout, stops and comes back, and its tasks crash their processors."""
    # stall_rate: enough stalls that some agent comes back to a new session with work of the old one in its
    # processors, on both seeds (how many do depends on how much placement queued on them: 0.1 no longer did)
    sim = simulate(SimConfig(seed=seed, workers=120, agent_rate=1.0, waves=3, stall_rate=0.15, slow_rate=0.3))
    summary = sim.summary()
    print(f"seed={seed}: {summary}")
    assert all(isinstance(worker, AgentWorker) for worker in sim.workers)
    assert summary["tasks"] > 500 and summary["workers_lost"] >= 5
    assert sum(len(runs) > 1 for runs in sim.runs.values()) > 10  # tasks ran again after a loss or a crash
    assert summary["canceled"] > 0 and summary["failed"] > 0 and summary["error"] > 0
    assert sim.core.received["balanceResponse"] > 0
    states = {worker.state for worker in sim.workers}
    assert "connected" in states and len(states - {"connected"}) >= 2  # faults of several kinds struck


def test_agents_back_from_a_stall_replace_processors_busy_with_the_old_session() -> None:
    """Agents stalled past their timeout come back to a new session and replace the processors still busy with the
    old one's tasks, which run again, every check holding. Whether a run's stalls catch processors busy depends on its
    whole course (2 of the 5 seeds did when this was written): the seeds are tried in turn until one shows it."""
    tried = []
    for seed in SEEDS:
        sim = simulate(SimConfig(seed=seed, workers=120, agent_rate=1.0, waves=3, stall_rate=0.15, slow_rate=0.3))
        warnings = [text for worker in sim.workers if isinstance(worker, AgentWorker) for text in worker.warnings]
        if any("of the previous session, which run" in text for text in warnings):
            return
        tried.append(seed)
    raise AssertionError(f"no run replaced a processor busy with an old session's tasks (seeds {tried})")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("seed", SEEDS[:2], ids=lambda seed: f"seed={seed}")
def test_agents_survive_scheduler_stalls_past_their_timeout(seed: int) -> None:
    """Issue 25: the scheduler stalls longer than the worker timeout, twice, while tasks wait. The agents give their
    sessions up and say hello again; catching up, a read at a time, the scheduler dispatches to sessions given up
    (it read their heartbeats before their hellos), trusting objects the agents forgot. Those dispatches are dropped:
    no task fails for an object it was not sent (the agents and clients check), and none is held beyond capacity."""
    stalls = ((2_500, 4_000), (9_000, 3_500))  # the worker timeout is 3 s
    config = SimConfig(seed=seed, workers=40, agent_rate=1.0, waves=2, wave_size=(200, 500), scheduler_stalls=stalls)
    sim = simulate(config)
    summary = sim.summary()
    print(f"seed={seed}: {summary}, stale dispatches: {sim.stale_dispatches}")
    assert summary["tasks"] > 500 and summary["success"] > 0
    assert sim.stale_dispatches > 0  # the path was taken


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", CRASH_SEEDS, ids=lambda seed: f"seed={seed}")
def test_the_scheduler_killed_and_started_again_from_its_journal_under_faults_loses_nothing(seed: int) -> None:
    """Issue 28: the scheduler process dies (kill -9) three times while work and worker faults go on, and the same
    command starts it again from its journal (down 300 ms to 2 s). At each restart the recovered core is compared
    with the one that died (recovery_check.assert_recovers: the same sessions, objects and tasks, but what ran at a
    worker queued again); the clients (the real ClientCore) wait, resume and send their unfinished work again; the
    workers say hello again. Every task of a client that stayed ends at it, with its own result, as in every run of
    the simulation. After a restart a task may also run again when its client sent it again as its result crossed
    the resend (at least once: the client keeps the first result; counted, not failed), never for nothing."""
    crashes = ((1_500 + seed * 31 % 700, 300), (5_000 + seed * 17 % 900, 2_000), (9_000 + seed * 7 % 500, 800))
    config = SimConfig(seed=seed, workers=60, waves=3, wave_size=(100, 300), scheduler_crashes=crashes)
    sim = simulate(config)
    summary = sim.summary()
    again, duplicates = sim.again_after_restart, sim.duplicates
    print(f"seed={seed}: {summary}, tasks recovered {sim.recovered_tasks}, again {again}, results twice {duplicates}")
    assert sim.crashes == 3 and sim.recovered_tasks > 0  # there was work in the journal each time
    assert summary["tasks"] > 500 and summary["success"] > 0


@pytest.mark.parametrize("seed", SEEDS[:2], ids=lambda seed: f"seed={seed}")
def test_a_small_placement_grain_starves_nobody(seed: int) -> None:
    """With grain 4 every pass of more than 4 tasks leaves most of the 100 workers out: the workers left out
    still get work (later passes, balancing), every task ends, and no task runs twice on live workers."""
    config = SchedulerConfig(
        worker_timeout_seconds=3.0, client_timeout_seconds=8.0, balance_interval_seconds=0.2, placement_grain=4
    )
    sim = simulate(SimConfig(seed=seed, workers=100, waves=3, scheduler=config))
    summary = sim.summary()
    print(f"seed={seed}: {summary}")
    assert summary["tasks"] > 500
    assert sim.core.received["balanceResponse"] > 0
    busy = {run.peer for runs in sim.runs.values() for run in runs}
    assert len(busy) >= 90  # the work reached (nearly) every worker, not only the first few chosen


def test_same_seed_same_run() -> None:
    config = SimConfig(seed=5, workers=60, clients=3, waves=2, wave_size=(20, 80))
    first = simulate(config, trace=True)
    again = simulate(config, trace=True)
    assert first.trace is not None and again.trace is not None
    assert len(first.trace) > 500
    assert first.trace == again.trace
    other = simulate(SimConfig(seed=6, workers=60, clients=3, waves=2, wave_size=(20, 80)), trace=True)
    assert other.trace != first.trace


# ----------------------------------------------------------------------------------------------- the checks can fail
class TrustingBalancing(Balancing):
    """Broken: it takes back every task it asked for, not only those the worker gave."""

    def rebalance(self) -> None:
        self.asked: dict[bytes, list[int]] = getattr(self, "asked", {})
        before = len(self.core._out)
        super().rebalance()
        for command in self.core._out[before:]:
            if isinstance(command, Send) and isinstance(command.message, BalanceRequest):
                self.asked[command.peer] = list(command.message.ids)

    def on_balance_response(self, worker: WorkerSession, message: BalanceResponse) -> None:
        super().on_balance_response(worker, BalanceResponse(self.asked.pop(worker.identity, message.ids)))


class TrustsBalanceRequests(SchedulerCore):
    """A broken scheduler: it takes back every task it asked for, not only those the worker gave."""

    def __init__(self, config: SchedulerConfig | None = None) -> None:
        super().__init__(config)
        self.balancing = TrustingBalancing(self)


class AnswersTwice(SchedulerCore):
    """A broken scheduler: the first error result it reports goes to the client twice."""

    # an override of the core's private _end, typed loosely: its ignores below stand for first being a Task
    def _end(self, first: object, status: int, payload: Payload, *args: object, **kwargs: object) -> None:
        super()._end(first, status, payload, *args, **kwargs)  # type: ignore[arg-type]
        silent = first.flags & FLAG_SILENT  # type: ignore[attr-defined]
        if status == TaskStatus.ERROR and not silent and not getattr(self, "doubled", False):
            self.doubled = True
            client = first.client  # type: ignore[attr-defined]
            client.outbox.add(first.task_id, status, payload)  # type: ignore[attr-defined]


class ChargingLifecycle(SessionLifecycle):
    """Broken, as before tasksStarted: a lost worker's tasks are all charged an attempt, started or not."""

    def worker_lost(self, worker: WorkerSession, reason: str, count_attempt: bool) -> None:
        for task in worker.assigned.values():
            task.started = True
        super().worker_lost(worker, reason, count_attempt)


class ChargesEveryLostTask(SchedulerCore):
    """A broken scheduler, as before tasksStarted: a lost worker's tasks are all charged an attempt, started or
    not (the false retry exhaustion of crash-looping workers)."""

    def __init__(self, config: SchedulerConfig | None = None) -> None:
        super().__init__(config)
        self.lifecycle = ChargingLifecycle(self)


class GivesBackStartedTasks(AgentCore):
    """A broken agent: asked for tasks back, it gives back those its processor already holds, without taking them
    back from the processor."""

    def _on_balance_request(self, ids: list[int]) -> None:
        held = [task_id for task_id in ids if task_id in self.tasks and task_id not in self._take_queued(ids)]
        super()._on_balance_request(ids)
        if held:
            self._out.append(ToScheduler(BalanceResponse(held)))


def test_the_simulation_catches_a_broken_agent() -> None:
    """A broken agent that gives back tasks it started: caught where the task runs twice, or is dispatched again to the
    worker still running it (as the ask-back of fair placement makes it likely), or that worker, given more in their
    place, holds more than its capacity."""
    with pytest.raises(AssertionError, match=r"runs on|dispatched twice|holds \d+ > \d+ tasks") as failure:
        simulate(SimConfig(seed=SEEDS[0], workers=100, agent_rate=1.0), agent=GivesBackStartedTasks)
    assert f"seed={SEEDS[0]}" in str(failure.value)


@pytest.mark.parametrize(
    ("core", "complaint"),
    [
        # the tasks it takes back wrongly run twice, or their worker is given more than its capacity
        (TrustsBalanceRequests, r"runs on|holds \d+ > \d+ tasks"),
        (AnswersTwice, "ended twice at its client"),
        (ChargesEveryLostTask, "but it may have started only"),
    ],
    ids=["runs-twice", "answers-twice", "charges-unstarted"],
)
def test_the_simulation_catches_a_broken_scheduler(core: type[SchedulerCore], complaint: str) -> None:
    with pytest.raises(AssertionError, match=complaint) as failure:
        simulate(SimConfig(seed=SEEDS[0], workers=150), core=core)
    assert f"seed={SEEDS[0]}" in str(failure.value)


@pytest.mark.parametrize(
    ("seed", "monitored", "capabilities"),
    [(SEEDS[0], False, False), (SEEDS[0], True, False), (SEEDS[1], True, True)],
    ids=[f"seed={SEEDS[0]}-unmonitored", f"seed={SEEDS[0]}-monitored", f"seed={SEEDS[1]}-monitored-capabilities"],
)
def test_submits_and_results_read_from_their_frames_under_faults(
    seed: int, monitored: bool, capabilities: bool
) -> None:
    """Every submit and result is read from its frames as the shell reads it (decode: the record fed is the one it
    gives, checked equal to what was encoded), lone ones and batches alike, while workers die, hang and come back."""
    config = SimConfig(  # five waves: enough lone tasks with either seed
        seed=seed,
        workers=40,
        clients=3,
        waves=5,
        wave_size=(20, 100),
        monitored=monitored,
        capabilities=capabilities,
    )
    sim = simulate(config)
    assert sim.decoded > 100, f"only {sim.decoded} submits and results were read from their frames"
    assert sim.summary()["workers_lost"] > 0


@pytest.mark.parametrize("seed", SEEDS[:2], ids=lambda seed: f"seed={seed}")
def test_a_monitored_scheduler_survives_faults_and_its_records_add_up(seed: int) -> None:
    """A monitor subscribes from the start: the statuses hold sampled task events, failures with the error texts
    their workers sent and departed workers (Simulation._check_status), and the run is the same otherwise."""
    sim = simulate(SimConfig(seed=seed, workers=150, monitored=True))
    summary = sim.summary()
    assert summary["tasks"] > 1000 and summary["workers_lost"] >= 5 and sim.statuses > 5
    functions = sim.core.status().functions
    assert sum(f.submitted for f in functions) == sum(f.success + f.error + f.canceled + f.failed for f in functions)
    assert sum(f.submitted for f in functions) >= summary["tasks"]


@pytest.mark.parametrize("seed", SEEDS[:3], ids=lambda seed: f"seed={seed}")
def test_capabilities_under_faults_no_task_lands_on_a_worker_that_cannot_run_it(seed: int) -> None:
    """Workers offer random capability sets, tasks require random ones (sim.worker_capabilities, task_requirement):
    no task is ever dispatched to a worker lacking one it requires (Simulation._check_sent), every task ends, and
    those that require what no worker offers fail with "missing capabilities" (SimClient._check_capabilities)."""
    sim = simulate(SimConfig(seed=seed, workers=120, waves=3, capabilities=True, agent_rate=0.3))
    summary = sim.summary()
    missing = sum(len(c.missing) for c in sim.clients)
    print(f"seed={seed}: {summary}, missing capabilities: {missing}")
    assert summary["tasks"] > 500 and summary["workers_lost"] >= 3
    assert missing > 10
    assert sim.core.sent["balanceRequest"] > 0
    assert len(sim.core.needs.offers.counts) >= 3  # several distinct capability sets were connected


def test_the_simulation_catches_a_task_dispatched_to_a_worker_that_cannot_run_it() -> None:
    class BlindNeeds(NeedTable):
        def _offers_changed(self) -> None:  # every need stays in the shared queue: placed on any worker
            return None

        def of(self, caps: frozenset[str]) -> Need:
            need = super().of(caps)
            if self.split.pop(need, False) is None:  # it was just split: share it instead
                need.ready = self.ready
            return need

    class IgnoresCapabilities(SchedulerCore):
        def __init__(self, config: SchedulerConfig | None = None) -> None:
            super().__init__(config)
            self.needs = BlindNeeds(self._task_cost)

        def validate(self) -> None:  # every check but the needs' (which would see it)
            views.validate(self, skip=(views.validate_needs,))

    with pytest.raises(AssertionError, match="which cannot run it"):
        simulate(SimConfig(seed=SEEDS[0], workers=60, waves=2, capabilities=True), core=IgnoresCapabilities)
