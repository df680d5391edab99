"""Stand-ins for the private helpers (scaler.utility.*) that scaler 1.9.9's tests import, on public names."""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

from scaler.errors import TaskFailedError

MissingObjects = TaskFailedError  # a task refers to an object that clear() freed
ProcessorDiedError = TaskFailedError  # the processor running the task died, on every attempt


def setup_logger(*_args: Any, **_kwargs: Any) -> None:
    logging.basicConfig(level=logging.INFO)


def get_available_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def ScopedLogger(message: str, *_args: Any, **_kwargs: Any) -> Iterator[None]:
    start = time.monotonic()
    logging.info("started %s", message)
    yield
    logging.info("done %s in %.3fs", message, time.monotonic() - start)


class ZMQConfig:
    """1.9.9's address class, as its tests use it: from_string() gives the address itself (Cluster takes a str)."""

    @staticmethod
    def from_string(address: str) -> str:
        return address


# 1.9.9's defaults (scaler.io.config), for the settings its tests pass to Cluster.
DEFAULT_IO_THREADS = 1
DEFAULT_HEARTBEAT_INTERVAL_SECONDS = 2
DEFAULT_GARBAGE_COLLECT_INTERVAL_SECONDS = 30
DEFAULT_TRIM_MEMORY_THRESHOLD_BYTES = 1024 * 1024 * 1024
DEFAULT_TASK_TIMEOUT_SECONDS = 0
