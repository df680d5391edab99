"""scaler 1.9.9's scaler.utility.logging.utility (see scaler.utility): setup_logger as this version sets logging up."""

from __future__ import annotations

from collections.abc import Sequence

from scaler.io.logs import setup_logging


def setup_logger(
    log_paths: Sequence[str] = ("/dev/stdout",), logging_level: str = "INFO", logging_config_file: str | None = None
) -> None:
    """Log to `log_paths` (files, /dev/stdout or /dev/stderr) at `logging_level`, as the commands' --logging-paths and
    --logging-level do. logging_config_file (1.9.9's) is not read: use logging.config.fileConfig() yourself."""
    if logging_config_file is not None:
        raise ValueError(
            "setup_logger(logging_config_file=...) is not supported: call logging.config.fileConfig(path) instead"
        )
    setup_logging(logging_level, tuple(log_paths))
