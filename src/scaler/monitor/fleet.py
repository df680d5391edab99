"""The workers over time, for scaler_ui's workers view: each worker's recent cpu, memory, queue, running tasks and
lag (sparklines), its state, and the workers that left or were lost, remembered for a while with the reason.

Pure: statuses in, plain data out; time comes from the statuses themselves.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scaler.core.capabilities import PYTHON_PAYLOAD
from scaler.monitor.render import STALE_HEARTBEAT_MS
from scaler.monitor.ring import Spark
from scaler.protocol.messages import Status, WorkerStatus

SPARK_POINTS = 120  # statuses of history per worker: two minutes at one status a second
DEPARTED_MAX = 1000  # departed workers remembered, newest kept
DEPARTED_KEEP_MS = 15 * 60 * 1000  # and for at most this long after they left
GONE = "gone from the scheduler's status"  # the reason given when a worker vanished without a departure record

# Sort order of the state column (ascending): the states that need a look first.
STATE_RANK = {"lost": 0, "stale": 1, "held back": 2, "gone": 3, "left": 4, "busy": 5, "idle": 6}


def wall_ms(status: Status, clock_us: int) -> int:
    """A time on the scheduler's own clock (events, failures, outputs, departures) as wall-clock ms since the epoch,
    through the status's pair of clocks (a scheduler without clockUs: the status's own time)."""
    if status.clock_us == 0:
        return status.time_us // 1000
    return (status.time_us - (status.clock_us - clock_us)) // 1000


def worker_state(w: WorkerStatus) -> str:
    if w.held_back_ms > 0:
        return "held back"
    if w.heartbeat_age_ms > STALE_HEARTBEAT_MS:
        return "stale"
    return "busy" if w.running or w.queued else "idle"


class Track:
    """One worker's latest figures and recent history."""

    __slots__ = ("cpu", "lag_ms", "latest", "queued", "rss", "running", "since_ms", "times")

    def __init__(self, latest: WorkerStatus, since_ms: int) -> None:
        self.latest = latest
        self.since_ms = since_ms  # first seen
        self.times = Spark(SPARK_POINTS, "d")  # ms since the epoch
        self.cpu = Spark(SPARK_POINTS)  # agent and processors, percent of one core
        self.rss = Spark(SPARK_POINTS)  # agent and processors, bytes
        self.queued = Spark(SPARK_POINTS)
        self.running = Spark(SPARK_POINTS)
        self.lag_ms = Spark(SPARK_POINTS)

    def add(self, w: WorkerStatus, t_ms: int) -> None:
        self.latest = w
        self.times.add(t_ms)
        self.cpu.add(w.agent_cpu_percent + w.cpu_percent)
        self.rss.add(w.agent_rss_bytes + w.rss_bytes)
        self.queued.add(w.queued)
        self.running.add(w.running)
        self.lag_ms.add(w.lag_us / 1000)

    def history(self) -> dict[str, list[float]]:
        return {
            "t": self.times.values(),
            "cpu": self.cpu.values(),
            "rss": self.rss.values(),
            "prefetched": self.queued.values(),
            "running": self.running.values(),
            "lag_ms": self.lag_ms.values(),
        }


@dataclass
class Departed:
    name: str
    reason: str
    lost: bool | None  # None: it vanished from the statuses without a departure record
    time_ms: int
    track: Track | None

    @property
    def state(self) -> str:
        return "gone" if self.lost is None else "lost" if self.lost else "left"


def row(name: str, track: Track | None, state: str, departed: Departed | None = None) -> dict[str, Any]:
    """A worker as the workers table shows it (without sparklines)."""
    w = track.latest if track is not None else WorkerStatus(name)
    return {
        "name": name,
        "state": state,
        "cpu": round(w.agent_cpu_percent + w.cpu_percent, 1),
        "rss": w.agent_rss_bytes + w.rss_bytes,
        "agent_cpu": round(w.agent_cpu_percent, 1),
        "agent_rss": w.agent_rss_bytes,
        "processor_cpu": round(w.cpu_percent, 1),
        "processor_rss": w.rss_bytes,
        "free": w.free,
        "sent": w.sent,
        "prefetched": w.queued,  # in the worker's queue, waiting for a processor (docs/monitoring.md, "Words")
        "running": w.running,
        "processors": w.processors,
        "blocked": w.blocked_processors,
        "waiting": w.waiting,
        "lag_ms": round(w.lag_us / 1000, 2),
        "completed": w.completed,
        "held_back_ms": w.held_back_ms,
        "heartbeat_age_ms": w.heartbeat_age_ms,
        "capabilities": list(w.capabilities),
        "offers": [c for c in w.capabilities if c != PYTHON_PAYLOAD],  # shown: every Python worker offers that one
        "since_ms": track.since_ms if track is not None else None,
        "reason": departed.reason if departed is not None else "",
        "departed_ms": departed.time_ms if departed is not None else None,
    }


def _state_key(r: dict[str, Any]) -> Any:
    return STATE_RANK.get(r["state"], len(STATE_RANK))


SORT_KEYS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "name": lambda r: r["name"],
    "state": _state_key,
    **{
        column: (lambda c: lambda r: r[c])(column)
        for column in ("cpu", "rss", "free", "sent", "prefetched", "running", "processors", "lag_ms", "completed")
    },
    "held_back_ms": lambda r: r["held_back_ms"],
    "heartbeat_age_ms": lambda r: r["heartbeat_age_ms"],
    "capabilities": lambda r: ", ".join(r["offers"]),
}


