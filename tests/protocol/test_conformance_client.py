"""The conformance kit's client mode (`python -m scaler.conformance client ADDRESS`) run as a user would: the kit in a
subprocess binds the address as a fake scheduler, a real client connects to it, and the kit's verdicts are read.

- the Python client (submit, map, a graph, a task that raises, an argument and a result of 3 MiB, leaving the
  with-block): every check PASSes (heartbeats may SKIP, the session being short);
- the TypeScript example client (ts/dist/example.js: add, worker_info, keyword arguments, a cancelled sleep, a
  failing task, the echo of a 3 MB string), when ts/dist is built: no check FAILs;
- raw clients written here that break the rules on purpose (reuse a task id, refer to an object never put,
  require no payload convention; a hello with queueCapacity and capabilities, a scheduler's message, no disconnect;
  silence past peerTimeoutMs / 2; a payload of 2 MiB in one frame): those checks FAIL and the kit exits 1.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import zmq

from scaler.conformance.wire import MAX_FRAME, build, parse, task_batch_fields, u64
from scaler.conformance.wire import Task as WireTask
from tests.helpers import free_address

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "ts" / "dist"
KIT = [sys.executable, "-m", "scaler.conformance", "client"]
TIMEOUT = 30


def verdicts(output: str) -> dict[str, str]:
    """check name -> PASS/FAIL/SKIP line of the kit's output."""
    out: dict[str, str] = {}
    for line in output.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASS", "FAIL", "SKIP"):
            out[rest.split(" ")[0]] = line
    return out


