"""A stopped scheduler's ipc files (scaler.io.ipc.remove_bound_sockets, lifetime.removing_own_files): the socket
files this process bound go, with the private folder it made when that is left empty; another process's socket, or
a file put in the place of ours, stays. Real ZeroMQ sockets, in a $TMPDIR of each test's own."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from scaler.io.cpus import claim_cpu
from scaler.io.ipc import private_dir, remove_bound_sockets
from scaler.io.lifetime import removing_own_files
from scaler.io.sockets import bind_socket


@pytest.fixture
def tmp() -> Iterator[Path]:
    """This test's $TMPDIR (short: socket paths must fit in 107 bytes), with no $XDG_RUNTIME_DIR."""
    folder = Path(tempfile.mkdtemp(prefix="ipcc"))
    remove_bound_sockets()  # sockets earlier tests in this process bound (tests/unit/test_exposure.py) are not ours
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TMPDIR", str(folder))
        env.setattr(tempfile, "tempdir", str(folder))
        env.delenv("XDG_RUNTIME_DIR", raising=False)
        yield folder
    remove_bound_sockets()  # forget what a failed test left
    shutil.rmtree(folder, ignore_errors=True)


def bound_and_closed(path: Path) -> None:
    """Bind a socket at `path` as the scheduler does (io.sockets.bind_socket), then close it: its context ended
    (ZeroMQ closes a socket in its I/O thread, later; ending the context waits for that, as the scheduler's does)."""
    ctx: zmq.Context[Any] = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    bind_socket(sock, f"ipc://{path}")
    assert path.is_socket()
    ctx.destroy(linger=0)


def test_the_sockets_this_process_bound_are_removed(tmp: Path) -> None:
    first, second = tmp / "scheduler", tmp / "monitor"
    bound_and_closed(first)
    bound_and_closed(second)
    assert sorted(remove_bound_sockets()) == sorted([str(first), str(second)])
    assert not first.exists() and not second.exists()
    assert remove_bound_sockets() == []  # once


def test_a_socket_put_in_the_place_of_ours_stays(tmp: Path) -> None:
    path = tmp / "monitor"
    bound_and_closed(path)
    path.unlink()
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # another program's, live
    other.bind(str(path))
    other.listen()
    try:
        assert remove_bound_sockets() == []
        assert path.is_socket()
    finally:
        other.close()


def test_a_file_put_in_the_place_of_ours_stays(tmp: Path) -> None:
    path = tmp / "monitor"
    bound_and_closed(path)
    path.unlink()
    path.write_text("not ours")
    assert remove_bound_sockets() == []
    assert path.read_text() == "not ours"


def test_a_forked_child_leaves_the_sockets_of_its_parent(tmp: Path) -> None:
    path = tmp / "monitor"
    bound_and_closed(path)
    fork = multiprocessing.get_context("fork")
    receive, send = fork.Pipe(duplex=False)
    child = fork.Process(target=lambda: send.send(remove_bound_sockets()))
    child.start()
    assert receive.poll(10)
    assert receive.recv() == []
    child.join(10)
    assert path.is_socket()
    assert remove_bound_sockets() == [str(path)]


def test_the_private_folder_this_process_made_goes_when_left_empty(tmp: Path) -> None:
    folder, refused = private_dir()  # $TMPDIR/scaler-<uid>, made now
    assert refused is None and Path(folder).parent == tmp
    with removing_own_files():
        bound_and_closed(Path(folder) / "monitor")
    assert not Path(folder).exists()


def test_the_private_folder_stays_while_it_holds_something_else(tmp: Path) -> None:
    folder = Path(private_dir()[0])
    (folder / "another_monitor").write_text("")
    bound_and_closed(folder / "monitor")
    assert remove_bound_sockets() == [str(folder / "monitor")]
    assert sorted(p.name for p in folder.iterdir()) == ["another_monitor"]


def test_a_private_folder_made_by_someone_else_stays(tmp: Path) -> None:
    folder = tmp / f"scaler-{os.geteuid()}"
    folder.mkdir(mode=0o700)
    assert private_dir() == (str(folder), None)
    bound_and_closed(folder / "monitor")
    remove_bound_sockets()
    assert folder.is_dir() and not list(folder.iterdir())


def test_a_scheduler_binding_after_another_took_the_folder_away_gets_it_back(tmp: Path) -> None:
    """Between private_dir() and the bind, a scheduler that stopped may have removed the (empty) folder."""
    folder = Path(private_dir()[0])
    folder.rmdir()
    bound_and_closed(folder / "monitor")
    assert (folder / "monitor").is_socket()


def test_the_private_folder_made_for_cpu_claims_alone_goes_too(tmp: Path) -> None:
    """A scheduler with a monitor address of its own still made the usual folder, for its CPU claim."""
    with removing_own_files():
        assert claim_cpu(0)  # in $TMPDIR/scaler-<uid>, made now
        assert (tmp / f"scaler-{os.geteuid()}" / "cpu0.claim").exists()
        bound_and_closed(tmp / "monitor")
    assert sorted(p.name for p in tmp.iterdir()) == []
