"""Keys another user could change are refused, as OpenSSH's StrictModes does: the keys directory, its authorized_*
folders and every key file read must belong to this user or root and not be writable by group or others; so must
every directory above the keys directory, except root's sticky ones (/tmp).

Real directories and owners: the tests that hand a file to another user (nobody, uid 65534) run as root only.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import zmq

from scaler.errors import KeysError
from scaler.scheduler import gate as gate_module
from scaler.scheduler.gate import KeyGate
from scaler.security.keys import generate, load_peer_keys, load_server_keys, read_authorized

NOBODY = 65534
ME = "root" if os.geteuid() == 0 else None  # only root's name is needed: the chown tests run as root
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="handing a file to another user takes root")


@pytest.fixture()
def keys_dir(tmp_path: Path) -> Path:
    root = tmp_path / "keys"
    generate(root, clients=["alice"])
    return root


def every_load(root: Path) -> list[Callable[[], object]]:
    """Every program's way in: the scheduler's, a client's, a worker's, a monitor viewer's, a worker manager's, and
    scaler_keygen's."""
    return [
        lambda: load_server_keys(root),
        lambda: load_peer_keys(root, "client"),
        lambda: load_peer_keys(root, "worker"),
        lambda: load_peer_keys(root, "monitor"),
        lambda: load_peer_keys(root, "manager"),
        lambda: generate(root),
    ]


def refused_by_all(root: Path, pattern: str) -> None:
    for load in every_load(root):
        with pytest.raises(KeysError, match=pattern):
            load()


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


# ----------------------------------------------------------------------------------------------- the keys directory
@as_root
def test_a_keys_directory_of_another_user_is_refused_by_every_program(keys_dir: Path) -> None:
    os.chown(keys_dir, NOBODY, -1)
    refused_by_all(
        keys_dir,
        re.escape(
            f"the keys directory {keys_dir} belongs to nobody (uid {NOBODY}), not to root (mode 0700): another user "
            f"could change the keys Scaler trusts. Fix: chown root {keys_dir}, or make the keys elsewhere with "
            "scaler_keygen, in a directory only you can write to"
        ),
    )


@pytest.mark.parametrize(("bits", "whom"), [(0o777, "its group and others"), (0o770, "its group"), (0o702, "others")])
def test_a_keys_directory_writable_by_others_is_refused(keys_dir: Path, bits: int, whom: str) -> None:
    os.chmod(keys_dir, bits)
    before = snapshot(keys_dir)
    refused_by_all(
        keys_dir,
        re.escape(f"the keys directory {keys_dir} is writable by {whom} (owner ")
        + f".*mode {bits:04o}\\): another user could change the keys Scaler trusts. "
        + re.escape(f"Fix: chmod go-w {keys_dir}, or make the keys elsewhere with scaler_keygen"),
    )
    assert snapshot(keys_dir) == before


def test_keygen_refuses_to_create_keys_in_an_open_directory(tmp_path: Path) -> None:
    open_dir = tmp_path / "shared"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    with pytest.raises(KeysError, match=re.escape(f"the directory {open_dir} above the keys directory")):
        generate(open_dir / "keys")
    assert not (open_dir / "keys").exists()
    with pytest.raises(KeysError, match=re.escape(f"the keys directory {open_dir} is writable")):
        generate(open_dir)
    assert list(open_dir.iterdir()) == []


def test_keygen_still_makes_private_folders(tmp_path: Path) -> None:
    root = tmp_path / "keys"
    old = os.umask(0)
    try:
        generate(root, clients=["alice"], monitors=["ops"], managers=["slurm"])
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o7777 for p in (root, *root.iterdir()) if p.is_dir()}
    assert modes == {
        "keys": 0o700,
        "authorized_clients": 0o755,
        "authorized_workers": 0o755,
        "authorized_monitors": 0o755,
        "authorized_managers": 0o755,
        "alice": 0o700,
        "ops": 0o700,
        "slurm": 0o700,
    }
    assert (root / "manager.key_secret").stat().st_mode & 0o7777 == 0o600
    assert (root / "slurm" / "manager.key_secret").stat().st_mode & 0o7777 == 0o600
    load_server_keys(root)
    load_peer_keys(root / "ops", "monitor")
    load_peer_keys(root / "slurm", "manager")


# ----------------------------------------------------------------------------------------------- directories above
def test_a_directory_above_writable_by_others_without_the_sticky_bit_is_refused(tmp_path: Path) -> None:
    open_dir = tmp_path / "open"
    generate(open_dir / "keys")
    os.chmod(open_dir, 0o777)
    refused_by_all(
        open_dir / "keys",
        re.escape(
            f"the directory {open_dir} above the keys directory {open_dir / 'keys'} is writable by its group and "
            "others (owner "
        )
        + ".*mode 0777\\)"
        + re.escape(f": another user could change the keys Scaler trusts. Fix: chmod go-w {open_dir}, or make"),
    )


@as_root
def test_a_directory_above_of_another_user_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    generate(theirs / "keys")
    os.chown(theirs, NOBODY, -1)
    refused_by_all(theirs / "keys", re.escape(f"the directory {theirs} above the keys directory {theirs / 'keys'}"))


@as_root
def test_roots_sticky_directory_like_tmp_is_accepted(tmp_path: Path) -> None:
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    generate(shared / "keys")
    for load in every_load(shared / "keys"):
        load()
    os.chown(shared, NOBODY, -1)  # sticky, but not root's: anyone's directory
    refused_by_all(shared / "keys", re.escape(f"the directory {shared} above the keys directory"))


