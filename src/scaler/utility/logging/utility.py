"""scaler 1.9.9's scaler.utility.logging.utility (see scaler.utility): setup_logger as this version sets logging up."""

from __future__ import annotations

from collections.abc import Sequence

from scaler.io.logs import setup_logging
from scaler.settings.worker import ClusterSettings


def setup_logger(
    log_paths: Sequence[str] | None = None, logging_level: str | None = None, logging_config_file: str | None = None
) -> None:
    """Log to `log_paths` (files, /dev/stdout or /dev/stderr) at `logging_level`, as the commands' --logging-paths and
    --logging-level do (their defaults when not given). logging_config_file (1.9.9's) is not read: use
    logging.config.fileConfig() yourself."""
    if logging_config_file is not None:
        raise ValueError(
            "setup_logger(logging_config_file=...) is not supported: call logging.config.fileConfig(path) instead"
        )
    paths = tuple(log_paths) if log_paths is not None else tuple(ClusterSettings.default("logging_paths"))
    setup_logging(logging_level or ClusterSettings.default("logging_level"), paths)
