"""Task functions for the CLI tests: workers started from the command line import them by name, so this module
stays light (no pytest), as a user's own module would be."""

from __future__ import annotations

from scaler import Client


def square(x: int) -> int:
    return x * x


def fibonacci(clnt: Client, n: int) -> int:
    if n < 2:
        return n
    a = clnt.submit(fibonacci, clnt, n - 1)
    b = clnt.submit(fibonacci, clnt, n - 2)
    return int(a.result() + b.result())


def touch_and_sleep(path: str, seconds: float) -> None:
    """Create `path` (the test sees the task started), then sleep."""
    import time

    open(path, "w").close()
    time.sleep(seconds)


def sleep_and_square(x: int) -> int:
    """10 ms of work, then x * x."""
    import time

    time.sleep(0.01)
    return x * x
