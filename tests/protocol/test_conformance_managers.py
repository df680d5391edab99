"""The conformance kit's worker-manager checks, run as a user would (a subprocess, real processes and sockets):

- scheduler mode's manager checks against a real `scaler_scheduler`, without and with keys (scaler_keygen's real
  CurveZMQ keys: the manager key admitted, a client key refused);
- manager mode against a real `scaler_worker_manager local` (its units are real `scaler_cluster` workers that connect
  to the kit), without and with keys;
- the checks FAIL against deliberately wrong peers: a scheduler that answers nothing, a scheduler that stops a unit
  while its worker holds tasks, and a raw manager broken in one way at a time.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from scaler.conformance.scheduler_manager_checks import ManagerChecks
from tests.helpers import free_address, kill_tree, scheduler_command
from tests.helpers import stop_process as stop
from tests.protocol.test_conformance_kit import KIT, ROOT, STUB_SCHEDULER, finish_kit, outcomes, run_kit

pytestmark = pytest.mark.timeout(180)

MANAGER_CHECKS = ",".join(ManagerChecks.NAMES)


@pytest.fixture()
def keys(tmp_path: Path) -> str:
    directory = tmp_path / "keys"
    command = [sys.executable, "-m", "scaler.entry_points.keygen", str(directory)]
    subprocess.run(command, check=True, capture_output=True, timeout=60, cwd=ROOT)
    return str(directory)


@pytest.fixture()
def scheduler() -> Iterator[str]:
    """A real scheduler on a free address (stopped by pid afterwards)."""
    address = free_address()
    process = subprocess.Popen(
        scheduler_command(address), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT
    )
    try:
        yield address
    finally:
        stop(process)


# ================================================================================================ scheduler mode
def test_list_documents_the_manager_checks_and_the_manager_mode() -> None:
    code, lines, _ = run_kit("scheduler", "tcp://127.0.0.1:1", "--list")
    assert code == 0
    documented = {line.split(":")[0]: line for line in lines}
    for name in ManagerChecks.NAMES:
        assert len(documented[name]) > len(name) + 20, documented[name]  # a name and what it checks
    assert lines[-1].startswith("shutdown_protected:")
    code, lines, _ = run_kit("manager", "tcp://127.0.0.1:1", "--list")
    assert code == 0
    names = [line.split(":")[0] for line in lines]
    assert names[0] == "hello" and "start_unit" in names and "stop_unit" in names and names[-1] == "shutdown"
    done = subprocess.run([*KIT, "--help"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert "manager mode:" in done.stdout and "scaleUnits(start)" in done.stdout


def test_scheduler_mode_manager_checks_pass_against_the_python_scheduler(scheduler: str) -> None:
    code, lines, err = run_kit("scheduler", scheduler, "--only", MANAGER_CHECKS, "--timeout", "10")
    table = outcomes(lines)
    assert code == 0, "\n".join(lines) + err
    assert table.pop("manager_key_role") == "SKIP"  # needs --keys (below)
    assert set(table.values()) == {"PASS"} and len(table) == len(ManagerChecks.NAMES) - 1, "\n".join(lines)


def test_scheduler_mode_manager_checks_with_keys(tmp_path: Path, keys: str) -> None:
    address = free_address()
    command = [*scheduler_command(address), "--keys", keys]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        only = "manager_hello_welcome,manager_scale_down,manager_key_role"
        code, lines, err = run_kit("scheduler", address, "--keys", keys, "--only", only)
        assert code == 0, "\n".join(lines) + err
        assert lines == [f"PASS {name}" for name in only.split(",")]
    finally:
        stop(process)


def test_scheduler_mode_manager_checks_fail_against_a_scheduler_that_answers_nothing(tmp_path: Path) -> None:
    address = free_address()
    script = tmp_path / "stub.py"
    script.write_text(STUB_SCHEDULER)
    schema = str(ROOT / "src" / "scaler" / "protocol" / "scaler.capnp")
    process = subprocess.Popen([sys.executable, str(script), address, schema], cwd=ROOT)
    try:
        only = "manager_hello_welcome,manager_report_out_of_range,manager_scale_up"
        code, lines, _ = run_kit("scheduler", address, "--timeout", "0.5", "--only", only)
        assert code == 1
        assert [line.split(" — ")[0] for line in lines] == [
            "FAIL manager_hello_welcome",
            "FAIL manager_report_out_of_range",
            "FAIL manager_scale_up",
        ], lines
        assert "expected scaleUnits: M: no message within 0.5s" in lines[2], lines
    finally:
        stop(process)


# A scheduler that asks its manager for a unit when tasks come, gives them to the unit's worker, and stops the unit
# 0.2 s later while the worker still holds them: what a scheduler must never do (docs/protocol.md section 8).
HASTY_SCHEDULER = """
import sys, time, zmq
from scaler.conformance.wire import build, layout, parse, task_batch_fields, tasks_of, u64

