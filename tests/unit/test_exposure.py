"""Small pieces of the security shell: which addresses only this machine can reach, ipc paths claimed safely, and
sizes given on the command line. Real files and sockets; no mocks."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from scaler.io.addresses import is_loopback
from scaler.io.ipc import check_private, claim, ipc_path, private_files


@pytest.mark.parametrize(
    "address",
    ["tcp://127.0.0.1:8516", "tcp://127.8.9.10:1", "tcp://localhost:2345", "tcp://[::1]:2345", "ipc:///tmp/x"],
)
def test_loopback_addresses(address: str) -> None:
    assert is_loopback(address)


@pytest.mark.parametrize("address", ["tcp://0.0.0.0:8516", "tcp://*:8516", "tcp://10.1.2.3:1", "tcp://[::]:2345"])
def test_network_addresses(address: str) -> None:
    assert not is_loopback(address)


def test_ipc_path_of_addresses() -> None:
    assert ipc_path("ipc:///tmp/a_monitor") == "/tmp/a_monitor"
    assert ipc_path("ipc://@abstract") is None
    assert ipc_path("tcp://127.0.0.1:1") is None


def test_claim_leaves_a_free_path_alone(tmp_path: Path) -> None:
    claim(str(tmp_path / "nothing-here"))


def test_claim_removes_a_stale_socket_of_ours(tmp_path: Path) -> None:
    path = str(tmp_path / "stale")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.close()  # the file stays; nobody listens
    claim(path)
    assert not os.path.exists(path)


def test_claim_refuses_a_live_socket(tmp_path: Path) -> None:
    path = str(tmp_path / "live")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(1)
    try:
        with pytest.raises(OSError, match="is in use"):
            claim(path)
        assert os.path.exists(path)
    finally:
        listener.close()


def test_claim_refuses_a_file_that_is_not_a_socket(tmp_path: Path) -> None:
    path = tmp_path / "plain"
    path.write_text("mine")
    with pytest.raises(OSError, match="is not a socket"):
        claim(str(path))
    assert path.read_text() == "mine"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_claim_refuses_another_users_file(tmp_path: Path) -> None:
    path = tmp_path / "theirs"
    path.write_text("x")
    os.chown(path, 65534, 65534)
    with pytest.raises(OSError, match=r"belongs to .*uid 65534"):
        claim(str(path))


def test_sockets_bound_in_private_files_are_closed_to_others(tmp_path: Path) -> None:
    path = str(tmp_path / "private")
    old = os.umask(0)
    try:
        with private_files():
            listener = socket.socket(socket.AF_UNIX)
            listener.bind(path)
        assert os.umask(0) == 0  # the umask came back
    finally:
        os.umask(old)
    try:
        assert stat.S_IMODE(os.lstat(path).st_mode) & 0o077 == 0
        os.chmod(path, 0o666)
        check_private(path)
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    finally:
        listener.close()


def test_a_child_left_running_is_found_described_and_killed() -> None:
    """What tests/conftest.py's _no_orphans does after every test: it can fail."""
    import subprocess
    import sys

    import psutil

    from tests.helpers import my_children, stop_children_born_since

    before = {p.pid for p in my_children()}
    assert stop_children_born_since(before, timeout=0.1) == []
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        leftovers = stop_children_born_since(before, timeout=0.2)
        assert len(leftovers) == 1 and leftovers[0].startswith(f"{child.pid} ") and "sleep(60)" in leftovers[0]
        assert not psutil.pid_exists(child.pid)  # killed (and reaped)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(5)
