"""scaler_scheduler: run a scheduler. Its flags are made from scaler.settings.scheduler.SchedulerSettings."""

from __future__ import annotations

import argparse
import logging
import platform
import sys

from scaler.entry_points.help import HelpFormatter, add_version
from scaler.entry_points.logging_options import start_logging, take_address_out_of_paths
from scaler.errors import KeysError
from scaler.io.addresses import default_monitor_address
from scaler.io.lifetime import removing_own_files
from scaler.security.keys import ServerKeys, load_server_keys
from scaler.settings.cli import add_settings, settings_from
from scaler.settings.common import keys_directory
from scaler.settings.config_file import add_config_option, apply_config
from scaler.settings.opengris import translated
from scaler.settings.scheduler import SchedulerSettings


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scaler_scheduler",
        description="Run a Scaler scheduler: clients and workers connect to ADDRESS.",
        formatter_class=HelpFormatter,
    )
    add_version(p)
    add_settings(p, SchedulerSettings)
    add_config_option(p, "scheduler")
    return p


def main(argv: list[str] | None = None) -> None:
    p = parser()
    words = take_address_out_of_paths(sys.argv[1:] if argv is None else argv)
    words = translated(p, words, "scheduler")
    apply_config(p, words, "scheduler")
    settings = settings_from(p, SchedulerSettings, p.parse_args(words))
    assert settings.address is not None  # a positional argument: argparse requires it (or the --config file gives it)
    keys: ServerKeys | None = None
    directory = keys_directory(settings.keys)
    if directory is not None:
        try:
            keys = load_server_keys(directory)
        except KeysError as exc:
            p.error(str(exc))
    paths = start_logging(p, settings)
    logging.info("logging to %s", paths)
    from scaler.protocol.messages import CODEC
    from scaler.scheduler.server import SchedulerFailed, run_scheduler

    logging.info("Scheduler: %s %s, %s codec", platform.python_implementation(), platform.python_version(), CODEC)
    monitor = settings.monitor_address or default_monitor_address(settings.address)
    try:
        with removing_own_files():
            run_scheduler(
                settings.address,
                monitor,
                settings.core_config(),
                settings.event_loop,
                cpu=settings.cpu,
                keys=keys,
                max_connections=settings.max_connections,
                max_silent_connections=settings.max_silent_connections,
                monitor_task_data=settings.monitor_task_data,
                journal=settings.journal,
                journal_sync=settings.journal_sync,
            )
    except SchedulerFailed:  # logged as it happened
        sys.exit(1)
    except Exception as exc:  # bind failures and the like: say it plainly
        logging.error("Scheduler: cannot run: %s", exc)
        sys.exit(1)


if __name__ == "__main__":
    main()
