"""What tasks write, in the processor: the text streams that stand in for sys.stdout and sys.stderr while a task
flagged FLAG_STREAM_OUTPUT runs (sent to the agent in pieces), and the text of the exception a task raised.

Python level only: what C code or a child process writes to file descriptors 1 and 2 directly is not seen.
Nothing here runs for a task that is not flagged and does not raise.
"""

from __future__ import annotations

import io
import itertools
import logging
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import TextIO

from scaler.core.outbox import Pieces
from scaler.io.lifetime import current_pid
from scaler.protocol.records import OUTPUT_STDERR, OUTPUT_STDOUT

logger = logging.getLogger(__name__)

MAX_TASK_OUTPUT = 1 << 20  # UTF-8 bytes forwarded per task; then TRUNCATED and nothing more
TRUNCATED = "[scaler: output of this task truncated after 1 MiB]\n"
SEND_AT = 16 * 1024  # bytes buffered: sent at once, by the thread that wrote them
SEND_AFTER_SECONDS = 0.2  # text buffered this long is sent by the sender thread
MAX_PIECE = 64 * 1024  # bytes per piece (docs/protocol.md, taskOutput)
MAX_ERROR_TEXT = 8 * 1024  # bytes of an exception's text; a longer one keeps its end (the innermost frames)
ERROR_TRUNCATED = "[scaler: the start of this traceback was cut, to keep its last 8 KiB]\n"

Send = Callable[[int, Pieces], None]  # (task id, pieces)


def error_text(exc: BaseException) -> str:
    """The exception and its traceback as text, at most MAX_ERROR_TEXT bytes of UTF-8 (keeping the end)."""
    try:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception as failure:  # a broken exception type: say what is known
        text = f"{type(exc).__qualname__} (its traceback could not be formatted: {failure!r})\n"
    if text.isascii() and len(text) <= MAX_ERROR_TEXT:
        return text
    data = text.encode("utf-8", "replace")  # "replace": lone surrogates are not UTF-8
    if len(data) > MAX_ERROR_TEXT:
        data = ERROR_TRUNCATED.encode() + data[len(data) - MAX_ERROR_TEXT + len(ERROR_TRUNCATED) :]
    return data.decode("utf-8", "ignore")  # "ignore": the cut may have split a character


class TaskCapture:
    """What one task writes to sys.stdout and sys.stderr (its `stdout` and `stderr` streams), forwarded in pieces
    through `send`: at once when SEND_AT bytes are buffered, else SEND_AFTER_SECONDS after the first of them (by
    the Sender), and what is left by close(), at the task's end. At most MAX_TASK_OUTPUT bytes, then TRUNCATED.

    Pieces are sent holding the capture's lock, so none can follow close(). Text written after close() (by a
    thread the task left behind, or a handler that kept the stream) goes to `fallback`, the processor's own
    streams; so does text written in a process forked from the processor, which must not use its link."""

    def __init__(self, task_id: int, send: Send, sender: Sender, fallback: tuple[TextIO | None, TextIO | None]) -> None:
        self.task_id = task_id
        self.pid = current_pid()
        self.stdout = CaptureStream(self, OUTPUT_STDOUT, "<stdout>")
        self.stderr = CaptureStream(self, OUTPUT_STDERR, "<stderr>")
        self._send = send
        self._sender = sender
        self._fallback = fallback
        self._lock = threading.RLock()  # reentrant: a write from a finalizer or signal handler inside a write
        self._pending: Pieces = []
        self._pending_bytes = 0
        self._forwarded = 0  # bytes taken, pending ones included
        self._truncated = False
        self._ends_line = True  # the last text taken ends with a newline
        self._armed = False  # the Sender will look at this capture
        self._closed = False

    def write(self, stream: int, text: str) -> None:
        if current_pid() == self.pid:  # (in a forked child, the lock may have been held by a thread left behind)
            with self._lock:
                if not self._closed:
                    self._take(stream, text)
                    return
        target = self._fallback[stream - OUTPUT_STDOUT]
        if target is not None:
            target.write(text)

    def _take(self, stream: int, text: str) -> None:
        if self._truncated or not text:
            return
        size = _utf8_size(text)
        room = MAX_TASK_OUTPUT - self._forwarded
        if size > room:
            text, size = _utf8_head(text, room)
            self._truncated = True
        if text:
            self._pending.append((stream, text))
            self._pending_bytes += size
            self._forwarded += size
            self._ends_line = text.endswith("\n")
        if self._truncated:
            self._pending.append((stream, TRUNCATED if self._ends_line else "\n" + TRUNCATED))
        if self._pending_bytes >= SEND_AT or self._truncated:
            self._send_pending()
        elif not self._armed:
            self._armed = True
            self._sender.arm(self)

    def send_due(self) -> None:
        """The Sender's call, SEND_AFTER_SECONDS after this capture armed it."""
        with self._lock:
            self._armed = False
            if not self._closed and self._pending:
                self._send_pending()

    def close(self) -> Pieces:
        """The task ended: what is left to send (it goes before the task's result); later writes go elsewhere."""
        with self._lock:
            self._closed = True
            pieces, self._pending, self._pending_bytes = self._pending, [], 0
        return _pieces(pieces)

    def _send_pending(self) -> None:
        pieces, self._pending, self._pending_bytes = self._pending, [], 0
        self._send(self.task_id, _pieces(pieces))


