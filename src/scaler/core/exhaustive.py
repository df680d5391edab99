"""unreachable(): the last branch of an isinstance chain (or a `match`) over a closed union (events, commands), so that
mypy proves every member is handled (its argument must be of type Never) and a member added later without a branch
fails the type check. (The scheduler's modules use isinstance chains: they run on Python 3.9 too, for PyPy.)

Pure; no I/O.
"""

from __future__ import annotations

from typing import NoReturn


def unreachable(value: NoReturn) -> NoReturn:
    raise AssertionError(f"unhandled {type(value).__name__}: {value!r}")