sock = zmq.Context().socket(zmq.ROUTER)
sock.bind(sys.argv[1])
sessions, manager, objects, queued, unit, stop_at = {}, None, {}, [], "", None


def send(identity, member, payloads=None, **fields):
    frames = []
    if payloads is not None:
        fields["payloadSizes"] = u64(len(p) for p in payloads)
        frames = layout(payloads, False)
    sock.send_multipart([identity, build(member, **fields), *frames])


while True:
    if sock.poll(20):
        identity, *frames = sock.recv_multipart()
        message = parse(frames)
        if message.name == "hello":
            sessions[identity] = len(sessions) + 1
            kind = message.fields["kind"]
            manager = identity if kind == "manager" else manager
            send(identity, "welcome", protocolVersion=1, idPrefix=sessions[identity], peerTimeoutMs=10000,
                 protected=True, maxPayloadBytes=1 << 30)
            if kind == "worker" and unit and message.fields.get("unit") == unit and queued:
                send(identity, "putObjects", list(objects.values()), objectIds=u64(objects))
                fields, payloads = task_batch_fields(queued)
                send(identity, "dispatchTasks", payloads, **fields)
                queued, stop_at = [], time.monotonic() + 0.2
        elif identity not in sessions:
            if message.name != "disconnect":
                send(identity, "error", code="notConnected", message="say hello first")
        elif message.name == "disconnect":
            del sessions[identity]
        elif message.name == "heartbeat":
            send(identity, "heartbeatEcho")
        elif message.name == "putObjects":
            objects.update(zip(message.ids("objectIds"), message.payloads))
        elif message.name == "submitTasks" and manager is not None:
            queued += tasks_of(message)
            unit = f"hasty-{len(sessions)}"
            send(manager, "scaleUnits", start=[unit], stop=[], reason="tasks wait")
    if stop_at is not None and time.monotonic() >= stop_at:
        send(manager, "scaleUnits", start=[], stop=[unit], reason="in a hurry")
        stop_at = None
"""


def test_scheduler_mode_fails_against_a_scheduler_that_stops_a_unit_whose_worker_holds_tasks(tmp_path: Path) -> None:
    address = free_address()
    script = tmp_path / "hasty.py"
    script.write_text(HASTY_SCHEDULER)
    process = subprocess.Popen([sys.executable, str(script), address], cwd=ROOT)
    try:
        code, lines, err = run_kit("scheduler", address, "--timeout", "2", "--only", "manager_scale_down")
        assert code == 1, "\n".join(lines) + err
        assert len(lines) == 1 and lines[0].startswith("FAIL manager_scale_down — M: unexpected scaleUnits"), lines
        assert "'stop': ['hasty-" in lines[0], lines
    finally:
        stop(process)


# ================================================================================================ manager mode
def start_kit(address: str, *args: str) -> subprocess.Popen[str]:
    command = [*KIT, "manager", address, "--connect-timeout", "60", *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def start_manager(address: str, log: Path, *options: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "scaler.entry_points.worker_manager", "local", *options]
    return subprocess.Popen([*command, "--logging-paths", str(log), address], cwd=ROOT)


def stop_manager(manager: subprocess.Popen[bytes]) -> None:
    """Stop the manager this test started, and anything it started that is still alive (only if the test failed)."""
    try:
        left = psutil.Process(manager.pid).children(recursive=True)
    except psutil.Error:
        left = []
    stop(manager)
    kill_tree(left)


def test_manager_mode_passes_against_the_local_worker_manager(tmp_path: Path) -> None:
    address = free_address()
    kit = start_kit(address)
    manager = start_manager(address, tmp_path / "manager.log", "--workers-per-unit", "2", "--capability", "gpu")
    try:
        code, lines, err = finish_kit(kit)
        table = outcomes(lines)
        assert code == 0, "\n".join(lines) + err + (tmp_path / "manager.log").read_text()
        assert set(table.values()) == {"PASS"} and list(table) == [
            "hello",
            "first_report",
            "start_unit",
            "stop_unit",
            "unit_workers_leave",
            "heartbeats",
            "well_formed",
            "shutdown",
        ], "\n".join(lines)
        assert manager.wait(20) == 0  # the shutdown check stopped it
    finally:
        stop_manager(manager)


def test_manager_mode_with_keys(tmp_path: Path, keys: str) -> None:
    address = free_address()
    kit = start_kit(address, "--keys", keys, "--only", "start_unit,stop_unit,shutdown")
    manager = start_manager(address, tmp_path / "manager.log", "--keys", keys)
    try:
        code, lines, err = finish_kit(kit)
        assert code == 0, "\n".join(lines) + err + (tmp_path / "manager.log").read_text()
        assert lines == ["PASS hello", "PASS start_unit", "PASS stop_unit", "PASS shutdown"]
        assert manager.wait(20) == 0
    finally:
        stop_manager(manager)


def test_manager_mode_exits_2_when_no_manager_comes() -> None:
    code, lines, _ = run_kit("manager", free_address(), "--connect-timeout", "0.5")
    assert code == 2
    assert "no worker manager said hello" in lines[-1]


# A worker manager written from docs/protocol.md alone (the kit's raw wire helpers): its units are raw worker sockets
# in this process. BREAK (argv[2]) makes it wrong in one way, for the kit to notice.
RAW_MANAGER = """
import os, sys, time, zmq
from scaler.conformance.wire import build, parse

