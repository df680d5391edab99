"""Printed output of tasks (taskOutput from workers): the pieces of tasks flagged stream output wait in their client's
session (ClientSession.output) until the next flush sends them, before the results; past MAX_PENDING_OUTPUT
characters waiting for one client, more is dropped with a warning. While a monitor subscribes, the status period also
keeps a bounded part of all output, and error texts until their results come (monitoring.PeriodLog).

A component of a SchedulerCore: it reads the core's sessions and records and marks clients for its flush. Pure, like
the core. Python 3.9 (the scheduler runs on PyPy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scaler.core.scheduler import notices
from scaler.protocol.records import FLAG_STREAM_OUTPUT, OUTPUT_ERROR, TaskOutput

if TYPE_CHECKING:
    from scaler.core.scheduler.core import SchedulerCore
    from scaler.core.scheduler.sessions import WorkerSession
    from scaler.core.scheduler.tasks import Task

# Printed output (characters) waiting for one client's next flush; more is dropped, with a warning.
MAX_PENDING_OUTPUT = 4 << 20


class OutputRelay:
    __slots__ = ("core", "dropped")

    def __init__(self, core: SchedulerCore) -> None:
        self.core = core
        self.dropped = 0  # pieces of printed output dropped: too much waited for their client

    def on_task_output(self, worker: WorkerSession, message: TaskOutput) -> None:
        """Printed output goes to the task's client (tasks flagged stream output), before the task's result; monitors
        keep a bounded part of it, and error texts until their results come, while they subscribe. Pieces of tasks
        the worker does not hold (ended, cancelled, moved meanwhile) are ignored."""
        core = self.core
        assigned, monitored, log = worker.assigned, core.monitored, core._log
        task_ids, streams, texts = message.task_ids, message.streams, message.texts
        if not len(task_ids) == len(streams) == len(texts):  # the codecs check it; as zip(strict=True) did
            raise ValueError(f"taskOutput: {len(task_ids)} ids, {len(streams)} streams, {len(texts)} texts")
        for task_id, stream, text in zip(task_ids, streams, texts):
            task = assigned.get(task_id)
            if task is None:
                continue
            if stream == OUTPUT_ERROR:
                if monitored:
                    log.error_text(task_id, text)
                continue
            if task.flags & FLAG_STREAM_OUTPUT:
                self._forward(task, stream, text)
            if monitored:
                name = core.function_stats(task.function_id).name
                log.output(task_id, name, worker.name, stream, text, int(core.now * 1e6))

    def _forward(self, task: Task, stream: int, text: str) -> None:
        core, client = self.core, task.client
        if core.clients.get(client.identity) is not client:
            return
        output = client.output
        if output.chars + len(text) > MAX_PENDING_OUTPUT:
            self.dropped += 1
            notices.warn(
                core,
                "output dropped",
                client.identity,
                f"dropped printed output of task {task.task_id:#x} for client {client.name}: more than "
                f"{MAX_PENDING_OUTPUT:,} characters of output wait for it",
            )
            return
        output.add(task.task_id, stream, text)
        core._dirty_clients[client] = None
