"""The package version; one place, read by pyproject.toml. And the one Python requirement that differs by role."""

import platform
import sys

__version__ = "2.0.0.dev0"


def require_python_310(what: str) -> None:
    """Stop with a clear ImportError where `what` (clients, workers, monitors) cannot run: a Python before 3.10. The
    scheduler alone also runs on Python 3.9, for PyPy (Debian's pypy3 7.3.11 is 3.9; docs/command-line.md,
    "Running the scheduler on PyPy"); everything else needs 3.10."""
    if sys.version_info < (3, 10):  # the scheduler alone runs on 3.9 (pyproject.toml: per-file-target-version)
        raise ImportError(
            f"{what} need Python 3.10 or newer; this is {platform.python_implementation()} "
            f"{platform.python_version()} ({sys.executable}), where only the scheduler (scaler_scheduler) runs"
        )
