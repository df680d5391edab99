"""scaler 1.9.9's scaler.utility.exceptions (see scaler.utility): its names for this version's errors, so that an
`except` clause written for 1.9.9 catches what this version raises in the same case."""

from __future__ import annotations

import concurrent.futures

from scaler.errors import ClientClosedError, ConnectionFailedError, ScalerError, TaskFailedError

WorkerDiedError = TaskFailedError  # a task whose worker died on every attempt fails with TaskFailedError
ProcessorDiedError = TaskFailedError  # ... and one whose processor did
MissingObjects = TaskFailedError  # a task that refers to an object the client freed fails
DisconnectedError = ConnectionFailedError  # the scheduler is lost
ClientShutdownException = ClientClosedError  # the client was shut down (its futures fail with it)
ClientQuitException = ClientClosedError
ClientCancelledException = concurrent.futures.CancelledError


class TaskNotFoundError(ScalerError):
    """(Not raised by this version: a task id it does not know is refused with a protocol error.)"""


class NoWorkerError(ScalerError):
    """(Not raised by this version: tasks wait for a worker to join.)"""


class DeserializeObjectError(ScalerError):
    """(Not raised by this version: an object that cannot be deserialized fails its task with the error itself.)"""
