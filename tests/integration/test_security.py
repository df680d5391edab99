"""CurveZMQ keys on real processes: a secured SchedulerClusterCombo serves the keys it authorizes, refuses every
other peer fast and with words to act on, runs nothing for intruders, drops revoked keys without a restart; payload
limits; and the monitor channel (tcp:// with keys, ipc:// files private to the user).

Keys come from scaler.security.keys.generate, as scaler_keygen writes them. Every process is started here and
stopped here.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from scaler import Client, SchedulerClusterCombo
from scaler.errors import AuthenticationError, ConnectionFailedError, PayloadTooLargeError, TaskFailedError
from scaler.io.curve import make_client
from scaler.payloads import pack_function
from scaler.protocol.errors import ProtocolError
from scaler.protocol.messages import (
    ID_PREFIX_SHIFT,
    DispatchTasks,
    Heartbeat,
    Hello,
    Message,
    PeerKind,
    PutObjects,
    Refused,
    SubmitTasks,
    TaskResults,
    TaskStatus,
    Welcome,
    decode,
)
from scaler.security.keys import ENV_VAR, PeerKeys, generate, load_peer_keys
from scaler.serializer import DEFAULT_SERIALIZER
from tests.helpers import combo_processes, encoded, fibonacci, free_address, free_port

TIMEOUT = 20
FAST: dict[str, Any] = {"heartbeat_interval_seconds": 0.5, "worker_timeout_seconds": 3, "logging_level": "WARNING"}
LIMIT = 1_000_000  # max_payload_bytes of the unsecured combo
BIG = b"x" * 2_000_000
BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
MADE_UP_PREFIX = 0x5CA1E  # an intruder without a session guesses an id prefix


# ----------------------------------------------------------------------------------------------- task functions
def square(x: int) -> int:
    return x * x


def add(a: int, b: int) -> int:
    return a + b


def touch(path: str) -> str:
    """What an intruder wants to run: it leaves a marker file behind."""
    Path(path).touch()
    return path


def whoami(_: int = 0) -> int:
    return os.getpid()


def sleep_then(seconds: float, value: int) -> int:
    time.sleep(seconds)
    return value


def make_bytes(n: int) -> bytes:
    return b"x" * n


# ----------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def keys_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The secured cluster's keys: scheduler, client, worker, and a named client alice (DIR/alice)."""
    root = tmp_path_factory.mktemp("keys")
    generate(root, clients=["alice"])
    return root


@pytest.fixture(scope="module")
def other_keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Keys of another cluster: a scheduler pair and client and worker keys the secured scheduler never authorized."""
    root = tmp_path_factory.mktemp("other-keys")
    generate(root)
    return root


@pytest.fixture(scope="module")
def secured(keys_dir: Path) -> Iterator[SchedulerClusterCombo]:
    """A scheduler that requires keys, two workers with the worker key, and a tcp:// monitor for monitor keys."""
    combo = SchedulerClusterCombo(
        address=free_address(),
        n_workers=2,
        keys=keys_dir,
        monitor_address=f"tcp://127.0.0.1:{free_port()}",
        **FAST,
    )
    try:
        yield combo
    finally:
        combo.shutdown()


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchedulerClusterCombo]:
    """A scheduler without keys and one worker, with a payload limit of LIMIT bytes and an ipc:// monitor."""
    monitor = tmp_path_factory.mktemp("ipc") / "monitor"
    combo = SchedulerClusterCombo(
        address=free_address(),
        n_workers=1,
        keys=False,
        monitor_address=f"ipc://{monitor}",
        max_payload_bytes=LIMIT,
        **FAST,
    )
    try:
        yield combo
    finally:
        combo.shutdown()


@pytest.fixture(scope="module")
def secure_client(secured: SchedulerClusterCombo, keys_dir: Path) -> Iterator[Client]:
    client = Client(secured.address, keys=keys_dir, timeout_seconds=TIMEOUT)
    try:
        yield client
    finally:
        client.disconnect()


@pytest.fixture(scope="module")
def plain_client(plain: SchedulerClusterCombo) -> Iterator[Client]:
    client = Client(plain.address, keys=False, timeout_seconds=TIMEOUT)
    try:
        yield client
    finally:
        client.disconnect()


