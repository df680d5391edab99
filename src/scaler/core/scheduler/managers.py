"""Worker managers as the scheduler sees them: their sessions, and the scaling policy (scaling.py) fed from the
core's state and carried out on it (docs/protocol.md section 8, "Worker managers").

A manager says hello (kind manager), then reports what it is and which units it runs (managerReport). At each
scaling tick this component gives the policy the backlog (tasks queued or assigned, per required capability set), the
expected work of those whose functions' run times are known (FunctionStats.expected_us, from the functions each need's
tasks were submitted with: a walk over functions, not tasks) and what each worker holds, and carries out its
decisions: StartUnit and StopUnit go to the manager as scaleUnits; Drain holds the unit's workers back (no new task:
placement, balancing and the fleet size skip a worker held back) and asks them for the queued tasks they have not
started; Undrain lets them take tasks again. Workers say in their hello which unit they belong to; one naming a unit
already stopped gets no task.

WorkerManagers is a component of a SchedulerCore that reads and changes the core's state as the core's own methods
would. Pure, like the core: no I/O, no clock. Python 3.9 (the scheduler runs on PyPy).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from scaler.core.scheduler import notices
from scaler.core.scheduler.events import Log, PeerKey
from scaler.core.scheduler.scaling import (
    Drain,
    ManagerJoined,
    ManagerLeft,
    ManagerSpec,
    ScalingPolicy,
    StartUnit,
    StopUnit,
    Tick,
    Undrain,
    UnitEnded,
    WorkerJoined,
    WorkerLeft,
)
from scaler.protocol.capabilities import MAX_OFFERED, capabilities_problem
from scaler.protocol.records import (
    MESSAGE_NAMES,
    BalanceRequest,
    Disconnect,
    Heartbeat,
    HeartbeatEcho,
    Hello,
    ManagerReport,
    Message,
    ScaleUnits,
    Welcome,
)

if TYPE_CHECKING:
    from scaler.core.scheduler.core import SchedulerCore
    from scaler.core.scheduler.needs import Need
    from scaler.core.scheduler.sessions import WorkerSession

# How often the policy looks at the backlog: often enough that waiting work asks for units within about a second,
# seldom enough that walking the assigned tasks (only while a manager is connected) costs nothing that matters.
SCALING_TICK_SECONDS = 0.25
MAX_UNITS = 100_000  # a report asking for more is refused (a typo, not a cluster)
MAX_UNIT_NAMES = 100_000  # units and ended names in one report
STOPPED_REMEMBERED = 10_000  # the names of the last units stopped, whose workers get no task if they say hello


class ManagerSession:
    __slots__ = ("capabilities", "identity", "key", "last_seen", "name")

    def __init__(self, identity: bytes, name: str, capabilities: frozenset[str], now: float, key: bytes | None) -> None:
        self.identity = identity
        self.name = name
        self.capabilities = capabilities  # what its workers will offer (its hello)
        self.key = key
        self.last_seen = now

    def __repr__(self) -> str:
        return f"<Manager {self.name}>"


class WorkerManagers:
    __slots__ = ("_completed", "_last_tick", "by_name", "core", "draining", "policy", "sessions", "stopped")

    def __init__(self, core: SchedulerCore) -> None:
        self.core = core
        self.policy = ScalingPolicy()
        self.sessions: dict[bytes, ManagerSession] = {}  # by routing id
        self.by_name: dict[str, ManagerSession] = {}
        self.draining: dict[bytes, str] = {}  # workers drained for scaling -> their unit
        self._last_tick = -math.inf
        self._completed: dict[bytes, int] = {}  # each worker's tasks ended, at the last scaling tick
        self.stopped: dict[str, None] = {}  # units scaleUnits.stop named, oldest first (at most STOPPED_REMEMBERED)

    # ------------------------------------------------------------------------------------------- sessions
    def on_hello(self, peer: bytes, hello: Hello, key: PeerKey | None) -> None:
        """A manager's hello that passed the common checks (hello.refusal): open its session."""
        core = self.core
        problem = capabilities_problem(hello.capabilities, MAX_OFFERED, "the manager's capabilities")
        if problem is None and not hello.name:
            problem = "a worker manager needs a name (its units are named after it)"
        other = self.by_name.get(hello.name)
        if problem is None and other is not None and other.identity != peer:
            problem = f"a worker manager named {hello.name!r} is connected already"
        if problem is not None:
            core.lifecycle._refuse_hello(peer, hello, problem, key=key)
            return
        if peer in self.sessions:
            self.gone(self.sessions[peer], "it said hello again")
        session = ManagerSession(
            peer, hello.name, frozenset(hello.capabilities), core.now, key.public if key is not None else None
        )
        self.sessions[peer] = self.by_name[session.name] = session
        who = f"worker manager {session.name}" + (f" (key {key.name})" if key is not None else "")
        core._out.append(Log.info(f"{who} connected"))
        timeout = core.config.worker_timeout_seconds
        core._send(peer, Welcome(0, core.config.name, core.config.protected, int(timeout * 1000)))

    def on_message(self, session: ManagerSession, message: Message) -> None:
        core = self.core
        session.last_seen = core.now
        if isinstance(message, Heartbeat):
            core._send(session.identity, HeartbeatEcho())
        elif isinstance(message, ManagerReport):
            self._on_report(session, message)
        elif isinstance(message, Disconnect):
            self.gone(session, f"disconnected{': ' + message.reason if message.reason else ''}")
        else:
            name = MESSAGE_NAMES[type(message)]
            notices.bad_request(core, session.identity, f"a worker manager may not send {name}")

    def _on_report(self, session: ManagerSession, report: ManagerReport) -> None:
        core = self.core
        spec = ManagerSpec(
            session.name,
            report.min_units,
            report.max_units,
            report.workers_per_unit,
            report.slots_per_worker,
            session.capabilities,
            report.tier,
            report.idle_ms / 1000,
            report.start_timeout_ms / 1000,
        )
        problem = spec.problem()
        if problem is None and report.max_units > MAX_UNITS:
            problem = f"max_units {report.max_units} is more than {MAX_UNITS}"
        if problem is None and len(report.units) + len(report.ended) > MAX_UNIT_NAMES:
            problem = f"more than {MAX_UNIT_NAMES} unit names in one report"
        if problem is not None:
            notices.bad_request(core, session.identity, f"managerReport: {problem}")
            return
        policy = self.policy
        old = policy.managers.get(session.name)
        if old is None or old.spec != spec:
            policy.feed(ManagerJoined(core.now, spec, tuple(report.units) if old is None else ()))
            text = (
                f"worker manager {session.name}: {spec.min_units}-{spec.max_units} units of {spec.workers_per_unit} "
                f"workers, tier {spec.tier}, idle {spec.idle_seconds:g}s"
            )
            core._out.append(Log.info(text))
        ended = set(report.ended)
        running = set(report.units)
        mine = policy.managers[session.name].units
        # Units the policy asked for that the manager no longer runs, and said have ended, are gone. (A unit asked for
        # moments ago may not be in a report sent before the manager saw the request: only `ended` ends a unit.)
        for unit in [u for u in mine if u in ended and u not in running]:
            why = _reason_of(unit, report.reason)
            policy.feed(UnitEnded(core.now, session.name, unit, why))
            core._out.append(Log.info(f"worker manager {session.name}: unit {unit} ended ({why or '?'})"))
        self._carry_out()

    def gone(self, session: ManagerSession, reason: str) -> None:
        """A manager's session ended: its units are forgotten (their workers stay, as ordinary workers)."""
        core = self.core
        self.sessions.pop(session.identity, None)
        if self.by_name.get(session.name) is session:
            del self.by_name[session.name]
            self.policy.feed(ManagerLeft(core.now, session.name))
            for worker in [w for w, unit in self.draining.items() if unit not in self.policy.units]:
                self._undrain(worker)  # its unit was forgotten with its manager: an ordinary worker again
        core._out.append(Log.info(f"worker manager {session.name} left ({reason})"))

    def time_out_silent(self, now: float) -> None:
        timeout = self.core.config.worker_timeout_seconds
        for session in [s for s in self.sessions.values() if now - s.last_seen > timeout]:
            self.gone(session, f"no heartbeat for {now - session.last_seen:.1f}s")

    # ------------------------------------------------------------------------------------------- workers
    def worker_joined(self, worker: WorkerSession, unit: str) -> None:
        if unit in self.stopped:
            # Its unit was stopped (given up while it started after all, or drained and stopped while this worker said
            # hello again): its manager is stopping it, so a task started there would be lost or run twice. Held back
            # and unknown to the policy (no room counted) until it leaves.
            worker.held_until = math.inf
            self.core._out.append(Log.info(f"worker {worker.name} of stopped unit {unit} gets no task"))
            return
        policy = self.policy
        known = policy.units.get(unit) if unit else None
        slots = known.manager.spec.slots_per_worker if known is not None else 1
        policy.feed(WorkerJoined(self.core.now, worker.identity, slots, worker.capabilities, unit or None))

    def worker_left(self, worker: WorkerSession) -> None:
        self.draining.pop(worker.identity, None)
        self._completed.pop(worker.identity, None)
        if worker.identity in self.policy.workers:
            self.policy.feed(WorkerLeft(self.core.now, worker.identity))

    # ------------------------------------------------------------------------------------------- the tick
    def tick(self) -> None:
        """At most every SCALING_TICK_SECONDS while a manager is known: feed the policy the backlog, carry out its
        decisions, and ask draining workers again for queued tasks they still hold."""
        core = self.core
        now = core.now
        self.time_out_silent(now)
        if not self.policy.managers or now - self._last_tick < SCALING_TICK_SECONDS * 0.99:  # (float sums)
            return
        self._last_tick = now
        backlog: dict[frozenset[str], int] = {}
        for need in core.needs.by_caps.values():
            if need.queued:
                backlog[need.caps] = backlog.get(need.caps, 0) + need.queued
        held: dict[bytes, int] = {}
        completed = self._completed
        for worker in core.workers.values():
            # A worker that ended tasks since the last scaling tick was busy, even if it holds none now.
            busy = worker.completed != completed.get(worker.identity, 0)
            completed[worker.identity] = worker.completed
            held[worker.identity] = len(worker.assigned) or int(busy)
            for task in worker.assigned.values():
                caps = task.need.caps
                backlog[caps] = backlog.get(caps, 0) + 1
        needs = core.needs.by_caps
        work = {caps: _work(needs[caps], count) for caps, count in backlog.items() if caps in needs}
        self.policy.feed(Tick(now, backlog, held, work))
        self._carry_out()
        for identity in self.draining:
            drained = core.workers.get(identity)
            if drained is not None:
                self._ask_back(drained)

    def _carry_out(self) -> None:
        core = self.core
        orders: dict[str, tuple[list[str], list[str], list[str]]] = {}  # manager -> (start, stop, why)
        for decision in self.policy.decisions():
            if isinstance(decision, StartUnit):
                start, _, why = orders.setdefault(decision.manager, ([], [], []))
                start.append(decision.unit)
                why.append(f"start {decision.unit}: {decision.why}")
            elif isinstance(decision, StopUnit):
                _, stop, why = orders.setdefault(decision.manager, ([], [], []))
                stop.append(decision.unit)
                why.append(f"stop {decision.unit}: {decision.why}")
                self._remember_stopped(decision.unit)
                for retired in [w for w, unit in self.draining.items() if unit == decision.unit]:
                    del self.draining[retired]  # held back still (retired) until it leaves
            elif isinstance(decision, Drain):
                core._out.append(Log.info(f"draining unit {decision.unit} of {decision.manager}: {decision.why}"))
                for identity in decision.workers:
                    session = core.workers.get(identity)
                    if session is not None:
                        self.draining[identity] = decision.unit
                        session.held_until = math.inf
                        self._ask_back(session)
            elif isinstance(decision, Undrain):
                core._out.append(Log.info(f"unit {decision.unit} of {decision.manager} kept: {decision.why}"))
                for identity in decision.workers:
                    self._undrain(identity)
        for name, (start, stop, why) in orders.items():
            manager = self.by_name.get(name)
            if manager is not None:
                core._send(manager.identity, ScaleUnits(start, stop, "; ".join(why)))
                core._out.append(Log.info(f"worker manager {name}: {'; '.join(why)}"))

    def _remember_stopped(self, unit: str) -> None:
        self.stopped[unit] = None
        if len(self.stopped) > STOPPED_REMEMBERED:
            del self.stopped[next(iter(self.stopped))]

    def _undrain(self, identity: bytes) -> None:
        self.draining.pop(identity, None)
        worker = self.core.workers.get(identity)
        if worker is not None:
            worker.held_until = worker.record.held_until if worker.record is not None else 0.0
            self.core._balance_due = True

    def _ask_back(self, worker: WorkerSession) -> None:
        """Ask a draining worker for the tasks it holds and has not started (they go back to the queue)."""
        if worker.balance_pending:
            return
        ids = [task_id for task_id, task in worker.assigned.items() if not task.started]
        if ids:
            worker.balance_pending = True
            self.core._send(worker.identity, BalanceRequest(ids))

    # ------------------------------------------------------------------------------------------- queries
    def serves(self, caps: frozenset[str]) -> bool:
        """Whether a connected manager could bring a worker that runs tasks requiring `caps`."""
        return self.policy.serves(caps)


def _work(need: Need, count: int) -> tuple[int, float]:
    """Of a need's `count` tasks queued or assigned, how many have a known expected run time and their seconds (the
    policy's Tick.work), from the counters of the functions its tasks were submitted with (Need.functions; those with
    nothing in flight are forgotten here): a walk over its functions, not its tasks. A function's tasks in flight may
    be of other needs too, or wait on other tasks: the tasks of unknown run time are counted first (a slot each), the
    rest at the known functions' mean, weighted by their tasks in flight."""
    unknown = known = 0
    known_us = 0.0
    functions = need.functions
    for stats in list(functions):
        in_flight = stats.in_flight
        if in_flight <= 0:
            del functions[stats]
            continue
        expected = stats.expected_us
        if expected < 0:
            unknown += in_flight
        else:
            known += in_flight
            known_us += in_flight * expected
    if not known:
        return 0, 0.0
    timed = max(0, count - unknown)
    return timed, timed * known_us / known / 1e6


def _reason_of(unit: str, reason: str) -> str:
    """The words about `unit` in a report's reason ("local-1: exit code 1; local-2: ..."), or all of it."""
    for part in reason.split("; "):
        if part.startswith(unit + ": "):
            return part[len(unit) + 2 :]
    return reason