def serve(address: str, client: list[str], *kit_args: str) -> tuple[int, str, subprocess.CompletedProcess[str]]:
    """Start the kit on `address`, run `client` against it; the kit's status and output, and the client's run."""
    kit = subprocess.Popen(
        [*KIT, address, "--connect-timeout", "20", "--timeout", "8", *kit_args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    try:
        done = subprocess.run(client, capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT)
        output, _ = kit.communicate(timeout=TIMEOUT)
        return kit.returncode, output, done
    finally:
        if kit.poll() is None:
            kit.kill()
            kit.wait(5)


PYTHON_CLIENT = """
import operator, sys
from scaler import Client

def triple(x, y):
    return 3 * x + y

# shared_memory=False: an argument over 1 MiB travels in frames (the kit does not read shared memory)
with Client(address=sys.argv[1], timeout_seconds=20, shared_memory=False) as c:
    assert c.submit(pow, 2, 10).result(timeout=10) == 1024
    assert list(c.map(triple, [(1, 2), (3, 4), (5, 6)])) == [5, 13, 21]
    assert c.get({"a": 1, "b": (operator.add, "a", 2)}, ["b"]) == {"b": 3}
    graph = {"x": (operator.mul, 2, 5), "y": (operator.add, "x", 1), "z": (operator.neg, "y")}
    assert c.get(graph, ["z"]) == {"z": -11}  # x and y: silent tasks z waits on
    big = bytes(range(256)) * 12289  # 3 MiB + 256 bytes: it spans frames both ways
    assert c.submit(bytes, big).result(timeout=10) == big
    try:
        c.submit(operator.truediv, 1, 0).result(timeout=10)
    except ZeroDivisionError as exc:
        print("raised", type(exc).__name__)
    else:
        raise SystemExit("no exception")
print("client done")
"""


def test_python_client_passes(tmp_path: Path) -> None:
    script = tmp_path / "client.py"
    script.write_text(PYTHON_CLIENT)
    address = free_address()
    status, output, client = serve(address, [sys.executable, str(script), address])
    assert client.returncode == 0, client.stdout + client.stderr
    assert "raised ZeroDivisionError" in client.stdout
    seen = verdicts(output)
    assert status == 0, output
    assert "silent; conventions: payload=python" in output and "(0 silent" not in output, output
    assert set(seen) == {
        "hello", "ids", "references", "well_formed", "frame_limit", "heartbeats", "conventions", "results_answered",
        "disconnect",
    }, output  # fmt: skip
    for name, line in seen.items():
        assert line.startswith("PASS") or (name == "heartbeats" and line.startswith("SKIP")), output


def test_typescript_client_passes() -> None:
    node = shutil.which("node")
    if node is None or not (DIST / "example.js").exists():
        why = "node is not installed" if node is None else f"{DIST / 'example.js'} is missing: run scripts/ts-setup"
        if os.environ.get("SCALER_TS_TEST") == "required":
            pytest.fail(why)
        pytest.skip(why)
    address = free_address()
    example = [node, str(DIST / "example.js"), address, "--count", "4", "--big", "3000000"]
    status, output, client = serve(address, example)
    lines = client.stdout.strip().splitlines()
    assert lines, client.stderr
    report = json.loads(lines[-1])
    assert report["ok"] and report["sums"] == [1000, 1001, 1002, 1003], report
    assert report["canceled"] and report["remoteError"], report
    assert report["kwargs"] == {"a": 1, "b": "two"}, report
    assert report["big"] == {"chars": 3_000_000, "echoed": True}, report  # a 3 MB argument, and result, span frames
    seen = verdicts(output)
    assert status == 0 and not [line for line in seen.values() if line.startswith("FAIL")], output
    assert "conventions: payload=json" in output, output
    for name in ("conventions", "disconnect", "frame_limit"):
        assert seen[name].startswith("PASS"), output


def broken_client(address: str) -> None:
    """A raw client that reuses a task id and refers to an object it never put, then says disconnect."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 1000)
    try:
        sock.connect(address)
        sock.send_multipart([build("hello", protocolVersion=1, kind="client", name="broken")])
        assert sock.poll(20_000), "no welcome"
        welcome = parse(sock.recv_multipart())
        prefix = welcome.fields["idPrefix"] << 40
        function, never_put = prefix | 1, prefix | 99
        sock.send_multipart([build("putObjects", objectIds=u64([function]), payloadSizes=u64([13])), b'{"function":"'])
        for task in (WireTask(prefix | 2, function, refs=[never_put]), WireTask(prefix | 2, function)):
            fields, payloads = task_batch_fields([task])
            fields["requirements"] = [["payload=json"]]
            sock.send_multipart([build("submitTasks", **fields, payloadSizes=u64(len(p) for p in payloads))])
        fields, _ = task_batch_fields([WireTask(prefix | 3, function)])  # no requirement at all
        sock.send_multipart([build("submitTasks", **fields)])
        sock.send_multipart([build("disconnect", reason="done")])
    finally:
        sock.close()
        ctx.term()


def test_broken_client_fails(tmp_path: Path) -> None:
    address = free_address()
    script = tmp_path / "broken.py"
    script.write_text(
        textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {str(ROOT)!r})
            from tests.protocol.test_conformance_client import broken_client
            broken_client(sys.argv[1])
        """)
    )
    status, output, client = serve(address, [sys.executable, str(script), address])
    assert client.returncode == 0, client.stdout + client.stderr
    seen = verdicts(output)
    assert status == 1, output
    for name in ("ids", "references", "conventions"):
        assert seen[name].startswith("FAIL"), output
    assert "used before" in seen["ids"] and f"{7 << 40 | 99:#x}" in seen["references"], output
    for name in ("hello", "well_formed", "disconnect"):
        assert seen[name].startswith("PASS"), output


