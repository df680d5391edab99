"""Process plumbing shared by the scheduler, cluster, workers and processors: dying with the parent,
signals, logging set-up, names."""

from __future__ import annotations

import ctypes
import ipaddress
import logging
import multiprocessing
import os
import signal
import socket
import sys

from scaler.io.ipc import private_dir

LOG_FORMAT = "[%(levelname)s]%(asctime)s: %(message)s"
LOG_DATE_FORMAT = "%Y-%m-%d %H:%M:%S%z"
_PR_SET_PDEATHSIG = 1
logger = logging.getLogger(__name__)


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


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on, in order (every CPU where Linux does not say)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(size: str | int) -> int:
    """A number of bytes: an int, or text such as 512M, 4G, 1.5GiB, 2gb (powers of 1024). ValueError otherwise."""
    if isinstance(size, bool):
        raise ValueError(f"a size must be bytes or text like 4G, not {size!r}")
    if isinstance(size, int):
        value = size
    else:
        text = str(size).strip().lower().removesuffix("ib").removesuffix("b") if str(size).strip() else ""
        number, unit = (text[:-1], text[-1]) if text and text[-1] in "kmgt" else (text, "")
        try:
            value = int(float(number) * _SIZE_UNITS[unit])
        except ValueError:
            text = f"a size must be bytes or a number with K, M, G or T (like 512M or 4G), not {size!r}"
            raise ValueError(text) from None
    if value < 1:
        raise ValueError(f"a size must be positive, not {size!r}")
    return value


def check_cpu(choice: str | int | None) -> str | int | None:
    """A scheduler's CPU choice, checked: "auto", "none" (or None), or the number of a CPU this process may use.
    Returns it with numbers as int; ValueError with a clear message otherwise."""
    if choice is None or choice in ("auto", "none"):
        return choice
    if isinstance(choice, bool) or not isinstance(choice, (int, str)) or not str(choice).isdigit():
        raise ValueError(f"the scheduler's CPU must be 'auto', 'none' or a CPU number, not {choice!r}")
    cpu = int(choice)
    allowed = allowed_cpus()
    if cpu not in allowed:
        raise ValueError(f"CPU {cpu} is not one this process may run on ({_ranges(allowed)})")
    return cpu


def pin_to_cpu(choice: str | int | None) -> int | None:
    """Keep this process (the calling thread, and every thread it starts from now on) on one CPU: `choice` as
    check_cpu takes it, "auto" being the last CPU this process may use. Returns the CPU, or None when not pinned
    ("none", one CPU allowed anyway, or a system without CPU affinity).

    Why the scheduler does this: each message crosses from its ZeroMQ I/O thread to its main thread or back. On one
    CPU that hand-over is a plain wake-up; across two CPUs of a virtual machine it takes an inter-processor
    interrupt, which costs more than the rest of the hand-over. Start ZeroMQ after this call: its I/O thread
    inherits the pinning."""
    choice = check_cpu(choice)
    if choice in (None, "none") or not hasattr(os, "sched_setaffinity"):
        return None
    allowed = allowed_cpus()
    if choice == "auto":
        if len(allowed) < 2:
            return None
        choice = allowed[-1]
    assert isinstance(choice, int)
    os.sched_setaffinity(0, {choice})
    return choice


def _ranges(cpus: list[int]) -> str:
    """'0-3, 6' for [0, 1, 2, 3, 6]."""
    parts: list[str] = []
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        parts.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ", ".join(parts) or "none"


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


def documented_monitor_address(address: str) -> str:
    """The monitor address the documents show for a scheduler at `address`: ipc:///tmp/<host>_<port>_monitor for
    tcp://<host>:<port> (ipc.find_monitor takes it to where the socket is), <address>_monitor for ipc and inproc."""
    scheme, rest = parse_address(address)
    if scheme == "tcp":
        host, _, port = rest.rpartition(":")
        return f"ipc:///tmp/{host}_{port}_monitor"
    return f"{scheme}://{rest}_monitor"


def default_monitor_address(address: str) -> str:
    """Where a scheduler at `address` given no monitor address publishes its monitor. For tcp://<host>:<port>:
    <host>_<port>_monitor in a folder of this user's only (ipc.private_dir: $XDG_RUNTIME_DIR/scaler or
    /tmp/scaler-<uid>, made 0700), with a WARNING when /tmp/scaler-<uid> is not this user's and a fresh folder is
    used instead. For ipc and inproc: <address>_monitor, next to the scheduler's own socket, where its user chose."""
    documented = documented_monitor_address(address)
    if parse_address(address)[0] != "tcp":
        return documented
    folder, refused = private_dir()
    monitor = "ipc://" + os.path.join(folder, os.path.basename(documented))
    if refused is not None:
        logger.warning(
            "%s: it is not used for the monitor socket (another user could take the monitor's place there, or serve "
            "scaler_top a false status); the monitor address is %s, in a fresh private folder, as the scheduler "
            "logs at start",
            refused,
            monitor,
        )
    return monitor


def is_loopback(address: str) -> bool:
    """Whether only this machine can reach `address`: ipc and inproc, or tcp on a loopback host."""
    scheme, rest = parse_address(address)
    if scheme != "tcp":
        return True
    host = rest.rpartition(":")[0].strip("[]")
    if host in ("localhost", "*"):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(info[4][0])).is_loopback for info in infos)
