"""Process plumbing shared by the scheduler, cluster, workers and processors: dying with the parent,
signals, logging set-up, the scheduler's CPU (and its claim among this user's schedulers), names."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import ipaddress
import logging
import multiprocessing
import os
import signal
import socket
import sys
from collections.abc import Iterator

from scaler.io.ipc import private_dir, remove_bound_sockets, usual_private_dir

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


LOGGING_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def check_logging_level(level: str | int) -> str | int:
    """A logging level, checked: one of LOGGING_LEVELS in any case (returned upper-cased), or a number >= 0.
    ValueError naming the levels otherwise."""
    if isinstance(level, int) and not isinstance(level, bool) and level >= 0:
        return level
    if isinstance(level, str) and level.strip().upper() in LOGGING_LEVELS:
        return level.strip().upper()
    raise ValueError(f"the logging level must be one of {', '.join(LOGGING_LEVELS)}, not {level!r}")


def log_handlers(paths: tuple[str, ...]) -> list[logging.Handler]:
    """A handler per path: /dev/stdout (or -) and /dev/stderr are the streams, anything else a file appended to.
    ValueError naming the path and why when one cannot be opened for writing (none is left open then)."""
    handlers: list[logging.Handler] = []
    for path in paths:
        try:
            handlers.append(_log_handler(path))
        except OSError as exc:
            for handler in handlers:
                handler.close()
            raise ValueError(f"cannot log to {path}: {exc.strerror or exc}") from None
    return handlers


def check_logging_paths(paths: tuple[str, ...]) -> None:
    """That every path can be logged to (files are created, empty, if missing); ValueError as log_handlers says."""
    for handler in log_handlers(paths):
        handler.close()


def _log_handler(path: str) -> logging.Handler:
    if path in ("/dev/stdout", "-"):
        return logging.StreamHandler(sys.stdout)
    if path == "/dev/stderr":
        return logging.StreamHandler(sys.stderr)
    return logging.FileHandler(path)


def setup_logging(level: str | int = "INFO", paths: tuple[str, ...] = ("/dev/stdout",)) -> None:
    """Log records of `level` and above to `paths` (see log_handlers), in place of the root logger's handlers.
    ValueError, with the logging untouched, for a level that is not one or a path that cannot be written."""
    level = check_logging_level(level)
    handlers = log_handlers(paths)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    formatter = logging.Formatter(LOG_FORMAT, LOG_DATE_FORMAT)
    for handler in handlers:
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(level)


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
    check_cpu takes it. "auto" is a CPU no other scheduler of this user's on this machine claimed, the last one first
    (see claim_cpu); when every CPU this process may use is claimed, or it may use one only, it is not pinned. Returns
    the CPU, or None when not pinned ("none", or a system without CPU affinity).

    Why the scheduler does this: each message crosses from its ZeroMQ I/O thread to its main thread or back. On one
    CPU that hand-over is a plain wake-up; across two CPUs of a virtual machine it takes an inter-processor
    interrupt, which costs more than the rest of the hand-over. Start ZeroMQ after this call: its I/O thread
    inherits the pinning. Two schedulers on one CPU would take turns on it: hence the claims."""
    choice = check_cpu(choice)
    if choice in (None, "none") or not hasattr(os, "sched_setaffinity"):
        return None
    if choice == "auto":
        cpu = _unclaimed_cpu(allowed_cpus())
        if cpu is None:
            return None
    else:
        assert isinstance(choice, int)
        cpu = choice
        claim_cpu(cpu)  # taken or not, the CPU asked for is the one: the claim keeps "auto" schedulers off it
    os.sched_setaffinity(0, {cpu})
    return cpu


def _unclaimed_cpu(allowed: list[int]) -> int | None:
    """The CPU "auto" pins to, claimed: the one this process holds already, else the last unclaimed one; None when
    every one is claimed, or there is only one."""
    if len(allowed) < 2:
        return None
    held = [_claim[0]] if _claim is not None and _claim[0] in allowed else []
    return next((cpu for cpu in [*held, *reversed(allowed)] if claim_cpu(cpu)), None)


_claim: tuple[int, int, str] | None = None  # the CPU this process claimed: (cpu, the locked file's fd, its path)


def claim_cpu(cpu: int) -> bool:
    """Claim `cpu` for this process among this user's processes on this machine: an exclusive lock (flock) on the
    file cpu<N>.claim in the usual private folder (ipc.usual_private_dir). True when this process holds it now (or
    when there is no such folder: nothing tells then), False when another process does. A process holds one claim:
    it lets go of any other; the kernel releases the lock when the process ends, however it ends."""
    if _claim is not None and _claim[0] == cpu:
        return True
    release_cpu()
    folder = usual_private_dir()
    if folder is None:
        return True
    path = os.path.join(folder, f"cpu{cpu}.claim")
    for _ in range(3):  # a holder letting go unlinks the file: lock the file at the path, not one just removed
        try:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            return True
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held = os.path.samestat(os.fstat(descriptor), os.lstat(path))
        except BlockingIOError:  # another process holds it
            os.close(descriptor)
            return False
        except OSError:  # its holder let go (and removed it) in between
            held = False
        if held:
            _hold(cpu, descriptor, path)
            return True
        os.close(descriptor)
    return False


def _hold(cpu: int, descriptor: int, path: str) -> None:
    global _claim
    os.ftruncate(descriptor, 0)
    os.write(descriptor, f"{os.getpid()}\n".encode())  # for whoever looks: the claim's holder
    _claim = (cpu, descriptor, path)


def release_cpu() -> None:
    """Let go of this process's CPU claim (claim_cpu), removing its file; nothing when it holds none."""
    global _claim
    if _claim is None:
        return
    _cpu, descriptor, path = _claim
    _claim = None
    with contextlib.suppress(OSError):
        if os.path.samestat(os.fstat(descriptor), os.lstat(path)):
            os.unlink(path)  # under the lock: whoever opened it before sees it gone once the lock is theirs
    os.close(descriptor)


def _forget_claim() -> None:
    """In a forked child: the claim is the parent's (the lock stays the parent's while its descriptor is open)."""
    global _claim
    if _claim is not None:
        os.close(_claim[1])
        _claim = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_claim)
atexit.register(release_cpu)


@contextlib.contextmanager
def removing_own_files() -> Iterator[None]:
    """Around a scheduler's run in this process: when it ends (a clean stop, or an error) its CPU claim is released
    and the ipc socket files it bound are removed, with the private folder it made when that is left empty."""
    try:
        yield
    finally:
        release_cpu()
        remove_bound_sockets()


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