def _matches(r: dict[str, Any], contains: str) -> bool:
    return contains in r["name"] or any(contains in c for c in r["capabilities"])


def life_label(name: str, life: int) -> str:
    """A worker as the page names it: its name, and from its second life on (a worker restarted under the same name)
    the number of the life, "name #2"."""
    return name if life <= 1 else f"{name} #{life}"


class Fleet:
    """The live workers' tracks and the departed workers of the last DEPARTED_KEEP_MS. Each life of a worker is kept
    apart: a worker that comes back under the name of one that departed (scaler_cluster restarts a dead worker under
    its name) starts a new life, "name #2", and the departed life stays, "name #1", with its history and reason."""

    def __init__(self) -> None:
        self.tracks: dict[str, Track] = {}
        self.departed: OrderedDict[str, Departed] = OrderedDict()  # by label (life_label)
        self.lives: dict[str, int] = {}  # worker name -> the number of its current (or latest) life
        self.now_ms = 0

    def add(self, status: Status) -> None:
        self.now_ms = t_ms = status.time_us // 1000
        present = {w.name for w in status.workers}
        for d in status.departed:
            self._depart(d.name, d.reason, d.lost, wall_ms(status, d.time_us))
        for name in [name for name in self.tracks if name not in present]:
            self._depart(name, GONE, None, t_ms)
        for w in status.workers:
            track = self.tracks.get(w.name)
            if track is not None and w.completed < track.latest.completed:  # its counters started again: a new life
                self._depart(w.name, "restarted: its counters started again", None, t_ms)
                track = None
            if track is None:
                track = self.tracks[w.name] = Track(w, t_ms)
                self._new_life(w.name)
            track.add(w, t_ms)
        cutoff = t_ms - DEPARTED_KEEP_MS
        if any(d.time_ms < cutoff for d in self.departed.values()):
            self.departed = OrderedDict((label, d) for label, d in self.departed.items() if d.time_ms >= cutoff)
        while len(self.departed) > DEPARTED_MAX:
            self.departed.popitem(last=False)

    def _new_life(self, name: str) -> None:
        """`name` is seen again after a departure (or for the first time): the departed life keeps its own label."""
        life = self.lives.get(name, 0)
        earlier = self.departed.pop(name, None) if life <= 1 else None
        if earlier is not None:  # its first life departed: from now on it is "name #1"
            earlier.name = f"{name} #1"
            self.departed[earlier.name] = earlier
        self.lives[name] = life + 1

    def label(self, name: str) -> str:
        return life_label(name, self.lives.get(name, 1))

    def _depart(self, name: str, reason: str, lost: bool | None, time_ms: int) -> None:
        label = self.label(name)
        earlier = self.departed.pop(label, None)
        track = self.tracks.pop(name, None) or (earlier.track if earlier is not None else None)
        if earlier is not None and lost is None:  # a record came first: keep its reason
            reason, lost, time_ms = earlier.reason, earlier.lost, earlier.time_ms
        self.departed[label] = Departed(label, reason, lost, time_ms, track)

    def rows(self) -> list[dict[str, Any]]:
        live = [row(self.label(name), track, worker_state(track.latest)) for name, track in self.tracks.items()]
        gone = [row(d.name, d.track, d.state, d) for d in self.departed.values()]
        return live + gone

    def counts(self) -> dict[str, int]:
        """How many workers are in each state, departed lives included."""
        result: dict[str, int] = {}
        for track in self.tracks.values():
            state = worker_state(track.latest)
            result[state] = result.get(state, 0) + 1
        for d in self.departed.values():
            result[d.state] = result.get(d.state, 0) + 1
        return result

    def table(self, sort: str, descending: bool, offset: int, limit: int, contains: str = "") -> dict[str, Any]:
        """One page of the workers table: sorted by `sort` (a SORT_KEYS name; the name breaks ties), the rows whose
        name or one of whose capabilities contains `contains`, `limit` of them from `offset`, each with its cpu and
        memory sparklines."""
        rows = self.rows()
        if contains:
            rows = [r for r in rows if _matches(r, contains)]
        rows.sort(key=lambda r: r["name"])
        rows.sort(key=SORT_KEYS[sort], reverse=descending)
        page = rows[offset : offset + limit]
        for r in page:
            track = self.track(r["name"])
            r["spark_cpu"] = [round(v, 1) for v in track.cpu.values()] if track is not None else []
            r["spark_rss"] = track.rss.values() if track is not None else []
        return {"total": len(rows), "offset": offset, "sort": sort, "descending": descending, "rows": page}

    def live_name(self, label: str) -> str | None:
        """The name of the live worker the page calls `label` (None if no live worker goes by it)."""
        name, _, life = label.rpartition(" #")
        if name and life.isdigit() and name in self.tracks and self.label(name) == label:
            return name
        return label if label in self.tracks and self.label(label) == label else None

    def track(self, label: str) -> Track | None:
        name = self.live_name(label)
        if name is not None:
            return self.tracks[name]
        return self.departed[label].track if label in self.departed else None

    def detail(self, label: str) -> dict[str, Any] | None:
        """Everything about one life of a worker, live or departed: its row and its history; None if unknown."""
        track: Track | None
        name = self.live_name(label)
        if name is not None:
            track = self.tracks[name]
            result = row(label, track, worker_state(track.latest))
        elif label in self.departed:
            d = self.departed[label]
            track, result = d.track, row(label, d.track, d.state, d)
        else:
            return None
        result["history"] = track.history() if track is not None else {}
        return result
