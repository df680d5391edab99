"""What the scheduler core consumes (events) and produces (commands). Small frozen records; no behaviour."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from scaler.protocol.messages import Message


@dataclass(frozen=True, slots=True)
class Received:
    """A decoded message arrived from `peer` (its ZeroMQ routing id)."""

    now: float
    peer: bytes
    message: Message


@dataclass(frozen=True, slots=True)
class Malformed:
    """A message from `peer` could not be decoded (or is of a kind the scheduler never accepts: `unexpected`)."""

    now: float
    peer: bytes
    reason: str
    unexpected: bool = False


@dataclass(frozen=True, slots=True)
class Undeliverable:
    """A message to `peer` could not be delivered: it is no longer connected."""

    now: float
    peer: bytes


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passes: timeouts and balancing are checked."""

    now: float


Event = Received | Malformed | Undeliverable | Tick


@dataclass(frozen=True, slots=True)
class Send:
    peer: bytes
    message: Message


@dataclass(frozen=True, slots=True)
class Log:
    level: int
    text: str

    @staticmethod
    def info(text: str) -> Log:
        return Log(logging.INFO, text)

    @staticmethod
    def warning(text: str) -> Log:
        return Log(logging.WARNING, text)


@dataclass(frozen=True, slots=True)
class Stop:
    """The scheduler must stop (after sending the commands before this one)."""

    reason: str


Command = Send | Log | Stop
