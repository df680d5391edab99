"""A nested client's credentials leave the processor with the task that brought them (docs/security.md, "Nested tasks
and a client's credentials"), on a real secured cluster: alice passes her client to a task, which submits a nested
task with it; then bob's task, on the same processor, looks for alice's identity every way there is (the cache of
nested clients, any Client or key pair left in the process, a Client unpickled with alice's public key and a made-up
secret, a Client of its own without keys) and finds nothing to act as her with.

One worker with one processor, so that bob's task runs where alice's did (checked by pid). Keys come from
scaler.security.keys.generate, as scaler_keygen writes them (two named client keys, alice and bob).
"""

from __future__ import annotations

import functools
import gc
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from scaler import Client, SchedulerClusterCombo
from scaler.security.keys import KeyPair, PeerKeys, generate, load_peer_keys
from tests.helpers import free_address

pytestmark = pytest.mark.timeout(120)

TIMEOUT = 20
FAST: dict[str, Any] = {"heartbeat_interval_seconds": 0.5, "worker_timeout_seconds": 5, "logging_level": "WARNING"}
FORGED = "forged by bob"  # the source of the made-up key pair bob brings (not alice's)


# ----------------------------------------------------------------------------------------------- task functions
def square(x: int) -> int:
    return x * x


def nested_square(clnt: Client, x: int) -> tuple[int, int]:
    """alice's task: x * x through a nested task of the client it was given, and the processor's pid."""
    return clnt.submit(square, x).result(timeout=TIMEOUT), os.getpid()


def act(clnt: Client) -> str:
    """Submit a task through a client: "acted" if that worked, else the error."""
    try:
        return "acted" if clnt.submit(square, 2).result(timeout=TIMEOUT) == 4 else "wrong result"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def look_for_alice(address: str, alice_public: bytes, forged: tuple[Any, ...]) -> dict[str, Any]:
    """bob's task: everything in this processor that would let it act as alice."""
    from scaler.client import client as client_module

    gc.collect()
    objects = gc.get_objects()
    keys = [o for o in objects if isinstance(o, PeerKeys) and o.pair.public == alice_public and o.source != FORGED]
    clients = [
        o for o in objects if isinstance(o, Client) and o._keys is not None and o._keys.pair.public == alice_public
    ]
    cached = [c for c in list(client_module._nested.values()) if c._keys is not None]
    found: dict[str, Any] = {
        "pid": os.getpid(),
        "alice's key pairs in memory": len(keys),
        "clients with alice's keys": len(clients),
        "cached nested clients with keys": len(cached),
        "acted through a client left behind": [act(c) for c in clients + cached],
    }
    del objects, keys, clients, cached
    try:  # what unpickling a Client carrying alice's public key (which is no secret) and a made-up secret gives
        found["a forged Client"] = act(client_module._reconnect(*forged))
    except Exception as exc:
        found["a forged Client"] = f"{type(exc).__name__}: {exc}"
    try:
        found["Client(address)"] = act(Client(address, timeout_seconds=TIMEOUT))
    except Exception as exc:
        found["Client(address)"] = f"{type(exc).__name__}: {exc}"
    return found


# ----------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def keys_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("keys")
    generate(root, clients=["alice", "bob"])
    return root


@pytest.fixture(scope="module")
def secured(keys_dir: Path) -> Iterator[SchedulerClusterCombo]:
    combo = SchedulerClusterCombo(
        address=free_address(), n_workers=1, max_processors_per_worker=1, keys=keys_dir, **FAST
    )
    try:
        yield combo
    finally:
        combo.shutdown()


@pytest.fixture()
def alice(secured: SchedulerClusterCombo, keys_dir: Path) -> Iterator[Client]:
    with Client(secured.address, keys=keys_dir / "alice", timeout_seconds=TIMEOUT) as client:
        yield client


@pytest.fixture()
def bob(secured: SchedulerClusterCombo, keys_dir: Path) -> Iterator[Client]:
    with Client(secured.address, keys=keys_dir / "bob", timeout_seconds=TIMEOUT) as client:
        yield client


def forged_like(alice: Client) -> tuple[Any, ...]:
    """What a pickled Client would unpickle with: alice's settings and public key, and a secret that is not hers."""
    function, args = alice.__reduce__()
    assert function.__name__ == "_reconnect"
    keys: PeerKeys = args[5]
    made_up = KeyPair(keys.pair.public, zmq.curve_keypair()[1])
    return (*args[:5], PeerKeys(keys.server_public, made_up, "client", FORGED), *args[6:])


def assert_nothing_of_alice(found: dict[str, Any]) -> None:
    story = "bob's task found:\n" + "\n".join(f"  {what}: {value}" for what, value in found.items())
    assert found["alice's key pairs in memory"] == 0, story
    assert found["clients with alice's keys"] == 0, story
    assert found["cached nested clients with keys"] == 0, story
    assert found["acted through a client left behind"] == [], story
    for way in ("a forged Client", "Client(address)"):
        assert found[way].startswith("AuthenticationError:") and "authentication failed" in found[way], story
    assert "this client has none" in found["Client(address)"], story


# ----------------------------------------------------------------------------------------------- tests
def test_a_later_task_of_another_client_gets_nothing_of_a_nested_client(
    secured: SchedulerClusterCombo, keys_dir: Path, alice: Client, bob: Client
) -> None:
    alice_public = load_peer_keys(keys_dir / "alice", "client").pair.public
    processor = alice_pid(alice)
    assert alice.submit(nested_square, alice, 7).result(timeout=TIMEOUT) == (49, processor)

    found = bob.submit(look_for_alice, secured.address, alice_public, forged_like(alice)).result(timeout=TIMEOUT)

    assert found["pid"] == processor  # the processor alice's task ran in
    assert_nothing_of_alice(found)
    # alice's nested tasks still work, on the same processor, with a fresh connection
    assert alice.submit(nested_square, alice, 8).result(timeout=TIMEOUT) == (64, processor)


def test_a_client_inside_a_function_or_an_object_leaves_with_its_task_too(
    secured: SchedulerClusterCombo, keys_dir: Path, alice: Client, bob: Client
) -> None:
    """A client captured by the function itself (functools.partial, a closure) or sent as an object: the processor
    keeps function objects and objects' values for later tasks, but not one that brought a client; each task that
    uses it gets a live one."""
    alice_public = load_peer_keys(keys_dir / "alice", "client").pair.public
    function = functools.partial(nested_square, alice)
    assert [alice.submit(function, x).result(timeout=TIMEOUT)[0] for x in (2, 3)] == [4, 9]
    assert alice.map(function, [(4,), (5,)], timeout=TIMEOUT) == [(16, alice_pid(alice)), (25, alice_pid(alice))]
    sent = alice.send_object(alice, name="alice's client")
    assert [alice.submit(nested_square, sent, x).result(timeout=TIMEOUT)[0] for x in (6, 7)] == [36, 49]

    found = bob.submit(look_for_alice, secured.address, alice_public, forged_like(alice)).result(timeout=TIMEOUT)

    assert found["pid"] == alice_pid(alice)
    assert_nothing_of_alice(found)


def alice_pid(alice: Client) -> int:
    """The one processor's pid (a task without a client)."""
    return int(alice.submit(os.getpid).result(timeout=TIMEOUT))
