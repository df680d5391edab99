"""The conformance kit (`python -m scaler.conformance`) run as a user would: a subprocess against real peers.

- scheduler mode against a real `scaler_scheduler` (every check PASSes, too_large included thanks to a small limit);
- worker mode against a real Python worker (`scaler_cluster -n 1` pointed at the kit's address);
- worker mode against a small JSON worker written here from docs/protocol.md alone (the `payload=json` convention
  the TypeScript worker follows), correct and then broken on purpose: the kit must notice each fault;
- scheduler mode against a stub that welcomes everyone and answers nothing else: the kit must FAIL, not hang;
- scheduler mode against a stub that reads frames of any size and no payload spanning frames: the frame checks FAIL.
The worker-manager checks (scheduler mode's manager_* checks, and manager mode): test_conformance_managers.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import free_port, scheduler_command
from tests.helpers import stop_process as stop

ROOT = Path(__file__).resolve().parents[2]
KIT = [sys.executable, "-m", "scaler.conformance"]


def run_kit(*args: str, timeout: float = 240) -> tuple[int, list[str], str]:
    done = subprocess.run([*KIT, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    return done.returncode, done.stdout.splitlines(), done.stderr


def outcomes(lines: list[str]) -> dict[str, str]:
    """check name -> PASS/FAIL/SKIP, from the kit's output lines."""
    table = {}
    for line in lines:
        word, _, rest = line.partition(" ")
        if word in ("PASS", "FAIL", "SKIP"):
            table[rest.split(" — ")[0]] = word
    return table


