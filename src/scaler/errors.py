"""The errors Scaler raises, by who is at fault. Every one says what happened and what to do."""

from __future__ import annotations

import graphlib
from collections.abc import Hashable, Sequence

from scaler.protocol.capabilities import MISSING_PREFIX
from scaler.protocol.errors import ProtocolError
from scaler.protocol.records import Payload, TaskStatus


class ScalerError(Exception):
    """Base of the errors raised by Scaler itself (not by your tasks)."""


class RemoteError(Exception):
    """A task raised an exception that could not be brought back as itself; its text and traceback are here."""


class GraphCycleError(graphlib.CycleError):
    """The graph has a cycle: a graphlib.CycleError (a ValueError), as scaler 1.9 raised. As with graphlib, args[1]
    lists the keys of the cycle, each needed by the next, the first one again at the end."""

    def __init__(self, message: str, cycle: list[Hashable]) -> None:
        super().__init__(message, cycle)

    def __str__(self) -> str:
        return str(self.args[0])


class ConnectionFailedError(ScalerError, ConnectionError, TimeoutError):
    """The scheduler could not be reached, refused the connection, or stopped answering. Also a TimeoutError: what
    scaler 1.9 raised for a scheduler that could not be reached or went silent."""


class AuthenticationError(ConnectionFailedError):
    """The scheduler did not accept this peer's keys: a key it does not authorize, a key of the other role, keys
    against a scheduler without keys, or none against one that needs them. The message says which and what to check."""


class ClientClosedError(ScalerError, RuntimeError):
    """The client was disconnected (or shut down) and cannot be used any more."""


class ProtectedModeError(ScalerError, PermissionError, ValueError):
    """client.shutdown() was refused: the scheduler runs in protected mode. Also a ValueError: what scaler 1.9
    raised."""


class KeysError(ScalerError, ValueError):
    """A key directory is missing a file Scaler needs, or holds one it cannot read."""


class PayloadTooLargeError(ScalerError, ValueError):
    """A function, argument or object is bigger, once serialized, than the scheduler accepts per payload
    (scaler_scheduler --max-payload-bytes): send less, or raise the limit."""


class TaskFailedError(ScalerError):
    """Scaler could not run the task (its worker kept dying, an object it needs is gone...)."""


class TaskTimeoutError(TaskFailedError, TimeoutError):
    """The task ran longer than the timeout it was submitted with (client.options(timeout=...)): the worker stopped
    the process running it. The message names the task and the limit."""


class TaskMemoryError(TaskFailedError, MemoryError):
    """The process running the task went over the worker's memory limit (scaler_cluster --memory-limit) and was
    stopped. The message names the limit and how much it used."""


class MissingCapabilityError(TaskFailedError):
    """No connected worker offers every capability the task requires (client.options(capabilities=...)), so the
    scheduler failed it at once (or after its --capability-grace-seconds). The message says what the task requires
    and what the connected workers offer; `required` holds the former. Start a worker that offers them
    (scaler_cluster --capability NAME), or submit without them. See docs/capabilities.md."""

    def __init__(self, text: str, requirement: Sequence[str] | None = None) -> None:
        super().__init__(text)
        self.required = _required_in(text, requirement)

    def __str__(self) -> str:
        return (
            f"{self.args[0]}. Start a worker that offers them (scaler_cluster --capability NAME[=VALUE]), or submit "
            "without them (client.options(capabilities=...))"
        )


def _required_in(text: str, requirement: Sequence[str] | None = None) -> tuple[str, ...]:
    """The capabilities a "missing capabilities:" text says the task requires (its format: docs/protocol.md). The
    text joins them with ", ", which a capability may contain itself: when it names exactly `requirement` (what the
    client asked for, sorted), that is the answer; else (a dependent failing with the task it needed) the text split."""
    start = text.find(" the task requires ")
    end = text.find("; no connected worker", start)
    if start < 0 or end < 0:
        return ()
    listed = text[start + len(" the task requires ") : end]
    if requirement is not None and ", ".join(requirement) == listed:
        return tuple(requirement)
    return tuple(listed.split(", ")) if listed else ()


def task_failure(status: int, payload: Payload, requirement: Sequence[str] | None = None) -> TaskFailedError:
    """The error for a task that ended failed, timed out or over memory: the text the system sent, as the error of
    that kind. `requirement`: the capabilities the task required (sorted), if known."""
    text = bytes(payload).decode(errors="replace")  # type: ignore[call-overload]
    if status == TaskStatus.TIMED_OUT:
        return TaskTimeoutError(text)
    if status == TaskStatus.OVER_MEMORY:
        return TaskMemoryError(text)
    if status == TaskStatus.FAILED and text.startswith(MISSING_PREFIX):
        return MissingCapabilityError(text, requirement)
    return TaskFailedError(text)


__all__ = [
    "AuthenticationError",
    "ClientClosedError",
    "ConnectionFailedError",
    "GraphCycleError",
    "KeysError",
    "MissingCapabilityError",
    "PayloadTooLargeError",
    "ProtectedModeError",
    "ProtocolError",
    "RemoteError",
    "ScalerError",
    "TaskFailedError",
    "TaskMemoryError",
    "TaskTimeoutError",
]
