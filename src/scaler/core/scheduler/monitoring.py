"""What the scheduler keeps for its monitors (Status): per-function counters, always on and cheap (a dict get and an
increment per task), and the records of the current status period (task events, failures, printed output, departed
workers), kept only while a monitor subscribes and bounded.

Pure; no I/O, no clock: the core passes its own time in.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import TYPE_CHECKING

from scaler.protocol.frames import whole
from scaler.protocol.records import (
    DURATION_BOUNDS_US,
    ID_COUNTER_MASK,
    NO_NAME,
    DepartedWorker,
    FunctionStatus,
    OutputRecord,
    Payload,
    TaskEvents,
    TaskFailure,
    TaskStatus,
)

if TYPE_CHECKING:
    from scaler.core.scheduler.objects import StoredObject

UNNAMED = "(unnamed)"  # a function object its client gave no name (or a task's result used as a function)
OTHER_FUNCTIONS = "(other functions)"  # every name past MAX_FUNCTIONS
MAX_FUNCTIONS = 1_000  # distinct names counted
MAX_NAME = 200  # characters of a name kept
STATUS_FUNCTIONS = 200  # entries in one Status
IDLE_SECONDS = 600.0  # a name with nothing in flight and no activity this long may be forgotten, once over the bound
EVENT_TASKS = 2_500  # tasks drawn per period (a start and an end each: about 5,000 events), see sample_every
MAX_EVENTS = 10_000  # events drawn per period whatever the sampling (a burst within one period); see PeriodLog.drawn
MAX_OPEN = 100_000  # tasks whose start was kept and whose end is awaited, carried from period to period
MAX_FAILURES = 100
MAX_TEXT = 4_096  # characters of a failure's text
CUT_MARK = "[...]\n"  # starts an error text whose beginning was cut (its end holds the exception)
MAX_OUTPUT = 256 * 1024  # characters of printed output per period
MAX_DEPARTED = 100
MAX_ERROR_TEXTS = 1_000  # error texts waiting for their task's result
STARTED, ENDED = 0, 1  # TaskEvents.kinds
# by TaskStatus value: the FunctionStats.ended slot (success, error, canceled, failed: crashed, failed, timed out and
# over memory)
ENDED_INDEX = (0, 1, 2, 3, 3, 3, 3)
ENDED_NAMES = ("success", "error", "canceled", "failed")
FAILURES = frozenset(s for s in TaskStatus if s not in (TaskStatus.SUCCESS, TaskStatus.CANCELED))


class FunctionStats:
    """One function name's tasks since the scheduler started (or since the name was last forgotten)."""

    __slots__ = ("_duration_us", "buckets", "ended", "last_active", "name", "seen", "span_us", "submitted", "timed")

    def __init__(self, name: str, now: float) -> None:
        self.name = name
        self.submitted = 0
        self.ended = [0, 0, 0, 0]  # success, error, canceled, failed (ENDED_INDEX)
        self._duration_us = 0  # summed over tasks that ended with a result (success or error) and a run time
        self.timed = 0  # how many tasks _duration_us sums: those whose worker sent a run time (profiled)
        self.buckets = [0] * (len(DURATION_BOUNDS_US) + 1)  # those tasks by run time (DURATION_BOUNDS_US)
        self.seen = 0  # submitted + ended at the last status period's end: activity since shows as a change
        self.last_active = now  # the end of the status period in which activity was last seen
        self.span_us = -1.0  # the scheduler's moving average of the worker time per result of it (-1: none yet)

    @property
    def in_flight(self) -> int:
        return self.submitted - sum(self.ended)

    def ran(self, duration_us: int) -> None:
        """A task ended with a result and its worker's run time: summed, counted, and put in its bucket."""
        self._duration_us += duration_us
        self.timed += 1
        self.buckets[bisect_left(DURATION_BOUNDS_US, duration_us)] += 1

    @property
    def duration_us(self) -> int:
        return self._duration_us

    @property
    def expected_us(self) -> float:
        """How long one of its tasks is expected to run, in µs, or -1 if not known: the mean of the run times its
        workers reported (profiled tasks), else the scheduler's own measure (span_us: the time a worker spent per result
        of it, as ClientSession.task_us; a worker running several at once shows less than each one's run time)."""
        return self._duration_us / self.timed if self.timed else self.span_us

    def __repr__(self) -> str:
        return f"<Function {self.name} submitted={self.submitted} ended={self.ended}>"


def display_name(name: str) -> str:
    return name[:MAX_NAME] if name else UNNAMED


