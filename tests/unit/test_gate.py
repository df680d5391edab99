"""The scheduler's key gate without sockets: its answers to ZAP requests and its reloading of the authorized keys,
on real key files made by scaler.security.keys.generate."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.utils.z85

from scaler.io.curve import MAIN_DOMAIN, MONITOR_DOMAIN
from scaler.protocol.messages import PeerKind
from scaler.scheduler import gate as gate_module
from scaler.scheduler.gate import KeyGate
from scaler.security.keys import generate, load_peer_keys, load_server_keys


@pytest.fixture()
def keys(tmp_path: Path) -> Path:
    root = tmp_path / "keys"
    generate(root)
    return root


@pytest.fixture()
def gate(keys: Path) -> KeyGate:
    g = KeyGate(zmq.Context.instance(), load_server_keys(keys))
    g.reload(force=True)
    return g


def answered(gate: KeyGate, request: list[bytes]) -> list[bytes]:
    """The gate's reply frames to a ZAP request (which it must take for one)."""
    reply = gate.answer(request)
    assert reply is not None, "the gate took a request for something else"
    return reply


def request(public_z85: bytes, domain: bytes = MAIN_DOMAIN, mechanism: bytes = b"CURVE") -> list[bytes]:
    credentials = [zmq.utils.z85.decode(public_z85)] if mechanism == b"CURVE" else []
    return [b"envelope", b"", b"1.0", b"7", domain, b"10.0.0.1", b"", mechanism, *credentials]


def test_authorized_keys_get_in_with_their_public_key_as_user_id(gate: KeyGate, keys: Path) -> None:
    for role, kind in (("client", PeerKind.CLIENT), ("worker", PeerKind.WORKER), ("manager", PeerKind.MANAGER)):
        public = load_peer_keys(keys, role).pair.public
        reply = gate.answer(request(public))
        assert reply == [b"envelope", b"", b"1.0", b"7", b"200", b"OK", public, b""]
        peer_key = gate.key_of(public.decode())
        assert peer_key is not None and peer_key.role == kind and peer_key.name == role
    assert gate.denied == 0


