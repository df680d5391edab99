"""Task results and printed output waiting to go out together, as the columns of one TaskResults and one TaskOutput:
filled one result (or one piece of text) at a time, taken whole. The scheduler's outbox to each client, the worker
agent's batch to the scheduler and the processor's batch to its agent all gather them here.

Hot paths (one add per task): no call inside an add, nothing more per task than the columns themselves.
Pure; no I/O. The scheduler imports it: Python 3.9 (pyproject.toml).
"""

from __future__ import annotations

from collections.abc import Sized
from typing import TYPE_CHECKING

from scaler.core.common import InvariantError
from scaler.protocol.records import TaskOutput, TaskResults

if TYPE_CHECKING:
    from scaler.protocol.records import Payload


Pieces = list[tuple[int, str]]  # text one task wrote: (OUTPUT_STDOUT, OUTPUT_STDERR or OUTPUT_ERROR, text) each


class ResultColumns:
    """Results a scheduler forwards to one client (its session's outbox). The profiling columns (run time in µs, peak
    memory in bytes, CPU time in µs: all three, or none) appear with the first result that brings a value for them,
    zeros filled in for the results before it."""

    __slots__ = ("cpu", "durations", "ids", "payloads", "peaks", "statuses")

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.statuses = bytearray()
        self.payloads: list[Payload] = []
        self.durations: list[int] | None = None
        self.peaks: list[int] | None = None
        self.cpu: list[int] | None = None

    def add(
        self, task_id: int, status: int, payload: Payload, duration_us: int = 0, peak: int = 0, cpu_us: int = 0
    ) -> None:
        if (duration_us or peak or cpu_us) and self.durations is None:
            self.durations = [0] * len(self.ids)
            self.peaks = [0] * len(self.ids)
            self.cpu = [0] * len(self.ids)
        self.ids.append(task_id)
        self.statuses.append(status)
        self.payloads.append(payload)
        if self.durations is not None and self.peaks is not None and self.cpu is not None:
            self.durations.append(duration_us)
            self.peaks.append(peak)
            self.cpu.append(cpu_us)

    def take(self) -> TaskResults | None:
        """The results as one message (None when there are none), and the columns empty again."""
        if not self.ids:
            return None
        message = TaskResults(self.ids, bytes(self.statuses), self.payloads, self.durations, self.peaks, self.cpu)
        self.ids, self.statuses, self.payloads = [], bytearray(), []
        self.durations = self.peaks = self.cpu = None
        return message

    def validate(self) -> None:
        profiling = (self.durations, self.peaks, self.cpu)
        if any(column is None for column in profiling) and any(column is not None for column in profiling):
            raise InvariantError("a result outbox has some of the profiling columns, not all three")
        _check_lengths(self.ids, self.statuses, self.payloads, *(c for c in profiling if c is not None))


class MeasuredResultColumns:
    """Results a worker measured: the processor's to its agent, the agent's to the scheduler. Every result has every
    column (its run time, which the agent averages, and its profiling figures, zeros when not profiled); `take()` sends
    the profiling columns only when a task of the batch asked to be profiled. (The processor fills the columns itself:
    its own add per task measures memory too, and a second call per task is not paid.)"""

    __slots__ = ("cpu", "durations", "ids", "payloads", "peaks", "profiled", "statuses")

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.statuses = bytearray()
        self.payloads: list[Payload] = []
        self.durations: list[int] = []
        self.peaks: list[int] = []
        self.cpu: list[int] = []
        self.profiled = False  # some task of the batch was profiled: the profiling columns go out

    def add(
        self, task_id: int, status: int, payload: Payload, duration_us: int, peak: int, cpu_us: int, profiled: int
    ) -> None:
        """profiled: non-zero when the task asked to be profiled (FLAG_PROFILING)."""
        self.ids.append(task_id)
        self.statuses.append(status)
        self.payloads.append(payload)
        self.durations.append(duration_us)
        self.peaks.append(peak)
        self.cpu.append(cpu_us)
        if profiled:
            self.profiled = True

    def take(self) -> TaskResults | None:
        """The results as one message (None when there are none), and the columns empty again."""
        if not self.ids:
            return None
        if self.profiled:
            message = TaskResults(self.ids, bytes(self.statuses), self.payloads, self.durations, self.peaks, self.cpu)
        else:
            message = TaskResults(self.ids, bytes(self.statuses), self.payloads)
        self.ids, self.statuses, self.payloads, self.durations, self.peaks = [], bytearray(), [], [], []
        self.cpu, self.profiled = [], False
        return message

    def clear(self) -> None:
        self.ids, self.statuses, self.payloads, self.durations, self.peaks = [], bytearray(), [], [], []
        self.cpu, self.profiled = [], False

    def validate(self) -> None:
        _check_lengths(self.ids, self.statuses, self.payloads, self.durations, self.peaks, self.cpu)


class OutputColumns:
    """Pieces of text tasks wrote (streams OUTPUT_STDOUT, OUTPUT_STDERR, OUTPUT_ERROR, one per piece), in order. They
    go out just before the results gathered with them: a task's output always arrives before its result. `chars`
    counts the text held (the scheduler bounds what one client may have waiting)."""

    __slots__ = ("chars", "ids", "streams", "texts")

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.streams = bytearray()
        self.texts: list[str] = []
        self.chars = 0

    def add(self, task_id: int, stream: int, text: str) -> None:
        self.ids.append(task_id)
        self.streams.append(stream)
        self.texts.append(text)
        self.chars += len(text)

    def add_pieces(self, task_id: int, pieces: Pieces) -> None:
        for stream, text in pieces:
            self.ids.append(task_id)
            self.streams.append(stream)
            self.texts.append(text)
            self.chars += len(text)

    def take(self) -> TaskOutput | None:
        """The pieces as one message (None when there are none), and the columns empty again."""
        if not self.ids:
            return None
        message = TaskOutput(self.ids, bytes(self.streams), self.texts)
        self.ids, self.streams, self.texts, self.chars = [], bytearray(), [], 0
        return message

    def clear(self) -> None:
        self.ids, self.streams, self.texts, self.chars = [], bytearray(), [], 0

    def validate(self) -> None:
        _check_lengths(self.ids, self.streams, self.texts)
        if self.chars != sum(len(text) for text in self.texts):
            raise InvariantError(f"an output outbox counts {self.chars} characters, not what it holds")


def _check_lengths(ids: list[int], *columns: Sized) -> None:
    if any(len(column) != len(ids) for column in columns):
        raise InvariantError(f"the columns of {len(ids)} results or pieces differ in length")
