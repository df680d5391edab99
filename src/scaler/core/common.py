"""What every core (scheduler, worker agent, client session) shares: the commands a core gives its shell to send a
message to its one peer, to stop, and to write a log line; the error a core raises when its own rules are broken; and
the last branch of a dispatch over a closed union.

Pure; no I/O. The scheduler imports it: Python 3.9 (pyproject.toml).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, NoReturn

from scaler.core.slotted import slotted

if TYPE_CHECKING:
    from scaler.protocol.records import Message


@slotted(frozen=True)
class Send:
    """Send `message` to the core's one peer: the scheduler, for a worker agent and a client session. (The scheduler
    talks to many: its own Send, scaler.core.scheduler.events.Send, names the peer.)"""

    message: Message


@slotted(frozen=True)
class Stop:
    """The process must stop, after the commands before this one, exiting with `exit_code`."""

    reason: str
    exit_code: int = 0


@slotted(frozen=True)
class Log:
    """A line for the shell's logger, at `level` (logging's levels)."""

    level: int
    text: str

    @staticmethod
    def info(text: str) -> Log:
        return Log(logging.INFO, text)

    @staticmethod
    def warning(text: str) -> Log:
        return Log(logging.WARNING, text)


class InvariantError(AssertionError):
    """A core reached a state its own rules forbid: a bug in Scaler, never the peer's fault."""


def unreachable(value: NoReturn) -> NoReturn:
    """The last branch of an isinstance chain (or a `match`) over a closed union (events, commands): mypy proves every
    member handled (the argument must be of type Never), and a member added later without a branch fails the type
    check. (The scheduler's modules use isinstance chains: they run on Python 3.9 too, for PyPy.)"""
    raise AssertionError(f"unhandled {type(value).__name__}: {value!r}")
