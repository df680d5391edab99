"""The errors Scaler raises, by who is at fault. Every one says what happened and what to do."""

from __future__ import annotations

from scaler.client.graph import GraphCycleError
from scaler.payloads import RemoteError
from scaler.protocol.errors import ProtocolError
from scaler.protocol.records import Payload, TaskStatus


class ScalerError(Exception):
    """Base of the errors raised by Scaler itself (not by your tasks)."""


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


def task_failure(status: int, payload: Payload) -> TaskFailedError:
    """The error for a task that ended failed, timed out or over memory: the text the system sent, as the error of
    that kind."""
    text = bytes(payload).decode(errors="replace")  # type: ignore[call-overload]
    if status == TaskStatus.TIMED_OUT:
        return TaskTimeoutError(text)
    if status == TaskStatus.OVER_MEMORY:
        return TaskMemoryError(text)
    return TaskFailedError(text)


__all__ = [
    "AuthenticationError",
    "ClientClosedError",
    "ConnectionFailedError",
    "GraphCycleError",
    "KeysError",
    "PayloadTooLargeError",
    "ProtectedModeError",
    "ProtocolError",
    "RemoteError",
    "ScalerError",
    "TaskFailedError",
    "TaskMemoryError",
    "TaskTimeoutError",
]
