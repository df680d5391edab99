"""Whether this code runs inside a task, and how a task waits for other tasks without keeping its worker.

A worker's processor (the process where tasks run) installs its hooks here when it starts (`install`) and removes
them when it stops; everything else only asks: the client (a task waiting on nested futures lets its worker run other
tasks meanwhile; a client unpickled in a task belongs to that task), the joblib backend and the Ray API. Outside a
processor nothing is installed: in_task() is False, current_task_id() None, and waits are the caller's own.

    from scaler.task_context import in_task
    if in_task(): ...  # running on a worker

Imports nothing of scaler; no I/O of its own (the hooks do what the processor needs).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

__all__ = [
    "SCHEDULER_ADDRESS_VARIABLE",
    "NestedWait",
    "ProcessorHooks",
    "current_task_id",
    "in_task",
    "install",
    "wake_blocked_waits",
]

# A worker agent's processors (its forked children) find the address of the scheduler it serves here: Client() without
# an address inside a task connects to it.
SCHEDULER_ADDRESS_VARIABLE = "SCALER_SCHEDULER_ADDRESS"


class ProcessorHooks(NamedTuple):
    """What a processor lends the code it runs (scaler.worker.processor)."""

    current_task: Callable[[], int | None]  # the innermost task running now (any thread may ask), None between tasks
    enter_wait: Callable[[], bool]  # a task is about to wait on nested futures: True if the worker was told
    exit_wait: Callable[[], None]  # ...and stopped waiting
    wait: Callable[[Callable[[], bool], float | None], None]  # wait until is_done() or the timeout, helping meanwhile
    wake: Callable[[], None]  # something a wait may be waiting for happened: look again


_hooks: ProcessorHooks | None = None


def install(hooks: ProcessorHooks | None) -> None:
    """A processor's call as it starts (None as it stops): one processor runs in a process."""
    global _hooks
    _hooks = hooks


def in_task() -> bool:
    """True in a worker's processor, where tasks run (also in threads a task started); False anywhere else."""
    return _hooks is not None


def current_task_id() -> int | None:
    """The id of the innermost task running now in this processor (any thread may ask); None between tasks and
    outside a processor."""
    hooks = _hooks
    return None if hooks is None else hooks.current_task()


def wake_blocked_waits() -> None:
    """Something a task's wait may be waiting for happened (a client's I/O thread ended futures or map slots, or a
    future was cancelled): a processor's wait looks again. Nothing happens outside a processor."""
    hooks = _hooks
    if hooks is not None:
        hooks.wake()


class NestedWait:
    """Around a wait on other tasks: inside a task, the worker is told, and runs other tasks meanwhile.

    >>> with NestedWait() as section:
    ...     if not section.wait(future.done, timeout):
    ...         ...  # not in a task: wait your own way
    """

    def __init__(self, needed: bool = True) -> None:
        self._hooks = hooks = _hooks
        self.entered = bool(needed and hooks is not None and hooks.enter_wait())

    def wait(self, is_done: Callable[[], bool], timeout: float | None) -> bool:
        """Inside a task: wait until is_done() or `timeout` seconds (None: no limit), running the tasks the worker
        hands over meanwhile, and return True. Elsewhere return False at once: the caller waits its way."""
        hooks = self._hooks
        if not self.entered or hooks is None:
            return False
        hooks.wait(is_done, timeout)
        return True

    def __enter__(self) -> NestedWait:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.entered and self._hooks is not None:
            self._hooks.exit_wait()
