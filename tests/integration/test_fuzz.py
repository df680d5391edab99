"""Fuzzing live schedulers: Hypothesis draws messages of every kind (valid ones with hostile contents, valid ones
mutated bit by bit, cut short or padded, headers with random fields, random frames, raw bytes on the TCP port) and
sends them from throwaway sockets, while a real client on each scheduler keeps doing round trips and checking
every result.

Two schedulers: one without keys (anyone may send anything) and one with keys (sockets with a client key, with a
worker key, and without keys, whose handshake fails). Afterwards both still serve, every round trip of the real
clients was right, none failed or hung, and the schedulers' memory stayed bounded.

In CI it sends SCALER_FUZZ_EXAMPLES batches (default 150, about 15 s); run longer by hand:
    SCALER_FUZZ_EXAMPLES=20000 .venv/bin/python -m pytest -q tests/integration/test_fuzz.py -p no:timeout
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import zmq
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from scaler import Client, SchedulerClusterCombo
from scaler.io.curve import make_client
from scaler.protocol import messages as m
from scaler.protocol.columns import pack_u16, pack_u64
from scaler.security.keys import PeerKeys, generate, load_peer_keys
from tests.helpers import RoundTrips, encoded, free_address
from tests.protocol import capnp_codec as codec
from tests.protocol.make_golden import golden_messages

EXAMPLES = int(os.environ.get("SCALER_FUZZ_EXAMPLES", "150"))
GOLDEN = {name: encoded(message) for name, message in golden_messages().items()}
NAMES = sorted(GOLDEN)
STRUCTS = {  # union member -> its struct in scaler.capnp
    "hello": "Hello",
    "welcome": "Welcome",
    "refused": "Refused",
    "heartbeat": "Heartbeat",
    "heartbeatEcho": "HeartbeatEcho",
    "submitTasks": "TaskBatch",
    "dispatchTasks": "TaskBatch",
    "taskResults": "ResultBatch",
    "cancelTasks": "IdList",
    "putObjects": "ObjectBatch",
    "freeObjects": "IdList",
    "balanceRequest": "IdList",
    "balanceResponse": "IdList",
    "disconnect": "Disconnect",
    "shutdownRequest": "ShutdownRequest",
    "shutdown": "Shutdown",
    "error": "Error",
}
# Payloads that can never unpickle into anything ('F' wants a float literal): a fuzzed task cannot run code.
JUNK = b"FUZZ"


# ------------------------------------------------------------------------------------------------ the targets
@dataclass
class Target:
    name: str
    cluster: SchedulerClusterCombo
    keys: dict[str, PeerKeys | None]  # which keys fuzzing sockets may use: role -> keys (None: no keys)
    log: Path  # where the scheduler and its workers log


@contextlib.contextmanager
def stderr_to(path: Path) -> Iterator[None]:
    """Processes forked inside write their standard error to `path` too (what libzmq prints when it aborts is only
    there; the test's own is given back afterwards)."""
    saved = os.dup(2)
    try:
        with open(path, "ab") as file:
            os.dup2(file.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def died_how(target: Target) -> str:
    """What a dead scheduler left behind: its exit code and the end of the log (CI keeps no temporary folders)."""
    code = target.cluster._scheduler.exitcode
    lines = target.log.read_text(errors="replace").splitlines() if target.log.exists() else ["(no log)"]
    return f"exit code {code}; the log ends:\n" + "\n".join(lines[-40:])


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Target]]:
    folder: Path = tmp_path_factory.mktemp("fuzz")
    keys = folder / "keys"
    generate(keys)
    settings_: dict[str, Any] = dict(
        n_workers=2,
        heartbeat_interval_seconds=0.5,
        worker_timeout_seconds=3,
        max_task_retries=1000,  # fuzzing "workers" come and go holding real tasks: not what this test is about
        logging_level="WARNING",
    )
    logs = {name: folder / f"{name}.log" for name in ("open", "secured")}
    with stderr_to(logs["open"]):
        open_one = SchedulerClusterCombo(
            address=free_address(), keys=False, logging_paths=(str(logs["open"]),), **settings_
        )
    try:
        with stderr_to(logs["secured"]):
            secured = SchedulerClusterCombo(
                address=free_address(), keys=str(keys), logging_paths=(str(logs["secured"]),), **settings_
            )
    except BaseException:
        open_one.shutdown()
        raise
    try:
        yield [
            Target("open", open_one, {"none": None}, logs["open"]),
            Target(
                "secured",
                secured,
                {
                    "client": load_peer_keys(keys, "client"),
                    "worker": load_peer_keys(keys, "worker"),
                    "none": None,
                },
                logs["secured"],
            ),
        ]
    finally:
        secured.shutdown()
        open_one.shutdown()


