"""The command-line programs with keys, as a user runs them: scaler_scheduler and scaler_cluster with --keys, their
usage errors, --keys in every program's help, and the warning of a scheduler on the network without keys.

Every process is started here in its own session and killed (by its process group) if a test fails.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from scaler import Client
from scaler.errors import AuthenticationError
from scaler.io.curve import make_client
from scaler.protocol.messages import Hello, Message, PeerKind, Refused, Welcome, decode
from scaler.security.keys import PeerKeys, generate, load_peer_keys
from tests.e2e.cli_tasks import fibonacci, square
from tests.e2e.test_cli import Program, cli, run, wait_for_agents
from tests.helpers import encoded, free_address, free_port

TIMEOUT = 20


@pytest.fixture()
def started() -> Iterator[list[Program]]:
    """Programs a test starts; whatever is left is killed at the end."""
    programs: list[Program] = []
    yield programs
    for program in programs:
        program.kill()


def start(programs: list[Program], *args: str) -> Program:
    program = Program(*args)
    programs.append(program)
    return program


def test_a_scheduler_and_workers_with_keys_serve_a_client_with_keys(started: list[Program], tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    generate(keys)
    address = free_address()
    scheduler = start(started, cli("scaler_scheduler"), "--keys", str(keys), address)
    scheduler.wait_for_output(r"monitor address is")
    assert f"listening on {address} (CurveZMQ keys required)" in scheduler.output, scheduler.output
    cluster = start(started, cli("scaler_cluster"), "--keys", str(keys), "-n", "1", address)
    wait_for_agents(cluster, 1)
    with Client(address, keys=keys, timeout_seconds=TIMEOUT) as client:
        assert client.submit(square, 4).result(timeout=TIMEOUT) == 16
        assert client.submit(fibonacci, client, 6).result(timeout=TIMEOUT) == 8  # nested clients carry the keys
    with pytest.raises(AuthenticationError, match="requires keys"):
        Client(address, keys=False, timeout_seconds=10)
    assert f"worker key {keys / 'worker.key_secret'}" in cluster.output, cluster.output

    # SIGHUP re-reads the authorized keys; the worker's removed, its session ends and the worker exits 1
    (keys / "authorized_workers" / "worker.key").unlink()
    os.kill(scheduler.pid, signal.SIGHUP)
    scheduler.wait_for_output(r"reloading the authorized keys")
    assert cluster.wait(10) == 1, cluster.output
    assert "its key was removed from the authorized keys" in cluster.output, cluster.output
    assert "every worker failed" in cluster.output, cluster.output
    os.kill(scheduler.pid, signal.SIGTERM)
    assert scheduler.wait() == 0
    assert "Traceback" not in scheduler.output + cluster.output, scheduler.output + cluster.output


@pytest.mark.parametrize("program", ["scaler_scheduler", "scaler_cluster", "scaler_worker"])
def test_a_keys_directory_that_does_not_exist_is_a_usage_error(program: str, tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent"
    done = run(cli(program), "--keys", str(missing), "tcp://127.0.0.1:8516")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{program}: error:" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert f"the keys directory {missing} does not exist" in done.stderr, done.stderr
    assert f"scaler_keygen {missing}" in done.stderr, done.stderr


def test_a_scheduler_given_a_clients_copy_of_the_keys_is_a_usage_error(tmp_path: Path) -> None:
    """DIR/alice is what alice's machine gets: the scheduler's public key and alice's secret, no scheduler secret."""
    generate(tmp_path, clients=["alice"])
    done = run(cli("scaler_scheduler"), "--keys", str(tmp_path / "alice"), "tcp://127.0.0.1:8516")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{tmp_path / 'alice' / 'scheduler.key_secret'} is missing" in done.stderr, done.stderr


@pytest.mark.parametrize("program", ["scaler_scheduler", "scaler_cluster", "scaler_top", "scaler_ui"])
def test_help_mentions_keys(program: str) -> None:
    done = run(cli(program), "-h")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())  # argparse wraps lines at the terminal's width
    assert "--keys DIR" in text and "scaler_keygen" in text and "SCALER_KEYS" in text, done.stdout


def test_a_scheduler_on_the_network_without_keys_warns(started: list[Program]) -> None:
    address = f"tcp://0.0.0.0:{free_port()}"
    scheduler = start(started, cli("scaler_scheduler"), address)
    line = scheduler.wait_for_output(r"\[WARNING\][^\n]*without keys[^\n]*").group(0)
    assert f"listens on {address} without keys" in line, line
    assert "scaler_keygen" in line and "--keys DIR" in line, line
    assert not re.search(r"publishes its monitor on \S+ without keys", scheduler.output), scheduler.output  # ipc
    os.kill(scheduler.pid, signal.SIGTERM)
    assert scheduler.wait() == 0, scheduler.output


