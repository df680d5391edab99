"""The settings every Scaler process has (its event loop, its logging) and the rules of the settings that several
declare with their own help (an address, a keys directory).

Runs on Python 3.9: the scheduler (PyPy) imports it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from scaler.io.addresses import parse_address
from scaler.io.logs import LOGGING_LEVELS, check_logging_level, check_logging_paths
from scaler.io.loop import EVENT_LOOPS, check_event_loop
from scaler.security.keys import resolve
from scaler.settings.model import Rule, Settings, choice, labelled, setting

_ADDRESS = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
KEYS_HELP = (
    "the keys directory scaler_keygen made: connections are encrypted and only authorized keys get in "
    "(default: $SCALER_KEYS if set, else no keys; see docs/security.md)"
)


def address_text(address: object) -> str:
    """An address as text: a str, or an object with to_address() (scaler 1.9.9's ZMQConfig), or one whose str() is
    the address. ValueError unless it looks like tcp://HOST:PORT or ipc:///PATH."""
    to_address = getattr(address, "to_address", None)
    text = str(to_address() if callable(to_address) else address)
    parse_address(text)
    return text


def _keys(value: Any, label: str) -> Any:
    if value is True:
        raise TypeError(f"{label} must be a keys directory, None (use $SCALER_KEYS if set) or False (no keys)")
    return value


def keys_directory(keys: str | os.PathLike[str] | bool | None) -> str | None:
    """The keys directory a `keys` setting means: None (no keys) for False, else as scaler.security.keys.resolve."""
    return None if keys is False else resolve(keys if not isinstance(keys, bool) else None)


def _logging_paths(paths: tuple[Any, ...], label: str) -> tuple[str, ...]:
    prefix = f"{label}: " if label else ""
    for path in paths:
        if not isinstance(path, str):
            raise TypeError(f"{prefix}a path to log to is text, not {path!r}")
        if _ADDRESS.match(path):
            raise ValueError(f"{prefix}{path!r} is an address, not a file to log to; give the address once")
    labelled(check_logging_paths)(paths, label)
    return paths


ADDRESS_RULE = Rule("an address like tcp://HOST:PORT or ipc:///PATH", (object,), None, labelled(address_text), str)
OPTIONAL_ADDRESS_RULE = Rule(ADDRESS_RULE.allowed, (object,), None, labelled(address_text), str, optional=True)
KEYS_RULE = Rule(
    "a keys directory, None (use $SCALER_KEYS if set) or False (no keys)",
    (str, os.PathLike, bool),
    None,
    _keys,
    optional=True,
)


@dataclass(frozen=True)
class ProcessSettings(Settings):
    """What every process started by Scaler takes: its asyncio event loop and where its logs go."""

    event_loop: str = setting(
        "builtin",
        flags=("--event-loop", "-el"),
        help="asyncio event loop",
        rule=choice(EVENT_LOOPS, labelled(check_event_loop)),
    )
    logging_level: str | int = setting(
        "INFO",
        flags=("--logging-level", "-ll"),
        metavar="LEVEL",
        help=f"one of {', '.join(LOGGING_LEVELS)}",
        rule=Rule(f"one of {', '.join(LOGGING_LEVELS)}", (str, int), None, labelled(check_logging_level)),
    )
    logging_paths: tuple[str, ...] = setting(
        ("/dev/stdout",),
        flags=("--logging-paths", "-lp"),
        metavar="PATH",
        help="where logs go: files (appended to), /dev/stdout or /dev/stderr; several may follow the option, which "
        "may be repeated",
        rule=Rule("paths to log to", (tuple,), None, _logging_paths, many="+"),
    )