# ------------------------------------------------------------------------------------------------ strategies
IDS = st.one_of(
    st.integers(0, 2**64 - 1),
    st.builds(lambda p, n: (p << m.ID_PREFIX_SHIFT) | n, st.integers(0, 64), st.integers(0, 64)),
    st.sampled_from([0, 1, 2**40, 2**63, 2**64 - 1]),
)
SMALL_BYTES = st.binary(max_size=64)
TEXT = st.text(max_size=40)


@st.composite
def valid_hostile(draw: st.DrawFn, prefix: int) -> list[bytes]:
    """A message decode() accepts, with contents chosen to annoy: ids of others, unknown references, duplicates,
    wrong kinds for the sender, oversized counts."""
    own = st.integers(1, 40).map(lambda n: (prefix << m.ID_PREFIX_SHIFT) | n)
    ids = st.one_of(IDS, own) if prefix else IDS
    kind = draw(st.sampled_from(["hello", "heartbeat", "submit", "results", "ids", "objects", "reason", "other"]))
    message: m.Message
    if kind == "hello":
        message = m.Hello(
            draw(st.sampled_from([m.PeerKind.CLIENT, m.PeerKind.WORKER])),
            draw(TEXT),
            draw(TEXT),
            draw(st.integers(0, 2**32 - 1)),
            draw(st.integers(0, 2**32 - 1)),
            draw(st.integers(0, 2**32 - 1)),
            draw(st.sampled_from([m.PROTOCOL_VERSION, 0, 2, 2**32 - 1])),
        )
    elif kind == "heartbeat":
        message = m.Heartbeat(waiting_tasks=draw(st.integers(0, 2**32 - 1)), queued=draw(st.integers(0, 2**32 - 1)))
    elif kind == "submit":
        count = draw(st.integers(1, 5))
        task_ids = draw(st.lists(ids, min_size=count, max_size=count))
        functions = draw(st.lists(ids, min_size=count, max_size=count))
        arg_counts = draw(st.lists(st.integers(0, 3), min_size=count, max_size=count))
        refs = [draw(st.one_of(st.just(0), ids)) for _ in range(sum(arg_counts))]
        payloads: list[m.Payload] = [JUNK + draw(SMALL_BYTES) for ref in refs if ref == 0]
        flags = bytes(draw(st.lists(st.integers(0, 255), min_size=count, max_size=count)))
        message = m.SubmitTasks(task_ids, functions, flags, arg_counts, refs, None, payloads)
    elif kind == "results":
        count = draw(st.integers(1, 5))
        statuses = bytes(draw(st.lists(st.integers(0, 4), min_size=count, max_size=count)))
        message = m.TaskResults(draw(st.lists(ids, min_size=count, max_size=count)), statuses, [JUNK] * count)
    elif kind == "ids":
        listed = draw(st.lists(ids, max_size=8))
        by_ids: list[m.Message] = [m.CancelTasks(listed), m.FreeObjects(listed)]
        by_ids += [m.BalanceResponse(listed), m.BalanceRequest(listed)]
        message = draw(st.sampled_from(by_ids))
    elif kind == "objects":
        object_ids = draw(st.lists(ids, min_size=1, max_size=4))
        message = m.PutObjects(object_ids, [JUNK + draw(SMALL_BYTES) for _ in object_ids])
    elif kind == "reason":
        reason = draw(TEXT)
        with_reason: list[m.Message] = [m.Disconnect(reason), m.ShutdownRequest(reason), m.Shutdown(reason)]
        message = draw(st.sampled_from(with_reason))
    else:
        others: list[m.Message] = [m.HeartbeatEcho(), m.Welcome(1), m.Refused("x"), m.Error(m.ErrorCode.MALFORMED, "")]
        message = draw(st.sampled_from(others))
    return encoded(message)


