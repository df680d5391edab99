"""The --logging-level and --logging-paths options of the CLIs, made from scaler.settings.common.ProcessSettings: a
bad value is a one-line usage error (exit code 2) naming the option, and `-lp FILE ADDRESS` leaves the address to the
address.

--logging-paths takes one or more paths (scaler 1.9.9's `-lp A B`) and may be repeated (`-lp A -lp B`); the paths
given replace the default /dev/stdout. An address (SCHEME://...) right after the paths is the program's address, not
a path: take_address_out_of_paths moves it in front of the options before argparse reads them."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from typing import Protocol

from scaler.io.logs import setup_logging
from scaler.settings.cli import add_settings, long_flag
from scaler.settings.common import ProcessSettings
from scaler.settings.model import SettingError, spec_of

_ADDRESS = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_PATHS = spec_of(ProcessSettings.fields()["logging_paths"])
PATHS_FLAGS = _PATHS.flags


class Logging(Protocol):
    """Parsed arguments, or settings, that say how to log."""

    @property
    def logging_level(self) -> str | int: ...

    @property
    def logging_paths(self) -> Sequence[str]: ...


def add_logging_level(p: argparse.ArgumentParser) -> None:
    add_settings(p, ProcessSettings, only=["logging_level"])


def add_logging_options(p: argparse.ArgumentParser) -> None:
    """--logging-level and --logging-paths, as every program that runs a scheduler or workers takes them."""
    add_settings(p, ProcessSettings, only=["logging_level", "logging_paths"])


def take_address_out_of_paths(argv: Sequence[str]) -> list[str]:
    """`argv` with every address (SCHEME://...) that follows --logging-paths moved to the front: argparse would take
    it for one more path (nargs='+') and then miss the address. An address ends the paths that precede it."""
    front: list[str] = []
    rest: list[str] = []
    in_paths = False
    for index, arg in enumerate(argv):
        if arg == "--":
            rest += argv[index:]
            break
        if in_paths and _ADDRESS.match(arg):
            front.append(arg)
            in_paths = False
            continue
        in_paths = _is_paths_flag(arg) or (in_paths and (arg == "-" or not arg.startswith("-")))
        rest.append(arg)
    return front + rest


def _is_paths_flag(arg: str) -> bool:
    """-lp, --logging-paths, or an abbreviation argparse takes for it (--logging-p...)."""
    return arg in PATHS_FLAGS or (len(arg) > len("--logging-") and PATHS_FLAGS[0].startswith(arg))


def start_logging(p: argparse.ArgumentParser, args: Logging) -> tuple[str, ...]:
    """Log as args.logging_level and args.logging_paths say; a usage error naming the path that cannot be written.
    Returns the paths."""
    try:
        paths: tuple[str, ...] = _PATHS.rule.check(args.logging_paths, long_flag("logging_paths", _PATHS))
        setup_logging(args.logging_level, paths)
    except SettingError as exc:
        p.error(str(exc))
    except ValueError as exc:
        p.error(f"{PATHS_FLAGS[0]}: {exc}")
    return paths
