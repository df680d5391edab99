"""The scheduler's connections, by file descriptor: how many are open, which have not sent a message yet, and which
to end when there are too many.

libzmq accepts every TCP or ipc connection and has no limit of its own, so a flood of connections that never
complete a handshake (or never say anything) would use up the descriptors the scheduler needs (its key folders,
new peers) and hold the memory of whatever frames they start. The scheduler follows its sockets' ACCEPTED and
DISCONNECTED events in a ConnectionTable, counts a connection as silent until a message arrives over it (the
message's SRCFD), and ends the oldest silent ones past the limits with shutdown(2) on their descriptor (end_silent):
libzmq then sees the connection end and closes it itself. Nothing here decides anything about tasks or sessions.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import resource
import socket
import stat
from dataclasses import dataclass

logger = logging.getLogger(__name__)

CONNECTIONS_AT_MOST = 65_536  # the default limit, whatever the descriptor limit allows
SILENT_AT_MOST = 256  # the default limit of connections that have not sent a message yet
RESERVED_DESCRIPTORS = 64  # at least this many descriptors stay for everything but connections (an eighth if more)
AUDIT_EVERY = 10.0  # seconds between two checks that every connection counted is still open


@dataclass(frozen=True)
class ConnectionLimits:
    """`connections`: open connections at most (both sockets together); `silent`: of those, connections that have
    not sent a message yet (a handshake under way, or a peer that connected and says nothing)."""

    connections: int
    silent: int

    def __post_init__(self) -> None:
        if self.connections < 1 or self.silent < 1:
            raise ValueError(f"connection limits must be at least 1, not {self.connections} and {self.silent}")


def descriptor_limit() -> int:
    """This process's soft limit of open files."""
    return int(resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def raise_descriptor_limit() -> tuple[int, int]:
    """Raise this process's soft limit of open files to its hard limit; returns (before, now)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):
            return soft, soft
        return soft, wanted
    return soft, soft


def default_limits(descriptors: int, connections: int | None = None, silent: int | None = None) -> ConnectionLimits:
    """The limits for a process that may open `descriptors` files: the descriptors left once some are reserved,
    CONNECTIONS_AT_MOST at most; silent connections a quarter of that, SILENT_AT_MOST at most. Given values win
    (a connection limit over what the descriptors allow is lowered to it, with a warning)."""
    room = max(1, descriptors - max(RESERVED_DESCRIPTORS, descriptors // 8))
    if connections is None:
        connections = min(room, CONNECTIONS_AT_MOST)
    elif connections > room:
        logger.warning(
            "Scheduler: --max-connections %d is more than the file descriptor limit allows (%d open files, %d kept "
            "for other uses): at most %d connections; raise the limit (ulimit -n, or LimitNOFILE= in a systemd unit)",
            connections,
            descriptors,
            descriptors - room,
            room,
        )
        connections = room
    if silent is None:
        silent = max(1, min(SILENT_AT_MOST, connections // 4))
    return ConnectionLimits(connections, min(silent, connections))


class ConnectionTable:
    """Open connections by descriptor, with the identity of the socket behind each (its inode: a descriptor number
    is reused as soon as it is closed, an inode is not while the socket lives), and the silent ones in the order they
    were accepted. Pure bookkeeping: the caller feeds events and carries out end_silent's choices."""

    __slots__ = ("limits", "open", "silent")

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.open: dict[int, int] = {}  # descriptor -> socket inode
        self.silent: dict[int, float] = {}  # descriptor -> when accepted; oldest first

    def accepted(self, fd: int, inode: int, now: float) -> None:
        self.open[fd] = inode
        self.silent.pop(fd, None)  # a number reused for a connection whose end went unreported
        self.silent[fd] = now

    def spoke(self, fd: int) -> None:
        """A message came over `fd` (on the hot path, call it only while `silent` is not empty)."""
        self.silent.pop(fd, None)

    def closed(self, fd: int) -> None:
        self.open.pop(fd, None)
        self.silent.pop(fd, None)

    def excess(self) -> list[tuple[int, int]]:
        """(descriptor, inode) of the silent connections to end so that both counts are within the limits, oldest
        first (removed from the table: their DISCONNECTED event may come later, or never)."""
        count = max(len(self.open) - self.limits.connections, len(self.silent) - self.limits.silent, 0)
        return self.take_oldest(count)

    def take_oldest(self, count: int) -> list[tuple[int, int]]:
        chosen = [(fd, self.open.get(fd, -1)) for fd in itertools.islice(self.silent, count)]
        for fd, _ in chosen:
            self.closed(fd)
        return chosen

    def forget(self, gone: list[int]) -> None:
        for fd in gone:
            self.closed(fd)


def socket_inode(fd: int) -> int | None:
    """The inode of the socket open as `fd`, or None if `fd` is not an open socket (closed already)."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_ino if stat.S_ISSOCK(st.st_mode) else None


def end_silent(chosen: list[tuple[int, int]]) -> int:
    """Shut down each (descriptor, inode) whose descriptor still holds that socket; returns how many were ended.
    The descriptor stays open: libzmq, which owns it, sees the connection end and closes it."""
    ended = 0
    for fd, inode in chosen:
        if socket_inode(fd) != inode:
            continue  # closed meanwhile, perhaps reused for another connection: leave it
        try:
            sock = socket.socket(fileno=fd)
        except OSError:
            continue
        try:
            sock.shutdown(socket.SHUT_RDWR)
            ended += 1
        except OSError as exc:
            if exc.errno != errno.ENOTCONN:
                logger.debug("Scheduler: could not shut connection %d down: %s", fd, exc)
        finally:
            sock.detach()
    return ended


def audit(table: ConnectionTable) -> int:
    """Forget the connections counted whose socket is no longer open under their descriptor (a connection taken
    over by another with the same routing id ends without a DISCONNECTED event); returns how many."""
    gone = [fd for fd, inode in table.open.items() if socket_inode(fd) != inode]
    table.forget(gone)
    return len(gone)