class FunctionTable:
    """Counters by function name, and a cache of them by function object id (dropped with the object).

    A task's counters are found by its function id: the cached entry (one dict get), or, on a miss, by the name of the
    object (cached then); a task whose function is not an object (yet: a task's result) counts as UNNAMED, uncached,
    and so does the result once an object. UNNAMED gets an entry even past MAX_FUNCTIONS, and entries are forgotten
    only with nothing in flight: a task finds the same entry at its submission and at its end."""

    __slots__ = ("by_id", "by_name", "forgotten")

    def __init__(self) -> None:
        self.by_id: dict[int, FunctionStats] = {}
        self.by_name: dict[str, FunctionStats] = {}
        self.forgotten = [0, 0, 0, 0]  # tasks ended of the names forgotten, by ENDED_NAMES

    def ended(self) -> list[int]:
        """Every task ended since the start, by ENDED_NAMES."""
        totals = list(self.forgotten)
        for stats in self.by_name.values():
            for index, count in enumerate(stats.ended):
                totals[index] += count
        return totals

    def of(self, function_id: int, obj: StoredObject | None, now: float) -> FunctionStats:
        """The entry of `function_id` (a miss of by_id: the caller tried it first)."""
        name = display_name(obj.name) if obj is not None else UNNAMED
        stats = self.by_name.get(name)
        if stats is None:
            if len(self.by_name) >= MAX_FUNCTIONS and name != UNNAMED:
                name = OTHER_FUNCTIONS
                stats = self.by_name.get(name)
            if stats is None:
                stats = self.by_name[name] = FunctionStats(name, now)
        if obj is not None:
            self.by_id[function_id] = stats
        return stats

    def peek(self, function_id: int, obj: StoredObject | None) -> FunctionStats | None:
        """The entry a task of `function_id` counts in, without making one (for validate)."""
        stats = self.by_id.get(function_id)
        if stats is None and (obj is None or not obj.name):
            stats = self.by_name.get(UNNAMED)
        return stats

    def end_period(self, now: float) -> None:
        """Once per status period, whether or not a status is built: notes which entries changed since the last
        period, and forgets idle ones when over the bound."""
        for stats in self.by_name.values():
            total = stats.submitted + sum(stats.ended)
            if total != stats.seen:
                stats.seen, stats.last_active = total, now
        if len(self.by_name) >= MAX_FUNCTIONS:
            self._forget_idle(now)

    def report(self, running: dict[FunctionStats, int]) -> list[FunctionStatus]:
        """The functions with tasks in flight, then the most recently active, STATUS_FUNCTIONS at most (after
        end_period)."""
        chosen = sorted(self.by_name.values(), key=lambda s: (s.in_flight > 0, s.last_active), reverse=True)
        return [_function_status(s, running.get(s, 0)) for s in chosen[:STATUS_FUNCTIONS]]

    def _forget_idle(self, now: float) -> None:
        idle = {
            name
            for name, s in self.by_name.items()
            if s.in_flight == 0 and now - s.last_active > IDLE_SECONDS and name not in (UNNAMED, OTHER_FUNCTIONS)
        }
        if idle:
            for name in idle:
                for index, count in enumerate(self.by_name[name].ended):
                    self.forgotten[index] += count
            self.by_name = {name: s for name, s in self.by_name.items() if name not in idle}
            self.by_id = {fid: s for fid, s in self.by_id.items() if s.name not in idle}


def _function_status(stats: FunctionStats, running: int) -> FunctionStatus:
    success, error, canceled, failed = stats.ended
    return FunctionStatus(
        stats.name,
        stats.submitted,
        running,
        success,
        error,
        canceled,
        failed,
        stats._duration_us,
        stats.timed,
        list(stats.buckets) if stats.timed else [],
    )


def next_sample_every(ended: int) -> int:
    """One task in how many to draw in a period after one in which `ended` tasks ended."""
    return max(1, math.ceil(ended / EVENT_TASKS))


def payload_text(payload: Payload) -> str:
    """The UTF-8 text a failed, timed out or over-memory result carries, clipped."""
    data = bytes(memoryview(whole(payload))[: MAX_TEXT * 4])
    return data.decode(errors="replace")[:MAX_TEXT]


# One task event as the period keeps it: (task id, kind, status, function name, worker name or None, time in µs,
# duration in µs, peak memory); TaskEvents' columns are made when a status takes them.
EventRow = tuple[int, int, int, str, "str | None", int, int, int]


