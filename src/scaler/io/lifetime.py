"""A process's lifetime: its pid without a system call (kept right in forked children), dying with its parent, and a
scheduler's files removed when it ends. Shared by the scheduler, cluster, workers and processors."""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
from collections.abc import Iterator

from scaler.io.cpus import release_cpu
from scaler.io.ipc import remove_bound_sockets

_PR_SET_PDEATHSIG = 1

_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def current_pid() -> int:
    """os.getpid() without its system call (glibc no longer caches it): kept up to date in forked children. The
    client asks on every submit and wait, to refuse use from a process forked from the one that owns it."""
    return _pid


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask Linux to send us `sig` when our parent dies (best effort; a no-op elsewhere).

    Call it first thing in a child started by multiprocessing. A parent that died between the fork and this call
    never signals us: then we send ourselves `sig` at once rather than live on as an orphan."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        return
    parent = multiprocessing.parent_process()
    if parent is not None and parent.pid is not None and os.getppid() != parent.pid:
        os.kill(os.getpid(), sig)


def signal_when_parent_dies() -> None:
    """For subprocess.Popen(preexec_fn=...): the command it starts gets SIGTERM when the process that started it dies,
    even by SIGKILL (Linux; a no-op elsewhere). Runs between fork and exec: nothing but the one system call."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


@contextlib.contextmanager
def removing_own_files() -> Iterator[None]:
    """Around a scheduler's run in this process: when it ends (a clean stop, or an error) its CPU claim is released
    and the ipc socket files it bound are removed, with the private folder it made when that is left empty."""
    try:
        yield
    finally:
        release_cpu()
        remove_bound_sockets()
