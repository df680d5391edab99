"""Ray's exception types for scaler.compat.ray (`ray.exceptions.*`), so that Ray scripts' `except` clauses work.

A task's own exception comes out of get() as Ray's does: an instance of `RayTaskError(<its class>)`, a subclass of
both RayTaskError and the exception's class, so `except ValueError:` and `except ray.exceptions.RayTaskError:` both
catch it, and `.cause` is the exception itself (with its remote traceback, as Scaler raises it).
"""

from __future__ import annotations

import concurrent.futures
import traceback
from typing import Any


class RayError(Exception):
    """The base of Ray's exceptions."""


class RayTaskError(RayError):
    """A task raised: `cause` is its exception, `function_name` the task, `traceback_str` where it was raised."""

    def __init__(self, function_name: str, traceback_str: str, cause: BaseException) -> None:
        self.function_name = function_name
        self.traceback_str = traceback_str
        self.cause = cause
        super().__init__(f"{type(cause).__name__}: {cause}")

    def as_instanceof_cause(self) -> RayTaskError:
        """This error as an instance of a class deriving from both RayTaskError and the cause's class (Ray's
        `RayTaskError(ValueError)`); this error itself where such a class cannot be made."""
        cause_class = type(self.cause)
        if issubclass(RayTaskError, cause_class):
            return self
        derived = _derived.get(cause_class)
        if derived is None:
            try:
                derived = type(
                    f"RayTaskError({cause_class.__name__})",
                    (RayTaskError, cause_class),
                    {"__init__": _derived_init, "__getattr__": _cause_attribute, "__module__": __name__},
                )
            except TypeError:  # (classes whose instance layouts clash)
                return self
            _derived[cause_class] = derived
        try:
            error = derived.__new__(derived, str(self))
            RayTaskError.__init__(error, self.function_name, self.traceback_str, self.cause)
            for name in _OS_ATTRIBUTES if isinstance(self.cause, OSError) else ():  # (its own slots: not read through)
                setattr(error, name, getattr(self.cause, name))
        except Exception:
            return self
        return error

    def __str__(self) -> str:
        return f"{self.function_name} raised {type(self.cause).__name__}: {self.cause}\n\n{self.traceback_str}".rstrip()

    def __reduce__(self) -> tuple[Any, ...]:
        return RayTaskError, (self.function_name, self.traceback_str, self.cause)


_derived: dict[type, type[RayTaskError]] = {}
_OS_ATTRIBUTES = ("errno", "strerror", "filename", "filename2")


def _derived_init(self: RayTaskError, function_name: str, traceback_str: str, cause: BaseException) -> None:
    RayTaskError.__init__(self, function_name, traceback_str, cause)


def _cause_attribute(self: RayTaskError, name: str) -> Any:
    """The cause's attributes (an OSError's errno, a KeyError's args...) read through the error."""
    if name == "cause":  # (not set yet: while it is being made)
        raise AttributeError(name)
    return getattr(self.cause, name)


def task_error(function_name: str, cause: BaseException) -> RayTaskError:
    """What get() raises for a task that raised `cause`."""
    text = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
    return RayTaskError(function_name, text, cause).as_instanceof_cause()


class GetTimeoutError(RayError, TimeoutError):
    """get() ran out of time before the values were ready (the tasks go on)."""


class TaskCancelledError(RayError, concurrent.futures.CancelledError):
    """The task was cancelled (ray.cancel, or shutdown()) before it returned."""


class WorkerCrashedError(RayError):
    """The process running the task died (Scaler runs it again up to the scheduler's --max-task-retries first)."""


class ObjectLostError(RayError):
    """A value is gone. (Not raised by Scaler: objects stay at the scheduler until shutdown().)"""


class RaySystemError(RayError):
    """The system failed. (Scaler raises its own errors for its failures: scaler.errors.)"""


class RayActorError(RayError):
    """An actor failed. (Scaler has no actors: @ray.remote on a class raises NotImplementedError.)"""


__all__ = [
    "GetTimeoutError",
    "ObjectLostError",
    "RayActorError",
    "RayError",
    "RaySystemError",
    "RayTaskError",
    "TaskCancelledError",
    "WorkerCrashedError",
]