address, BREAK = sys.argv[1], sys.argv[2]
ctx = zmq.Context()


def dealer(label):
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 500)
    sock.setsockopt(zmq.ROUTING_ID, label + os.urandom(16).hex().encode())
    sock.connect(address)
    return sock


sock = dealer(b"M|raw|")
units, ended, lingering = {}, [], []


def report():
    sock.send_multipart([build(
        "managerReport", minUnits=0, maxUnits=0 if BREAK == "bad-report" else 2, workersPerUnit=1, slotsPerWorker=1,
        idleMs=1000, startTimeoutMs=60000, units=list(units), ended=list(ended),
        reason="; ".join(f"{unit}: stopped" for unit in ended),
    )])
    ended.clear()


def start(unit):
    worker = dealer(b"W|raw|")
    named = unit + "-typo" if BREAK == "wrong-unit" else unit
    worker.send_multipart([build("hello", protocolVersion=1, kind="worker", name=f"{unit}-0", queueCapacity=1,
                                 capabilities=["payload=json"], unit=named)])
    units[unit] = worker


def stop(unit):
    worker = units.pop(unit, None)
    if worker is None:
        return
    if BREAK == "workers-stay":
        lingering.append(worker)
    else:
        worker.send_multipart([build("disconnect", reason="its unit stopped")])
        worker.close()
    if BREAK != "no-ended":
        ended.append(unit)
        report()


sock.send_multipart([build("hello", protocolVersion=1, kind="manager", name="raw", capabilities=["payload=json"])])
if BREAK == "self-start":  # a unit nobody asked for, not even in its report
    start("raw-of-its-own")
    lingering.append(units.pop("raw-of-its-own"))
welcomed, next_beat, deadline = False, 0.0, time.monotonic() + 120
while time.monotonic() < deadline:
    if sock.poll(50):
        message = parse(sock.recv_multipart())
        if message.name == "welcome":
            welcomed = True
            report()
        elif message.name == "scaleUnits":
            for unit in message.fields["start"]:
                start(unit)
            for unit in message.fields["stop"]:
                stop(unit)
        elif message.name == "shutdown":
            for unit in list(units):
                stop(unit)
            sock.send_multipart([build("disconnect", reason="shutdown")])
            sock.close()
            sys.exit(0)
    for worker in [*units.values(), *lingering]:
        while worker.poll(0):
            worker.recv_multipart()
    if welcomed and time.monotonic() >= next_beat:
        next_beat = time.monotonic() + 1
        for peer in [sock, *units.values(), *lingering]:
            peer.send_multipart([build("heartbeat")])
"""


def run_raw_manager(tmp_path: Path, fault: str, only: str) -> tuple[int, list[str], str]:
    address = free_address()
    script = tmp_path / "raw_manager.py"
    script.write_text(RAW_MANAGER)
    kit = start_kit(address, "--timeout", "3", "--connect-timeout", "10", "--only", f"{only},shutdown")
    manager = subprocess.Popen([sys.executable, str(script), address, fault], cwd=ROOT)
    try:
        return finish_kit(kit)
    finally:
        stop(manager)


def test_manager_mode_passes_against_a_raw_manager(tmp_path: Path) -> None:
    only = "first_report,start_unit,stop_unit,unit_workers_leave,well_formed"
    code, lines, err = run_raw_manager(tmp_path, "none", only)
    assert code == 0, "\n".join(lines) + err
    assert set(outcomes(lines).values()) == {"PASS"}, lines


@pytest.mark.parametrize(
    ("fault", "check", "words"),
    [
        ("bad-report", "first_report", "minUnits 0, maxUnits 0"),
        ("wrong-unit", "start_unit", "1 worker hello(s) naming unit 'raw-1' did not happen within 10s"),
        ("self-start", "start_unit", "workers of units the kit did not ask for said hello"),
        ("no-ended", "stop_unit", "no managerReport listed unit 'raw-1' in ended"),
        ("workers-stay", "unit_workers_leave", "1 of the unit's 1 workers neither said disconnect"),
    ],
)
def test_manager_mode_notices_a_broken_manager(tmp_path: Path, fault: str, check: str, words: str) -> None:
    code, lines, err = run_raw_manager(tmp_path, fault, check)
    table = outcomes(lines)
    assert code == 1, "\n".join(lines) + err
    assert table[check] == "FAIL", "\n".join(lines)
    line = next(line for line in lines if line.startswith(f"FAIL {check}"))
    assert words in line, line
