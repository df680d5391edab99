"""Event loop choice ("builtin" asyncio or "uvloop") and running a coroutine on it."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
EVENT_LOOPS = ("builtin", "uvloop")
# Our service processes (scheduler, worker agent) allocate many short-lived, acyclic objects per message: young
# collections every 700 allocations cost them time for nothing. Processors, which run user code, restore the
# interpreter's defaults (see DEFAULT_GC_THRESHOLDS).
SERVICE_GC_THRESHOLDS = (20_000, 20, 20)
# PyPy's collector has neither thresholds nor freeze (it is tuned otherwise): there it is left as it is.
TUNABLE_GC = hasattr(gc, "freeze") and hasattr(gc, "get_threshold")
DEFAULT_GC_THRESHOLDS = gc.get_threshold() if TUNABLE_GC else (700, 10, 10)


def check_event_loop(name: str) -> str:
    if name not in EVENT_LOOPS:
        raise ValueError(f"event_loop must be one of {', '.join(EVENT_LOOPS)}, not {name!r}")
    if name == "uvloop":
        try:
            import uvloop  # noqa: F401
        except ImportError as exc:
            raise ValueError("event_loop='uvloop' needs the uvloop package: pip install 'scaler[uvloop]'") from exc
    return name


def run(main: Coroutine[Any, Any, T], event_loop: str) -> T:
    """Run `main` on a new loop of the kind asked for, as a service process (see SERVICE_GC_THRESHOLDS)."""
    if TUNABLE_GC:
        gc.freeze()  # what start-up made lives as long as the process: keep it out of every collection
        gc.set_threshold(*SERVICE_GC_THRESHOLDS)
    loop: asyncio.AbstractEventLoop
    if check_event_loop(event_loop) == "uvloop":
        import uvloop

        loop = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main)
    finally:
        asyncio.set_event_loop(None)
        loop.close()
