"""Capabilities: what a worker offers and what a task requires (scaler.capnp's Hello.capabilities and
TaskBatch.requirements), the rules every peer checks a capability text against, and the words of a failure.

A capability is `name` or `name=value`: UTF-8, 1 to 256 bytes, no control characters, no white space at either end.
Matching is exact string equality: a task runs on a worker iff every capability it requires is one the worker
offers. Pure data and checks; no I/O (the scheduler's core, clients and workers import it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_CAPABILITY_BYTES = 256
MAX_OFFERED = 256  # capabilities one worker may advertise
MAX_REQUIRED = 64  # capabilities one task may require
MISSING_PREFIX = "missing capabilities:"  # the start of a failed task's text when no connected worker can run it
MAX_LISTED_OFFERS = 5  # capability sets listed in that text
_CONTROL = re.compile("[\x00-\x1f\x7f]")


def capability_problem(text: object) -> str | None:
    """Why `text` is not a valid capability, or None if it is one."""
    if not isinstance(text, str):
        return f"a capability must be a string, not {type(text).__name__}"
    size = len(text.encode("utf-8", "surrogatepass"))
    if not 1 <= size <= MAX_CAPABILITY_BYTES:
        return f"capability {text[:40]!r} is {size} bytes; a capability has 1 to {MAX_CAPABILITY_BYTES} bytes"
    if text != text.strip():
        return f"capability {text[:40]!r} has white space at an end"
    if _CONTROL.search(text):
        return f"capability {text[:40]!r} has a control character"
    return None


def capabilities_problem(texts: Iterable[object], most: int, what: str) -> str | None:
    """Why this list of capabilities (`what`: "a worker's capabilities", "a task's requirement") is invalid: too many
    (more than `most`), or one invalid; None if it is valid (duplicates are allowed, and count once)."""
    texts = list(texts)
    if len(texts) > most:
        return f"{what} lists {len(texts)} capabilities; at most {most} are allowed"
    for text in texts:
        problem = capability_problem(text)
        if problem is not None:
            return f"{what}: {problem}"
    return None


def missing_text(required: Iterable[str], offers: Iterable[frozenset[str]]) -> str:
    """The text of a task that failed because no connected worker offers every capability it requires."""
    listed = sorted("[" + ", ".join(sorted(offer)) + "]" for offer in offers)
    shown = ", ".join(listed[:MAX_LISTED_OFFERS])
    if len(listed) > MAX_LISTED_OFFERS:
        shown += f" and {len(listed) - MAX_LISTED_OFFERS} more"
    return (
        f"{MISSING_PREFIX} the task requires {', '.join(sorted(required))}; no connected worker offers them all "
        f"(connected workers offer: {shown})"
    )
