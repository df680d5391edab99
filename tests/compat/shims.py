"""The private helpers (scaler.utility.*, scaler.io.config) that scaler 1.9.9's tests import: this version keeps them
on its own ground (issue 29), so they are imported from there."""

from __future__ import annotations

from scaler.io.config import (
    DEFAULT_GARBAGE_COLLECT_INTERVAL_SECONDS,
    DEFAULT_HEARTBEAT_INTERVAL_SECONDS,
    DEFAULT_IO_THREADS,
    DEFAULT_TASK_TIMEOUT_SECONDS,
    DEFAULT_TRIM_MEMORY_THRESHOLD_BYTES,
)
from scaler.utility.exceptions import MissingObjects, ProcessorDiedError
from scaler.utility.logging.scoped_logger import ScopedLogger
from scaler.utility.logging.utility import setup_logger
from scaler.utility.network_util import get_available_tcp_port
from scaler.utility.zmq_config import ZMQConfig

__all__ = [
    "DEFAULT_GARBAGE_COLLECT_INTERVAL_SECONDS",
    "DEFAULT_HEARTBEAT_INTERVAL_SECONDS",
    "DEFAULT_IO_THREADS",
    "DEFAULT_TASK_TIMEOUT_SECONDS",
    "DEFAULT_TRIM_MEMORY_THRESHOLD_BYTES",
    "MissingObjects",
    "ProcessorDiedError",
    "ScopedLogger",
    "ZMQConfig",
    "get_available_tcp_port",
    "setup_logger",
]
