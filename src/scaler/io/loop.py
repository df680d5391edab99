"""Event loop choice ("builtin" asyncio or "uvloop") and running a coroutine on it."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
EVENT_LOOPS = ("builtin", "uvloop")


def check_event_loop(name: str) -> str:
    if name not in EVENT_LOOPS:
        raise ValueError(f"event_loop must be one of {', '.join(EVENT_LOOPS)}, not {name!r}")
    if name == "uvloop":
        try:
            import uvloop  # noqa: F401
        except ImportError as exc:
            raise ValueError("event_loop='uvloop' needs the uvloop package: pip install 'scaler[uvloop]'") from exc
    return name


def run(main: Coroutine[Any, Any, T], event_loop: str = "builtin") -> T:
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
