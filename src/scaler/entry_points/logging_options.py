"""The --logging-level and --logging-paths options of the CLIs: a bad value is a one-line usage error (exit code 2)
naming the option, and `-lp FILE ADDRESS` leaves the address to the address.

--logging-paths takes one or more paths (scaler 1.9.9's `-lp A B`) and may be repeated (`-lp A -lp B`); the paths
given replace the default /dev/stdout. An address (SCHEME://...) right after the paths is the program's address, not
a path: take_address_out_of_paths moves it in front of the options before argparse reads them."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from typing import Any

from scaler.io.processes import LOGGING_LEVELS, check_logging_level, setup_logging

PATHS_FLAGS = ("--logging-paths", "-lp")
DEFAULT_PATHS = ["/dev/stdout"]
_ADDRESS = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def logging_level(text: str) -> str:
    """argparse type= of --logging-level: the level upper-cased, or a usage error naming the levels."""
    try:
        return str(check_logging_level(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class _Paths(argparse.Action):
    """-lp A B, or -lp A -lp B: the paths given replace the default, and add up when the option is repeated."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        current = getattr(namespace, self.dest)
        given = list(values)
        setattr(namespace, self.dest, given if current is self.default else [*current, *given])


def add_logging_level(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--logging-level",
        "-ll",
        type=logging_level,
        metavar="LEVEL",
        default="INFO",
        help=f"one of {', '.join(LOGGING_LEVELS)}",
    )


def add_logging_options(p: argparse.ArgumentParser) -> None:
    """--logging-level and --logging-paths, as every program that runs a scheduler or workers takes them."""
    add_logging_level(p)
    p.add_argument(
        *PATHS_FLAGS,
        nargs="+",
        action=_Paths,
        metavar="PATH",
        default=DEFAULT_PATHS,
        help="where logs go: files (appended to), /dev/stdout or /dev/stderr; several may follow the option, which "
        "may be repeated",
    )


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


def start_logging(p: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, ...]:
    """Log as args.logging_level and args.logging_paths say; a usage error naming the path that cannot be written.
    Returns the paths."""
    paths = tuple(args.logging_paths)
    for path in paths:
        if _ADDRESS.match(path):
            p.error(f"--logging-paths: {path!r} is an address, not a file to log to; give the address once")
    try:
        setup_logging(args.logging_level, paths)
    except ValueError as exc:
        p.error(f"--logging-paths: {exc}")
    return paths
