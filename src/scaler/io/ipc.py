"""ipc:// addresses the scheduler binds: only its own user may connect, and a path someone else holds is a clear
start-up error, never taken over nor left to hang.

libzmq removes whatever is at an ipc path before binding (even another program's live socket) and creates the socket
file with the process's umask. So the path is checked first, and bound with a umask that leaves others out.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import socket
import stat
from collections.abc import Iterator


def ipc_path(address: str) -> str | None:
    """The file path of an ipc:// address (None for other transports, and for Linux's abstract names '@...')."""
    scheme, sep, rest = address.partition("://")
    if scheme != "ipc" or not sep or rest.startswith("@"):
        return None
    return rest


def claim(path: str) -> None:
    """Make `path` free for our socket: a stale socket file of ours (nobody listening) is removed; anything else
    there raises OSError saying what holds it and what to do."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    me = os.geteuid()
    if info.st_uid != me:
        raise OSError(
            f"{path} already exists and belongs to {_user(info.st_uid)}, not to this user ({_user(me)}): another "
            "user could be listening there in the scheduler's place. Remove it, or choose another address "
            "(--monitor-address for the monitor)"
        )
    if not stat.S_ISSOCK(info.st_mode):
        raise OSError(f"{path} already exists and is not a socket; remove it or choose another address")
    if _listening(path):
        raise OSError(f"{path} is in use: another program (another scheduler?) listens there; choose another address")
    os.unlink(path)


@contextlib.contextmanager
def private_files() -> Iterator[None]:
    """Files (sockets) created inside this block are readable and writable by this user only. The umask is the
    process's: use it only while no other thread creates files."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def check_private(path: str) -> None:
    """Make sure the socket file at `path` is ours, and mode 0600 (the umask of private_files left it 0700)."""
    info = os.lstat(path)
    if info.st_uid != os.geteuid():
        raise OSError(f"{path} belongs to {_user(info.st_uid)} right after we bound it: someone raced us there")
    if stat.S_IMODE(info.st_mode) != 0o600:
        os.chmod(path, 0o600)


def _listening(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True


def _user(uid: int) -> str:
    try:
        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"