@st.composite
def mutated(draw: st.DrawFn) -> list[bytes]:
    """A golden message of any kind, damaged: bits flipped, cut, padded, frames added, dropped or swapped."""
    frames = [bytearray(frame) for frame in GOLDEN[draw(st.sampled_from(NAMES))]]
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["flip", "cut", "pad", "add", "drop", "swap", "byte"]))
        index = draw(st.integers(0, len(frames) - 1))
        frame = frames[index]
        if how == "flip" and frame:
            bit = draw(st.integers(0, len(frame) * 8 - 1))
            frame[bit // 8] ^= 1 << (bit % 8)
        elif how == "byte" and frame:
            frame[draw(st.integers(0, len(frame) - 1))] = draw(st.integers(0, 255))
        elif how == "cut":
            del frame[draw(st.integers(0, len(frame))) :]
        elif how == "pad":
            frame.extend(draw(SMALL_BYTES))
        elif how == "add":
            frames.insert(index + 1, bytearray(draw(SMALL_BYTES)))
        elif how == "drop" and len(frames) > 1:
            del frames[index]
        elif how == "swap" and len(frames) > 1:
            frames[0], frames[-1] = frames[-1], frames[0]
    return [bytes(frame) for frame in frames]


def fill_list(draw: st.DrawFn, body: Any, field_name: str, element: str) -> None:
    """A list field of random texts, or of random Requirements (lists of texts) for a list of structs."""
    if element == "struct":
        sets = draw(st.lists(st.lists(TEXT, max_size=3), max_size=3))
        entries = body.init(field_name, len(sets))
        for entry, texts in zip(entries, sets):
            inner = entry.init("capabilities", len(texts))
            for i, item in enumerate(texts):
                inner[i] = item
        return
    items = draw(st.lists(TEXT, max_size=4))
    target = body.init(field_name, len(items))
    for i, item in enumerate(items):
        target[i] = item


@st.composite
def random_fields(draw: st.DrawFn) -> list[bytes]:
    """A header of any kind whose every field holds a random value of its type (columns of random lengths)."""
    name = draw(st.sampled_from(sorted(STRUCTS)))
    root = codec._schema.Message.new_message()
    body = root.init(name)
    schema = getattr(codec._schema, STRUCTS[name]).schema
    for field_name, field in schema.fields.items():
        kind = field.proto.slot.type.which()
        if kind == "data":
            value: Any = draw(
                st.one_of(
                    st.lists(IDS, max_size=6).map(pack_u64),
                    st.lists(st.integers(0, 65535), max_size=6).map(pack_u16),
                    SMALL_BYTES,
                )
            )
        elif kind == "text":
            value = draw(TEXT)
        elif kind == "bool":
            value = draw(st.booleans())
        elif kind == "enum":
            value = draw(st.integers(0, 6))
        elif kind in ("uint32", "uint16", "uint8"):
            value = draw(st.integers(0, 2 ** {"uint32": 32, "uint16": 16, "uint8": 8}[kind] - 1))
        elif kind == "uint64":
            value = draw(st.integers(0, 2**64 - 1))
        elif kind == "float32":
            value = draw(st.floats(width=32, allow_nan=True))
        elif kind == "list":
            fill_list(draw, body, field_name, field.proto.slot.type.list.elementType.which())
            continue
        else:
            continue
        try:
            setattr(body, field_name, value)
        except Exception:  # an enum value pycapnp refuses to set: leave the field at its default
            continue
    frames = [root.to_bytes()]
    frames.extend(draw(st.lists(SMALL_BYTES, max_size=3)))
    return frames


# ------------------------------------------------------------------------------------------------ sending
def open_socket(ctx: zmq.Context[Any], address: str, keys: PeerKeys | None) -> zmq.Socket[Any]:
    sock: zmq.Socket[Any] = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.IDENTITY, os.urandom(12))
    if keys is not None:
        make_client(sock, keys)
    sock.connect(address)
    return sock


def say_hello(sock: zmq.Socket[Any], kind: m.PeerKind) -> int:
    """Open a session and return its prefix (0 if no welcome came quickly)."""
    try:  # never blocks: a socket whose handshake failed has nowhere to send
        sock.send_multipart(encoded(m.Hello(kind, "fuzz", queue_capacity=2)), zmq.NOBLOCK)
    except zmq.Again:
        return 0
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:
        if not sock.poll(50):
            continue
        try:
            reply = m.decode(sock.recv_multipart())
        except Exception:
            continue
        if isinstance(reply, m.Welcome):
            return reply.id_prefix
    return 0


def send_raw_tcp(address: str, data: bytes) -> None:
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1) as conn:
            conn.sendall(data)
            conn.settimeout(0.05)
            try:
                conn.recv(4096)
            except OSError:
                pass
    except OSError:
        pass