@pytest.fixture()
def scheduler_address(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    command = [*scheduler_command(address), "--max-payload-bytes", "4000000"]  # 3 MiB + 5 may span frames
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        yield address
    finally:
        stop(process)


# ================================================================================================ the package
def test_the_kit_imports_without_side_effects() -> None:
    code = textwrap.dedent(
        """
        import sys, threading
        import scaler.conformance, scaler.conformance.cli, scaler.conformance.wire
        import scaler.conformance.scheduler_checks, scaler.conformance.worker_checks
        import scaler.conformance.scheduler_manager_checks, scaler.conformance.manager_checks
        from scaler.conformance import wire
        assert wire._schema is None, "the schema was loaded at import"
        assert threading.active_count() == 1, threading.enumerate()
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.stdout.strip() == "ok", done.stderr


def test_list_names_every_check_of_both_modes() -> None:
    code, lines, _ = run_kit("scheduler", "tcp://127.0.0.1:1", "--list")
    assert code == 0
    names = [line.split(":")[0] for line in lines]
    assert "hello_welcome" in names and "capability_missing" in names and "shutdown_protected" in names
    code, lines, _ = run_kit("worker", "tcp://127.0.0.1:1", "--list")
    assert code == 0
    names = [line.split(":")[0] for line in lines]
    assert names[0] == "hello" and names[-1] == "shutdown"


def test_usage_errors_exit_2() -> None:
    code, _, err = run_kit("scheduler", "tcp://127.0.0.1:1", "--only", "no_such_check", "--timeout", "1")
    assert code == 2 and "no_such_check" in err
    code, _, _ = run_kit("scheduler", "tcp://127.0.0.1:1", "--timeout", "0")
    assert code == 2


# ================================================================================================ scheduler mode
def test_scheduler_mode_passes_against_the_python_scheduler(scheduler_address: str) -> None:
    code, lines, err = run_kit("scheduler", scheduler_address, "--timeout", "10")
    table = outcomes(lines)
    assert code == 0, "\n".join(lines) + err
    assert table.pop("refused_key_role") == "SKIP"  # needs --keys (test_scheduler_mode_with_keys)
    assert table.pop("manager_key_role") == "SKIP"  # needs --keys (test_conformance_managers.py)
    assert set(table.values()) == {"PASS"}, "\n".join(lines)
    assert len(table) >= 37
    assert "capability_placement" in table and "too_large" in table and "shutdown_protected" in table
    assert "spanning_payloads" in table and "frame_limit" in table
    assert "manager_scale_down" in table and "manager_stopped_unit_gets_no_task" in table


def test_only_runs_the_named_checks(scheduler_address: str) -> None:
    code, lines, _ = run_kit("scheduler", scheduler_address, "--only", "round_trip,cancel_queued", "--only", "balance")
    assert code == 0
    assert lines == ["PASS round_trip", "PASS cancel_queued", "PASS balance"]


def test_shutdown_is_skipped_against_an_unprotected_scheduler(tmp_path: Path) -> None:
    address = f"tcp://127.0.0.1:{free_port()}"
    command = [*scheduler_command(address), "--no-protected"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        code, lines, _ = run_kit("scheduler", address, "--only", "shutdown_protected,too_large")
        assert code == 0
        assert [line.split(" — ")[0] for line in lines] == ["SKIP too_large", "SKIP shutdown_protected"]
        assert process.poll() is None  # the kit never asks an unprotected scheduler to stop
    finally:
        stop(process)


STUB_SCHEDULER = """
import sys, capnp, zmq
schema = capnp.load(sys.argv[2])
sock = zmq.Context().socket(zmq.ROUTER)
sock.bind(sys.argv[1])
while True:  # welcome every hello; answer nothing else
    frames = sock.recv_multipart()
    with schema.Message.from_bytes(frames[1]) as root:
        if root.which() == "hello":
            reply = schema.Message.new_message()
            w = reply.init("welcome")
            w.protocolVersion, w.idPrefix, w.peerTimeoutMs, w.protected = 1, len(frames[0]) + 7, 10000, True
            sock.send_multipart([frames[0], reply.to_bytes()])
"""


def test_scheduler_mode_fails_against_a_scheduler_that_answers_nothing(tmp_path: Path) -> None:
    address = f"tcp://127.0.0.1:{free_port()}"
    script = tmp_path / "stub.py"
    script.write_text(STUB_SCHEDULER)
    schema = str(ROOT / "src" / "scaler" / "protocol" / "scaler.capnp")
    process = subprocess.Popen([sys.executable, str(script), address, schema], cwd=ROOT)
    try:
        started = time.monotonic()
        code, lines, _ = run_kit("scheduler", address, "--timeout", "0.5", "--only", "heartbeat_echo,not_connected")
        assert code == 1
        assert [line.split(" — ")[0] for line in lines] == ["FAIL heartbeat_echo", "FAIL not_connected"], lines
        assert time.monotonic() - started < 30
    finally:
        stop(process)


# A scheduler as it was before payloads could span frames: it reads frames of any size (no ZMQ_MAXMSGSIZE) and takes
# a payload only within one frame (error malformed otherwise); it welcomes, echoes heartbeats, and runs nothing.
STUB_WITHOUT_FRAME_RULES = """
import sys, zmq
from scaler.conformance.wire import PAYLOAD_KINDS, CheckFailed, build, parse, unpack_u64

def within_frames(sizes, frames):
    index = position = 0
    for size in sizes:
        if size == 0:
            continue
        while index < len(frames) and position == len(frames[index]):
            index, position = index + 1, 0
        if index == len(frames) or len(frames[index]) - position < size:
            return False
        position += size
    return True

sock = zmq.Context().socket(zmq.ROUTER)
sock.bind(sys.argv[1])
sessions = {}
while True:
    identity, *frames = sock.recv_multipart()
    try:
        message = parse(frames)
        sizes = unpack_u64(message.fields.get("payloadSizes", b"")) if message.name in PAYLOAD_KINDS else []
        readable = within_frames(sizes, frames[1:])
    except CheckFailed:
        readable = False
    if not readable:
        sock.send_multipart([identity, build("error", code="malformed", message="cannot read that")])
    elif message.name == "hello":
        sessions[identity] = len(sessions) + 1
        welcome = build("welcome", protocolVersion=1, idPrefix=sessions[identity], peerTimeoutMs=10000,
                        protected=True, maxPayloadBytes=1 << 30)
        sock.send_multipart([identity, welcome])
    elif message.name == "disconnect":
        sessions.pop(identity, None)
    elif identity not in sessions:
        sock.send_multipart([identity, build("error", code="notConnected", message="say hello first")])
    elif message.name == "heartbeat":
        sock.send_multipart([identity, build("heartbeatEcho")])
"""


def test_scheduler_mode_fails_against_a_scheduler_without_the_frame_rules(tmp_path: Path) -> None:
    """frame_limit FAILs against a scheduler that reads a frame of 1 MiB + 1 (and answers it), spanning_payloads
    against one that refuses a payload spanning frames."""
    address = f"tcp://127.0.0.1:{free_port()}"
    script = tmp_path / "stub.py"
    script.write_text(STUB_WITHOUT_FRAME_RULES)
    process = subprocess.Popen([sys.executable, str(script), address], cwd=ROOT)
    try:
        code, lines, err = run_kit("scheduler", address, "--timeout", "2", "--only", "frame_limit,spanning_payloads")
        assert code == 1, "\n".join(lines) + err
        assert [line.split(" — ")[0] for line in lines] == ["FAIL frame_limit", "FAIL spanning_payloads"], lines
        assert "read a frame of 1,048,577 bytes and answered error" in lines[0], lines
        assert "sent in frames of up to 1 MiB: C: expected heartbeatEcho, got error" in lines[1], lines
        assert "malformed" in lines[1], lines
    finally:
        stop(process)


# ================================================================================================ worker mode
def start_kit(address: str, *args: str) -> subprocess.Popen[str]:
    command = [*KIT, "worker", address, "--connect-timeout", "30", *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def finish_kit(kit: subprocess.Popen[str], timeout: float = 240) -> tuple[int, list[str], str]:
    try:
        out, err = kit.communicate(timeout=timeout)
    finally:
        if kit.poll() is None:
            kit.kill()
            kit.wait(5)
    return kit.returncode, out.splitlines(), err


def test_worker_mode_passes_against_the_python_worker() -> None:
    address = f"tcp://127.0.0.1:{free_port()}"
    kit = start_kit(address)
    command = [sys.executable, "-m", "scaler.entry_points.cluster", address, "-n", "1", "--logging-level", "ERROR"]
    worker = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        code, lines, err = finish_kit(kit)
        table = outcomes(lines)
        assert code == 0, "\n".join(lines) + err
        assert table.pop("unknown_function") == "SKIP"  # payload=json only
        assert set(table.values()) == {"PASS"}, "\n".join(lines)
        assert worker.wait(20) == 0  # the shutdown check stopped it
    finally:
        stop(worker)


def test_worker_mode_exits_2_when_no_worker_comes() -> None:
    address = f"tcp://127.0.0.1:{free_port()}"
    code, lines, _ = run_kit("worker", address, "--connect-timeout", "0.5")
    assert code == 2
    assert "no worker said hello" in lines[-1]


# A worker of the JSON convention written from docs/protocol.md and the issue 18 design alone (pyzmq + pycapnp),
# single-threaded: tasks run one at a time; sleep(ms) is a deadline, not a blocking sleep, so that it can read
# cancelTasks and balanceRequest meanwhile. BREAK (argv[3]) makes it wrong in one way, for the kit to notice.
JSON_WORKER = r"""
import json, os, struct, sys, time
import capnp, zmq

address, schema_path, BREAK = sys.argv[1], sys.argv[2], sys.argv[3]
schema = capnp.load(schema_path)


def col(data, code, size):
    return list(struct.unpack(f"<{len(data) // size}{code}", data))


def u64(values):
    return struct.pack(f"<{len(values)}Q", *values)


MAX_FRAME = 1 << 20


def frames_of(payloads):  # each payload alone; one over 1 MiB in pieces of 1 MiB (but with BREAK uncut-frames)
    frames = []
    for p in payloads:
        if len(p) <= MAX_FRAME or BREAK == "uncut-frames":
            frames += [p] if p else []
        else:
            frames += [p[k : k + MAX_FRAME] for k in range(0, len(p), MAX_FRAME)]
    return frames


def send(member, payloads=None, **fields):
    root = schema.Message.new_message()
    body = root.init(member)
    frames = []
    if payloads is not None:
        fields["payloadSizes"] = u64([len(p) for p in payloads])
        frames = frames_of(payloads)
    for key, value in fields.items():
        setattr(body, key, value)
    sock.send_multipart([root.to_bytes(), *frames])


def cut(sizes, frames):
    out, index, position = [], 0, 0
    for size in sizes:
        if size == 0:
            out.append(b"")
            continue
        while position == len(frames[index]):
            index, position = index + 1, 0
        if len(frames[index]) - position >= size:
            out.append(frames[index][position : position + size])
            position += size
            continue
        end, total = index, 0  # it starts a frame and fills whole frames
        while total < size:
            total, end = total + len(frames[end]), end + 1
        out.append(b"".join(frames[index:end]))
        index, position = end - 1, len(frames[end - 1])
    return out


def error_payload(text):
    data = text.encode()
    trailer = b"extra" if BREAK == "error-trailer" else b""
    return struct.pack("<I", len(data)) + data + trailer


def hello():
    send("hello", protocolVersion=1, kind="worker", name="json-test-worker", hostname="here", pid=os.getpid(),
         heartbeatIntervalMs=1000, queueCapacity=100, capabilities=["payload=json", "lang=py-test"])


sock = zmq.Context().socket(zmq.DEALER)
sock.setsockopt(zmq.LINGER, 1000)
sock.setsockopt(zmq.ROUTING_ID, b"W|json|" + os.urandom(16).hex().encode())
sock.connect(address)
objects, queue, running, profiled = {}, [], None, set()  # running: [task, end, limit, result, start]
results, outputs, started = [], [], []
beat_every, next_beat, saying_hello = 1.0, 0.0, True
hello()


def finish(task_id, status, payload, duration_us=1):
    results.append((task_id, status, payload, duration_us if task_id in profiled else 0))
    if BREAK == "double-result":
        results.append((task_id, status, payload, 0))


def start(task):
    global running
    task_id, function_id, refs, keywords, inline, timeout_ms = task
    started.append(task_id)
    args, kwargs, position = [], {}, 0
    for k, ref in enumerate(refs):
        if ref == 0:
            raw = inline[position]
            position += 1
        elif ref in objects:
            raw = objects[ref]
        else:
            finish(task_id, 4, f"object {ref:#x} was not sent to this worker".encode())
            return
        value = json.loads(raw)
        if keywords and keywords[k]:
            kwargs[keywords[k]] = value
        else:
            args.append(value)
    if kwargs:
        args.append(kwargs)
    name = json.loads(objects[function_id])["function"]
    now = time.monotonic()
    if name == "echo":
        finish(task_id, 0, json.dumps(args[0] if args else None).encode())
    elif name == "add":
        finish(task_id, 0, json.dumps(sum(a for a in args if isinstance(a, (int, float)))).encode())
    elif name == "fail":
        text = f"Error: {args[0]}\n    at fail (conformance)"
        outputs.append((task_id, 3, text))
        finish(task_id, 1, error_payload(text))
    elif name == "sleep":
        end = now + args[0] / 1000
        limit = now + timeout_ms / 1000 if timeout_ms else None
        running = [task, end, limit, json.dumps(args[0]).encode(), now]
    else:
        text = f"unknown function {name}"
        outputs.append((task_id, 3, text))
        finish(task_id, 1, error_payload(text))


def handle(frames):
    global running, queue, objects, saying_hello
    with schema.Message.from_bytes(frames[0]) as root:
        kind = root.which()
        body = getattr(root, kind)
        if kind == "welcome":
            saying_hello = False
        elif kind == "putObjects":
            ids = col(body.objectIds, "Q", 8)
            objects.update(zip(ids, cut(col(body.payloadSizes, "Q", 8), frames[1:])))
        elif kind == "freeObjects":
            for object_id in col(body.ids, "Q", 8):
                objects.pop(object_id, None)
        elif kind == "dispatchTasks":
            ids, fns = col(body.taskIds, "Q", 8), col(body.functionIds, "Q", 8)
            counts, refs = col(body.argCounts, "H", 2), col(body.argRefs, "Q", 8)
            keywords = list(body.keywords)
            timeouts = col(body.timeoutsMs, "I", 4) or [0] * len(ids)
            payloads = cut(col(body.payloadSizes, "Q", 8), frames[1:])
            arg = position = 0
            flags = bytes(body.flags)
            for k, task_id in enumerate(ids):
                mine = refs[arg : arg + counts[k]]
                inline = payloads[position : position + mine.count(0)]
                kws = keywords[arg : arg + counts[k]] if keywords else None
                held = {t[0] for t in queue} | ({running[0][0]} if running else set())
                if task_id not in held or BREAK == "no-duplicate-check":  # a held task id: a duplicate, ignored
                    queue.append((task_id, fns[k], mine, kws, inline, timeouts[k]))
                    if flags[k] & 1 and BREAK != "no-profiling":
                        profiled.add(task_id)
                arg += counts[k]
                position += mine.count(0)
        elif kind == "cancelTasks":
            for task_id in col(body.ids, "Q", 8):
                if any(t[0] == task_id for t in queue):
                    queue = [t for t in queue if t[0] != task_id]
                    finish(task_id, 2, b"")
                elif running and running[0][0] == task_id:
                    running = None
                    finish(task_id, 2, b"")
        elif kind == "balanceRequest":
            if BREAK == "exit-on-balance":
                os._exit(3)
            asked = set(col(body.ids, "Q", 8))
            back = [t[0] for t in queue if t[0] in asked]
            if BREAK == "give-back-started" and running:
                back.append(running[0][0])
            queue = [t for t in queue if t[0] not in asked]
            send("balanceResponse", ids=u64(back))
        elif kind == "error" and str(body.code) == "notConnected":
            if not saying_hello:
                objects, queue, running, saying_hello = {}, [], None, True
                results.clear()
                hello()
        elif kind == "shutdown":
            sys.exit(0)


deadline_silence = time.monotonic() + 120
while time.monotonic() < deadline_silence:
    if sock.poll(10):
        while sock.poll(0):
            handle(sock.recv_multipart())
    now = time.monotonic()
    if running:
        task, end, limit, payload, began = running
        if limit is not None and now >= limit:
            finish(task[0], 5, b"ran longer than its timeout")
            running = None
        elif now >= end:
            finish(task[0], 0, payload, max(1, int((now - began) * 1e6)))
            running = None
    while running is None and queue:
        start(queue.pop(0))
    if started:
        send("tasksStarted", ids=u64(started))
        started = []
    if outputs:
        send("taskOutput", taskIds=u64([o[0] for o in outputs]), streams=bytes(o[1] for o in outputs),
             texts=[o[2] for o in outputs])
        outputs = []
    for batch in ([[r] for r in results] if BREAK == "no-batching" else [results] if results else []):
        extra = {"durationsUs": u64([r[3] for r in batch])} if any(r[3] for r in batch) else {}
        send("taskResults", [r[2] for r in batch], taskIds=u64([r[0] for r in batch]),
             statuses=bytes(r[1] for r in batch), **extra)
    results = []
    if now >= next_beat and not saying_hello:
        send("heartbeat")
        next_beat = now + beat_every
"""


def run_json_worker(tmp_path: Path, fault: str, only: str = "") -> tuple[int, list[str], str, int | None]:
    """The kit against the JSON worker above with `fault`: all its checks, or `only` these (and shutdown)."""
    address = f"tcp://127.0.0.1:{free_port()}"
    script = tmp_path / "json_worker.py"
    script.write_text(JSON_WORKER)
    schema = str(ROOT / "src" / "scaler" / "protocol" / "scaler.capnp")
    kit = start_kit(address, *(("--only", f"{only},shutdown") if only else ()))
    worker = subprocess.Popen([sys.executable, str(script), address, schema, fault], cwd=ROOT)
    try:
        code, lines, err = finish_kit(kit)
        try:
            exit_code: int | None = worker.wait(10)
        except subprocess.TimeoutExpired:
            exit_code = None
        return code, lines, err, exit_code
    finally:
        stop(worker)


def test_worker_mode_passes_against_a_json_worker(tmp_path: Path) -> None:
    code, lines, err, exit_code = run_json_worker(tmp_path, "none")
    table = outcomes(lines)
    assert code == 0, "\n".join(lines) + err
    assert table.pop("stream_output") == "SKIP"  # payload=python only
    assert set(table.values()) == {"PASS"}, "\n".join(lines)
    assert "unknown_function" in table and exit_code == 0


@pytest.mark.parametrize(
    ("fault", "check", "only"),
    [
        ("error-trailer", "error_payload", "error_payload"),
        ("double-result", "well_formed", "run_task,add_numbers,well_formed"),
        ("give-back-started", "balance", "balance"),
        ("no-duplicate-check", "duplicate_dispatch", "duplicate_dispatch"),
        ("no-profiling", "profiling", "profiling"),
        ("uncut-frames", "frame_limit", "frame_limit"),
    ],
)
def test_worker_mode_notices_a_broken_worker(tmp_path: Path, fault: str, check: str, only: str) -> None:
    code, lines, err, _ = run_json_worker(tmp_path, fault, only)
    table = outcomes(lines)
    assert code == 1, "\n".join(lines) + err
    assert table[check] == "FAIL", "\n".join(lines)
    assert os.linesep.join(line for line in lines if line.startswith("FAIL"))


def test_worker_mode_advises_a_worker_that_does_not_batch_results(tmp_path: Path) -> None:
    """docs/protocol.md says workers *should* batch results: one message per result passes, with advice."""
    code, lines, err, _ = run_json_worker(tmp_path, "no-batching", "run_task,results_batched")
    assert code == 0, "\n".join(lines) + err
    line = next(line for line in lines if line.startswith("PASS results_batched"))
    assert "advice: 50 results came in 50 taskResults messages: workers should batch them" in line, line
    assert any(line == "PASS run_task" for line in lines), lines  # no advice where nothing was found


# ================================================================================================ keys
@pytest.fixture()
def keys(tmp_path: Path) -> str:
    directory = tmp_path / "keys"
    command = [sys.executable, "-m", "scaler.entry_points.keygen", str(directory)]
    subprocess.run(command, check=True, capture_output=True, timeout=60, cwd=ROOT)
    return str(directory)


def test_scheduler_mode_with_keys(tmp_path: Path, keys: str) -> None:
    address = f"tcp://127.0.0.1:{free_port()}"
    command = [*scheduler_command(address), "--keys", keys]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        only = "hello_welcome,refused_key_role,frame_limit,round_trip,spanning_payloads,capability_placement"
        code, lines, err = run_kit("scheduler", address, "--keys", keys, "--only", only)
        assert code == 0, "\n".join(lines) + err
        assert lines == [f"PASS {name}" for name in only.split(",")]
        code, lines, _ = run_kit("scheduler", address, "--only", "hello_welcome", "--timeout", "1")  # no keys
        assert code == 1 and lines[0].startswith("FAIL hello_welcome")
    finally:
        stop(process)


def test_worker_mode_with_keys(keys: str) -> None:
    address = f"tcp://127.0.0.1:{free_port()}"
    kit = start_kit(address, "--keys", keys, "--only", "run_task,shutdown")
    command = [sys.executable, "-m", "scaler.entry_points.cluster", address, "-n", "1", "--keys", keys]
    worker = subprocess.Popen(
        [*command, "--logging-level", "ERROR"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT
    )
    try:
        code, lines, err = finish_kit(kit)
        assert code == 0, "\n".join(lines) + err
        assert lines == ["PASS hello", "PASS run_task", "PASS shutdown"]
        assert worker.wait(20) == 0
    finally:
        stop(worker)


def test_worker_mode_fails_fast_when_the_worker_dies(tmp_path: Path) -> None:
    started = time.monotonic()
    only = "cancel_before_start,balance,timeout,heartbeat,free_objects"
    code, lines, err, exit_code = run_json_worker(tmp_path, "exit-on-balance", only)
    table = outcomes(lines)
    assert code == 1 and exit_code == 3, "\n".join(lines) + err
    assert table["balance"] == "FAIL" and table["cancel_before_start"] == "PASS"
    after = [line for line in lines if line.split(" ")[1] in ("timeout", "heartbeat", "free_objects", "shutdown")]
    assert all(line.endswith("the worker closed its connection during an earlier check") for line in after), after
    assert time.monotonic() - started < 60


def test_python_function_objects_of_the_kit_need_no_scaler(tmp_path: Path) -> None:
    """The kit's payload=python function objects (new and old format) load where `scaler` cannot be imported."""
    from scaler.conformance.worker_checks import PythonConvention

    convention = PythonConvention()
    new = convention.function("add")
    convention.old_format = True
    old = convention.function("add")
    (tmp_path / "new.bin").write_bytes(new)
    (tmp_path / "old.bin").write_bytes(old)
    code = textwrap.dedent(
        """
        import pickle, sys
        sys.modules["scaler"] = None
        import cloudpickle
        serializer, data = pickle.loads(open(sys.argv[1], "rb").read())
        assert serializer is None
        print(pickle.loads(data)(1, 2))
        serializer, data = pickle.loads(open(sys.argv[2], "rb").read())
        print(serializer.deserialize(data)(3, 4))
        """
    )
    command = [sys.executable, "-c", code, str(tmp_path / "new.bin"), str(tmp_path / "old.bin")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.stdout.split() == ["3", "7"], done.stderr
