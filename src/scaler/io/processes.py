"""Process plumbing shared by the scheduler, cluster, workers and processors: dying with the parent,
signals, logging set-up, names."""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import socket
import sys

LOG_FORMAT = "[%(levelname)s]%(asctime)s: %(message)s"
LOG_DATE_FORMAT = "%Y-%m-%d %H:%M:%S%z"
_PR_SET_PDEATHSIG = 1


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


def setup_logging(level: str | int = "INFO", paths: tuple[str, ...] = ("/dev/stdout",)) -> None:
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    formatter = logging.Formatter(LOG_FORMAT, LOG_DATE_FORMAT)
    handler: logging.Handler
    for path in paths:
        if path in ("/dev/stdout", "-"):
            handler = logging.StreamHandler(sys.stdout)
        elif path == "/dev/stderr":
            handler = logging.StreamHandler(sys.stderr)
        else:
            handler = logging.FileHandler(path)
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(level if isinstance(level, int) else level.upper())


def hostname() -> str:
    return socket.gethostname()


def parse_address(address: str) -> tuple[str, str]:
    """('tcp', 'host:port') from 'tcp://host:port'; ValueError with a clear message otherwise."""
    scheme, sep, rest = address.partition("://")
    if not sep or scheme not in ("tcp", "ipc", "inproc") or not rest:
        raise ValueError(f"address must look like tcp://HOST:PORT or ipc:///PATH, not {address!r}")
    if scheme == "tcp":
        host, colon, port = rest.rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"address must look like tcp://HOST:PORT with a port from 1 to 65535, not {address!r}")
    return scheme, rest


def default_monitor_address(address: str) -> str:
    """ipc:///tmp/<host>_<port>_monitor for tcp://<host>:<port>, as the documents show."""
    scheme, rest = parse_address(address)
    if scheme == "tcp":
        host, _, port = rest.rpartition(":")
        return f"ipc:///tmp/{host}_{port}_monitor"
    return f"{scheme}://{rest}_monitor"
