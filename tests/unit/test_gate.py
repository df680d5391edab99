"""The scheduler's key gate without sockets: its answers to ZAP requests and its reloading of the authorized keys,
on real key files made by scaler.security.keys.generate."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import zmq
import zmq.utils.z85

from scaler.io.curve import MAIN_DOMAIN, MONITOR_DOMAIN
from scaler.protocol.messages import PeerKind
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


def request(public_z85: bytes, domain: bytes = MAIN_DOMAIN, mechanism: bytes = b"CURVE") -> list[bytes]:
    credentials = [zmq.utils.z85.decode(public_z85)] if mechanism == b"CURVE" else []
    return [b"envelope", b"", b"1.0", b"7", domain, b"10.0.0.1", b"", mechanism, *credentials]


def test_authorized_keys_get_in_with_their_public_key_as_user_id(gate: KeyGate, keys: Path) -> None:
    for role, kind in (("client", PeerKind.CLIENT), ("worker", PeerKind.WORKER)):
        public = load_peer_keys(keys, role).pair.public
        reply = gate.answer(request(public))
        assert reply == [b"envelope", b"", b"1.0", b"7", b"200", b"OK", public, b""]
        peer_key = gate.key_of(public.decode())
        assert peer_key is not None and peer_key.role == kind and peer_key.name == role
    assert gate.denied == 0


def test_the_monitor_admits_client_keys_only(gate: KeyGate, keys: Path) -> None:
    client = load_peer_keys(keys, "client").pair.public
    worker = load_peer_keys(keys, "worker").pair.public
    assert gate.answer(request(client, MONITOR_DOMAIN))[4] == b"200"  # type: ignore[index]
    assert gate.answer(request(worker, MONITOR_DOMAIN))[4] == b"400"  # type: ignore[index]
    assert gate.answer(request(client, b"another-domain"))[4] == b"400"  # type: ignore[index]
    assert gate.denied == 2


def test_unknown_keys_and_other_mechanisms_are_denied(gate: KeyGate) -> None:
    stranger, _ = zmq.curve_keypair()
    assert gate.answer(request(stranger))[4:7] == [b"400", b"key not authorized", b""]  # type: ignore[index]
    assert gate.answer(request(b"", mechanism=b"NULL"))[4] == b"400"  # type: ignore[index]
    assert gate.answer([b"envelope", b"", b"2.0", b"1", MAIN_DOMAIN, b"", b"", b"CURVE", b"x" * 32])[4] == b"400"  # type: ignore[index]
    assert gate.answer([b"no delimiter"]) is None and gate.answer([b"", b"1.0"]) is None
    assert gate.denied == 2


def test_removing_a_key_file_revokes_it(gate: KeyGate, keys: Path) -> None:
    client = load_peer_keys(keys, "client").pair.public
    assert gate.reload() == frozenset()  # nothing changed
    os.remove(keys / "authorized_clients" / "client.key")
    assert gate.reload() == frozenset({client})
    assert gate.key_of(client.decode()) is None
    assert gate.answer(request(client))[4] == b"400"  # type: ignore[index]


def test_moving_a_key_to_the_other_role_ends_its_sessions(gate: KeyGate, keys: Path) -> None:
    client = load_peer_keys(keys, "client").pair.public
    shutil.move(keys / "authorized_clients" / "client.key", keys / "authorized_workers" / "was-client.key")
    assert gate.reload() == frozenset({client})
    moved = gate.key_of(client.decode())
    assert moved is not None and moved.role == PeerKind.WORKER


def test_adding_a_key_admits_it_without_revoking_anyone(gate: KeyGate, keys: Path) -> None:
    generate(keys, clients=["bob"])
    bob = load_peer_keys(keys / "bob", "client").pair.public
    assert gate.answer(request(bob))[4] == b"400"  # type: ignore[index]
    assert gate.reload() == frozenset()
    assert gate.answer(request(bob))[4] == b"200"  # type: ignore[index]