def send_batch(data: st.DataObject, ctx: zmq.Context[Any], address: str, keys: PeerKeys | None) -> int:
    """From a fresh socket (saying hello first, or not): up to 25 drawn messages; returns how many went out."""
    sock = open_socket(ctx, address, keys)
    sent = 0
    try:
        prefix = 0
        if data.draw(st.booleans()):
            prefix = say_hello(sock, data.draw(st.sampled_from([m.PeerKind.CLIENT, m.PeerKind.WORKER])))
        strategy = st.one_of(valid_hostile(prefix), mutated(), random_fields())
        for frames in data.draw(st.lists(strategy, min_size=1, max_size=25)):
            if not frames:
                continue
            try:
                sock.send_multipart(frames, zmq.NOBLOCK)
                sent += 1
            except zmq.Again:
                break
        sock.poll(20)  # let it leave before the socket goes
    finally:
        sock.close(linger=0)
    return sent


# ------------------------------------------------------------------------------------------------ the test
def test_live_schedulers_survive_fuzzing_while_real_clients_work(targets: list[Target], tmp_path: Path) -> None:
    keys_dir = None
    for target in targets:
        for keys in target.keys.values():
            if keys is not None:
                keys_dir = os.path.dirname(keys.source)
    workers = [
        RoundTrips(targets[0].cluster.address, False, map_every=10),
        RoundTrips(targets[1].cluster.address, str(keys_dir), map_every=10),
    ]
    ctx: zmq.Context[Any] = zmq.Context()
    processes = [psutil.Process(t.cluster._scheduler.pid) for t in targets]
    # The schedulers are forked from this test process: their RSS starts with the pages they share with it (more or
    # less, by what the tests before imported), so what is bounded is how much it grows while fuzzed.
    start_rss = [process.memory_info().rss / 1e6 for process in processes]
    peak_rss = list(start_rss)
    sent = [0]
    chosen = int(os.environ.get("SCALER_FUZZ_SEED", random.randrange(2**32)))
    print(f"fuzz: {EXAMPLES} batches (SCALER_FUZZ_EXAMPLES), seed {chosen} (SCALER_FUZZ_SEED to replay)")

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        phases=[Phase.generate],  # a live system cannot be shrunk against; the seed is printed
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @seed(chosen)
    @given(st.data())
    def batch(data: st.DataObject) -> None:
        index = data.draw(st.integers(0, len(targets) - 1))
        target = targets[index]
        address = target.cluster.address
        if data.draw(st.integers(0, 19)) == 0:  # now and then, bytes that are not even ZMTP
            send_raw_tcp(address, data.draw(st.binary(max_size=512)))
            return
        role = data.draw(st.sampled_from(sorted(target.keys)))
        sent[0] += send_batch(data, ctx, address, target.keys[role])
        for i, process in enumerate(processes):
            peak_rss[i] = max(peak_rss[i], process.memory_info().rss / 1e6)

    try:
        batch()
    finally:
        ctx.destroy(linger=0)
        for client in workers:
            client.stop()
    for target, process in zip(targets, processes, strict=True):
        alive = process.is_running() and process.status() != psutil.STATUS_ZOMBIE
        assert alive, f"the {target.name} scheduler died: {died_how(target)}"
    for client, target in zip(workers, targets, strict=True):
        assert not client.errors, f"the real client of the {target.name} scheduler failed: {client.errors!r}"
        assert client.done > 10, f"the real client of the {target.name} scheduler made no progress"
    growth = [peak - start for peak, start in zip(peak_rss, start_rss, strict=True)]
    assert max(growth) < 150, f"scheduler memory grew by {growth} MB (from {start_rss} MB) while fuzzed"
    print(f"fuzz: sent {sent[0]:,} messages; round trips {[c.done for c in workers]}; RSS {start_rss} -> {peak_rss} MB")
    # and both still take new clients
    with Client(targets[0].cluster.address, timeout_seconds=10, keys=False) as fresh:
        assert fresh.submit(pow, 2, 3).result(timeout=10) == 8
    with Client(targets[1].cluster.address, timeout_seconds=10, keys=str(keys_dir)) as fresh:
        assert fresh.submit(pow, 2, 4).result(timeout=10) == 16


def test_the_fuzz_payload_can_never_unpickle() -> None:
    import pickle

    for tail in (b"", b"0", b"\x80\x05", b"c\nos\nsystem\n"):
        with pytest.raises(Exception):  # noqa: B017 - any failure will do, as long as nothing is built
            pickle.loads(JUNK + tail)