def test_a_symlinked_keys_directory_is_checked_where_it_points(tmp_path: Path) -> None:
    open_dir = tmp_path / "open"
    generate(open_dir / "keys")
    (tmp_path / "link").symlink_to(open_dir / "keys")
    load_server_keys(tmp_path / "link")
    os.chmod(open_dir, 0o777)
    with pytest.raises(KeysError, match=re.escape(f"the directory {open_dir} above the keys directory")):
        load_server_keys(tmp_path / "link")


# ----------------------------------------------------------------------------------------------- folders and files
@as_root
def test_a_secret_of_another_user_is_refused(keys_dir: Path) -> None:
    secret = keys_dir / "client.key_secret"
    os.chown(secret, NOBODY, -1)
    with pytest.raises(KeysError, match=re.escape(f"the key file {secret} belongs to nobody (uid {NOBODY})")):
        load_peer_keys(keys_dir, "client")
    load_peer_keys(keys_dir, "worker")


def test_a_key_file_writable_by_others_is_refused(keys_dir: Path) -> None:
    for name in ("scheduler.key", "scheduler.key_secret"):
        os.chmod(keys_dir / name, 0o666)
    with pytest.raises(KeysError, match=re.escape(f"the key file {keys_dir / 'scheduler.key_secret'} is writable")):
        load_server_keys(keys_dir)
    with pytest.raises(KeysError, match=re.escape(f"the key file {keys_dir / 'scheduler.key'} is writable")):
        load_peer_keys(keys_dir, "client")


@pytest.mark.parametrize("folder_name", ["authorized_monitors", "authorized_managers"])
def test_an_authorized_folder_writable_by_others_is_refused(keys_dir: Path, folder_name: str) -> None:
    folder = keys_dir / folder_name
    os.chmod(folder, 0o777)
    with pytest.raises(KeysError, match=re.escape(f"the folder {folder} is writable by its group and others")):
        read_authorized(keys_dir)
    with pytest.raises(KeysError, match=re.escape(f"the folder {folder} is writable")):
        load_server_keys(keys_dir)
    load_peer_keys(keys_dir, "client")  # a client reads no authorized folder
    load_peer_keys(keys_dir, "manager")  # nor does a worker manager


@pytest.mark.parametrize("bits", [0o777, 0o702])
def test_a_manager_secret_writable_by_others_is_refused(keys_dir: Path, bits: int) -> None:
    secret = keys_dir / "manager.key_secret"
    os.chmod(secret, bits)
    with pytest.raises(KeysError, match=re.escape(f"the key file {secret} is writable")):
        load_peer_keys(keys_dir, "manager")
    load_peer_keys(keys_dir, "worker")  # the other roles' keys are not concerned


def test_a_private_directory_made_before_manager_keys_passes_the_checks(keys_dir: Path) -> None:
    """No authorized_managers/ (an old directory) is not a folder another user could change: nothing is refused."""
    (keys_dir / "manager.key_secret").unlink()
    for path in (keys_dir / "authorized_managers").iterdir():
        path.unlink()
    (keys_dir / "authorized_managers").rmdir()
    load_server_keys(keys_dir)
    assert read_authorized(keys_dir)[1] == []
    for role in ("client", "worker", "monitor"):
        load_peer_keys(keys_dir, role)


def _intruder(keys_dir: Path, tmp_path: Path) -> tuple[Path, bytes]:
    """What the other user of a shared directory did: their own key, dropped into authorized_clients/."""
    generate(tmp_path / "intruder")
    dropped = keys_dir / "authorized_clients" / "intruder.key"
    dropped.write_bytes((tmp_path / "intruder" / "authorized_clients" / "client.key").read_bytes())
    os.chown(dropped, NOBODY, -1)
    return dropped, load_peer_keys(tmp_path / "intruder", "client").pair.public


@as_root
def test_a_key_file_of_another_user_is_refused_at_start(keys_dir: Path, tmp_path: Path) -> None:
    server = load_server_keys(keys_dir)
    dropped, _ = _intruder(keys_dir, tmp_path)
    message = re.escape(f"the key file {dropped} belongs to nobody (uid {NOBODY})")
    with pytest.raises(KeysError, match=message):
        load_server_keys(keys_dir)
    gate = KeyGate(zmq.Context.instance(), server)
    with pytest.raises(KeysError, match=message):
        gate.start()
    assert gate.sock is None


@as_root
def test_a_key_file_of_another_user_keeps_the_last_keys_on_reload(
    keys_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gate = KeyGate(zmq.Context.instance(), load_server_keys(keys_dir))
    gate.reload(force=True)
    before = dict(gate.by_user)
    caplog.set_level(logging.INFO, logger=gate_module.__name__)
    dropped, intruder = _intruder(keys_dir, tmp_path)
    (keys_dir / "authorized_clients" / "alice.key").unlink()  # a real change at the same time: not half-applied
    for _ in range(5):
        assert gate.reload() == frozenset()
    assert gate.by_user == before and gate.key_of(intruder.decode()) is None
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, errors  # rate-limited
    assert errors[0].startswith(f"Scheduler: refused the authorized keys: the key file {dropped} belongs to nobody")
    assert errors[0].endswith("; keeping the 5 keys loaded and trying again about every second")

    dropped.unlink()
    caplog.clear()
    revoked = gate.reload()
    assert revoked == frozenset({load_peer_keys(keys_dir / "alice", "client").pair.public})
    assert any("could read the authorized keys again" in r.getMessage() for r in caplog.records), caplog.text
