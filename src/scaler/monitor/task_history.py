"""Tasks over time, for scaler_ui's task stream, task log, failures and output views: task starts and ends paired
into bars laid out in lanes per worker (at most as many as it has processors), the failures with their error text,
and the pieces of output tasks printed. Statuses carry these since the previous status only: this keeps them.

Pure: statuses in, plain data out; time comes from the statuses themselves. Every table is bounded (see below).
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from scaler.monitor.fleet import wall_ms
from scaler.monitor.ring import Numbering, Ring
from scaler.protocol.messages import Status
from scaler.protocol.records import NO_NAME, OUTPUT_STDOUT

ENDED_CAPACITY = 200_000  # ended tasks kept: the task stream's bars and the task log (about 10 MB)
RUNNING_MAX = 100_000  # started tasks not ended yet that are tracked (the oldest forgotten beyond)
NAMES_MAX = 50_000  # function and worker names interned before unused ones are let go
LANE_SLACK_MS = 5  # a bar may start this much before the previous bar of its lane ends (clocks of two messages)
LANES_MAX = 256  # lanes per worker that does not say how many processors it has
FAILURES_CAPACITY = 1000  # failures kept, with their text
FAILURE_TEXT_MAX = 16 * 1024  # characters of a failure's text kept
SUMMARY_MAX = 200  # characters of a failure's one-line summary
OUTPUT_PIECES_MAX = 10_000  # pieces of output kept
OUTPUT_CHARS_MAX = 8 * 1024 * 1024  # characters of output kept, all pieces together
OUTPUT_PIECE_MAX = 64 * 1024  # characters of one piece kept

RUNNING = -1  # the status of a bar still running, in the page's data
LOST_ATTEMPT = -2  # the status of an attempt that started again (its worker was lost)
BUSY = 2**62  # a lane's end while a task runs in it (laying out the running tasks)
# The words of docs/monitoring.md ("Words"): how a task ended (TaskStatus), and, for failed, the cause.
STATUS_NAMES = {
    0: "success",
    1: "error",
    2: "canceled",
    3: "failed",
    4: "failed",
    5: "failed",
    6: "failed",
    RUNNING: "running",
    LOST_ATTEMPT: "lost",
}
CAUSES = {3: "crashed", 4: "", 5: "timed out", 6: "over memory"}  # why a failed task failed ("" if not said)
LOG_STATUSES = ("success", "error", "canceled", "failed", "lost")  # what the task log may be filtered by


def place(lanes: list[int], start_ms: int, end_ms: int, most: int = LANES_MAX) -> int:
    """The lane for a bar from `start_ms` to `end_ms` (BUSY while running), bars coming in the order they ended: of
    the lanes free by its start (give or take LANE_SLACK_MS), the one freed last (best fit: as few lanes as tasks ran
    at once, where first fit takes more), else a new one, else (`most` lanes: the worker's processors) the one that
    frees first (the bars then overlap: the messages telling of them came late). `lanes` holds when each frees."""
    best = -1
    for i, free_at in enumerate(lanes):
        if free_at <= start_ms + LANE_SLACK_MS and (best < 0 or free_at > lanes[best]):
            best = i
    if best >= 0:
        lanes[best] = end_ms
        return best
    if len(lanes) < max(1, most):
        lanes.append(end_ms)
        return len(lanes) - 1
    i = min(range(len(lanes)), key=lanes.__getitem__)
    lanes[i] = max(lanes[i], end_ms)
    return i


def summary(text: str) -> str:
    """A failure's text in one line: its last non-blank line (a Python traceback's "ValueError: ...")."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= SUMMARY_MAX else line[: SUMMARY_MAX - 1] + "\u2026"


@dataclass(slots=True)
class Started:
    function: int  # name ids
    worker: int
    start_ms: int


@dataclass(slots=True)
class Failure:
    task_id: int
    function: str
    worker: str
    status: int
    text: str
    time_ms: int


@dataclass(slots=True)
class Piece:
    task_id: int
    function: str
    worker: str
    stream: int
    text: str
    time_ms: int


class Names:
    """Function and worker names as small integers, so that a bar is a few numbers."""

    def __init__(self) -> None:
        self.names: list[str] = [""]  # 0: no name
        self.ids: dict[str, int] = {"": 0}

    def id(self, name: str) -> int:
        found = self.ids.get(name)
        if found is None:
            found = self.ids[name] = len(self.names)
            self.names.append(name)
        return found


