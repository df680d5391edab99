"""The scheduler's pure core: tasks, sessions, objects, placement. See SchedulerCore."""

from scaler.core.scheduler.config import SchedulerConfig
from scaler.core.scheduler.core import SchedulerCore
from scaler.core.scheduler.events import (
    Command,
    Event,
    Forbidden,
    Log,
    Malformed,
    PeerKey,
    Received,
    Revoked,
    Send,
    Stop,
    Tick,
    Undeliverable,
)

__all__ = [
    "Command",
    "Event",
    "Forbidden",
    "Log",
    "Malformed",
    "PeerKey",
    "Received",
    "Revoked",
    "SchedulerConfig",
    "SchedulerCore",
    "Send",
    "Stop",
    "Tick",
    "Undeliverable",
]
