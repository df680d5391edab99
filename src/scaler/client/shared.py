"""The client's side of arguments sent through shared memory (scaler.shm, ADR 0013): the sink of such a task unlinks
its segments when the task ends, and sends the task again with its arguments inline, under a new id and for the same
future or map slot, when the processor that got it could not read them (another host, say)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from scaler.client.connection import Collector, CollectorSlot, Connection, FutureSink, ResultSink
from scaler.client.future import ProfilingInfo
from scaler.core.client.session import NewTask
from scaler.errors import TaskFailedError
from scaler.protocol.messages import FLAG_STREAM_OUTPUT, Payload, TaskStatus
from scaler.protocol.records import FLAG_SHARED_ARGUMENTS
from scaler.shm import TAG_INLINE, SharedArguments, decode_reference, is_unreachable, split_payload

logger = logging.getLogger(__name__)


class SharedSink:
    """Wraps the sink of a task whose large arguments went by shared memory (names: its segments)."""

    __slots__ = (
        "cancelled",
        "connection",
        "function",
        "inner",
        "label",
        "names",
        "objects",
        "retarget",
        "shared",
        "task",
    )

    def __init__(
        self,
        connection: Connection,
        shared: SharedArguments,
        inner: ResultSink,
        task: NewTask,
        names: list[str],
        function: Any,
        label: str,
        retarget: Callable[[int], None],
        objects: Callable[[tuple[int, ...]], tuple[int, ...]] | None = None,
    ) -> None:
        """objects: for a task given objects that went by shared memory (send_object, ADR 0024), what makes its
        object references inline copies, should it be sent again."""
        self.connection = connection
        self.shared = shared
        self.inner = inner
        self.task = task
        self.names = names
        # Held until the task ends: sent again, the task needs its function object, which the client frees once
        # the function itself is gone (a lambda passed to submit is gone when submit returns).
        self.function = function
        self.label = label
        self.retarget = retarget  # told the new task id when the task is sent again
        self.objects = objects
        self.cancelled = False

    def deliver(self, status: int, payload: Payload, profiling: ProfilingInfo | None) -> None:
        if is_unreachable(status == TaskStatus.FAILED, payload) and not self.cancelled and _wanted(self.inner):
            try:
                self._send_inline(payload)
                return
            except Exception as exc:  # the session ended meanwhile, the segment is gone...: the future says so
                self.shared.release(self.names)
                self.inner.fail(TaskFailedError(f"the task could not be sent again with its arguments inline: {exc}"))
                return
        self.shared.release(self.names)
        if status == TaskStatus.SUCCESS:
            self.shared.read_ok()
        self.function = None
        self.inner.deliver(status, payload, profiling)

    def fail(self, exc: BaseException) -> None:
        self.shared.release(self.names)
        self.function = None
        self.inner.fail(exc)

    def cancel(self) -> None:
        """The task is cancelled here (Client.clear, or the client closing); its segments go when the scheduler
        answers, or when the client closes."""
        self.cancelled = True
        self.inner.cancel()

    def _send_inline(self, reason: Payload) -> None:
        task = self.task
        shared_arguments = task.flags & FLAG_SHARED_ARGUMENTS
        payloads = tuple(self._inline(p) for p in task.payloads) if shared_arguments else task.payloads
        refs = task.arg_refs if self.objects is None else self.objects(task.arg_refs)
        new_id = self.connection.mint(1)[0]
        logger.debug(
            "task %#x sent again as %#x with its arguments and objects inline: %s",
            task.task_id,
            new_id,
            bytes(reason).decode(errors="replace"),  # type: ignore[call-overload]
        )
        self.shared.release(self.names)
        self.shared.fell_back()
        self.retarget(new_id)
        self.connection.register([(new_id, self.inner)])
        if task.flags & FLAG_STREAM_OUTPUT:
            self.connection.output.expect((new_id,), self.label)
        flags = task.flags & ~FLAG_SHARED_ARGUMENTS
        self.connection.submit_one(task._replace(task_id=new_id, flags=flags, arg_refs=refs, payloads=payloads))
        if not _wanted(self.inner):  # cancelled by another thread meanwhile, under the old id
            self.connection.cancel(new_id)
        self.function = None

    def _inline(self, payload: Payload) -> bytes:
        tag, view = split_payload(payload)
        if tag == TAG_INLINE:
            return bytes(view[1:])
        return self.shared.read_back(decode_reference(view).name)


def _wanted(sink: ResultSink) -> bool:
    """Whether the outcome of a sink's task still matters (its future not cancelled, its map still waiting)."""
    if isinstance(sink, FutureSink):
        return not sink.future.done()
    if isinstance(sink, CollectorSlot):
        collector: Collector = sink.collector
        return collector.error is None and collector.failed is None
    return True