class Ended(Numbering):
    """The last ENDED_CAPACITY tasks that ended, numbered, as columns (about 50 bytes a task)."""

    COLUMNS = (("task", "Q"), ("function", "I"), ("worker", "I"), ("lane", "h"), ("start", "q"), ("end", "q"))
    MORE = (("status", "b"), ("duration_us", "Q"), ("peak_memory", "Q"))

    def __init__(self, capacity: int = ENDED_CAPACITY) -> None:
        super().__init__(capacity)
        self.columns = {name: array(code) for name, code in self.COLUMNS + self.MORE}

    def append(self, values: tuple[int, ...]) -> None:
        self.total += 1
        full = len(self.columns["task"]) == self.capacity
        slot = self.slot(self.total)
        for column, value in zip(self.columns.values(), values):
            if full:
                column[slot] = value
            else:
                column.append(value)

    def row(self, number: int) -> tuple[int, ...]:
        slot = self.slot(number)
        return tuple(column[slot] for column in self.columns.values())


class TaskHistory:
    """The bars (ended and running), failures and output of the tasks the statuses told of."""

    def __init__(self, ended_capacity: int = ENDED_CAPACITY) -> None:
        self.names = Names()
        self.ended = Ended(ended_capacity)
        self.running: dict[int, Started] = {}
        self.lanes: dict[int, list[int]] = {}  # worker name id -> when each of its lanes frees (ended tasks)
        self.processors: dict[str, int] = {}  # worker name -> its processors, as of the latest status
        self.failures: Ring[Failure] = Ring(FAILURES_CAPACITY)
        self.outputs: deque[tuple[int, Piece]] = deque()
        self.output_total = 0  # pieces appended so far: the newest one's number
        self.output_chars = 0
        self.sample_every = 1
        self.dropped = 0  # events the scheduler did not record, and running tasks forgotten here
        self.ends_not_seen = 0  # tasks shown running until the scheduler's counts said they had ended (settle)
        self._clock_us = 0

    def add(self, status: Status) -> None:
        if status.clock_us < self._clock_us:  # a new scheduler: its tasks are not the old one's
            self.running.clear()
            self.lanes.clear()
        self._clock_us = status.clock_us
        self.processors = {w.name: w.processors for w in status.workers}
        self._events(status)
        for f in status.failures:
            text = f.text[:FAILURE_TEXT_MAX]
            self.failures.append(Failure(f.task_id, f.function, f.worker, f.status, text, wall_ms(status, f.time_us)))
        for o in status.outputs:
            piece = Piece(
                o.task_id, o.function, o.worker, o.stream, o.text[:OUTPUT_PIECE_MAX], wall_ms(status, o.time_us)
            )
            self._output(piece)
        if len(self.names.names) > NAMES_MAX:
            self._compact()

    def forget_worker(self, name: str, t_ms: int) -> None:
        """A worker left at `t_ms`: its tasks still running stop there (lost attempts: the scheduler runs them again
        elsewhere, or ends them), and its lanes go (a worker of that name later starts afresh)."""
        worker = self.names.ids.get(name)
        if worker is None:
            return
        for task_id in [task_id for task_id, s in self.running.items() if s.worker == worker]:
            started = self.running.pop(task_id)
            end = max(t_ms, started.start_ms)
            self._close(task_id, started.function, worker, started.start_ms, end, LOST_ATTEMPT, 0, 0)
        self.lanes.pop(worker, None)

    def _events(self, status: Status) -> None:
        ev = status.events
        if ev.task_ids:
            self.sample_every = ev.sample_every
        self.dropped += ev.dropped
        names = [self.names.id(name) for name in ev.names]
        count = len(names)
        for i, task_id in enumerate(ev.task_ids):
            function = names[ev.functions[i]] if ev.functions[i] < count else 0
            worker = names[ev.workers[i]] if ev.workers[i] != NO_NAME and ev.workers[i] < count else 0
            t = wall_ms(status, ev.times_us[i])
            if ev.kinds[i] == 0:
                self._start(task_id, function, worker, t)
            else:
                self._end(task_id, function, worker, t, ev.statuses[i], ev.durations_us[i], ev.peak_memory[i])

    def settle(self, status: Status) -> None:
        """Running is what the scheduler holds, not what pairing events suggests: a start whose end never came here
        (a status the monitor missed, an event past the scheduler's bounds) would otherwise run for ever. No more
        tasks run than the scheduler has assigned to workers, in all and per function (the oldest go first). After add
        and the departed workers' forget_worker: their tasks are lost attempts, not ends unseen."""
        if not self.running:
            return
        by_state = status.tasks_by_state
        held = (
            by_state.get("assigned", 0) + by_state.get("canceling", 0) if "assigned" in by_state else len(self.running)
        )
        extra = len(self.running) - held
        by_function: dict[int, list[int]] = {}
        for task_id, started in self.running.items():
            by_function.setdefault(started.function, []).append(task_id)
        gone: list[int] = []
        for f in status.functions:
            ids = by_function.get(self.names.ids.get(f.name, -1), [])
            if len(ids) > f.running:
                gone += ids[: len(ids) - f.running]
        for task_id in gone:
            del self.running[task_id]
        beyond = list(self.running)[: max(0, extra - len(gone))]
        for task_id in beyond:
            del self.running[task_id]
        gone += beyond
        self.ends_not_seen += len(gone)

    def _start(self, task_id: int, function: int, worker: int, t: int) -> None:
        earlier = self.running.pop(task_id, None)
        if earlier is not None:  # it started again: the earlier attempt's worker was lost
            self._close(task_id, earlier.function, earlier.worker, earlier.start_ms, t, LOST_ATTEMPT, 0, 0)
        self.running[task_id] = Started(function, worker, t)
        if len(self.running) > RUNNING_MAX:
            del self.running[next(iter(self.running))]
            self.dropped += 1

    def _end(self, task_id: int, function: int, worker: int, t: int, status: int, duration_us: int, peak: int) -> None:
        """A bar from the end minus the run time the worker measured (else from its start event) to the end."""
        started = self.running.pop(task_id, None)
        if duration_us > 0:
            start = t - duration_us // 1000
        else:
            start = started.start_ms if started is not None else t
        if started is not None and not worker:
            worker = started.worker
        self._close(task_id, function, worker, min(start, t), t, status, duration_us, peak)

    def _close(
        self, task: int, function: int, worker: int, start: int, end: int, status: int, us: int, peak: int
    ) -> None:
        """Keep an ended bar, in a lane of its worker (place); -1 if it ran on no worker."""
        lane = place(self.lanes.setdefault(worker, []), start, end, self._most(worker)) if worker else -1
        self.ended.append((task, function, worker, lane, start, end, status, us, peak))

    def _most(self, worker: int) -> int:
        return self.processors.get(self.names.names[worker]) or LANES_MAX

    def _output(self, piece: Piece) -> None:
        self.output_total += 1
        self.outputs.append((self.output_total, piece))
        self.output_chars += len(piece.text)
        while len(self.outputs) > OUTPUT_PIECES_MAX or self.output_chars > OUTPUT_CHARS_MAX:
            self.output_chars -= len(self.outputs.popleft()[1].text)

    def _compact(self) -> None:
        """Let go of names no bar, running task or lane uses any more, renumbering the rest."""
        old = self.names.names
        used = {0, *self.ended.columns["function"], *self.ended.columns["worker"], *self.lanes}
        for s in self.running.values():
            used.update((s.function, s.worker))
        fresh = Names()
        remap = {i: fresh.id(old[i]) for i in sorted(used)}
        for column in ("function", "worker"):
            values = self.ended.columns[column]
            self.ended.columns[column] = array(values.typecode, (remap[v] for v in values))
        for s in self.running.values():
            s.function, s.worker = remap[s.function], remap[s.worker]
        self.lanes = {remap[w]: lanes for w, lanes in self.lanes.items()}
        self.names = fresh

    # What the page asks for.

    def bars(self, since: int, from_ms: int, now_ms: int, limit: int, running_limit: int) -> dict[str, Any]:
        """The task stream's new data: ended tasks numbered above `since` that ran on a worker and ended at or
        after `from_ms` (the newest `limit` of them), and the tasks running now (the newest `running_limit`,
        drawn up to `now_ms`), as columns; names as indexes into `names`."""
        ended = self.ended
        numbers = [n for n in ended.numbers_since(since) if self._shown(n, from_ms)]
        skipped = max(0, len(numbers) - limit)
        rows = [ended.row(n) for n in numbers[skipped:]]
        running = self._running_rows(running_limit, now_ms)
        rows += running
        names: dict[int, int] = {}  # name id -> index in this answer's names
        data: dict[str, Any] = {"seq": ended.total, "skipped": skipped, "running": len(running), "now": now_ms}
        for i, (name, _) in enumerate(Ended.COLUMNS + Ended.MORE):
            values = [row[i] for row in rows]
            if name == "task":
                data[name] = [f"{v:#x}" for v in values]
            elif name in ("function", "worker"):
                data[name] = [names.setdefault(v, len(names)) for v in values]
            else:
                data[name] = values
        data["names"] = [self.names.names[i] for i in names]
        return data

    def _running_rows(self, limit: int, now_ms: int) -> list[tuple[int, ...]]:
        """The newest `limit` running tasks up to `now_ms`, each in a lane of its worker after the ended tasks (placed
        on copies of the lanes: once ended, it goes where its whole bar fits)."""
        running = list(self.running.items())[-limit:] if limit > 0 else []
        lanes: dict[int, list[int]] = {}
        rows: list[tuple[int, ...]] = []
        for task, s in sorted(running, key=lambda item: item[1].start_ms):
            if s.worker:
                free = lanes.get(s.worker)
                if free is None:
                    free = lanes[s.worker] = list(self.lanes.get(s.worker, ()))
                lane = place(free, s.start_ms, BUSY, self._most(s.worker))
                rows.append((task, s.function, s.worker, lane, s.start_ms, now_ms, RUNNING, 0, 0))
        return rows

    def _shown(self, number: int, from_ms: int) -> bool:
        slot = self.ended.slot(number)
        columns = self.ended.columns
        return columns["lane"][slot] >= 0 and columns["end"][slot] >= from_ms

    def log(
        self, limit: int, statuses: frozenset[str] = frozenset(), function: str = "", worker: str = ""
    ) -> list[dict[str, Any]]:
        """The task log: the newest `limit` ended tasks, newest first, of those statuses (LOG_STATUSES; all if
        empty), function and worker if given."""
        result = []
        for number in self.ended.newest_first():
            entry = self.entry(self.ended.row(number))
            if _matches(entry, statuses, function, worker):
                result.append(entry)
                if len(result) >= limit:
                    break
        return result

    def entry(self, row: tuple[int, ...]) -> dict[str, Any]:
        task, function, worker, _lane, start, end, status, duration_us, peak = row
        return {
            "task": f"{task:#x}",
            "function": self.names.names[function],
            "worker": self.names.names[worker],
            "start": start,
            "end": end,
            "status": STATUS_NAMES.get(status, str(status)),
            "cause": CAUSES.get(status, ""),
            "duration_us": duration_us,
            "peak_memory": peak,
        }

    def failures_since(self, since: int, limit: int) -> dict[str, Any]:
        rows = [
            {
                "seq": n,
                "task": f"{f.task_id:#x}",
                "function": f.function,
                "worker": f.worker,
                "status": STATUS_NAMES.get(f.status, str(f.status)),
                "cause": CAUSES.get(f.status, ""),
                "summary": summary(f.text),
                "time": f.time_ms,
            }
            for n, f in self.failures.since(since, limit)
        ]
        return {"seq": self.failures.total, "failures": rows}

    def outputs_since(self, since: int, limit: int) -> dict[str, Any]:
        pieces = [(n, p) for n, p in self.outputs if n > since][-limit:]
        return {"seq": self.output_total, "outputs": [_piece(n, p) for n, p in pieces]}

    def task(self, task_id: int) -> dict[str, Any]:
        """Everything kept about one task: its runs (newest first), failures with their whole text, its output."""
        runs = [self.entry(self.ended.row(n)) for n in self._numbers_of(task_id)]
        started = self.running.get(task_id)
        if started is not None:
            runs.insert(
                0,
                self.entry((task_id, started.function, started.worker, -1, started.start_ms, 0, RUNNING, 0, 0)),
            )
        failures = [
            {
                "function": f.function,
                "worker": f.worker,
                "status": STATUS_NAMES.get(f.status, str(f.status)),
                "cause": CAUSES.get(f.status, ""),
                "text": f.text,
                "time": f.time_ms,
            }
            for _, f in self.failures.newest()
            if f.task_id == task_id
        ]
        output = [_piece(n, p) for n, p in self.outputs if p.task_id == task_id]
        return {"task": f"{task_id:#x}", "runs": runs, "failures": failures, "output": output}

    def _numbers_of(self, task_id: int) -> Iterator[int]:
        tasks = self.ended.columns["task"]
        for number in self.ended.newest_first():
            if tasks[self.ended.slot(number)] == task_id:
                yield number


def _matches(entry: dict[str, Any], statuses: frozenset[str], function: str, worker: str) -> bool:
    if statuses and entry["status"] not in statuses:
        return False
    return (not function or entry["function"] == function) and (not worker or entry["worker"] == worker)


def _piece(number: int, p: Piece) -> dict[str, Any]:
    return {
        "seq": number,
        "task": f"{p.task_id:#x}",
        "function": p.function,
        "worker": p.worker,
        "stream": "stdout" if p.stream == OUTPUT_STDOUT else "stderr",
        "text": p.text,
        "time": p.time_ms,
    }
