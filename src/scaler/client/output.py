"""The printed output of this client's tasks flagged stream_output, written out in the client's process: each line
prefixed with the function and the task that printed it, "(square task 0x10000000002) hello".

Used by the client's I/O thread only (Connection): it writes to sys.stdout or sys.stderr as they are at that moment.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from typing import TextIO

from scaler.protocol.records import OUTPUT_STDERR, OUTPUT_STDOUT, TaskOutput

logger = logging.getLogger(__name__)


def prefix(label: str, task_id: int) -> str:
    return f"({label} task {task_id:#x}) "


class OutputPrinter:
    """Prints forwarded output of the tasks it expects. A line split across pieces is printed once whole; a last
    line without a newline is printed when its task ends (end())."""

    def __init__(self) -> None:
        self.labels: dict[int, str] = {}  # task id -> its function's name, for the tasks whose output is printed
        self._partial: dict[tuple[int, int], str] = {}  # (task id, stream) -> the start of a line not yet ended
        self._failed = False  # writing failed once (said once)

    def expect(self, task_ids: Iterable[int], label: str) -> None:
        """Print the output of these tasks (called before they are submitted)."""
        self.labels.update(dict.fromkeys(task_ids, label))

    def write(self, message: TaskOutput) -> None:
        labels, partial = self.labels, self._partial
        lines: dict[int, list[str]] = {}
        for task_id, stream, text in zip(message.task_ids, message.streams, message.texts, strict=False):
            label = labels.get(task_id)
            if label is None or stream not in (OUTPUT_STDOUT, OUTPUT_STDERR):
                continue  # not ours to print (a task of another session, or one not flagged), or error text
            key = (task_id, stream)
            *complete, rest = (partial.pop(key, "") + text).split("\n")
            if rest:
                partial[key] = rest
            if complete:
                head = prefix(label, task_id)
                lines.setdefault(stream, []).extend(f"{head}{line}\n" for line in complete)
        for stream, texts in lines.items():
            self._print(stream, "".join(texts))

    def end(self, task_ids: Iterable[int]) -> None:
        """These tasks ended: print what is left of their last lines, and expect nothing more from them."""
        labels, partial = self.labels, self._partial
        for task_id in task_ids:
            label = labels.pop(task_id, None)
            if label is None or not partial:
                continue
            for stream in (OUTPUT_STDOUT, OUTPUT_STDERR):
                rest = partial.pop((task_id, stream), None)
                if rest is not None:
                    self._print(stream, f"{prefix(label, task_id)}{rest}\n")

    def end_all(self) -> None:
        self.end(list(self.labels))

    def _print(self, stream: int, text: str) -> None:
        target: TextIO | None = sys.stdout if stream == OUTPUT_STDOUT else sys.stderr
        if target is None:
            return
        try:
            target.write(text)
            target.flush()
        except Exception as exc:  # a closed or broken stream must not stop the client's I/O thread
            if not self._failed:
                self._failed = True
                logger.warning("could not print the output of tasks (stream_output): %r", exc)