def uncut_client(address: str) -> None:
    """A raw client that sends an argument of 2 MiB in one frame (a scheduler would drop its connection), reads the
    echo (which the kit sends back in frames of 1 MiB), then says disconnect."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 1000)
    try:
        sock.connect(address)
        sock.send_multipart([build("hello", protocolVersion=1, kind="client", name="uncut")])
        assert sock.poll(20_000), "no welcome"
        prefix = parse(sock.recv_multipart()).fields["idPrefix"] << 40
        function = b'{"function": "echo"}'
        sock.send_multipart(
            [build("putObjects", objectIds=u64([prefix | 1]), payloadSizes=u64([len(function)])), function]
        )
        argument = json.dumps("x" * (2 * MAX_FRAME - 2)).encode()  # 2 MiB
        fields, _ = task_batch_fields([WireTask(prefix | 2, prefix | 1, inline=[argument], refs=[0])])
        fields["requirements"] = [["payload=json"]]
        sock.send_multipart([build("submitTasks", **fields, payloadSizes=u64([len(argument)])), argument])
        assert sock.poll(20_000), "no result"
        frames = sock.recv_multipart()
        assert [len(f) for f in frames[1:]] == [MAX_FRAME, MAX_FRAME], [len(f) for f in frames]
        assert parse(frames).payloads == [argument]
        sock.send_multipart([build("disconnect", reason="done")])
    finally:
        sock.close()
        ctx.term()


def test_a_client_sending_a_frame_over_1_mib_fails(tmp_path: Path) -> None:
    address = free_address()
    script = tmp_path / "uncut.py"
    script.write_text(
        textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {str(ROOT)!r})
            from tests.protocol.test_conformance_client import uncut_client
            uncut_client(sys.argv[1])
        """)
    )
    status, output, client = serve(address, [sys.executable, str(script), address])
    assert client.returncode == 0, client.stdout + client.stderr
    seen = verdicts(output)
    assert status == 1, output
    assert seen["frame_limit"].startswith("FAIL"), output
    assert "submitTasks payload frame 1 of 2,097,152 bytes" in seen["frame_limit"], output
    for name in ("hello", "ids", "references", "well_formed", "conventions", "results_answered", "disconnect"):
        assert seen[name].startswith("PASS"), output


def test_heartbeats_checked_over_a_long_enough_session(tmp_path: Path) -> None:
    """A Python client beating every second for 5.5 s passes heartbeats; a raw client silent for 6.5 s fails it."""
    script = tmp_path / "idle.py"
    script.write_text(
        textwrap.dedent("""
            import sys, time
            from scaler import Client
            with Client(address=sys.argv[1], timeout_seconds=20, heartbeat_interval_seconds=1) as c:
                time.sleep(5.5)
        """)
    )
    silent = tmp_path / "silent.py"
    silent.write_text(
        textwrap.dedent("""
            import sys, time, zmq
            from scaler.conformance.wire import build
            ctx = zmq.Context()
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 1000)
            sock.connect(sys.argv[1])
            sock.send_multipart([build("hello", protocolVersion=1, kind="client", name="silent")])
            assert sock.poll(20_000), "no welcome"
            sock.recv_multipart()
            time.sleep(6.5)
            sock.send_multipart([build("disconnect", reason="done")])
            sock.close()
            ctx.term()
        """)
    )
    beating, quiet = free_address(), free_address()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # both sessions at once: they are mostly waiting
        first = pool.submit(serve, beating, [sys.executable, str(script), beating])
        second = pool.submit(serve, quiet, [sys.executable, str(silent), quiet])
        (status, output, client), (silent_status, silent_output, silent_client) = first.result(), second.result()
    assert client.returncode == 0, client.stdout + client.stderr
    assert status == 0 and verdicts(output)["heartbeats"].startswith("PASS"), output
    status, output, client = silent_status, silent_output, silent_client
    assert client.returncode == 0, client.stdout + client.stderr
    seen = verdicts(output)
    assert status == 1 and seen["heartbeats"].startswith("FAIL"), output
    assert seen["disconnect"].startswith("PASS"), output


def test_rude_client_fails(tmp_path: Path) -> None:
    """A raw client whose hello is a worker's, which sends a message only a scheduler sends and closes its connection
    without disconnect: hello, well_formed and disconnect FAIL."""
    script = tmp_path / "rude.py"
    script.write_text(
        textwrap.dedent("""
            import sys, zmq
            from scaler.conformance.wire import build
            ctx = zmq.Context()
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 1000)
            sock.connect(sys.argv[1])
            hello = build("hello", protocolVersion=1, kind="client", queueCapacity=4, capabilities=["payload=json"])
            sock.send_multipart([hello])
            assert sock.poll(20_000), "no welcome"
            sock.recv_multipart()
            sock.send_multipart([build("balanceRequest", ids=b"")])
            sock.close()
            ctx.term()
        """)
    )
    address = free_address()
    status, output, client = serve(address, [sys.executable, str(script), address])
    assert client.returncode == 0, client.stdout + client.stderr
    seen = verdicts(output)
    assert status == 1, output
    assert seen["hello"].startswith("FAIL") and "queueCapacity 4" in seen["hello"], output
    assert seen["well_formed"].startswith("FAIL") and "balanceRequest" in seen["well_formed"], output
    assert seen["disconnect"].startswith("FAIL"), output