def test_the_monitor_admits_monitor_keys_only(gate: KeyGate, keys: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The monitor carries every client's task data: a client or worker key does not open it any more."""
    caplog.set_level(logging.WARNING, logger=gate_module.__name__)
    client = load_peer_keys(keys, "client").pair.public
    worker = load_peer_keys(keys, "worker").pair.public
    monitor = load_peer_keys(keys, "monitor").pair.public
    manager = load_peer_keys(keys, "manager").pair.public
    admitted = [b"envelope", b"", b"1.0", b"7", b"200", b"OK", monitor, b""]
    assert gate.answer(request(monitor, MONITOR_DOMAIN)) == admitted
    assert answered(gate, request(client, MONITOR_DOMAIN))[4:6] == [b"400", b"key not authorized"]
    assert answered(gate, request(worker, MONITOR_DOMAIN))[4] == b"400"
    assert answered(gate, request(monitor, b"another-domain"))[4] == b"400"
    assert answered(gate, request(manager, MONITOR_DOMAIN))[4] == b"400"
    assert gate.denied == 4
    lines = [record.getMessage() for record in caplog.records]
    assert lines[0] == (
        "Scheduler: refused a connection to the monitor address from 10.0.0.1: its key 'client' is a client key; "
        f"the monitor address admits monitor keys only (scaler_keygen {keys} makes monitor.key_secret, for "
        "scaler_top and scaler_ui)"
    )
    assert "its key 'worker' is a worker key; the monitor address admits monitor keys only" in lines[1]
    assert "its key 'manager' is a manager key; the monitor address admits monitor keys only" in lines[3]


def test_a_monitor_key_is_refused_on_the_scheduler_address(
    gate: KeyGate, keys: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=gate_module.__name__)
    monitor = load_peer_keys(keys, "monitor").pair.public
    assert answered(gate, request(monitor, MAIN_DOMAIN))[4] == b"400"
    assert gate.denied == 1
    assert caplog.records[0].getMessage() == (
        "Scheduler: refused a connection to the scheduler from 10.0.0.1: its key 'monitor' is a monitor key, which "
        "only the monitor address admits"
    )


def test_the_core_never_sees_monitor_keys(gate: KeyGate, keys: Path) -> None:
    monitor = load_peer_keys(keys, "monitor").pair.public.decode()
    client = load_peer_keys(keys, "client").pair.public.decode()
    assert gate.key_of(monitor) is None and monitor not in gate.by_user
    assert gate.monitor_name(monitor) == "monitor"
    assert gate.monitor_name(client) is None and gate.monitor_name("unknown") is None
    assert {key.role for key in gate.by_user.values()} == {PeerKind.CLIENT, PeerKind.WORKER, PeerKind.MANAGER}


def test_removing_a_monitor_key_revokes_it_without_telling_the_core(gate: KeyGate, keys: Path) -> None:
    monitor = load_peer_keys(keys, "monitor").pair.public
    os.remove(keys / "authorized_monitors" / "monitor.key")
    assert gate.reload() == frozenset()  # no session of the core was opened with it
    assert gate.monitor_name(monitor.decode()) is None
    assert answered(gate, request(monitor, MONITOR_DOMAIN))[4] == b"400"


def test_a_client_key_moved_to_the_monitors_ends_its_sessions(gate: KeyGate, keys: Path) -> None:
    client = load_peer_keys(keys, "client").pair.public
    shutil.move(keys / "authorized_clients" / "client.key", keys / "authorized_monitors" / "dashboard.key")
    assert gate.reload() == frozenset({client})
    assert gate.key_of(client.decode()) is None
    assert gate.monitor_name(client.decode()) == "dashboard"
    assert answered(gate, request(client, MONITOR_DOMAIN))[4] == b"200"
    assert answered(gate, request(client, MAIN_DOMAIN))[4] == b"400"


def test_unknown_keys_and_other_mechanisms_are_denied(gate: KeyGate) -> None:
    stranger, _ = zmq.curve_keypair()
    assert answered(gate, request(stranger))[4:7] == [b"400", b"key not authorized", b""]
    assert answered(gate, request(b"", mechanism=b"NULL"))[4] == b"400"
    assert answered(gate, [b"envelope", b"", b"2.0", b"1", MAIN_DOMAIN, b"", b"", b"CURVE", b"x" * 32])[4] == b"400"
    assert gate.answer([b"no delimiter"]) is None and gate.answer([b"", b"1.0"]) is None
    assert gate.denied == 2


def test_removing_a_key_file_revokes_it(gate: KeyGate, keys: Path) -> None:
    client = load_peer_keys(keys, "client").pair.public
    assert gate.reload() == frozenset()  # nothing changed
    os.remove(keys / "authorized_clients" / "client.key")
    assert gate.reload() == frozenset({client})
    assert gate.key_of(client.decode()) is None
    assert answered(gate, request(client))[4] == b"400"


def test_moving_a_key_to_the_other_role_ends_its_sessions(gate: KeyGate, keys: Path) -> None:
    client = load_peer_keys(keys, "client").pair.public
    shutil.move(keys / "authorized_clients" / "client.key", keys / "authorized_workers" / "was-client.key")
    assert gate.reload() == frozenset({client})
    moved = gate.key_of(client.decode())
    assert moved is not None and moved.role == PeerKind.WORKER


def test_adding_a_key_admits_it_without_revoking_anyone(gate: KeyGate, keys: Path) -> None:
    generate(keys, clients=["bob"])
    bob = load_peer_keys(keys / "bob", "client").pair.public
    assert answered(gate, request(bob))[4] == b"400"
    assert gate.reload() == frozenset()
    assert answered(gate, request(bob))[4] == b"200"


def test_an_unknown_key_is_told_which_folder_it_belongs_in(
    gate: KeyGate, keys: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=gate_module.__name__)
    stranger, _ = zmq.curve_keypair()
    gate.answer(request(stranger, MONITOR_DOMAIN))
    gate.answer(request(stranger, MAIN_DOMAIN))
    monitor_line, main_line = (record.getMessage() for record in caplog.records)
    assert monitor_line.endswith(f"its public key file belongs in {keys}/authorized_monitors/)"), monitor_line
    assert main_line.endswith(f"belongs in {keys}/authorized_clients/, authorized_workers/ or authorized_managers/)"), (
        main_line
    )


def test_a_manager_key_maps_to_the_manager_kind_with_its_name(gate: KeyGate, keys: Path) -> None:
    generate(keys, managers=["slurm"])
    slurm = load_peer_keys(keys / "slurm", "manager").pair.public
    assert gate.key_of(slurm.decode()) is None
    assert answered(gate, request(slurm))[4] == b"400"  # not read yet
    assert gate.reload() == frozenset()
    assert answered(gate, request(slurm)) == [b"envelope", b"", b"1.0", b"7", b"200", b"OK", slurm, b""]
    peer_key = gate.key_of(slurm.decode())
    assert peer_key is not None
    assert (peer_key.role, peer_key.name, peer_key.public) == (PeerKind.MANAGER, "slurm", slurm)
    assert gate.monitor_name(slurm.decode()) is None


def test_removing_a_manager_key_revokes_it(gate: KeyGate, keys: Path) -> None:
    manager = load_peer_keys(keys, "manager").pair.public
    os.remove(keys / "authorized_managers" / "manager.key")
    assert gate.reload() == frozenset({manager})  # its session must end
    assert gate.key_of(manager.decode()) is None
    assert answered(gate, request(manager))[4] == b"400"


def test_a_manager_key_moved_to_the_workers_ends_its_sessions(gate: KeyGate, keys: Path) -> None:
    """The core refuses a hello whose kind is not its key's role: a key that changes role must start again."""
    manager = load_peer_keys(keys, "manager").pair.public
    shutil.move(keys / "authorized_managers" / "manager.key", keys / "authorized_workers" / "was-manager.key")
    assert gate.reload() == frozenset({manager})
    moved = gate.key_of(manager.decode())
    assert moved is not None and moved.role == PeerKind.WORKER and moved.name == "was-manager"


def test_the_log_counts_manager_keys(keys: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=gate_module.__name__)
    generate(keys, managers=["slurm", "k8s"], clients=["alice"])
    KeyGate(zmq.Context.instance(), load_server_keys(keys)).reload(force=True)
    assert caplog.records[-1].getMessage() == (
        f"Scheduler: 2 client, 1 worker, 3 manager and 1 monitor keys authorized (from {keys})"
    )


def test_a_directory_made_before_manager_keys_admits_as_before(keys: Path, caplog: pytest.LogCaptureFixture) -> None:
    """No authorized_managers/ folder (and no manager.key_secret): it starts, admits every other key as before, no
    manager, and says nothing is wrong; scaler_keygen run on it later adds the manager key, read without a restart."""
    (keys / "manager.key_secret").unlink()
    shutil.rmtree(keys / "authorized_managers")
    caplog.set_level(logging.INFO, logger=gate_module.__name__)
    ctx: zmq.Context[Any] = zmq.Context()
    gate = KeyGate(ctx, load_server_keys(keys))
    try:
        gate.start()  # binds the ZAP endpoint: a context of its own
        assert gate.sock is not None
    finally:
        gate.close()
        ctx.destroy(linger=0)
    for role, kind in (("client", PeerKind.CLIENT), ("worker", PeerKind.WORKER)):
        public = load_peer_keys(keys, role).pair.public
        assert answered(gate, request(public))[4] == b"200"
        peer_key = gate.key_of(public.decode())
        assert peer_key is not None and peer_key.role == kind
    monitor = load_peer_keys(keys, "monitor").pair.public
    assert answered(gate, request(monitor, MONITOR_DOMAIN))[4] == b"200"
    assert [r.levelno for r in caplog.records] == [logging.INFO]  # no problem reported
    assert caplog.records[0].getMessage().startswith("Scheduler: 1 client, 1 worker, 0 manager and 1 monitor keys")

    generate(keys)  # the next scaler_keygen adds manager.key_secret and authorized_managers/manager.key
    manager = load_peer_keys(keys, "manager").pair.public
    assert answered(gate, request(manager))[4] == b"400"
    assert gate.reload() == frozenset()
    assert answered(gate, request(manager))[4] == b"200"
    peer_key = gate.key_of(manager.decode())
    assert peer_key is not None and peer_key.role == PeerKind.MANAGER
