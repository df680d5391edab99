"""The TypeScript client and worker (ts/, the JSON payload convention) with the Python scheduler, workers and client.

ts/dist is built by scripts/ts-setup (Node.js >= 20, npm, Debian's capnproto). Without it these tests skip, or fail when
SCALER_TS_TEST=required (scripts/test sets it). Every process is started in its own session and killed (by its process
group) at the end.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import zmq

from scaler import Client
from scaler.conformance.wire import MAX_FRAME, Task, build, parse, task_batch_fields, u64
from tests.e2e.test_cli import Program, cli, start, wait_for_agents
from tests.e2e.test_cli import programs as programs  # the fixture: programs a test starts, killed after
from tests.helpers import free_address
from tests.integration.test_connection_flood import DroppingProxy

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "ts" / "dist"
TIMEOUT = 60


def missing(why: str) -> None:
    if os.environ.get("SCALER_TS_TEST") == "required":
        pytest.fail(why)
    pytest.skip(why)


def node() -> str:
    found = shutil.which("node")
    if found is None:
        missing("node (Node.js >= 20) is not installed")
    assert found is not None
    if not (DIST / "worker.js").exists():
        missing(f"{DIST / 'worker.js'} is missing: run scripts/ts-setup")
    return found


def python_marker(i: int) -> dict[str, Any]:
    """A Python task: says which process ran it."""
    return {"i": i, "pid": os.getpid(), "lang": "python"}


def start_scheduler(programs: list[Program], address: str, *extra: str) -> Program:
    scheduler = start(programs, cli("scaler_scheduler"), *extra, address)
    scheduler.wait_for_output(r"monitor address is")
    return scheduler


def start_ts_worker(programs: list[Program], address: str, name: str, *extra: str) -> Program:
    worker = start(programs, node(), str(DIST / "worker.js"), address, "--name", name, *extra)
    worker.wait_for_output(r"connected to scheduler|error")
    assert "connected to scheduler" in worker.output, worker.output
    return worker


def ts_example(address: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    """Run the TypeScript example client: its exit status, its JSON report, and its stderr."""
    began = time.monotonic()
    done = subprocess.run(
        [node(), str(DIST / "example.js"), address, *extra],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    lines = done.stdout.strip().splitlines()
    assert lines, f"no report from example.js (status {done.returncode}):\n{done.stderr}"
    report: dict[str, Any] = json.loads(lines[-1])
    report["seconds"] = time.monotonic() - began
    return done.returncode, report, done.stderr


def test_the_typescript_unit_tests_pass() -> None:
    done = subprocess.run(
        [node(), "--test", str(DIST / "test")], capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT / "ts"
    )
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    assert re.search(r"^# fail 0$", done.stdout, re.MULTILINE), done.stdout[-3000:]


def test_python_and_typescript_peers_share_a_scheduler(programs: list[Program]) -> None:
    """Python tasks run on Python workers only, JSON tasks on the TypeScript worker only, at the same time."""
    address = free_address()
    scheduler = start_scheduler(programs, address)
    cluster = start(programs, cli("scaler_cluster"), "-n", "2", address)
    wait_for_agents(cluster, 2)
    ts_worker = start_ts_worker(programs, address, "ts-e2e")
    assert "capabilities: payload=json, lang=ts" in ts_worker.output, ts_worker.output

    ts_client = start(programs, node(), str(DIST / "example.js"), address, "--count", "200")
    with Client(address, timeout_seconds=TIMEOUT) as client:
        results = client.map(python_marker, range(200), timeout=TIMEOUT)
    python_pids = {process.pid for process in cluster.tree()}
    assert [result["i"] for result in results] == list(range(200))
    ran_on = {result["pid"] for result in results}
    assert ran_on <= python_pids, (ran_on, python_pids)
    assert ts_worker.pid not in ran_on

    assert ts_client.wait(TIMEOUT) == 0, ts_client.output
    report = json.loads(ts_client.output.strip().splitlines()[-1])
    assert report["ok"] is True, report
    assert report["sums"] == [i + 1000 for i in range(200)]
    ts_info = {"name": "ts-e2e", "pid": ts_worker.pid, "hostname": os.uname().nodename, "lang": "ts"}
    assert report["workers"] == [ts_info]  # every JSON task ran on the TypeScript worker
    assert report["kwargs"] == {"a": 1, "b": "two"}  # keyword arguments: one last JSON object
    assert report["remoteError"] == "RemoteError: Error: boom"  # the error payload's text
    assert report["canceled"] == "CanceledError"  # a running JSON task, cancelled by its client
    assert re.fullmatch(r"task 0x[0-9a-f]+ was sent to worker ts-e2e \(attempt 1\)", report["explained"]), report

    ts_worker.process.terminate()  # SIGTERM: the worker says disconnect and exits 0
    assert ts_worker.wait(TIMEOUT) == 0, ts_worker.output
    scheduler.wait_for_output(r"worker ts-e2e left \(disconnected: received SIGTERM\)")
    for program in (cluster, scheduler):
        program.process.terminate()
        assert program.wait(TIMEOUT) == 0, program.output[-3000:]
    output = scheduler.output + cluster.output + ts_worker.output
    assert "Traceback" not in output and "malformed" not in output, output[-5000:]


def test_a_json_task_no_worker_can_run_fails_at_once(programs: list[Program]) -> None:
    """The TypeScript client's tasks require payload=json: with only Python workers, they fail "missing capabilities"
    (and so does a task requiring a capability the TypeScript worker lacks)."""
    address = free_address()
    start_scheduler(programs, address)
    cluster = start(programs, cli("scaler_cluster"), "-n", "1", address)
    wait_for_agents(cluster, 1)
    status, report, _ = ts_example(address, "--count", "2", "--timeout-ms", "20000")
    assert status == 1 and report["ok"] is False, report
    assert report["seconds"] < 10, report  # at once, not after example.js's 20 s wait
    for error in report["errors"]:
        assert error.startswith("MissingCapabilityError: missing capabilities: the task requires payload=json"), error
        assert "[payload=python]" in error, error

    start_ts_worker(programs, address, "ts-no-gpu")
    status, report, _ = ts_example(address, "--count", "2", "--require", "gpu", "--timeout-ms", "20000")
    assert status == 1, report
    for error in report["errors"]:
        assert error.startswith("MissingCapabilityError: missing capabilities: the task requires gpu, payload=json"), (
            error
        )
    status, report, _ = ts_example(address, "--count", "2", "--require", "lang=ts")
    assert status == 0 and report["sums"] == [1000, 1001], report


def test_a_typescript_worker_with_a_capability_runs_tasks_that_require_it(programs: list[Program]) -> None:
    address = free_address()
    start_scheduler(programs, address)
    start_ts_worker(programs, address, "ts-gpu", "--capability", "gpu", "--capability", "mem=64G")
    status, report, stderr = ts_example(address, "--count", "5", "--require", "gpu", "--require", "mem=64G")
    assert status == 0 and report["sums"] == [1000 + i for i in range(5)], (report, stderr)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--capability", " gpu"], "starts or ends with whitespace"),
        (["--capability", "a\tb"], "control character"),
        (["--queue-capacity", "0"], "--queue-capacity must be a positive number"),
        ([], "expected one ADDRESS"),
    ],
)
def test_the_typescript_worker_refuses_bad_options_clearly(args: list[str], message: str) -> None:
    address = [] if not args else ["tcp://127.0.0.1:1"]
    done = subprocess.run(
        [node(), str(DIST / "worker.js"), *address, *args], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr, done.stderr


def json_call(address: str, function: str, argument: bytes) -> tuple[list[int], int, bytes]:
    """A raw Python client (the conformance kit's wire helpers) runs one JSON task: the sizes of the frames its result
    came in, its status and its payload (joined)."""
    ctx: zmq.Context[Any] = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 1000)
    try:
        sock.connect(address)
        sock.send_multipart([build("hello", protocolVersion=1, kind="client", name="raw-json-client")])
        assert sock.poll(TIMEOUT * 1000), "no welcome"
        prefix = parse(sock.recv_multipart()).fields["idPrefix"] << 40
        payload = json.dumps({"function": function}).encode()
        sock.send_multipart(
            [build("putObjects", objectIds=u64([prefix | 1]), payloadSizes=u64([len(payload)])), payload]
        )
        fields, _ = task_batch_fields([Task(prefix | 2, prefix | 1, refs=[0], inline=[argument])])
        fields["requirements"] = [["payload=json"]]
        pieces = [argument[k : k + MAX_FRAME] for k in range(0, len(argument), MAX_FRAME)]
        sock.send_multipart([build("submitTasks", **fields, payloadSizes=u64([len(argument)])), *pieces])
        while True:
            assert sock.poll(TIMEOUT * 1000), "no result"
            frames = sock.recv_multipart()
            message = parse(frames)
            if message.name == "taskResults":
                sock.send_multipart([build("disconnect", reason="done")])
                return [len(f) for f in frames[1:]], message.fields["statuses"][0], message.payloads[0]
            assert message.name == "heartbeatEcho", message
    finally:
        sock.close()
        ctx.term()


def test_payloads_over_1_mib_span_frames_between_typescript_and_python_peers(programs: list[Program]) -> None:
    """A TypeScript client's 3 MB argument reaches the TypeScript worker and comes back whole; the TypeScript worker's
    result of 3 MB reaches a (raw) Python client in frames of at most 1 MiB. The scheduler takes no bigger frame."""
    address = free_address()
    scheduler = start_scheduler(programs, address)
    start_ts_worker(programs, address, "ts-big")
    status, report, stderr = ts_example(address, "--count", "2", "--big", "3000000")
    assert status == 0 and report["big"] == {"chars": 3_000_000, "echoed": True}, (report, stderr)

    value = os.urandom(1_500_000).hex()  # 3,000,000 characters
    argument = json.dumps(value).encode()
    sizes, status, payload = json_call(address, "echo", argument)
    assert status == 0 and json.loads(payload) == value
    assert sizes == [MAX_FRAME, MAX_FRAME, len(argument) - 2 * MAX_FRAME], sizes  # as the TypeScript worker cut it
    assert "malformed" not in scheduler.output and "Traceback" not in scheduler.output, scheduler.output[-3000:]


def make_keys(folder: Path) -> Path:
    done = subprocess.run([cli("scaler_keygen"), str(folder)], capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    return folder


def ts_run(*args: str) -> subprocess.CompletedProcess[str]:
    """Run a TypeScript program to its end, with SCALER_KEYS unset (each test says which keys it means)."""
    env = {k: v for k, v in os.environ.items() if k != "SCALER_KEYS"}
    return subprocess.run([node(), *args], capture_output=True, text=True, timeout=TIMEOUT, env=env)


def test_typescript_peers_join_a_secured_cluster_beside_python_ones(programs: list[Program], tmp_path: Path) -> None:
    """CurveZMQ: the TypeScript worker and client read the keys directory scaler_keygen makes, as the Python peers do,
    and work beside Python peers on a scheduler run with --keys."""
    keys = str(make_keys(tmp_path / "keys"))
    address = free_address()
    scheduler = start_scheduler(programs, address, "--keys", keys)
    cluster = start(programs, cli("scaler_cluster"), "--keys", keys, "-n", "1", address)
    wait_for_agents(cluster, 1)
    ts_worker = start_ts_worker(programs, address, "ts-secure", "--keys", keys)
    scheduler.wait_for_output(r"worker ts-secure \(key worker\) joined")
    done = ts_run(str(DIST / "example.js"), address, "--keys", keys, "--count", "20")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 0 and report["ok"] is True, (report, done.stderr)
    assert report["workers"] == [
        {"name": "ts-secure", "pid": ts_worker.pid, "hostname": os.uname().nodename, "lang": "ts"}
    ]
    with Client(address, timeout_seconds=TIMEOUT, keys=keys) as client:
        results = client.map(python_marker, range(20), timeout=TIMEOUT)
    assert {result["pid"] for result in results} <= {process.pid for process in cluster.tree()}
    scheduler.wait_for_output(r"client ts-example \(key client\) connected")


def test_typescript_peers_without_the_right_keys_are_told_why(programs: list[Program], tmp_path: Path) -> None:
    """Each way of getting keys wrong ends the TypeScript peer at once (ZeroMQ alone would retry silently for ever)
    with the Python peers' words for it; the secured scheduler keeps serving the right keys."""
    keys = make_keys(tmp_path / "keys")
    secured, plain = free_address(), free_address()
    start_scheduler(programs, secured, "--keys", str(keys))
    start_scheduler(programs, plain)
    start(programs, cli("scaler_cluster"), "--keys", str(keys), "-n", "1", secured)
    stranger = make_keys(tmp_path / "stranger")  # keys the scheduler never authorized
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    shutil.copy(keys / "scheduler.key", unknown)
    shutil.copy(stranger / "worker.key_secret", unknown)
    client_as_worker = tmp_path / "client_as_worker"
    client_as_worker.mkdir()
    shutil.copy(keys / "scheduler.key", client_as_worker)
    shutil.copy(keys / "client.key_secret", client_as_worker / "worker.key_secret")
    worker = str(DIST / "worker.js")
    cases = [
        ([str(DIST / "example.js"), secured, "--timeout-ms", "20000"], 1, "requires keys and this client has none"),
        ([worker, secured, "--keys", str(unknown)], 1, "does not accept this worker's key"),
        ([worker, secured, "--keys", str(client_as_worker)], 1, "is authorized for clients only"),
        ([worker, plain, "--keys", str(keys)], 1, "runs without keys"),
        ([str(DIST / "example.js"), plain, "--keys", str(keys)], 1, "runs without keys"),
        ([worker, secured, "--keys", str(tmp_path / "nowhere")], 2, "does not exist: create keys with: scaler_keygen"),
    ]
    # keys on one side only: which side notices first decides ZeroMQ's report, so the words differ; both say this
    for args, status, words in cases:
        began = time.monotonic()
        done = ts_run(*args)
        assert done.returncode == status and words in done.stderr, (args, done.returncode, done.stderr)
        assert time.monotonic() - began < 15, (args, "not at once")
    with Client(secured, timeout_seconds=TIMEOUT, keys=str(keys)) as client:  # still serving the right keys
        assert client.submit(pow, 2, 3).result(timeout=TIMEOUT) == 8


def test_the_typescript_worker_passes_the_conformance_kit(programs: list[Program]) -> None:
    """python -m scaler.conformance worker ADDRESS: the kit plays the scheduler; the TypeScript worker passes every
    check (the JSON convention's functions echo, add, fail, sleep)."""
    node()
    address = free_address()
    kit = start(programs, sys.executable, "-m", "scaler.conformance", "worker", address, "--connect-timeout", "30")
    worker = start(programs, node(), str(DIST / "worker.js"), address, "--name", "ts-conformance")
    code = kit.wait(240)
    lines = [line for line in kit.output.splitlines() if re.match(r"(PASS|FAIL|SKIP) ", line)]
    assert code == 0 and lines, kit.output[-5000:] + "\n--- worker:\n" + worker.output[-3000:]
    assert not [line for line in lines if line.startswith("FAIL")], kit.output[-5000:]
    assert worker.wait(TIMEOUT) == 0, worker.output  # the kit's last check sends shutdown: the worker exits


def test_a_typescript_client_whose_handshake_is_closed_once_connects_again(
    programs: list[Program], tmp_path: Path
) -> None:
    """As the Python peers: a handshake closed without a word (a flooded scheduler ends silent connections) is tried
    again; only a few in a row mean a wrong scheduler key (the wrong-keys test above)."""
    keys = str(make_keys(tmp_path / "keys"))
    address = free_address()
    start_scheduler(programs, address, "--keys", keys)
    start_ts_worker(programs, address, "ts-behind-proxy", "--keys", keys)
    proxy = DroppingProxy(int(address.rsplit(":", 1)[1]), drops=2)
    try:
        done = ts_run(str(DIST / "example.js"), f"tcp://127.0.0.1:{proxy.port}", "--keys", keys, "--count", "3")
        assert done.returncode == 0, done.stdout + done.stderr
        assert json.loads(done.stdout.strip().splitlines()[-1])["ok"] is True
        assert proxy.accepted >= 3
    finally:
        proxy.close()
