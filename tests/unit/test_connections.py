"""The scheduler's connection table: which silent connections end when there are too many, and the limits derived
from the file descriptor limit (scheduler/connections.py). Real sockets for the descriptor checks."""

from __future__ import annotations

import socket

import pytest

from scaler.scheduler.connections import (
    CONNECTIONS_AT_MOST,
    SILENT_AT_MOST,
    ConnectionLimits,
    ConnectionTable,
    audit,
    default_limits,
    end_silent,
    socket_inode,
)


def test_the_oldest_silent_connections_end_first_once_there_are_too_many_of_them() -> None:
    table = ConnectionTable(ConnectionLimits(connections=100, silent=3))
    for fd in range(10, 15):
        table.accepted(fd, inode=fd * 100, now=float(fd))
    table.spoke(11)  # it said hello: never ended for being silent
    assert table.excess() == [(10, 1000)]  # 4 silent, 3 allowed: the oldest
    assert sorted(table.open) == [11, 12, 13, 14] and list(table.silent) == [12, 13, 14]
    assert table.excess() == []


def test_past_the_connection_limit_silent_ones_end_even_within_the_silent_limit() -> None:
    table = ConnectionTable(ConnectionLimits(connections=4, silent=10))
    for fd in range(6):
        table.accepted(fd, inode=fd, now=0.0)
    for fd in (0, 1, 2):
        table.spoke(fd)
    assert table.excess() == [(3, 3), (4, 4)]  # 6 open, 4 allowed; connections that spoke are never chosen
    assert len(table.open) == 4


def test_a_reused_descriptor_counts_once_and_as_new() -> None:
    table = ConnectionTable(ConnectionLimits(connections=10, silent=10))
    table.accepted(7, inode=1, now=0.0)
    table.accepted(8, inode=2, now=1.0)
    table.accepted(7, inode=3, now=2.0)  # its end went unreported (a routing id taken over)
    assert table.open == {7: 3, 8: 2} and list(table.silent) == [8, 7]
    table.closed(7)
    table.closed(99)  # unknown: nothing happens
    assert table.open == {8: 2}


def test_only_the_socket_counted_is_shut_down_and_its_descriptor_stays_open() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    try:
        inode = socket_inode(accepted.fileno())
        assert inode is not None
        assert end_silent([(accepted.fileno(), inode + 1)]) == 0  # another socket now: left alone
        client.settimeout(0.2)
        with pytest.raises(socket.timeout):
            client.recv(1)
        assert end_silent([(accepted.fileno(), inode)]) == 1
        client.settimeout(5)
        assert client.recv(1) == b""  # the peer sees the end
        assert socket_inode(accepted.fileno()) == inode  # whoever owns the descriptor closes it
    finally:
        for s in (client, accepted, server):
            s.close()


def test_audit_forgets_connections_whose_socket_is_gone() -> None:
    live = socket.socket()
    gone = socket.socket()
    gone_fd = gone.fileno()
    table = ConnectionTable(ConnectionLimits(connections=10, silent=10))
    table.accepted(live.fileno(), inode=socket_inode(live.fileno()) or 0, now=0.0)
    table.accepted(gone_fd, inode=socket_inode(gone_fd) or 0, now=0.0)
    gone.close()
    try:
        assert audit(table) == 1 and list(table.open) == [live.fileno()]
    finally:
        live.close()


@pytest.mark.parametrize(
    ("descriptors", "connections", "silent"),
    [(1024, 896, 224), (20_000, 17_500, SILENT_AT_MOST), (1 << 20, CONNECTIONS_AT_MOST, SILENT_AT_MOST), (100, 36, 9)],
)
def test_default_limits_keep_descriptors_for_other_uses(descriptors: int, connections: int, silent: int) -> None:
    assert default_limits(descriptors) == ConnectionLimits(connections, silent)


def test_a_connection_limit_over_the_descriptors_is_lowered_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    assert default_limits(1024, connections=5000, silent=10) == ConnectionLimits(896, 10)
    assert "--max-connections 5000 is more than the file descriptor limit allows" in caplog.text
    assert default_limits(1024, connections=50, silent=100) == ConnectionLimits(50, 50)
    with pytest.raises(ValueError, match="at least 1"):
        ConnectionLimits(0, 1)