def test_a_scheduler_on_loopback_without_keys_does_not_warn(started: list[Program]) -> None:
    scheduler = start(started, cli("scaler_scheduler"), free_address())
    scheduler.wait_for_output(r"monitor address is")
    with Client(scheduler.args[-1], keys=False, timeout_seconds=TIMEOUT):
        pass  # serving, past its start-up warnings
    assert "without keys" not in scheduler.output, scheduler.output
    os.kill(scheduler.pid, signal.SIGTERM)
    assert scheduler.wait() == 0


def hello_answer(address: str, keys: PeerKeys, kind: PeerKind, name: str) -> Message | None:
    """What the scheduler answers a raw CURVE socket with `keys` that says hello as `kind` (None: nothing in 5 s,
    e.g. when the handshake was refused)."""
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        sock: zmq.Socket[Any] = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IDENTITY, b"M|" + name.encode() + b"|1|" + os.urandom(16).hex().encode())
        make_client(sock, keys)
        sock.connect(address)
        sock.send_multipart(encoded(Hello(kind, name, "manager-host", os.getpid())))
        return decode(sock.recv_multipart()) if sock.poll(5000) else None
    finally:
        ctx.destroy(linger=0)


def test_a_scheduler_with_keys_admits_a_manager_key_as_a_worker_manager_only(
    started: list[Program], tmp_path: Path
) -> None:
    keys = tmp_path / "keys"
    generate(keys, managers=["slurm"])
    address = free_address()
    scheduler = start(started, cli("scaler_scheduler"), "--keys", str(keys), address)
    scheduler.wait_for_output(r"monitor address is")
    assert "1 client, 1 worker, 2 manager and 1 monitor keys authorized" in scheduler.output, scheduler.output
    manager = load_peer_keys(keys, "manager")
    slurm = load_peer_keys(keys / "slurm", "manager")

    for peer_keys, name in ((manager, "local"), (slurm, "slurm")):
        answer = hello_answer(address, peer_keys, PeerKind.MANAGER, name)
        assert isinstance(answer, Welcome), answer
    for kind in (PeerKind.CLIENT, PeerKind.WORKER):  # a manager key opens no client or worker session
        answer = hello_answer(address, manager, kind, "intruder")
        assert isinstance(answer, Refused) and answer.key_problem, answer
        assert "authorized for worker managers only" in answer.reason, answer
    answer = hello_answer(address, load_peer_keys(keys, "client"), PeerKind.MANAGER, "intruder")
    assert isinstance(answer, Refused) and answer.key_problem, answer  # nor does a client key open a manager's

    (keys / "authorized_managers" / "slurm.key").unlink()  # revoked without a restart
    os.kill(scheduler.pid, signal.SIGHUP)
    scheduler.wait_for_output(r"reloading the authorized keys")
    assert hello_answer(address, slurm, PeerKind.MANAGER, "slurm-again") is None  # refused at the handshake
    os.kill(scheduler.pid, signal.SIGTERM)
    assert scheduler.wait() == 0, scheduler.output
    assert "Traceback" not in scheduler.output, scheduler.output


def test_a_keys_directory_made_before_manager_keys_serves_as_before(started: list[Program], tmp_path: Path) -> None:
    """No manager.key_secret and no authorized_managers/: the scheduler, the workers and the clients run as they did,
    and nothing is reported wrong with the keys."""
    keys = tmp_path / "keys"
    generate(keys)
    (keys / "manager.key_secret").unlink()
    shutil.rmtree(keys / "authorized_managers")
    address = free_address()
    scheduler = start(started, cli("scaler_scheduler"), "--keys", str(keys), address)
    scheduler.wait_for_output(r"monitor address is")
    assert "1 client, 1 worker, 0 manager and 1 monitor keys authorized" in scheduler.output, scheduler.output
    cluster = start(started, cli("scaler_cluster"), "--keys", str(keys), "-n", "1", address)
    wait_for_agents(cluster, 1)
    with Client(address, keys=keys, timeout_seconds=TIMEOUT) as client:
        assert client.submit(square, 5).result(timeout=TIMEOUT) == 25
    os.kill(scheduler.pid, signal.SIGTERM)
    assert scheduler.wait() == 0, scheduler.output
    assert "Scheduler: keys:" not in scheduler.output, scheduler.output  # no problem found in the key folders
    assert "[ERROR]" not in scheduler.output and "Traceback" not in scheduler.output, scheduler.output
    assert not (keys / "authorized_managers").exists()  # reading the keys wrote nothing
