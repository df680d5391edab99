"""Logging set-up for every process: the levels and paths checked where they enter, and the root logger's handlers."""

from __future__ import annotations

import logging
import sys

LOG_FORMAT = "[%(levelname)s]%(asctime)s: %(message)s"
LOG_DATE_FORMAT = "%Y-%m-%d %H:%M:%S%z"

LOGGING_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def check_logging_level(level: str | int) -> str | int:
    """A logging level, checked: one of LOGGING_LEVELS in any case (returned upper-cased), or a number >= 0.
    ValueError naming the levels otherwise."""
    if isinstance(level, int) and not isinstance(level, bool) and level >= 0:
        return level
    if isinstance(level, str) and level.strip().upper() in LOGGING_LEVELS:
        return level.strip().upper()
    raise ValueError(f"the logging level must be one of {', '.join(LOGGING_LEVELS)}, not {level!r}")


def log_handlers(paths: tuple[str, ...]) -> list[logging.Handler]:
    """A handler per path: /dev/stdout (or -) and /dev/stderr are the streams, anything else a file appended to.
    ValueError naming the path and why when one cannot be opened for writing (none is left open then)."""
    handlers: list[logging.Handler] = []
    for path in paths:
        try:
            handlers.append(_log_handler(path))
        except OSError as exc:
            for handler in handlers:
                handler.close()
            raise ValueError(f"cannot log to {path}: {exc.strerror or exc}") from None
    return handlers


def check_logging_paths(paths: tuple[str, ...]) -> None:
    """That every path can be logged to (files are created, empty, if missing); ValueError as log_handlers says."""
    for handler in log_handlers(paths):
        handler.close()


def _log_handler(path: str) -> logging.Handler:
    if path in ("/dev/stdout", "-"):
        return logging.StreamHandler(sys.stdout)
    if path == "/dev/stderr":
        return logging.StreamHandler(sys.stderr)
    return logging.FileHandler(path)


def setup_logging(level: str | int = "INFO", paths: tuple[str, ...] = ("/dev/stdout",)) -> None:
    """Log records of `level` and above to `paths` (see log_handlers), in place of the root logger's handlers.
    ValueError, with the logging untouched, for a level that is not one or a path that cannot be written."""
    level = check_logging_level(level)
    handlers = log_handlers(paths)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    formatter = logging.Formatter(LOG_FORMAT, LOG_DATE_FORMAT)
    for handler in handlers:
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(level)
