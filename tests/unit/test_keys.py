"""The key directory: what generate() writes (names, modes, formats), and what each role reads back from it."""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
import zmq.auth

from scaler.errors import KeysError
from scaler.security import keys
from scaler.security.keys import KeyPair, generate, load_peer_keys, load_server_keys, read_authorized, resolve

DEFAULT_FILES = {
    "scheduler.key": 0o644,
    "scheduler.key_secret": 0o600,
    "client.key_secret": 0o600,
    "worker.key_secret": 0o600,
    "monitor.key_secret": 0o600,
    "manager.key_secret": 0o600,
    "authorized_clients/client.key": 0o644,
    "authorized_workers/worker.key": 0o644,
    "authorized_monitors/monitor.key": 0o644,
    "authorized_managers/manager.key": 0o644,
}
MANAGER_FILES = ("manager.key_secret", "authorized_managers/manager.key")


def snapshot(root: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file under root: its bytes, mtime_ns and mode."""
    files = {}
    for path in root.rglob("*"):
        if path.is_file():
            st = path.stat()
            files[path.relative_to(root).as_posix()] = (path.read_bytes(), st.st_mtime_ns, stat.S_IMODE(st.st_mode))
    return files


def public_of(path: Path) -> bytes:
    return zmq.auth.load_certificate(path)[0]


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    directory = tmp_path / "keys"
    generate(directory)
    return directory


@pytest.fixture()
def umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


# ---- generate --------------------------------------------------------------------------------------------------------


def test_generate_creates_every_file_with_its_mode(root: Path) -> None:
    files = snapshot(root)
    assert {name: mode for name, (_, _, mode) in files.items()} == DEFAULT_FILES
    for name, mode in DEFAULT_FILES.items():
        public, secret = zmq.auth.load_certificate(root / name)
        assert len(public) == 40
        if mode == 0o600:
            assert secret is not None and zmq.curve_public(secret) == public
        else:
            assert secret is None


def test_public_files_match_their_secrets_and_every_key_differs(root: Path) -> None:
    scheduler = public_of(root / "scheduler.key_secret")
    client = public_of(root / "client.key_secret")
    worker = public_of(root / "worker.key_secret")
    monitor = public_of(root / "monitor.key_secret")
    manager = public_of(root / "manager.key_secret")
    assert public_of(root / "scheduler.key") == scheduler
    assert public_of(root / "authorized_clients" / "client.key") == client
    assert public_of(root / "authorized_workers" / "worker.key") == worker
    assert public_of(root / "authorized_monitors" / "monitor.key") == monitor
    assert public_of(root / "authorized_managers" / "manager.key") == manager
    assert len({scheduler, client, worker, monitor, manager}) == 5


def test_files_say_their_role_and_name(tmp_path: Path) -> None:
    generate(tmp_path, workers=["gpu1"])
    text = (tmp_path / "gpu1" / "worker.key_secret").read_text()
    assert text.startswith("#   ****  Generated on ")
    assert 'name = "gpu1"' in text and 'role = "worker"' in text and "secret-key = " in text
    assert 'role = "scheduler"' in (tmp_path / "scheduler.key").read_text()


@pytest.mark.parametrize("mask", [0o077, 0o000])
def test_modes_do_not_depend_on_the_umask(tmp_path: Path, umask: None, mask: int) -> None:
    os.umask(mask)
    generate(tmp_path / "keys")
    modes = {name: mode for name, (_, _, mode) in snapshot(tmp_path / "keys").items()}
    assert modes == DEFAULT_FILES


def test_a_second_generate_changes_nothing(root: Path) -> None:
    before = snapshot(root)
    report = generate(root)
    assert snapshot(root) == before
    assert report[0].startswith("Nothing to create")


def test_a_named_client_added_later_creates_only_its_files(root: Path) -> None:
    before = snapshot(root)
    generate(root, clients=["alice"])
    after = snapshot(root)
    assert {name: after[name] for name in before} == before
    assert set(after) - set(before) == {
        "authorized_clients/alice.key",
        "alice/scheduler.key",
        "alice/client.key_secret",
    }
    assert sorted(os.listdir(root / "alice")) == ["client.key_secret", "scheduler.key"]
    assert after["alice/client.key_secret"][2] == 0o600
    assert public_of(root / "alice" / "scheduler.key") == public_of(root / "scheduler.key")
    assert public_of(root / "alice" / "client.key_secret") == public_of(root / "authorized_clients" / "alice.key")
    assert public_of(root / "alice" / "client.key_secret") != public_of(root / "client.key_secret")


def test_a_named_worker_folder_holds_the_scheduler_key_and_its_secret(root: Path) -> None:
    generate(root, workers=["gpu1", "gpu2"])
    assert sorted(os.listdir(root / "gpu1")) == ["scheduler.key", "worker.key_secret"]
    assert sorted(os.listdir(root / "authorized_workers")) == ["gpu1.key", "gpu2.key", "worker.key"]
    assert load_peer_keys(root / "gpu2", "worker").pair.public == public_of(root / "authorized_workers" / "gpu2.key")


def test_a_named_monitor_folder_holds_the_scheduler_key_and_its_secret(root: Path) -> None:
    before = snapshot(root)
    generate(root, monitors=["ops"])
    after = snapshot(root)
    assert set(after) - set(before) == {"authorized_monitors/ops.key", "ops/scheduler.key", "ops/monitor.key_secret"}
    assert after["ops/monitor.key_secret"][2] == 0o600
    ops = load_peer_keys(root / "ops", "monitor")
    assert ops.role == "monitor" and ops.server_public == public_of(root / "scheduler.key")
    assert ops.pair.public == public_of(root / "authorized_monitors" / "ops.key")
    assert 'role = "monitor"' in (root / "ops" / "monitor.key_secret").read_text()


def test_a_named_manager_folder_holds_the_scheduler_key_and_its_secret(root: Path) -> None:
    before = snapshot(root)
    generate(root, managers=["slurm"])
    after = snapshot(root)
    assert set(after) - set(before) == {
        "authorized_managers/slurm.key",
        "slurm/scheduler.key",
        "slurm/manager.key_secret",
    }
    assert after["slurm/manager.key_secret"][2] == 0o600
    assert after["authorized_managers/slurm.key"][2] == 0o644
    slurm = load_peer_keys(root / "slurm", "manager")
    assert slurm.role == "manager" and slurm.server_public == public_of(root / "scheduler.key")
    assert slurm.pair.public == public_of(root / "authorized_managers" / "slurm.key")
    assert slurm.pair.public != public_of(root / "manager.key_secret")
    text = (root / "slurm" / "manager.key_secret").read_text()
    assert 'role = "manager"' in text and 'name = "slurm"' in text
    assert "machines that run worker managers" in (root / "manager.key_secret").read_text()


def _make_it_old(root: Path, *roles: str) -> None:
    """The directory as scaler_keygen made it before these roles existed: no secret, no authorized folder."""
    for role in roles:
        (root / f"{role}.key_secret").unlink()
        shutil.rmtree(root / f"authorized_{role}s")


def test_a_directory_made_before_manager_keys_loads_and_serves_as_before(root: Path) -> None:
    _make_it_old(root, "manager")
    before = snapshot(root)
    server = load_server_keys(root)
    assert server.pair.public == public_of(root / "scheduler.key")
    admitted, problems = read_authorized(root)
    assert problems == []  # a missing authorized_managers/ is no problem: it admits no manager
    assert sorted((key.role, key.name) for key in admitted.values()) == [
        ("client", "client"),
        ("monitor", "monitor"),
        ("worker", "worker"),
    ]
    for role in ("client", "worker", "monitor"):
        assert load_peer_keys(root, role).role == role
    with pytest.raises(KeysError, match=re.escape(f"{root / 'manager.key_secret'} is missing: copy")):
        load_peer_keys(root, "manager")
    assert keys.authorized_fingerprint(root) == keys.authorized_fingerprint(root)
    assert snapshot(root) == before  # reading never writes


@pytest.mark.parametrize("missing", [("manager",), ("monitor", "manager")])
def test_a_directory_made_before_manager_keys_gets_them_on_the_next_run(root: Path, missing: tuple[str, ...]) -> None:
    _make_it_old(root, *missing)
    before = snapshot(root)
    report = generate(root)
    after = snapshot(root)
    assert {name: after[name] for name in before} == before
    added = [f for role in missing for f in (f"{role}.key_secret", f"authorized_{role}s/{role}.key")]
    assert set(after) - set(before) == set(added)
    assert report[0] == f"Created in {root}: " + ", ".join(added)
    assert stat.S_IMODE(os.stat(root / "authorized_managers").st_mode) == 0o755
    assert load_peer_keys(root, "manager").pair.public == public_of(root / "authorized_managers" / "manager.key")


def test_a_directory_made_before_monitor_keys_gets_them_on_the_next_run(root: Path) -> None:
    (root / "monitor.key_secret").unlink()
    (root / "authorized_monitors" / "monitor.key").unlink()
    (root / "authorized_monitors").rmdir()
    before = snapshot(root)
    report = generate(root)
    after = snapshot(root)
    assert {name: after[name] for name in before} == before
    assert set(after) - set(before) == {"monitor.key_secret", "authorized_monitors/monitor.key"}
    assert report[0] == f"Created in {root}: monitor.key_secret, authorized_monitors/monitor.key"
    assert stat.S_IMODE(os.stat(root / "authorized_monitors").st_mode) == 0o755


@pytest.mark.parametrize(
    ("first", "then"),
    [
        ("client", "monitor"),
        ("monitor", "worker"),
        ("worker", "monitor"),
        ("manager", "worker"),
        ("worker", "manager"),
        ("client", "manager"),
        ("manager", "monitor"),
    ],
)
def test_a_name_is_one_role_only_monitors_and_managers_included(root: Path, first: str, then: str) -> None:
    generate(root, **{first + "s": ["ops"]})
    before = snapshot(root)
    with pytest.raises(KeysError, match=f"'ops' is already a {first}'s name"):
        generate(root, **{then + "s": ["ops"]})
    assert snapshot(root) == before


def test_asking_again_for_a_name_keeps_it_and_the_other_role_is_refused(root: Path) -> None:
    generate(root, clients=["alice"])
    before = snapshot(root)
    generate(root, clients=["alice"])
    assert snapshot(root) == before
    with pytest.raises(KeysError, match="alice"):
        generate(root, workers=["alice", "bob"])
    assert snapshot(root) == before


def test_the_report_says_where_each_file_goes(tmp_path: Path) -> None:
    lines = generate(tmp_path / "keys", clients=["alice"], workers=["gpu1"], monitors=["ops"], managers=["slurm"])
    report = "\n".join(lines)
    root = tmp_path / "keys"
    named = ["alice/client.key_secret", "gpu1/worker.key_secret", "ops/monitor.key_secret", "slurm/manager.key_secret"]
    for name in [*DEFAULT_FILES, *named]:
        assert name in report
    for path in ["scheduler.key_secret", "authorized_clients", "scheduler.key", "worker.key_secret"]:
        assert str(root / path) in report
    at = root.as_posix()
    assert (
        f"  the scheduler's machine:  {at}/scheduler.key_secret, {at}/authorized_clients/, {at}/authorized_workers/, "
        f"{at}/authorized_monitors/, {at}/authorized_managers/"
    ) in lines
    assert (
        f"  every monitor machine:    {at}/scheduler.key, {at}/monitor.key_secret (to run scaler_top or scaler_ui "
        "on a tcp:// monitor address)"
    ) in lines
    assert f"client alice's machine:   the folder {root / 'alice'}" in report
    assert f"worker gpu1's machine:    the folder {root / 'gpu1'}" in report
    assert f"monitor ops's machine:    the folder {root / 'ops'}" in report
    assert (
        f"  every manager machine:    {at}/scheduler.key, {at}/manager.key_secret (to run scaler_worker_manager), "
        f"and {at}/worker.key_secret for the workers its units run"
    ) in lines
    assert (
        f"  manager slurm's machine:  the folder {at}/slurm (use it as its keys directory, with a worker.key_secret "
        "added for the workers it starts)"
    ) in lines
    assert f"--keys {root}" in report and f"SCALER_KEYS={root}" in report


def test_a_lost_public_file_is_written_again_from_its_secret(root: Path) -> None:
    client = public_of(root / "client.key_secret")
    (root / "authorized_clients" / "client.key").unlink()
    (root / "scheduler.key").unlink()
    report = generate(root)
    assert "authorized_clients/client.key" in report[0] and "scheduler.key" in report[0]
    assert public_of(root / "authorized_clients" / "client.key") == client
    assert public_of(root / "scheduler.key") == public_of(root / "scheduler.key_secret")


def test_a_named_folder_handed_to_its_machine_is_not_made_again(root: Path) -> None:
    generate(root, clients=["alice"])
    shutil.rmtree(root / "alice")
    before = snapshot(root)
    report = generate(root, clients=["alice"])
    assert snapshot(root) == before
    assert not (root / "alice").exists()
    assert any(str(root / "alice" / "client.key_secret") in line and "kept" in line for line in report)


def test_a_copy_without_the_scheduler_secret_is_refused(root: Path) -> None:
    generate(root, clients=["alice"])
    before = snapshot(root)
    with pytest.raises(
        KeysError, match=re.escape(f"{root / 'alice'} holds scheduler.key but not scheduler.key_secret")
    ):
        generate(root / "alice", workers=["bob"])
    assert snapshot(root) == before


def test_a_scheduler_key_that_does_not_match_its_secret_is_refused(root: Path, tmp_path: Path) -> None:
    generate(tmp_path / "other")
    shutil.copy(tmp_path / "other" / "scheduler.key", root / "scheduler.key")
    with pytest.raises(KeysError, match="does not match"):
        generate(root)


def test_a_file_where_the_directory_should_be_is_refused(tmp_path: Path) -> None:
    (tmp_path / "keys").write_text("not a directory")
    with pytest.raises(KeysError, match="not a directory"):
        generate(tmp_path / "keys")


@pytest.mark.parametrize(
    "name",
    ["", "-x", ".hidden", "_x", "a/b", "a b", "a\n", "x" * 65, "é", "client", "Worker", "scheduler",
     "authorized_clients", "authorized_workers", "monitor", "authorized_monitors", "manager", "Manager",
     "authorized_managers"],
)  # fmt: skip
def test_bad_names_create_nothing(tmp_path: Path, name: str) -> None:
    with pytest.raises(KeysError):
        generate(tmp_path / "keys", clients=["fine", name])
    with pytest.raises(KeysError):
        generate(tmp_path / "keys", workers=[name])
    with pytest.raises(KeysError):
        generate(tmp_path / "keys", monitors=[name])
    with pytest.raises(KeysError):
        generate(tmp_path / "keys", managers=[name])
    assert not (tmp_path / "keys").exists()


def test_good_names_are_accepted(tmp_path: Path) -> None:
    generate(tmp_path, clients=["a", "x" * 64, "node-1.lab_2"])
    assert {"a.key", "x" * 64 + ".key", "node-1.lab_2.key"} < set(os.listdir(tmp_path / "authorized_clients"))


def test_one_name_for_both_roles_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(KeysError, match="both"):
        generate(tmp_path / "keys", clients=["alice"], workers=["alice"])
    with pytest.raises(KeysError, match="'slurm' is asked for as both a worker and a manager"):
        generate(tmp_path / "keys", workers=["slurm"], managers=["slurm"])
    assert not (tmp_path / "keys").exists()


# ---- loading ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["client", "worker", "monitor", "manager"])
def test_load_peer_keys(root: Path, role: str) -> None:
    peer = load_peer_keys(root, role)
    public, secret = zmq.auth.load_certificate(root / f"{role}.key_secret")
    assert peer.pair == KeyPair(public=public, secret=secret or b"")
    assert peer.server_public == public_of(root / "scheduler.key")
    assert peer.role == role
    assert peer.source == str(root / f"{role}.key_secret")


def test_load_server_keys(root: Path) -> None:
    server = load_server_keys(str(root))
    public, secret = zmq.auth.load_certificate(root / "scheduler.key_secret")
    assert server.pair == KeyPair(public=public, secret=secret or b"")
    assert server.directory == str(root)


def test_a_missing_directory_says_how_to_make_one(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    for load in (lambda: load_peer_keys(missing, "client"), lambda: load_server_keys(missing)):
        with pytest.raises(KeysError, match=f"{re.escape(str(missing))}.*scaler_keygen {re.escape(str(missing))}"):
            load()


@pytest.mark.parametrize("name", ["scheduler.key", "client.key_secret"])
def test_a_missing_peer_file_is_named(root: Path, name: str) -> None:
    (root / name).unlink()
    with pytest.raises(KeysError, match=re.escape(f"{root / name} is missing: copy")) as caught:
        load_peer_keys(root, "client")
    assert isinstance(caught.value, ValueError)


def test_a_missing_client_secret_does_not_stop_a_worker(root: Path) -> None:
    (root / "client.key_secret").unlink()
    assert load_peer_keys(root, "worker").role == "worker"


def test_a_manager_machine_copy_loads_as_manager_and_for_its_workers(root: Path, tmp_path: Path) -> None:
    """What the report says a manager machine gets: scheduler.key, manager.key_secret and worker.key_secret."""
    copy = tmp_path / "manager_machine"
    copy.mkdir()
    for name in ("scheduler.key", "manager.key_secret", "worker.key_secret"):
        shutil.copy2(root / name, copy / name)
    assert load_peer_keys(copy, "manager").pair == load_peer_keys(root, "manager").pair
    assert load_peer_keys(copy, "worker").pair == load_peer_keys(root, "worker").pair
    with pytest.raises(KeysError, match=re.escape(str(copy / "client.key_secret"))):
        load_peer_keys(copy, "client")


def test_a_missing_server_secret_is_named(root: Path) -> None:
    (root / "scheduler.key_secret").unlink()
    with pytest.raises(KeysError, match=re.escape(f"{root / 'scheduler.key_secret'} is missing")):
        load_server_keys(root)


def _corrupt(root: Path, name: str, how: str) -> None:
    path = root / name
    if how == "garbage":
        path.write_bytes(b"\x00\xff\xfe garbage\n")
    elif how == "short key":
        path.write_text(path.read_text().replace('public-key = "', 'public-key = "abc'))
    elif how == "public only":
        path.write_bytes((root / "scheduler.key").read_bytes())
    elif how == "another secret":
        text = path.read_text()
        other = (root / "worker.key_secret").read_text().split("secret-key = ")[1]
        path.write_text(text.split("secret-key = ")[0] + "secret-key = " + other)
    else:
        path.unlink()
        path.mkdir()


@pytest.mark.parametrize("how", ["garbage", "short key", "public only", "another secret", "a folder"])
def test_a_corrupted_secret_is_named(root: Path, how: str) -> None:
    _corrupt(root, "client.key_secret", how)
    with pytest.raises(KeysError, match=re.escape(str(root / "client.key_secret"))):
        load_peer_keys(root, "client")
    _corrupt(root, "scheduler.key_secret", how)
    with pytest.raises(KeysError, match=re.escape(str(root / "scheduler.key_secret"))):
        load_server_keys(root)


@pytest.mark.parametrize("how", ["garbage", "short key"])
def test_a_corrupted_scheduler_key_is_named(root: Path, how: str) -> None:
    _corrupt(root, "scheduler.key", how)
    with pytest.raises(KeysError, match=re.escape(str(root / "scheduler.key"))):
        load_peer_keys(root, "worker")


def test_a_worker_only_directory_loads_as_worker_only(root: Path, tmp_path: Path) -> None:
    copy = tmp_path / "worker_machine"
    copy.mkdir()
    for name in ("scheduler.key", "worker.key_secret"):
        shutil.copy2(root / name, copy / name)
    assert load_peer_keys(copy, "worker").pair == load_peer_keys(root, "worker").pair
    with pytest.raises(KeysError, match=re.escape(str(copy / "client.key_secret"))):
        load_peer_keys(copy, "client")
    with pytest.raises(KeysError, match=re.escape(str(copy / "scheduler.key_secret"))):
        load_server_keys(copy)


def test_an_unknown_role_is_a_programming_error(root: Path) -> None:
    with pytest.raises(ValueError, match="role"):
        load_peer_keys(root, "scheduler")


def test_a_secret_open_to_others_warns_once(root: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=keys.__name__)
    load_peer_keys(root, "client")
    load_server_keys(root)
    assert caplog.records == []
    os.chmod(root / "client.key_secret", 0o644)
    os.chmod(root / "scheduler.key_secret", 0o640)
    load_peer_keys(root, "client")
    load_server_keys(root)
    messages = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(messages) == 2
    assert f"chmod 600 {root / 'client.key_secret'}" in messages[0]
    assert f"chmod 600 {root / 'scheduler.key_secret'}" in messages[1]


def test_resolve(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(keys.ENV_VAR, raising=False)
    assert resolve(None) is None
    assert resolve(tmp_path) == str(tmp_path)
    assert resolve("~/keys") == os.path.expanduser("~/keys")
    monkeypatch.setenv("SCALER_KEYS", "/from/env")
    assert resolve(None) == "/from/env"
    assert resolve("") == "/from/env"
    assert resolve("/given") == "/given"
    monkeypatch.setenv("SCALER_KEYS", "")
    assert resolve(None) is None


def test_repr_hides_the_secret(root: Path) -> None:
    peer = load_peer_keys(root, "client")
    server = load_server_keys(root)
    assert repr(peer.pair) == f"KeyPair(public={peer.pair.public!r})"
    for value, secret in ((peer, peer.pair.secret), (peer.pair, peer.pair.secret), (server, server.pair.secret)):
        assert secret.decode() not in repr(value) and secret.decode() not in str(value)
        assert repr(secret) not in repr(value)


# ---- authorized keys -------------------------------------------------------------------------------------------------


def test_read_authorized_finds_default_and_named_keys(root: Path) -> None:
    generate(root, clients=["alice"], workers=["gpu1"], monitors=["ops"], managers=["slurm"])
    admitted, problems = read_authorized(root)
    assert problems == []
    found = {(key.role, key.name): key for key in admitted.values()}
    assert set(found) == {
        ("client", "client"),
        ("client", "alice"),
        ("worker", "worker"),
        ("worker", "gpu1"),
        ("monitor", "monitor"),
        ("monitor", "ops"),
        ("manager", "manager"),
        ("manager", "slurm"),
    }
    assert found[("monitor", "ops")].public == load_peer_keys(root / "ops", "monitor").pair.public
    slurm = found[("manager", "slurm")]
    assert slurm.path == str(root / "authorized_managers" / "slurm.key")
    assert slurm.public == load_peer_keys(root / "slurm", "manager").pair.public
    alice = found[("client", "alice")]
    assert alice.path == str(root / "authorized_clients" / "alice.key")
    assert admitted[alice.public] is alice
    assert alice.public == load_peer_keys(root / "alice", "client").pair.public


def test_a_malformed_key_is_skipped_and_reported_and_other_files_ignored(root: Path) -> None:
    folder = root / "authorized_clients"
    (folder / "broken.key").write_text("curve\n    nothing here\n")
    (folder / "short.key").write_text('curve\n    public-key = "tooshort"\n')
    (folder / "README.txt").write_text("hello")
    shutil.copy(root / "worker.key_secret", folder / "spare.key_secret")
    shutil.copy(root / "authorized_workers" / "worker.key", folder / "worker.key.bak")
    admitted, problems = read_authorized(root)
    assert sorted(key.name for key in admitted.values()) == ["client", "manager", "monitor", "worker"]
    assert len(problems) == 2
    assert str(folder / "broken.key") in problems[0] and str(folder / "short.key") in problems[1]


def test_a_key_in_both_folders_is_reported_and_admitted_as_neither(root: Path) -> None:
    shutil.copy(root / "authorized_clients" / "client.key", root / "authorized_workers" / "sneaky.key")
    admitted, problems = read_authorized(root)
    assert public_of(root / "client.key_secret") not in admitted
    assert sorted(key.name for key in admitted.values()) == ["manager", "monitor", "worker"]
    assert len(problems) == 1
    assert "sneaky.key" in problems[0] and "client.key" in problems[0] and "none of them" in problems[0]


@pytest.mark.parametrize(
    ("holder", "other"),
    [
        ("client", "monitor"),
        ("worker", "monitor"),
        ("monitor", "client"),
        ("manager", "client"),
        ("manager", "worker"),
        ("client", "manager"),
        ("worker", "manager"),
        ("monitor", "manager"),
    ],
)
def test_a_key_in_another_role_folder_is_admitted_as_none(root: Path, holder: str, other: str) -> None:
    """A client key copied to authorized_monitors/ or authorized_managers/ (or the reverse) would let one key do both:
    it does neither."""
    shutil.copy(root / f"authorized_{holder}s" / f"{holder}.key", root / f"authorized_{other}s" / "copied.key")
    admitted, problems = read_authorized(root)
    assert public_of(root / f"{holder}.key_secret") not in admitted
    assert len(admitted) == 3
    paths = {
        holder: root / f"authorized_{holder}s" / f"{holder}.key",
        other: root / f"authorized_{other}s" / "copied.key",
    }
    first, second = (paths[role] for role in keys.ROLES if role in paths)  # listed in the order of the roles
    assert problems == [
        f"{first} and {second} hold the same public key; a key has one role (client, worker, monitor or manager), so "
        "it is admitted as none of them"
    ]


def test_missing_folders_admit_nobody(tmp_path: Path) -> None:
    assert read_authorized(tmp_path) == ({}, [])
    assert keys.authorized_fingerprint(tmp_path) == keys.authorized_fingerprint(tmp_path)


def test_the_fingerprint_changes_with_the_answer(root: Path) -> None:
    generate(root, clients=["alice"])
    first = keys.authorized_fingerprint(root)
    assert keys.authorized_fingerprint(root) == first
    alice = public_of(root / "authorized_clients" / "alice.key")
    assert alice in read_authorized(root)[0]
    (root / "authorized_clients" / "alice.key").unlink()
    second = keys.authorized_fingerprint(root)
    assert second != first
    assert alice not in read_authorized(root)[0]
    generate(root, workers=["gpu1"])
    third = keys.authorized_fingerprint(root)
    assert third != second
    generate(root, managers=["slurm"])
    fourth = keys.authorized_fingerprint(root)
    assert fourth != third
    (root / "authorized_managers" / "slurm.key").unlink()
    assert keys.authorized_fingerprint(root) != fourth


def test_the_fingerprint_sees_the_managers_folder_come(root: Path) -> None:
    """A directory made before manager keys: its fingerprint changes when scaler_keygen adds authorized_managers/,
    so that a running scheduler reads the new folder."""
    _make_it_old(root, "manager")
    old = keys.authorized_fingerprint(root)
    generate(root)
    assert keys.authorized_fingerprint(root) != old
    assert public_of(root / "manager.key_secret") in read_authorized(root)[0]