# ----------------------------------------------------------------------------------------------- helpers
def key_folder(where: Path, scheduler_from: Path, secret_from: Path, as_role: str = "client") -> Path:
    """A keys directory holding `scheduler_from`'s scheduler.key and the secret file `secret_from`, named
    <as_role>.key_secret: what a peer would be handed by mistake, or steal."""
    where.mkdir()
    shutil.copy(scheduler_from / "scheduler.key", where / "scheduler.key")
    shutil.copy(secret_from, where / f"{as_role}.key_secret")
    os.chmod(where / f"{as_role}.key_secret", 0o600)
    return where


def refused_fast(address: str, keys: str | os.PathLike[str] | PeerKeys | bool | None) -> str:
    """Connecting fails with AuthenticationError, long before its timeout; returns the message."""
    start = time.monotonic()
    with pytest.raises(AuthenticationError) as caught:
        Client(address, keys=keys, timeout_seconds=10)
    elapsed = time.monotonic() - start
    assert elapsed < 5, f"AuthenticationError took {elapsed:.1f}s for a 10s timeout"
    message = str(caught.value)
    assert "authentication failed" in message and address in message, message
    return message


def combo_pids(combo: SchedulerClusterCombo) -> set[int]:
    return {process.pid for process in combo_processes(combo)}


def receive(sock: zmq.Socket[Any], seconds: float, until: type | None = None) -> list[Message]:
    """Every message the scheduler sends `sock` within `seconds` (or up to the first of type `until`)."""
    received: list[Message] = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if sock.poll(int(left * 1000) + 1):
            try:
                received.append(decode(sock.recv_multipart(copy=True)))
            except ProtocolError as exc:
                received.append(Refused(f"undecodable: {exc}"))
            if until is not None and isinstance(received[-1], until):
                break
    return received


def send(sock: zmq.Socket[Any], message: Message) -> bool:
    """Send without waiting; False if ZeroMQ has nowhere to send it (no connection ever completed its handshake)."""
    try:
        sock.send_multipart(encoded(message), zmq.NOBLOCK)
    except zmq.Again:
        return False
    return True


def raw_dealer(ctx: zmq.Context[Any], address: str, identity: bytes, keys: PeerKeys | None = None) -> zmq.Socket[Any]:
    sock: zmq.Socket[Any] = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.IDENTITY, identity)
    if keys is not None:
        make_client(sock, keys)
    sock.connect(address)
    return sock


def submit_by_hand(address: str, marker: Path, listen: float) -> list[Message]:
    """A hand-built client without keys: hello, then (with the prefix a welcome gave, or a guessed one) the function
    `touch` and a task touch(marker). Returns every message it got back, up to the task's result or for `listen`
    seconds."""
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        sock = raw_dealer(ctx, address, b"C|intruder|1|" + os.urandom(8).hex().encode())
        send(sock, Hello(PeerKind.CLIENT, "intruder", "intruder-host", 1))
        received = receive(sock, 1.0, until=Welcome)
        prefix = next((m.id_prefix for m in received if isinstance(m, Welcome)), MADE_UP_PREFIX)
        function_id, task_id = (prefix << ID_PREFIX_SHIFT) | 1, (prefix << ID_PREFIX_SHIFT) | 2
        send(sock, PutObjects([function_id], [pack_function(DEFAULT_SERIALIZER, touch)], ["touch"]))
        argument = DEFAULT_SERIALIZER.serialize(str(marker))
        send(sock, SubmitTasks([task_id], [function_id], b"\x00", [1], [0], None, [argument]))
        return received + receive(sock, listen, until=TaskResults)
    finally:
        ctx.destroy(linger=0)


def private(mode: int) -> bool:
    """Read and write for the owner, nothing for anyone else: 0600, as docs/security.md says."""
    return stat.S_IMODE(mode) == 0o600


def cli(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{name} is not installed next to {sys.executable}")
    return str(path)


def run_cli(*args: str, timeout: float = 15) -> subprocess.CompletedProcess[str]:
    """Run a CLI in its own session; on timeout, kill its whole group and fail."""
    env = {key: value for key, value in os.environ.items() if key != ENV_VAR}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    process = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"{args[0]} did not exit within {timeout}s:\n{out}\n{err}")
    return subprocess.CompletedProcess(args, process.returncode, out, err)


