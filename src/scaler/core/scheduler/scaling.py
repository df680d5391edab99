"""How many units each worker manager should run: the one place that decides (issue 27; docs/deploying/autoscaling.md).

The scheduler alone knows the queue; a worker manager (local processes, Slurm jobs, Kubernetes pods) only starts and
stops *units* on its resource manager, each unit bringing `workers_per_unit` Scaler workers that say in their hello
which unit they belong to. This policy turns the scheduler's demand into decisions:

- events in: a manager joined (its ManagerSpec) or left; a unit ended on its resource manager; a worker connected
  (with its slots, capabilities and unit, if a manager started it) or left; and at each tick the backlog (tasks queued
  or assigned, per required capability set), how many of those tasks have a known expected run time and their
  expected seconds, and what each worker holds;
- decisions out: StartUnit (the policy names the unit), Drain (the scheduler gives its workers nothing more and takes
  back what is queued on them), Undrain (work came back before the drain ended), StopUnit (its workers hold nothing).

Demand, in slots (demand()): one per task of unknown run time; for the tasks of known run time, the slots that would
end them within TARGET_SECONDS, at most one per task (10,000 tasks of 1 ms want one slot, not max_units).
Fast up: a tick that finds demand the connected workers and the units on their way cannot hold asks for units at once,
from the managers whose workers offer what those tasks require, the lowest tier first, never past a manager's
`max_units`, and counting units requested but not connected yet (a slow queue is not asked twice). Careful down: a unit
retires only once all its workers have held nothing for the manager's `idle_seconds`, no waiting task could use them,
and the manager keeps its `min_units`; the last tier and the newest unit first; it is drained before it is stopped, so
no task is lost, run twice or charged an attempt by scaling. A unit that has not connected within
`start_timeout_seconds` is given up (stopped), and one that ended before any of its workers connected failed to start:
either way its manager is asked again only after a back-off.

Pure: no I/O, no clock (times come with the events). Runs on Python 3.9 (the scheduler's closure).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import NamedTuple, Union

# After a unit was given up (never connected), its manager is asked again after this long, doubled each time, at most
# BACKOFF_MAX_SECONDS.
BACKOFF_SECONDS = 5.0
BACKOFF_MAX_SECONDS = 300.0
# Tasks whose run time is known ask for the slots that would finish them in about this long, not a slot each: 10,000
# tasks of 1 ms are 10 s of work, one slot's. A new unit helps only with work that outlasts its start (a local process:
# a second; a Slurm job: often longer than this), and the units a tick asks for stay at least idle_seconds: sizing
# below this would start units that come when the work is done, or nearly.
TARGET_SECONDS = 10.0
CONVENTION_PREFIX = "payload="  # capabilities every worker of a convention offers (payload=python): not special


class ManagerSpec(NamedTuple):
    """What a worker manager says of itself when it joins."""

    name: str
    min_units: int = 0
    max_units: int = 1
    workers_per_unit: int = 1  # Scaler workers one unit brings
    slots_per_worker: int = 1  # tasks one of its workers runs at once (its processors)
    capabilities: frozenset[str] = frozenset()  # what its workers offer
    tier: int = 0  # lower tiers are filled first and retired last
    idle_seconds: float = 60.0  # a unit idle this long retires
    start_timeout_seconds: float = 600.0  # a unit not connected by then is given up

    def problem(self) -> str | None:
        """Why this spec cannot be used, or None."""
        if not self.name:
            return "a worker manager needs a name"
        if self.min_units < 0 or self.max_units < 1 or self.min_units > self.max_units:
            return f"min_units {self.min_units} and max_units {self.max_units}: need 0 <= min <= max, max >= 1"
        if self.workers_per_unit < 1 or self.slots_per_worker < 1:
            return "workers_per_unit and slots_per_worker must be at least 1"
        if not (self.idle_seconds >= 0 and self.start_timeout_seconds > 0):
            return "idle_seconds must be >= 0 and start_timeout_seconds > 0"
        return None


# ------------------------------------------------------------------------------------------- events
class ManagerJoined(NamedTuple):
    """A manager joined, or changed its spec. `units`: those it says it runs; a manager the policy does not know (it
    came back after its session ended) gets the ones no other manager has as its own again."""

    now: float
    spec: ManagerSpec
    units: tuple[str, ...] = ()


class ManagerLeft(NamedTuple):
    now: float
    name: str


class UnitEnded(NamedTuple):
    """The resource manager says the unit is gone (finished, failed, cancelled)."""

    now: float
    manager: str
    unit: str
    reason: str


class WorkerJoined(NamedTuple):
    now: float
    worker: bytes
    slots: int
    capabilities: frozenset[str]
    unit: str | None  # the unit its hello names, None for a worker started by hand


class WorkerLeft(NamedTuple):
    now: float
    worker: bytes


class Tick(NamedTuple):
    now: float
    backlog: Mapping[frozenset[str], int]  # tasks queued or assigned, per required capability set
    held: Mapping[bytes, int]  # per connected worker, the tasks it holds (queued there or running)
    # Per required capability set, how many of its backlog's tasks have a known expected run time, and those tasks'
    # expected seconds added up (a need not here: none known). See demand().
    work: Mapping[frozenset[str], tuple[int, float]] = MappingProxyType({})


# Union[...], not X | Y: this runs, and must run on Python 3.9 too (PyPy).
ScalingEvent = Union[ManagerJoined, ManagerLeft, UnitEnded, WorkerJoined, WorkerLeft, Tick]


# ------------------------------------------------------------------------------------------- decisions
class StartUnit(NamedTuple):
    manager: str
    unit: str
    why: str


class Drain(NamedTuple):
    manager: str
    unit: str
    workers: tuple[bytes, ...]
    why: str


class Undrain(NamedTuple):
    manager: str
    unit: str
    workers: tuple[bytes, ...]
    why: str


class StopUnit(NamedTuple):
    manager: str
    unit: str
    why: str


ScalingDecision = Union[StartUnit, Drain, Undrain, StopUnit]


# ------------------------------------------------------------------------------------------- state
class Unit:
    __slots__ = ("draining", "joined", "manager", "name", "requested_at", "workers")

    def __init__(self, name: str, manager: Manager, now: float) -> None:
        self.name = name
        self.manager = manager
        self.requested_at = now
        self.workers: set[bytes] = set()
        self.joined = False  # a worker of it connected once (it started)
        self.draining = False

    @property
    def connected(self) -> bool:
        return bool(self.workers)


class Manager:
    __slots__ = ("failures", "last_failure", "next_try", "spec", "units")

    def __init__(self, spec: ManagerSpec) -> None:
        self.spec = spec
        self.units: dict[str, Unit] = {}  # requested or running, in the order requested
        self.failures = 0  # units given up in a row (never connected)
        self.next_try = -math.inf  # no unit is requested before then (back-off after a failure)
        self.last_failure = ""  # "<unit>: why", of the last unit that failed to start

    @property
    def slots_per_unit(self) -> int:
        return self.spec.workers_per_unit * self.spec.slots_per_worker

    def serves(self, need: frozenset[str]) -> bool:
        """Whether to ask this manager for tasks of `need`: its workers offer all of it, and a manager whose workers
        offer capabilities (gpu) is asked only for tasks that require one of them (not for tasks any worker runs).
        The payload convention every worker offers (payload=python) is no such capability."""
        capabilities = self.spec.capabilities
        special = self.special
        return need <= capabilities and (not special or not special.isdisjoint(need))

    @property
    def special(self) -> frozenset[str]:
        return frozenset(c for c in self.spec.capabilities if not c.startswith(CONVENTION_PREFIX))


class WorkerState:
    __slots__ = ("capabilities", "idle_since", "retired", "slots", "unit", "unit_name")

    def __init__(
        self, slots: int, capabilities: frozenset[str], unit: Unit | None, now: float, unit_name: str | None = None
    ) -> None:
        self.slots = slots
        self.capabilities = capabilities
        self.unit = unit
        self.unit_name = unit_name  # the unit its hello named (known to the policy or not)
        self.idle_since: float | None = now  # None while it holds tasks
        self.retired = False  # its unit was stopped: no capacity, whatever it says until it leaves


class ScalingPolicy:
    """See the module's documentation. feed() events, then decisions() (or handle() for both)."""

    def __init__(self) -> None:
        self.managers: dict[str, Manager] = {}
        self.workers: dict[bytes, WorkerState] = {}
        self.units: dict[str, Unit] = {}
        self.now = 0.0
        self.started = 0  # scale events, for the record (and the simulation's bound)
        self.stopped = 0
        self.given_up = 0
        self._minted = 0
        self._out: list[ScalingDecision] = []

    def handle(self, event: ScalingEvent) -> list[ScalingDecision]:
        self.feed(event)
        return self.decisions()

    def decisions(self) -> list[ScalingDecision]:
        out, self._out = self._out, []
        return out

    def feed(self, event: ScalingEvent) -> None:
        self.now = max(self.now, event.now)
        if isinstance(event, Tick):
            self._on_tick(event)
        elif isinstance(event, WorkerJoined):
            self._on_worker_joined(event)
        elif isinstance(event, WorkerLeft):
            self._on_worker_left(event.worker)
        elif isinstance(event, UnitEnded):
            self._on_unit_ended(event)
        elif isinstance(event, ManagerJoined):
            problem = event.spec.problem()
            if problem is not None:
                raise ValueError(f"worker manager {event.spec.name!r}: {problem}")
            old = self.managers.get(event.spec.name)
            manager = self.managers[event.spec.name] = Manager(event.spec)
            if old is not None:  # (the same manager again, with another spec: its units are still its)
                manager.units = old.units
                for unit in manager.units.values():
                    unit.manager = manager
            else:
                self._adopt(manager, event.units)
        elif isinstance(event, ManagerLeft):
            manager_left = self.managers.pop(event.name, None)
            if manager_left is not None:
                for name in list(manager_left.units):
                    self._forget_unit(name)
        else:
            raise AssertionError(f"unhandled {type(event).__name__}")

    def _adopt(self, manager: Manager, names: Iterable[str]) -> None:
        """Units a manager that came back runs: its own again, with the connected workers that named them."""
        for name in names:
            if name in self.units:
                continue
            unit = self.units[name] = manager.units[name] = Unit(name, manager, self.now)
            for worker, state in self.workers.items():
                if state.unit is None and state.unit_name == name and not state.retired:
                    state.unit = unit
                    unit.workers.add(worker)

    # ------------------------------------------------------------------------------------------- workers
    def _on_worker_joined(self, event: WorkerJoined) -> None:
        unit = self.units.get(event.unit) if event.unit is not None else None
        self.workers[event.worker] = WorkerState(event.slots, event.capabilities, unit, event.now, event.unit)
        if unit is not None:
            if not unit.workers:
                unit.manager.failures = 0
            unit.workers.add(event.worker)
            unit.joined = True

    def _on_worker_left(self, worker: bytes) -> None:
        state = self.workers.pop(worker, None)
        if state is not None and state.unit is not None:
            state.unit.workers.discard(worker)
            if not state.unit.workers:  # on its way again (a worker that reconnects), for start_timeout at most
                state.unit.requested_at = self.now

    def _on_unit_ended(self, event: UnitEnded) -> None:
        unit = self.units.get(event.unit)
        if unit is not None and not unit.joined:  # it failed to start: no new unit at once, every tick
            self._failed(unit.manager, f"{unit.name}: {event.reason}", event.now)
        self._forget_unit(event.unit)

    def _forget_unit(self, name: str) -> None:
        unit = self.units.pop(name, None)
        if unit is None:
            return
        unit.manager.units.pop(name, None)
        for worker in unit.workers:
            state = self.workers.get(worker)
            if state is not None:
                state.unit = None  # still connected: an ordinary worker until it leaves

    # ------------------------------------------------------------------------------------------- the tick
    def _on_tick(self, tick: Tick) -> None:
        now = tick.now
        for worker, state in self.workers.items():
            if tick.held.get(worker, 0):
                state.idle_since = None
            elif state.idle_since is None:
                state.idle_since = now
        self._give_up_late_units(now)
        shortfall = self._shortfall(demand(tick.backlog, tick.work), tick.held)
        self._scale_up(shortfall, now)
        self._finish_drains(tick.held)
        self._keep_minimum(now)
        if not any(shortfall.values()):
            self._scale_down(tick.backlog, sum(tick.held.values()), now)

    def _give_up_late_units(self, now: float) -> None:
        for manager in self.managers.values():
            for unit in list(manager.units.values()):
                if not unit.connected and now - unit.requested_at >= manager.spec.start_timeout_seconds:
                    again = " again" if unit.joined else ""
                    why = f"it did not connect{again} within {manager.spec.start_timeout_seconds:g}s"
                    self._stop(unit, why)
                    if not unit.joined:
                        self._failed(manager, f"{unit.name}: {why}", now)

    def _failed(self, manager: Manager, why: str, now: float) -> None:
        """A unit of `manager` never started: it is asked again only after a back-off, doubled each time in a row."""
        self.given_up += 1
        manager.failures += 1
        manager.last_failure = why
        manager.next_try = now + min(BACKOFF_SECONDS * 2 ** (manager.failures - 1), BACKOFF_MAX_SECONDS)

    def _shortfall(self, backlog: Mapping[frozenset[str], int], held: Mapping[bytes, int]) -> dict[frozenset[str], int]:
        """Per need, the slots its demand wants (`backlog`, see demand()) that neither the connected workers nor the
        units on their way have: each slot counted once, the needs that require most served first (they have the
        fewest places to go). A draining worker holds what it holds still (those tasks are in the backlog), nothing
        more."""
        free: list[tuple[frozenset[str], list[int]]] = []  # (capabilities, [slots left]) of workers and pending units
        for worker, state in self.workers.items():
            if state.retired:
                continue
            draining = state.unit is not None and state.unit.draining
            free.append((state.capabilities, [min(held.get(worker, 0), state.slots) if draining else state.slots]))
        for manager in self.managers.values():
            pending = sum(1 for unit in manager.units.values() if not unit.connected)
            if pending:
                free.append((manager.spec.capabilities, [pending * manager.slots_per_unit]))
        shortfall: dict[frozenset[str], int] = {}
        for need in sorted(backlog, key=len, reverse=True):
            left = backlog[need]
            for capabilities, slots in free:
                if left <= 0:
                    break
                if slots[0] and need <= capabilities:
                    taken = min(slots[0], left)
                    slots[0] -= taken
                    left -= taken
            shortfall[need] = max(left, 0)
        return shortfall

    def _scale_up(self, shortfall: dict[frozenset[str], int], now: float) -> None:
        for need in sorted(shortfall, key=len, reverse=True):
            missing = shortfall[need]
            if missing <= 0:
                continue
            missing = self._undrain(need, missing, now)
            last: Manager | None = None  # the manager of the last unit asked for
            for manager in self._by_tier(need):
                if missing <= 0:
                    break
                while missing > 0 and len(manager.units) < manager.spec.max_units and now >= manager.next_try:
                    self._start(manager, now, f"{missing} tasks{_requiring(need)} wait for room")
                    missing -= manager.slots_per_unit
                    last = manager
            shortfall[need] = max(missing, 0)
            if missing < 0 and last is not None:  # its last unit has room beyond this need: for the others it serves
                _share(shortfall, last, -missing)

    def _undrain(self, need: frozenset[str], missing: int, now: float) -> int:
        """Work came back while units drain: keep the ones that serve it (cheaper than new ones); their idle time
        starts again."""
        for unit in list(self.units.values()):
            if missing <= 0:
                break
            if unit.draining and unit.manager.serves(need):
                unit.draining = False
                for worker in unit.workers:
                    self.workers[worker].idle_since = now
                missing -= len(unit.workers) * unit.manager.spec.slots_per_worker
                why = f"tasks{_requiring(need)} came back before it drained"
                self._out.append(Undrain(unit.manager.spec.name, unit.name, tuple(sorted(unit.workers)), why))
        return missing

    def _by_tier(self, need: frozenset[str]) -> list[Manager]:
        managers = [m for m in self.managers.values() if m.serves(need)]
        return sorted(managers, key=lambda m: (m.spec.tier, m.spec.name))

    def _keep_minimum(self, now: float) -> None:
        for manager in self.managers.values():
            while len(manager.units) < manager.spec.min_units and now >= manager.next_try:
                self._start(manager, now, f"its min_units is {manager.spec.min_units}")

    def _finish_drains(self, held: Mapping[bytes, int]) -> None:
        for unit in list(self.units.values()):
            if unit.draining and not any(held.get(worker, 0) for worker in unit.workers):
                self._stop(unit, "drained: its workers hold no task")

    def _scale_down(self, backlog: Mapping[frozenset[str], int], held: int, now: float) -> None:
        """Drain at most one idle unit per manager per tick: the last tier first, then the newest unit. Not while
        tasks it serves wait unassigned (the backlog beyond what the workers hold, `held`)."""
        managers = sorted(self.managers.values(), key=lambda m: (-m.spec.tier, m.spec.name))
        for manager in managers:
            spec = manager.spec
            active = [u for u in manager.units.values() if not u.draining]
            if len(active) <= spec.min_units:
                continue
            if sum(count for need, count in backlog.items() if manager.serves(need)) > held:
                continue
            for unit in reversed(active):
                if unit.connected and self._idle_for(unit, now) >= spec.idle_seconds:
                    unit.draining = True
                    why = f"its workers have held no task for {spec.idle_seconds:g}s"
                    self._out.append(Drain(spec.name, unit.name, tuple(sorted(unit.workers)), why))
                    break

    def _idle_for(self, unit: Unit, now: float) -> float:
        """How long all of `unit`'s workers have held nothing (the least idle one's time)."""
        shortest = math.inf
        for worker in unit.workers:
            since = self.workers[worker].idle_since
            if since is None:
                return 0.0
            shortest = min(shortest, now - since)
        return shortest

    # ------------------------------------------------------------------------------------------- decisions
    def _start(self, manager: Manager, now: float, why: str) -> None:
        self._minted += 1
        name = f"{manager.spec.name}-{self._minted}"
        unit = self.units[name] = manager.units[name] = Unit(name, manager, now)
        self.started += 1
        self._out.append(StartUnit(manager.spec.name, unit.name, why))

    def _stop(self, unit: Unit, why: str) -> None:
        self.stopped += 1
        self._out.append(StopUnit(unit.manager.spec.name, unit.name, why))
        for worker in unit.workers:
            self.workers[worker].retired = True
        self._forget_unit(unit.name)

    # ------------------------------------------------------------------------------------------- queries
    def status(self, now: float, need: frozenset[str] | None = None) -> list[dict[str, object]]:
        """Per manager (only those asked for tasks of `need`, if given): its units by state, and since when the oldest
        unconnected one was asked for (explain, top)."""
        rows: list[dict[str, object]] = []
        for manager in self.managers.values():
            if need is not None and not manager.serves(need):
                continue
            pending = [u for u in manager.units.values() if not u.connected]
            rows.append(
                {
                    "manager": manager.spec.name,
                    "tier": manager.spec.tier,
                    "capabilities": sorted(manager.spec.capabilities),
                    "min_units": manager.spec.min_units,
                    "max_units": manager.spec.max_units,
                    "connected": sum(1 for u in manager.units.values() if u.connected and not u.draining),
                    "draining": sum(1 for u in manager.units.values() if u.draining),
                    "pending": len(pending),
                    "oldest_pending_seconds": max((now - u.requested_at for u in pending), default=None),
                    "failures": manager.failures,  # units in a row that failed to start
                    "last_failure": manager.last_failure,
                    "retry_in_seconds": max(0.0, manager.next_try - now),
                }
            )
        return rows

    def serves(self, need: frozenset[str]) -> bool:
        """Whether some manager could bring a worker offering `need` (else tasks requiring it can never run)."""
        return any(manager.serves(need) for manager in self.managers.values())