class PeriodLog:
    """The records of one status period, while a monitor subscribes; Status takes them and a new period starts.

    The core draws the tasks whose events are kept (sample_every, MAX_EVENTS) and appends rows itself, inline: most
    events are not drawn, and those that are cost one tuple. A task once drawn keeps being drawn (`kept`), past
    MAX_EVENTS and across periods whose sampling differs (carry): a start sent is followed by its end, and a monitor
    never has to guess whether a task still runs."""

    __slots__ = (
        "departed",
        "dropped",
        "error_texts",
        "failures",
        "kept",
        "output_chars",
        "outputs",
        "rows",
        "sample_every",
    )

    def __init__(self, sample_every: int = 1) -> None:
        self.sample_every = sample_every  # a task's events are kept if its id counter is a multiple of this
        self.rows: list[EventRow] = []
        self.kept: set[int] = set()  # tasks drawn this period, and those carried whose end is awaited
        self.dropped = 0  # events not kept (not drawn, or past MAX_EVENTS)
        self.failures: list[TaskFailure] = []
        self.outputs: list[OutputRecord] = []
        self.output_chars = 0
        self.departed: list[DepartedWorker] = []
        # task id -> the text of the error it raised (taskOutput stream 3), until its result comes or it leaves its
        # worker; kept across periods
        self.error_texts: dict[int, str] = {}

    def drawn(self, task_id: int) -> bool:
        """Whether the events of `task_id` are kept now (counted as dropped if not): those of a task drawn before
        always are (the end of a start that was sent)."""
        if (task_id & ID_COUNTER_MASK) % self.sample_every or len(self.rows) >= MAX_EVENTS:
            if task_id in self.kept:
                return True
            self.dropped += 1
            return False
        self.kept.add(task_id)
        return True

    def carry(self, previous: PeriodLog) -> None:
        """Start where `previous` (the period just ended) left: the error texts still waiting for their results, and
        the tasks whose start was kept and end not yet (their end will be kept whatever this period draws)."""
        self.error_texts = previous.error_texts
        last = {task_id: kind for task_id, kind, *_ in previous.rows}
        kept = {task_id for task_id in previous.kept if last.get(task_id, STARTED) == STARTED}
        self.kept = kept if len(kept) <= MAX_OPEN else set(list(kept)[:MAX_OPEN])

    def taken_events(self) -> TaskEvents:
        """The period's events as columns (the log is not used afterwards)."""
        events = TaskEvents(sample_every=self.sample_every, dropped=self.dropped)
        if not self.rows:
            return events
        ids, kinds, statuses, functions, workers, times, durations, peaks = (list(c) for c in zip(*self.rows))
        names: dict[str | None, int] = {None: NO_NAME}
        for name in (*functions, *workers):
            if name not in names:
                names[name] = len(names) - 1
        events.task_ids, events.times_us, events.durations_us, events.peak_memory = ids, times, durations, peaks
        events.kinds, events.statuses = bytes(kinds), bytes(statuses)
        events.functions = [names[f] for f in functions]
        events.workers = [names[w] for w in workers]
        events.names = [name for name in names if name is not None]
        return events

    def started(self, task_id: int, function: str, worker: str, time_us: int) -> None:
        """A task was handed to a processor (tasksStarted): a row if it is drawn."""
        if self.drawn(task_id):
            self.rows.append((task_id, STARTED, 0, function, worker, time_us, 0, 0))

    def ended(
        self,
        task_id: int,
        status: int,
        payload: Payload,
        function: str,
        worker: str | None,
        time_us: int,
        duration_us: int,
        peak: int,
        text: str | None,
    ) -> str | None:
        """A task ended (`worker`: the one that reported it; None for a dependent that ended with it): a row if it is
        drawn, a failure record if it failed. `text`: the failure text of the task it depends on, if any; returns
        the text of its failure, for its own dependents (same outcome)."""
        if self.error_texts:
            own = self.error_texts.pop(task_id, None)
            text = own if own is not None else text
        drawn = self.drawn(task_id)
        failed = status in FAILURES and len(self.failures) < MAX_FAILURES
        if not (drawn or failed):
            return text  # the common case under load
        if drawn:
            self.rows.append((task_id, ENDED, status, function, worker, time_us, duration_us, peak))
        if failed:
            if text is None:
                text = "" if status == TaskStatus.ERROR else payload_text(payload)
            self.failure(task_id, function, worker or "", status, text, time_us)
        return text

    def failure(self, task_id: int, function: str, worker: str, status: int, text: str, time_us: int) -> None:
        if len(self.failures) < MAX_FAILURES:
            self.failures.append(TaskFailure(task_id, function, worker, status, text[:MAX_TEXT], time_us))

    def output(self, task_id: int, function: str, worker: str, stream: int, text: str, time_us: int) -> None:
        room = MAX_OUTPUT - self.output_chars
        if room > 0 and text:
            text = text[:room]
            self.output_chars += len(text)
            self.outputs.append(OutputRecord(task_id, function, worker, stream, text, time_us))

    def departure(self, name: str, reason: str, lost: bool, time_us: int) -> None:
        if len(self.departed) < MAX_DEPARTED:
            self.departed.append(DepartedWorker(name, reason, lost, time_us))

    def error_text(self, task_id: int, text: str) -> None:
        texts = self.error_texts
        before = texts.get(task_id)
        if before is not None:
            texts[task_id] = _keep_end(before + text)
        elif len(texts) < MAX_ERROR_TEXTS:
            texts[task_id] = _keep_end(text)

    def forget_texts(self, task_ids: list[int]) -> None:
        """These tasks left their worker: an error text they sent is not theirs any longer."""
        texts = self.error_texts
        for task_id in task_ids:
            texts.pop(task_id, None)


def _keep_end(text: str) -> str:
    """An error text clipped to MAX_TEXT, keeping its end: the exception and the innermost frames are there."""
    if len(text) <= MAX_TEXT:
        return text
    return CUT_MARK + text[len(text) - MAX_TEXT + len(CUT_MARK) :]
