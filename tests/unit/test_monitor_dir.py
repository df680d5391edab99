"""The default monitor socket lives in a folder private to its user, and find_monitor maps the documents' address to
it; both on real folders, files and sockets. Each test points $TMPDIR (tempfile.tempdir) and $XDG_RUNTIME_DIR at
folders of its own, so that the real /tmp/scaler-<uid> is never touched."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from scaler.io.addresses import default_monitor_address, documented_monitor_address
from scaler.io.ipc import find_monitor, private_dir

UID = os.geteuid()
NOBODY = 65534
as_root = pytest.mark.skipif(UID != 0, reason="only root can make a file that belongs to another user (os.chown)")


@pytest.fixture
def tmp() -> Iterator[Path]:
    """This test's $TMPDIR (short: socket paths must fit in 107 bytes), with no $XDG_RUNTIME_DIR."""
    folder = Path(tempfile.mkdtemp(prefix="mdir"))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TMPDIR", str(folder))
        env.setattr(tempfile, "tempdir", str(folder))
        env.delenv("XDG_RUNTIME_DIR", raising=False)
        yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def xdg(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private $XDG_RUNTIME_DIR, as systemd makes it (0700, this user's)."""
    folder = tmp / "run"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    return folder


def listening(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen()
    return sock


def stale(path: Path) -> None:
    """A socket file nobody listens on: what a killed scheduler leaves behind."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()


def assert_private(folder: Path) -> None:
    info = os.lstat(folder)
    assert stat.S_ISDIR(info.st_mode) and info.st_uid == UID, info
    assert stat.S_IMODE(info.st_mode) == 0o700, oct(info.st_mode)


def fresh_dirs(tmp: Path) -> list[Path]:
    return sorted(tmp.glob(f"scaler-{UID}-*"))


# ----------------------------------------------------------------------------------------------- the default address
def test_the_documented_address_is_the_seed_form() -> None:
    assert documented_monitor_address("tcp://127.0.0.1:2345") == "ipc:///tmp/127.0.0.1_2345_monitor"
    assert documented_monitor_address("tcp://0.0.0.0:8516") == "ipc:///tmp/0.0.0.0_8516_monitor"
    assert documented_monitor_address("ipc:///x/sched") == "ipc:///x/sched_monitor"


def test_the_default_address_is_in_a_folder_of_this_user_only(tmp: Path, caplog: pytest.LogCaptureFixture) -> None:
    address = default_monitor_address("tcp://127.0.0.1:2345")
    assert address == f"ipc://{tmp}/scaler-{UID}/127.0.0.1_2345_monitor"
    assert_private(tmp / f"scaler-{UID}")
    assert default_monitor_address("tcp://127.0.0.1:2346") == f"ipc://{tmp}/scaler-{UID}/127.0.0.1_2346_monitor"
    assert not caplog.records  # the folder of an earlier call is ours: used again, nothing to say


def test_the_folder_is_made_0700_whatever_the_umask(tmp: Path) -> None:
    old = os.umask(0o277)  # one that takes the owner's write bit
    try:
        folder, refused = private_dir()
    finally:
        os.umask(old)
    assert (folder, refused) == (str(tmp / f"scaler-{UID}"), None)
    assert_private(Path(folder))


def test_an_ipc_scheduler_keeps_its_monitor_next_to_its_own_socket(tmp: Path) -> None:
    assert default_monitor_address("ipc:///x/sched") == "ipc:///x/sched_monitor"  # a place its user chose
    assert default_monitor_address("inproc://sched") == "inproc://sched_monitor"
    assert not (tmp / f"scaler-{UID}").exists()


def test_a_private_xdg_runtime_dir_is_preferred(xdg: Path, tmp: Path) -> None:
    assert default_monitor_address("tcp://127.0.0.1:2345") == f"ipc://{xdg}/scaler/127.0.0.1_2345_monitor"
    assert_private(xdg / "scaler")
    assert not (tmp / f"scaler-{UID}").exists()


@pytest.mark.parametrize("how", ["open to others", "a symlink", "missing", "a file"])
def test_an_xdg_runtime_dir_that_is_not_private_is_not_used(xdg: Path, tmp: Path, how: str) -> None:
    if how == "open to others":
        xdg.chmod(0o755)
    elif how == "a symlink":
        real = tmp / "real"
        xdg.rename(real)
        xdg.symlink_to(real)
    elif how == "missing":
        xdg.rmdir()
    else:
        xdg.rmdir()
        xdg.write_text("")
    assert default_monitor_address("tcp://127.0.0.1:2345") == f"ipc://{tmp}/scaler-{UID}/127.0.0.1_2345_monitor"


def squat(folder: Path, how: str) -> str:
    """Make `folder` something that is not this user's private folder; returns what the warning must say of it."""
    if how == "symlink":
        target = folder.parent / "elsewhere"
        target.mkdir(mode=0o700)
        folder.symlink_to(target)
        return "is a symbolic link"
    if how == "mode 0777":
        folder.mkdir()
        folder.chmod(0o777)
        return "is open to other users (mode 0777"
    if how == "a file":
        folder.write_text("")
        return "is not a directory"
    folder.mkdir(mode=0o700)
    os.chown(folder, NOBODY, NOBODY)
    return f"belongs to user nobody (uid {NOBODY}), not to this user"


@pytest.mark.parametrize("how", ["symlink", "mode 0777", "a file", pytest.param("nobody", marks=as_root)])
def test_a_tmp_folder_that_is_not_ours_is_left_alone_for_a_fresh_one(
    tmp: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    expected = tmp / f"scaler-{UID}"
    reason = squat(expected, how)
    before = os.lstat(expected)
    with caplog.at_level(logging.WARNING):
        address = default_monitor_address("tcp://127.0.0.1:2345")
    [fresh] = fresh_dirs(tmp)
    assert address == f"ipc://{fresh}/127.0.0.1_2345_monitor"
    assert_private(fresh)
    after = os.lstat(expected)  # neither taken over nor changed
    assert (after.st_uid, after.st_mode, after.st_ino) == (before.st_uid, before.st_mode, before.st_ino)
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    text = warning.getMessage()
    assert f"{expected} {reason}" in text, text
    assert f"the monitor address is {address}" in text, text


def test_find_monitor_leaves_tcp_and_missing_paths_alone(tmp: Path) -> None:
    assert find_monitor("tcp://127.0.0.1:2345") == "tcp://127.0.0.1:2345"
    assert find_monitor(f"ipc://{tmp}/nothing_here") == f"ipc://{tmp}/nothing_here"
    assert find_monitor("inproc://x") == "inproc://x"


def test_find_monitor_takes_a_socket_of_ours_as_it_is(tmp: Path) -> None:
    path = tmp / "mine_monitor"
    with listening(path):
        assert find_monitor(f"ipc://{path}") == f"ipc://{path}"


def seed(name: str) -> str:
    return f"ipc:///tmp/{name}"


def unique_name() -> str:
    """A socket name no real scheduler uses (the real /tmp holds none of it)."""
    return f"127.0.0.1_{os.getpid()}{os.urandom(3).hex()}_monitor"


def test_find_monitor_maps_the_seed_form_to_the_private_folder(tmp: Path) -> None:
    name = unique_name()
    folder, _ = private_dir()
    with listening(Path(folder) / name):
        assert find_monitor(seed(name)) == f"ipc://{folder}/{name}"
        assert find_monitor(f"ipc://{tmp}/{name}") == f"ipc://{folder}/{name}"  # $TMPDIR/NAME is the seed form too


def test_find_monitor_maps_the_seed_form_to_the_xdg_folder(xdg: Path, tmp: Path) -> None:
    name = unique_name()
    (tmp / f"scaler-{UID}").mkdir(mode=0o700)
    stale(tmp / f"scaler-{UID}" / name)  # left by a scheduler started without $XDG_RUNTIME_DIR, killed since
    folder, _ = private_dir()
    assert folder == str(xdg / "scaler")
    with listening(xdg / "scaler" / name):
        assert find_monitor(seed(name)) == f"ipc://{xdg}/scaler/{name}"
    assert find_monitor(seed(name)) == f"ipc://{xdg}/scaler/{name}"  # none listens: the first found


def test_find_monitor_prefers_the_socket_a_scheduler_listens_on(xdg: Path, tmp: Path) -> None:
    name = unique_name()
    private_dir()
    stale(xdg / "scaler" / name)
    (tmp / f"scaler-{UID}").mkdir(mode=0o700)
    with listening(tmp / f"scaler-{UID}" / name):
        assert find_monitor(seed(name)) == f"ipc://{tmp}/scaler-{UID}/{name}"


@pytest.mark.parametrize("how", ["symlink", "mode 0777", pytest.param("nobody", marks=as_root)])
def test_find_monitor_maps_the_seed_form_to_the_fresh_folder_and_never_to_a_squatted_one(tmp: Path, how: str) -> None:
    name = unique_name()
    expected = tmp / f"scaler-{UID}"
    squat(expected, how)
    with listening(expected / name):  # another user's socket in the folder they made
        folder, refused = private_dir()
        assert refused is not None and Path(folder).parent == tmp and Path(folder) != expected
        with listening(Path(folder) / name):
            assert find_monitor(seed(name)) == f"ipc://{folder}/{name}"


def test_find_monitor_of_the_seed_form_with_no_scheduler_yet_waits_in_the_private_folder(tmp: Path, xdg: Path) -> None:
    name = unique_name()
    assert find_monitor(seed(name)) == f"ipc://{xdg}/scaler/{name}"  # where this user's scheduler will bind it


def test_find_monitor_of_the_seed_form_falls_back_to_a_socket_of_ours_in_tmp(tmp: Path) -> None:
    name = unique_name()
    with listening(tmp / name):  # a scheduler started with --monitor-address ipc:///tmp/NAME, say
        assert find_monitor(f"ipc://{tmp}/{name}") == f"ipc://{tmp}/{name}"


def test_find_monitor_refuses_a_path_that_is_not_a_socket(tmp: Path) -> None:
    path = tmp / "plain_monitor"
    path.write_text("")
    with pytest.raises(ValueError, match=f"ipc://{path} is not a socket"):
        find_monitor(f"ipc://{path}")


@as_root
def test_find_monitor_refuses_a_socket_of_another_user(tmp: Path) -> None:
    path = tmp / "their_monitor"
    with listening(path):
        os.chown(path, NOBODY, NOBODY)
        with pytest.raises(ValueError) as caught:
            find_monitor(f"ipc://{path}")
        assert str(caught.value) == (
            f"ipc://{path} belongs to user nobody (uid {NOBODY}), not to you: it is not your scheduler's monitor "
            "(another user may serve a false status); the scheduler logs its monitor address at start"
        )
        name = unique_name()
        os.rename(path, tmp / name)  # the seed form, with no socket of ours in a private folder
        with pytest.raises(ValueError, match="belongs to user nobody"):
            find_monitor(f"ipc://{tmp}/{name}")


def test_find_monitor_of_the_seed_form_prefers_a_live_tmp_socket_to_a_stale_private_one(tmp: Path) -> None:
    name = unique_name()
    folder, _ = private_dir()
    stale(Path(folder) / name)  # a scheduler of ours with the default address, killed since
    with listening(tmp / name):  # one started since with --monitor-address ipc:///tmp/NAME
        assert find_monitor(f"ipc://{tmp}/{name}") == f"ipc://{tmp}/{name}"
    assert find_monitor(f"ipc://{tmp}/{name}") == f"ipc://{folder}/{name}"  # none listens: the private one


def test_find_monitor_does_not_follow_a_symlink(tmp: Path) -> None:
    name = unique_name()
    with listening(tmp / "real_monitor"):
        (tmp / "link_monitor").symlink_to(tmp / "real_monitor")
        with pytest.raises(ValueError, match="is not a socket"):
            find_monitor(f"ipc://{tmp}/link_monitor")
    (tmp / name).symlink_to(tmp / "nowhere")  # dangling: another user could make its target later
    with pytest.raises(ValueError, match="is not a socket"):
        find_monitor(f"ipc://{tmp}/{name}")