# ----------------------------------------------------------------------------------------------- 1, 2: served
def test_a_client_with_keys_gets_results_from_submit_map_get_and_send_object(secure_client: Client) -> None:
    assert secure_client.submit(square, 7).result(timeout=TIMEOUT) == 49
    assert secure_client.map(square, [(i,) for i in range(50)], timeout=TIMEOUT) == [i * i for i in range(50)]
    graph: dict[Hashable, Any] = {"a": 2, "b": 3, "c": (add, "a", "b"), "d": (square, "c")}
    assert secure_client.get(graph, keys=["c", "d"], timeout=TIMEOUT) == {"c": 5, "d": 25}
    ref = secure_client.send_object(list(range(100)), name="numbers")
    assert secure_client.submit(sum, ref).result(timeout=TIMEOUT) == 4950


def test_nested_fibonacci_with_the_client_it_was_given(secure_client: Client) -> None:
    """The client pickled into the task carries its keys: the nested clients connect to the secured scheduler."""
    assert secure_client.submit(fibonacci, secure_client, 8).result(timeout=TIMEOUT) == 21


# ----------------------------------------------------------------------------------------------- 3: refused fast
def test_no_keys_against_a_scheduler_that_requires_them(secured: SchedulerClusterCombo) -> None:
    message = refused_fast(secured.address, False)
    assert "requires keys" in message and "this client has none" in message, message
    assert "client.key_secret" in message, message


def test_a_worker_key_cannot_open_a_client_session(
    secured: SchedulerClusterCombo, keys_dir: Path, tmp_path: Path
) -> None:
    stolen = key_folder(tmp_path / "worker-as-client", keys_dir, keys_dir / "worker.key_secret")
    message = refused_fast(secured.address, stolen)
    assert "refused this client's key" in message, message
    assert "authorized for workers only" in message and "give this client a client key" in message, message


def test_a_key_the_scheduler_does_not_authorize(
    secured: SchedulerClusterCombo, keys_dir: Path, other_keys: Path, tmp_path: Path
) -> None:
    stranger = key_folder(tmp_path / "stranger", keys_dir, other_keys / "client.key_secret")
    message = refused_fast(secured.address, stranger)
    assert "does not accept this client's key" in message, message
    assert str(stranger / "client.key_secret") in message and "authorized_clients/" in message, message


def test_the_wrong_scheduler_key(
    secured: SchedulerClusterCombo, keys_dir: Path, other_keys: Path, tmp_path: Path
) -> None:
    """The client's own key is authorized, but the scheduler.key it pins is another scheduler's."""
    pinned_wrong = key_folder(tmp_path / "wrong-scheduler", other_keys, keys_dir / "client.key_secret")
    message = refused_fast(secured.address, pinned_wrong)
    assert "scheduler.key" in message and "is not the public key of the scheduler" in message, message


def test_keys_against_a_scheduler_without_keys(plain: SchedulerClusterCombo, keys_dir: Path) -> None:
    message = refused_fast(plain.address, keys_dir)
    # in words that depend on which side saw the mismatch first; either way they name both causes to check
    assert "runs without keys" in message, message
    assert re.search(r"(will not fall|never falls) back to an unencrypted connection", message), message


def test_the_secured_scheduler_still_serves_after_the_refusals(secure_client: Client) -> None:
    assert secure_client.submit(square, 5).result(timeout=TIMEOUT) == 25


# ----------------------------------------------------------------------------------------------- 4: intruders
def test_a_hand_built_submit_runs_on_a_scheduler_without_keys(plain: SchedulerClusterCombo, tmp_path: Path) -> None:
    """The control of the intruder tests below: the very messages they send do run code where nothing stops them."""
    marker = tmp_path / "ran"
    received = submit_by_hand(plain.address, marker, listen=TIMEOUT)
    assert [type(m) for m in received] == [Welcome, TaskResults], received
    assert isinstance(received[1], TaskResults) and received[1].statuses == bytes([TaskStatus.SUCCESS]), received
    assert marker.exists()