def demand(
    backlog: Mapping[frozenset[str], int], work: Mapping[frozenset[str], tuple[int, float]]
) -> dict[frozenset[str], int]:
    """Per need, the slots its tasks want: one per task of unknown run time; for the `known` tasks with `seconds` of
    expected work, the slots that would end them within TARGET_SECONDS, at most one per task (and one at least)."""
    out: dict[frozenset[str], int] = {}
    for need, count in backlog.items():
        known, seconds = work.get(need, (0, 0.0))
        known = min(max(known, 0), count)
        out[need] = count - known + (min(known, max(1, math.ceil(seconds / TARGET_SECONDS))) if known else 0)
    return out


def _share(shortfall: dict[frozenset[str], int], manager: Manager, room: int) -> None:
    for other, count in shortfall.items():
        if room <= 0:
            break
        if count > 0 and manager.serves(other):
            used = min(count, room)
            shortfall[other] -= used
            room -= used


def _requiring(need: Iterable[str]) -> str:
    caps = sorted(need)
    return f" requiring {', '.join(caps)}" if caps else ""


__all__ = [
    "Drain",
    "ManagerJoined",
    "ManagerLeft",
    "ManagerSpec",
    "ScalingDecision",
    "ScalingEvent",
    "ScalingPolicy",
    "StartUnit",
    "StopUnit",
    "Tick",
    "Undrain",
    "UnitEnded",
    "WorkerJoined",
    "WorkerLeft",
]
