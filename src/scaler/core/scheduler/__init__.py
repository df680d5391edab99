"""The scheduler's pure core: tasks, sessions, objects, placement. See SchedulerCore."""

from scaler.core.scheduler.config import SchedulerConfig
from scaler.core.scheduler.core import SchedulerCore
from scaler.core.scheduler.events import Command, Event, Log, Malformed, Received, Send, Stop, Tick, Undeliverable

__all__ = [
    "Command",
    "Event",
    "Log",
    "Malformed",
    "Received",
    "SchedulerConfig",
    "SchedulerCore",
    "Send",
    "Stop",
    "Tick",
    "Undeliverable",
]