def test_a_raw_socket_without_keys_runs_nothing(
    secured: SchedulerClusterCombo, secure_client: Client, tmp_path: Path
) -> None:
    marker = tmp_path / "intruder-ran"
    received = submit_by_hand(secured.address, marker, listen=2.0)
    assert received == [], received  # no welcome, no error: its handshake never completed
    assert secure_client.submit(square, 6).result(timeout=TIMEOUT) == 36
    assert not marker.exists()


@pytest.mark.parametrize("level", ["INFO", "WARNING"])
def test_a_worker_with_a_client_key_exits_1_saying_why(
    secured: SchedulerClusterCombo, secure_client: Client, keys_dir: Path, tmp_path: Path, level: str
) -> None:
    """scaler_cluster given the client's secret as its worker key: refused, it stops (exit 1) and logs why, at any
    logging level; the tasks submitted meanwhile run on the real workers only."""
    fake = key_folder(tmp_path / "client-as-worker", keys_dir, keys_dir / "client.key_secret", as_role="worker")
    start = time.monotonic()
    program = subprocess.Popen(
        [cli("scaler_cluster"), "--keys", str(fake), "-n", "1", "--logging-level", level, secured.address],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        pids = secure_client.map(whoami, [(i,) for i in range(40)], timeout=TIMEOUT)
        output, _ = program.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(program.pid, signal.SIGKILL)
        output, _ = program.communicate()
        pytest.fail(f"scaler_cluster with a client key did not exit within 10s:\n{output}")
    finally:
        if program.poll() is None:
            os.killpg(program.pid, signal.SIGKILL)
            program.wait()
    assert time.monotonic() - start < 10
    assert program.returncode == 1, output
    assert "the scheduler refused this worker: the key 'client' is authorized for clients only" in output, output
    assert "give this worker a worker key" in output, output
    assert "ClusterProcess: every worker failed" in output, output
    assert set(pids) <= combo_pids(secured), "a task ran outside the secured combo's workers"


def test_a_client_key_cannot_open_a_worker_session(
    secured: SchedulerClusterCombo, secure_client: Client, keys_dir: Path, tmp_path: Path
) -> None:
    """A raw CURVE socket with the client's keys says hello as a worker: refused (keyProblem), it is sent no task
    nor object, and its forged result for a legit task is ignored."""
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        identity = b"W|intruder|1|" + os.urandom(8).hex().encode()
        sock = raw_dealer(ctx, secured.address, identity, load_peer_keys(keys_dir, "client"))
        assert send(sock, Hello(PeerKind.WORKER, "intruder", "intruder-host", 1, queue_capacity=1000))
        answer = receive(sock, 1.0)
        assert len(answer) == 1 and isinstance(answer[0], Refused), answer
        assert answer[0].key_problem, answer
        assert "authorized for clients only" in answer[0].reason, answer

        marker = tmp_path / "legit-ran"
        slow = secure_client.submit(sleep_then, 1.0, 42)
        legit = secure_client.submit(touch, str(marker))
        where = secure_client.submit(whoami)
        assert send(sock, Heartbeat())
        forged = DEFAULT_SERIALIZER.serialize(666)
        assert send(sock, TaskResults([slow.task_id], bytes([TaskStatus.SUCCESS]), [forged]))
        assert slow.result(timeout=TIMEOUT) == 42, "a forged result from a refused peer ended the task"
        assert legit.result(timeout=TIMEOUT) == str(marker) and marker.exists()
        assert where.result(timeout=TIMEOUT) in combo_pids(secured)  # run by a real worker
        later = receive(sock, 0.5)
        assert not [m for m in answer + later if isinstance(m, (DispatchTasks, PutObjects, TaskResults))], later
    finally:
        ctx.destroy(linger=0)


# ----------------------------------------------------------------------------------------------- 5: revocation
def test_a_removed_key_ends_its_session_and_a_new_key_gets_in_without_restart(
    secured: SchedulerClusterCombo, secure_client: Client, keys_dir: Path
) -> None:
    alice = Client(secured.address, keys=keys_dir / "alice", timeout_seconds=TIMEOUT)
    try:
        assert alice.submit(square, 3).result(timeout=TIMEOUT) == 9
        pending = alice.submit(sleep_then, 30, 0)
        (keys_dir / "authorized_clients" / "alice.key").unlink()
        start = time.monotonic()
        with pytest.raises(AuthenticationError) as caught:
            pending.result(timeout=10)
        assert time.monotonic() - start < 5, "the revoked session outlived the key by 5s"
        assert "removed from the authorized keys" in str(caught.value), caught.value
        with pytest.raises(AuthenticationError, match="removed from the authorized keys"):
            alice.submit(square, 3)
    finally:
        alice.disconnect()
    assert "does not accept this client's key" in refused_fast(secured.address, keys_dir / "alice")
    assert secure_client.submit(square, 4).result(timeout=TIMEOUT) == 16  # the other sessions go on

    generate(keys_dir, clients=["bob"])
    deadline = time.monotonic() + 5
    while True:
        try:
            bob = Client(secured.address, keys=keys_dir / "bob", timeout_seconds=5)
            break
        except AuthenticationError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    with bob:
        assert bob.submit(square, 8).result(timeout=TIMEOUT) == 64


# ----------------------------------------------------------------------------------------------- 6: SCALER_KEYS
def test_scaler_keys_from_the_environment(
    secured: SchedulerClusterCombo, keys_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_VAR, str(keys_dir))
    with Client(secured.address, timeout_seconds=TIMEOUT) as client:
        assert client.submit(square, 9).result(timeout=TIMEOUT) == 81
    assert "requires keys" in refused_fast(secured.address, False)


# ----------------------------------------------------------------------------------------------- 7: payload limits
def test_payloads_over_the_limit_are_refused_before_they_leave(plain_client: Client) -> None:
    with pytest.raises(PayloadTooLargeError, match=f"argument 0 of len .*limit of {LIMIT:,} bytes"):
        plain_client.submit(len, BIG)
    with pytest.raises(PayloadTooLargeError, match=f"the object .*limit of {LIMIT:,} bytes"):
        plain_client.send_object(BIG)
    with pytest.raises(PayloadTooLargeError, match=f"limit of {LIMIT:,} bytes"):
        plain_client.map(len, [(b"small",), (BIG,)])
    assert plain_client.submit(len, b"x" * (LIMIT // 2)).result(timeout=TIMEOUT) == LIMIT // 2


def test_a_result_over_the_limit_fails_its_task(plain_client: Client) -> None:
    with pytest.raises(TaskFailedError, match=f"limit of {LIMIT:,} bytes"):
        plain_client.submit(make_bytes, len(BIG)).result(timeout=TIMEOUT)
    assert plain_client.submit(make_bytes, 10).result(timeout=TIMEOUT) == b"x" * 10
    assert plain_client.map(square, [(i,) for i in range(10)], timeout=TIMEOUT) == [i * i for i in range(10)]


# ----------------------------------------------------------------------------------------------- 8: the monitor
def test_scaler_top_with_a_monitor_key_reads_the_tcp_monitor(
    secured: SchedulerClusterCombo, secure_client: Client, keys_dir: Path
) -> None:
    secure_client.submit(square, 2).result(timeout=TIMEOUT)  # both workers have had time to join
    done = run_cli(cli("scaler_top"), "--once", "--timeout", "10", "--keys", str(keys_dir), secured.monitor_address)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"Total [12] worker\(s\)", done.stdout) and "task_manager" in done.stdout, done.stdout


def test_scaler_top_without_keys_fails_authentication_at_once(secured: SchedulerClusterCombo) -> None:
    start = time.monotonic()
    done = run_cli(cli("scaler_top"), "--once", "--timeout", "10", secured.monitor_address)
    assert time.monotonic() - start < 5, "scaler_top waited for its --timeout after the handshake failed"
    assert done.returncode == 1, done.stdout + done.stderr
    assert "authentication failed" in done.stdout and "requires keys" in done.stdout, done.stdout


@pytest.mark.parametrize("secret", ["client.key_secret", "worker.key_secret"])
def test_the_tcp_monitor_admits_monitor_keys_only(
    secured: SchedulerClusterCombo, keys_dir: Path, tmp_path: Path, secret: str
) -> None:
    """A client's or a worker's key, passed off as a monitor key, is authorized on the scheduler's address, not on the
    monitor: the monitor carries other clients' task data."""
    posing = tmp_path / f"{secret}-as-monitor"
    posing.mkdir(mode=0o700)
    shutil.copy(keys_dir / "scheduler.key", posing / "scheduler.key")
    shutil.copy(keys_dir / secret, posing / "monitor.key_secret")
    start = time.monotonic()
    done = run_cli(cli("scaler_top"), "--once", "--timeout", "10", "--keys", str(posing), secured.monitor_address)
    assert time.monotonic() - start < 5, "scaler_top waited for its --timeout after the handshake failed"
    assert done.returncode == 1, done.stdout + done.stderr
    assert "authentication failed" in done.stdout and "does not accept" in done.stdout, done.stdout


def test_scaler_top_with_a_worker_keys_directory_is_a_usage_error(
    secured: SchedulerClusterCombo, keys_dir: Path, tmp_path: Path
) -> None:
    worker_only = key_folder(tmp_path / "worker-only", keys_dir, keys_dir / "worker.key_secret", as_role="worker")
    done = run_cli(cli("scaler_top"), "--once", "--keys", str(worker_only), secured.monitor_address)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "scaler_top: error:" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert f"{worker_only / 'monitor.key_secret'} is missing" in done.stderr, done.stderr


def test_the_ipc_monitor_of_a_running_combo_is_private(plain: SchedulerClusterCombo) -> None:
    path = plain.monitor_address.removeprefix("ipc://")
    info = os.lstat(path)
    assert stat.S_ISSOCK(info.st_mode) and info.st_uid == os.geteuid()
    assert private(info.st_mode), oct(info.st_mode)


def test_an_ipc_monitor_path_that_is_a_plain_file_is_a_start_up_error(tmp_path: Path) -> None:
    path = tmp_path / "monitor"
    path.write_text("not a socket")
    with pytest.raises(RuntimeError, match="is not a socket") as caught:
        SchedulerClusterCombo(address=free_address(), n_workers=0, monitor_address=f"ipc://{path}", **FAST)
    assert str(path) in str(caught.value)
    assert path.read_text() == "not a socket"  # left as it was


def test_a_stale_ipc_socket_of_ours_is_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "monitor"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens: what a killed scheduler leaves behind
    with SchedulerClusterCombo(address=free_address(), n_workers=0, monitor_address=f"ipc://{path}", **FAST):
        info = os.lstat(path)
        assert stat.S_ISSOCK(info.st_mode) and private(info.st_mode), oct(info.st_mode)


def test_an_ipc_monitor_path_in_use_is_a_start_up_error(tmp_path: Path) -> None:
    path = tmp_path / "monitor"
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        live.bind(str(path))
        live.listen()
        with pytest.raises(RuntimeError, match="is in use"):
            SchedulerClusterCombo(address=free_address(), n_workers=0, monitor_address=f"ipc://{path}", **FAST)
        assert stat.S_ISSOCK(os.lstat(path).st_mode)  # not taken over
    finally:
        live.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can make a file that belongs to another user (os.chown)")
def test_an_ipc_monitor_path_of_another_user_is_a_start_up_error(tmp_path: Path) -> None:
    path = tmp_path / "monitor"
    path.touch()
    os.chown(path, 65534, 65534)  # nobody
    with pytest.raises(RuntimeError, match="belongs to") as caught:
        SchedulerClusterCombo(address=free_address(), n_workers=0, monitor_address=f"ipc://{path}", **FAST)
    assert "uid 65534" in str(caught.value)
    assert os.lstat(path).st_uid == 65534


# ----------------------------------------------------------------------------------------------- still serving
def test_the_secured_cluster_serves_after_everything_above(secured: SchedulerClusterCombo, keys_dir: Path) -> None:
    with Client(secured.address, keys=keys_dir, timeout_seconds=TIMEOUT) as client:
        assert client.map(square, [(i,) for i in range(20)], timeout=TIMEOUT) == [i * i for i in range(20)]
    with pytest.raises(ConnectionFailedError):
        Client(secured.address, keys=False, timeout_seconds=10)
