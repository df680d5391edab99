"""Reading the authorized keys fails safe: a folder or key file that cannot be read now (descriptors used up, no
permission, a symlink loop...) changes nobody's admission; only a real removal or a changed content does.

Real key directories made by scaler_keygen, real descriptors, real permissions: the process's own descriptor limit
is lowered and used up (then given back), and when the suite runs as root, root's power to ignore file permissions
is dropped from this thread for the length of a test (then given back), so chmod 000 means what it says.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import re
import resource
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.utils.z85

from scaler.errors import KeysError
from scaler.io.curve import MAIN_DOMAIN
from scaler.scheduler import gate as gate_module
from scaler.scheduler.gate import KeyGate
from scaler.security.keys import (
    authorized_fingerprint,
    load_peer_keys,
    load_server_keys,
    read_authorized,
)
from scaler.security.ownership import KeysUnreadable

KEYGEN = Path(sys.executable).parent / "scaler_keygen"
pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc/self/fd")


# ----------------------------------------------------------------------------------------------- the real thing
@contextlib.contextmanager
def descriptors_used_up() -> Iterator[int]:
    """This process cannot open one more descriptor (EMFILE) until the block ends: its soft RLIMIT_NOFILE is lowered
    just above the highest descriptor open, and /dev/null is opened until the kernel refuses. Everything is given
    back on the way out, before any failure is reported."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    highest = max(int(name) for name in os.listdir("/proc/self/fd"))
    opened: list[int] = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(highest + 16, hard), hard))
    try:
        while True:
            try:
                opened.append(os.open(os.devnull, os.O_RDONLY))
            except OSError as exc:
                assert exc.errno == errno.EMFILE, exc
                break
        yield len(opened)
    finally:
        for descriptor in opened:
            os.close(descriptor)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_CAPABILITY_V3 = 0x20080522
_DAC_CAPABILITIES = (1 << 1) | (1 << 2)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH


@contextlib.contextmanager
def permissions_enforced() -> Iterator[None]:
    """File permissions apply to this thread in the block, root or not. Root ignores them through two capabilities
    (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH): they leave this thread's effective set (capset(2)) and come back at
    the end; they stay permitted, so taking them back needs no privilege."""
    if os.geteuid() != 0:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    header, data = _CapHeader(_CAPABILITY_V3, 0), (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        pytest.skip(f"capget failed (errno {ctypes.get_errno()}): cannot make root obey file permissions")
    saved = data[0].effective
    data[0].effective = saved & ~_DAC_CAPABILITIES
    if libc.capset(ctypes.byref(header), data) != 0:
        pytest.skip(f"capset failed (errno {ctypes.get_errno()}): cannot make root obey file permissions")
    try:
        yield
    finally:
        data[0].effective = saved
        assert libc.capset(ctypes.byref(header), data) == 0, ctypes.get_errno()


@contextlib.contextmanager
def mode(path: Path, new: int) -> Iterator[None]:
    old = path.stat().st_mode & 0o7777
    os.chmod(path, new)
    try:
        yield
    finally:
        os.chmod(path, old)


# ----------------------------------------------------------------------------------------------- fixtures
@pytest.fixture()
def keys_dir(tmp_path: Path) -> Path:
    """A keys directory as a user makes it: the scaler_keygen program, one named client (alice)."""
    root = tmp_path / "keys"
    done = subprocess.run(
        [str(KEYGEN), str(root), "--client", "alice"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return root


@pytest.fixture()
def gate(keys_dir: Path) -> KeyGate:
    g = KeyGate(zmq.Context.instance(), load_server_keys(keys_dir))
    g.reload(force=True)
    return g


def public(keys_dir: Path, role: str) -> bytes:
    return load_peer_keys(keys_dir, role).pair.public


def admitted_on_main(gate: KeyGate, public_z85: bytes) -> bool:
    credentials = zmq.utils.z85.decode(public_z85)
    request = [b"envelope", b"", b"1.0", b"1", MAIN_DOMAIN, b"10.0.0.1", b"", b"CURVE", credentials]
    reply = gate.answer(request)
    assert reply is not None
    return reply[4] == b"200"


def table(gate: KeyGate) -> dict[str, object]:
    return {**gate.by_user, **{user: gate.monitor_name(user) for user in gate.monitors}}


def messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno == level]


# ----------------------------------------------------------------------------------------------- descriptors
def test_used_up_descriptors_keep_every_key_and_warn_once(
    gate: KeyGate, keys_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What an attacker's 1,100 stalled connections did: the folders cannot be listed (EMFILE). Nobody is revoked,
    the gate still admits every key, and it says so once, not every second."""
    before = table(gate)
    assert len(before) == 5  # client, alice, worker, monitor, manager
    worker = public(keys_dir, "worker")
    caplog.set_level(logging.INFO, logger=gate_module.__name__)
    with descriptors_used_up():
        forced = gate.reload(force=True)
        again = [gate.reload() for _ in range(5)]  # the scheduler retries about every second
        still_admitted = admitted_on_main(gate, worker)
    assert forced == frozenset() and again == [frozenset()] * 5
    assert table(gate) == before and still_admitted
    (warning,) = messages(caplog, logging.WARNING)
    assert warning == (
        f"Scheduler: could not read the authorized keys: {keys_dir / 'authorized_clients'} cannot be listed "
        "(Too many open files); keeping the 5 keys loaded and trying again about every second"
    )
    assert messages(caplog, logging.ERROR) == []

    # descriptors back: the next look reads the folders again though nothing changed in them, and says so
    caplog.clear()
    assert gate.reload() == frozenset()
    assert table(gate) == before
    (recovered,) = messages(caplog, logging.WARNING)
    assert recovered.startswith("Scheduler: could read the authorized keys again (after 6 failed tries over "), (
        recovered
    )

    # and a real change is picked up: a removed key file revokes its key
    (keys_dir / "authorized_clients" / "alice.key").unlink()
    assert gate.reload() == frozenset({public(keys_dir / "alice", "client")})
    assert len(table(gate)) == 4


def test_used_up_descriptors_are_unreadable_keys_not_missing_ones(keys_dir: Path) -> None:
    with descriptors_used_up():
        with pytest.raises(KeysUnreadable) as listing:
            read_authorized(keys_dir)
        with pytest.raises(KeysUnreadable) as fingerprint:
            authorized_fingerprint(keys_dir)
    for caught in (listing.value, fingerprint.value):
        assert isinstance(caught, OSError) and caught.errno == errno.EMFILE
        assert str(caught) == f"{keys_dir / 'authorized_clients'} cannot be listed (Too many open files)"


def test_the_fingerprint_does_not_change_while_it_cannot_be_taken(keys_dir: Path) -> None:
    """Before, an unreadable folder had a fingerprint of its own, which looked like a change."""
    first = authorized_fingerprint(keys_dir)
    with descriptors_used_up(), pytest.raises(KeysUnreadable):
        authorized_fingerprint(keys_dir)
    assert authorized_fingerprint(keys_dir) == first


# ----------------------------------------------------------------------------------------------- permissions
@pytest.mark.parametrize("role", ["worker", "manager"])
def test_a_folder_without_read_permission_keeps_every_key(
    gate: KeyGate, keys_dir: Path, caplog: pytest.LogCaptureFixture, role: str
) -> None:
    before = table(gate)
    caplog.set_level(logging.INFO, logger=gate_module.__name__)
    folder = keys_dir / f"authorized_{role}s"
    with permissions_enforced(), mode(folder, 0o000):
        assert gate.reload(force=True) == frozenset()
        with pytest.raises(KeysUnreadable) as caught:
            read_authorized(keys_dir)
    assert caught.value.errno == errno.EACCES
    assert table(gate) == before
    (warning,) = messages(caplog, logging.WARNING)
    assert f"could not read the authorized keys: {folder} cannot be" in warning and "(Permission denied)" in warning
    assert "keeping the 5 keys loaded" in warning
    (folder / f"{role}.key").unlink()
    assert gate.reload() == frozenset({public(keys_dir, role)})


def test_a_key_file_without_read_permission_keeps_every_key(
    gate: KeyGate, keys_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    before = table(gate)
    caplog.set_level(logging.INFO, logger=gate_module.__name__)
    key_file = keys_dir / "authorized_clients" / "alice.key"
    with permissions_enforced(), mode(key_file, 0o000):
        assert gate.reload(force=True) == frozenset()
    assert table(gate) == before
    (warning,) = messages(caplog, logging.WARNING)
    assert f"{key_file} cannot be read (Permission denied)" in warning, warning


def test_a_symlink_loop_is_unreadable_not_removed(gate: KeyGate, keys_dir: Path) -> None:
    """ELOOP, any error but 'not there': no change in who is admitted."""
    before = table(gate)
    folder = keys_dir / "authorized_clients"
    shutil.rmtree(folder)
    folder.symlink_to(folder)
    assert gate.reload() == frozenset()
    assert table(gate) == before
    with pytest.raises(KeysUnreadable) as caught:
        read_authorized(keys_dir)
    assert caught.value.errno == errno.ELOOP


def test_at_start_an_unreadable_folder_is_an_error_naming_it(keys_dir: Path) -> None:
    server = load_server_keys(keys_dir)
    folder = keys_dir / "authorized_clients"
    with permissions_enforced(), mode(folder, 0o000):
        gate = KeyGate(zmq.Context.instance(), server)
        with pytest.raises(KeysError, match=f"{re.escape(str(folder))} cannot be .*Permission denied"):
            gate.start()
        assert gate.sock is None  # it did not start half-blind
        with pytest.raises(KeysError, match=f"{re.escape(str(folder))} cannot be .*Permission denied"):
            load_server_keys(keys_dir)


# ----------------------------------------------------------------------------------------------- real removals
def test_a_removed_folder_admits_nobody_from_it(gate: KeyGate, keys_dir: Path) -> None:
    shutil.rmtree(keys_dir / "authorized_clients")
    assert gate.reload() == frozenset({public(keys_dir, "client"), public(keys_dir / "alice", "client")})
    assert admitted_on_main(gate, public(keys_dir, "worker"))
    assert not admitted_on_main(gate, public(keys_dir, "client"))


def test_a_folder_replaced_by_a_file_admits_nobody_from_it(gate: KeyGate, keys_dir: Path) -> None:
    shutil.rmtree(keys_dir / "authorized_workers")
    (keys_dir / "authorized_workers").write_text("not a folder")
    assert gate.reload() == frozenset({public(keys_dir, "worker")})
    problems = read_authorized(keys_dir)[1]
    assert problems == [f"{keys_dir / 'authorized_workers'} is not a folder: no worker is admitted from it"]


def test_a_removed_managers_folder_revokes_the_managers_only(gate: KeyGate, keys_dir: Path) -> None:
    """What a directory made before manager keys looks like: no authorized_managers/. Not there is not unreadable:
    it admits no manager, and nothing else changes."""
    manager = public(keys_dir, "manager")
    shutil.rmtree(keys_dir / "authorized_managers")
    assert gate.reload() == frozenset({manager})
    assert not admitted_on_main(gate, manager)
    assert admitted_on_main(gate, public(keys_dir, "worker")) and admitted_on_main(gate, public(keys_dir, "client"))
    assert len(table(gate)) == 4
    assert read_authorized(keys_dir)[1] == []


def test_a_directory_made_before_manager_keys_starts_the_gate(keys_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An old directory (no manager.key_secret, no authorized_managers/) is not a broken one: the scheduler starts
    with it, admits its other keys, and logs no warning or error."""
    (keys_dir / "manager.key_secret").unlink()
    shutil.rmtree(keys_dir / "authorized_managers")
    caplog.set_level(logging.INFO, logger=gate_module.__name__)
    ctx: zmq.Context[Any] = zmq.Context()
    gate = KeyGate(ctx, load_server_keys(keys_dir))
    try:
        gate.start()
        assert gate.sock is not None
        assert len(table(gate)) == 4  # client, alice, worker, monitor
        assert admitted_on_main(gate, public(keys_dir, "worker"))
        assert gate.reload() == frozenset()  # stable: the missing folder is not a change every second
        assert messages(caplog, logging.WARNING) == [] and messages(caplog, logging.ERROR) == []
    finally:
        gate.close()
        ctx.destroy(linger=0)


def test_a_removed_keys_directory_admits_nobody(gate: KeyGate, keys_dir: Path, tmp_path: Path) -> None:
    keys_dir.rename(tmp_path / "moved-away")
    assert len(gate.reload()) == 4
    assert table(gate) == {}


def test_a_bad_key_file_is_still_skipped_with_a_problem(
    gate: KeyGate, keys_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=gate_module.__name__)
    bad = keys_dir / "authorized_clients" / "alice.key"
    bad.write_text("not a key\n")
    assert gate.reload() == frozenset({public(keys_dir / "alice", "client")})
    assert any(str(bad) in line and "skipped" in line for line in messages(caplog, logging.WARNING)), caplog.text