class CaptureStream(io.TextIOBase):
    """sys.stdout or sys.stderr of a task whose output is captured: text only (no fileno, no buffer)."""

    encoding = "utf-8"  # what a reader of the output decodes with

    def __init__(self, capture: TaskCapture, stream: int, name: str) -> None:
        super().__init__()
        self._capture = capture
        self._stream = stream
        self.name = name

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self._capture.write(self._stream, text)
        return len(text)


class Sender:
    """A thread of the processor's, started by the first capture that buffers text: it sends what a capture buffered,
    SEND_AFTER_SECONDS after the capture armed it (a long task's output then reaches the client while it runs)."""

    def __init__(self) -> None:
        self._due: deque[tuple[float, TaskCapture]] = deque()  # in order of time: each waits the same delay
        self._condition = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None

    def arm(self, capture: TaskCapture) -> None:
        with self._condition:
            self._due.append((time.monotonic() + SEND_AFTER_SECONDS, capture))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="scaler-processor-output", daemon=True)
                self._thread.start()
            self._condition.notify()

    def _run(self) -> None:
        while True:
            with self._condition:
                if not self._due:
                    self._condition.wait()
                    continue
                when, capture = self._due[0]
                left = when - time.monotonic()
                if left > 0:
                    self._condition.wait(left)
                    continue
                self._due.popleft()
            try:
                capture.send_due()  # outside the condition: a writer holds its capture's lock while it arms
            except OSError:
                pass  # the link to the agent is gone: so is this process, soon
            except Exception:  # a bug: say so and keep sending the other tasks' output
                logger.exception("processor: sending a task's printed output failed")


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "replace"))


def _utf8_head(text: str, size: int) -> tuple[str, int]:
    """The longest start of `text` of at most `size` bytes of UTF-8, and its size."""
    if text.isascii():
        return text[:size], min(size, len(text))
    head = text.encode("utf-8", "replace")[:size].decode("utf-8", "ignore")
    return head, len(head.encode())


def _pieces(pending: Pieces) -> Pieces:
    """Runs of one stream joined, then cut into pieces of at most MAX_PIECE bytes of valid UTF-8."""
    pieces: Pieces = []
    for stream, run in itertools.groupby(pending, key=lambda item: item[0]):
        text = "".join(item[1] for item in run)
        if text.isascii():
            pieces.extend((stream, text[k : k + MAX_PIECE]) for k in range(0, len(text), MAX_PIECE))
            continue
        data = text.encode("utf-8", "replace")  # lone surrogates become "?": a piece must be valid UTF-8
        start = 0
        while start < len(data):
            end = min(len(data), start + MAX_PIECE)
            while end < len(data) and data[end] & 0xC0 == 0x80:  # not inside a character
                end -= 1
            pieces.append((stream, data[start:end].decode()))
            start = end
    return pieces
