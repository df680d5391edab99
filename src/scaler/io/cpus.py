"""The scheduler's CPU: the CPUs a process may use, the choice checked, pinning, and the claim of a CPU among this
user's schedulers on this machine (a lock file in the private folder)."""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os

from scaler.io.ipc import usual_private_dir


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on, in order (every CPU where Linux does not say)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


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
