"""scaler 1.9.9's scaler.utility.logging.scoped_logger (see scaler.utility)."""

from __future__ import annotations

import logging
import time
from types import TracebackType
from typing import Any


class ScopedLogger:
    """Logs "started MESSAGE" on entering and "done MESSAGE in N s" on leaving a with block."""

    def __init__(self, message: str, logging_level: int = logging.INFO, *_: Any) -> None:
        self.message = message
        self.level = logging_level
        self.started = 0.0

    def __enter__(self) -> ScopedLogger:
        self.started = time.monotonic()
        logging.log(self.level, "started %s", self.message)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        logging.log(self.level, "done %s in %.3fs", self.message, time.monotonic() - self.started)
