"""Conformance: a peer written from docs/protocol.md and scaler.capnp alone can work with a real scheduler.

Nothing of scaler's Python protocol, client or worker code is imported here, only the conformance kit's wire helpers
(scaler.conformance.wire, pyzmq and pycapnp alone). The raw peers below load the schema file with pycapnp, pack
columns with struct, and speak through plain pyzmq DEALER sockets to a real
`scaler_scheduler` process started for each test (and killed after it). Real scaler workers and clients appear
only as separate processes, to check the Python payload conventions from the other side.

Every receive waits with a poll timeout: a broken scheduler fails these tests, it never hangs them.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import capnp
import cloudpickle
import pytest
import zmq

from scaler.conformance.wire import MAX_FRAME, Msg, build, layout, parse, u16, u64, unpack_u16, unpack_u64
from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "src" / "scaler" / "protocol" / "scaler.capnp"
capnp.remove_import_hook()
schema: Any = capnp.load(str(SCHEMA_PATH))

PROTOCOL_VERSION = 1
SUCCESS, ERROR, CANCELED, CRASHED, FAILED = range(5)
PROFILE, SILENT = 1, 2
TIMEOUT = 5.0  # seconds any expected message may take


# Columns, headers, the payload-frame walk and parsing: the conformance kit's (scaler.conformance.wire: pyzmq and
# pycapnp only, nothing of scaler's codec), so that the kit and these tests read the protocol one way.


class Task(NamedTuple):
    task_id: int
    function_id: int
    flags: int
    refs: list[int]
    keywords: list[str] | None
    inline: list[bytes]


def tasks_of(message: Msg) -> list[Task]:
    """The tasks of a submitTasks/dispatchTasks batch, with their inline argument frames."""
    f = message.fields
    ids, functions, flags = unpack_u64(f["taskIds"]), unpack_u64(f["functionIds"]), f["flags"]
    counts, refs, keywords = unpack_u16(f["argCounts"]), unpack_u64(f["argRefs"]), list(f["keywords"])
    assert len(functions) == len(flags) == len(counts) == len(ids) and sum(counts) == len(refs)
    assert not keywords or len(keywords) == len(refs)
    tasks, arg, frame = [], 0, 0
    for k, task_id in enumerate(ids):
        mine = refs[arg : arg + counts[k]]
        inline = mine.count(0)
        kws = keywords[arg : arg + counts[k]] if keywords else None
        tasks.append(Task(task_id, functions[k], flags[k], mine, kws, message.payloads[frame : frame + inline]))
        arg += counts[k]
        frame += inline
    assert frame == len(message.payloads)
    return tasks


# ------------------------------------------------------------------------------------------------ scheduler
@dataclass
class Scheduler:
    address: str
    monitor: str
    process: subprocess.Popen[bytes]
    log_path: Path
    clean_log: bool = True  # at teardown: the scheduler logged no traceback

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


@pytest.fixture()
def start_scheduler(tmp_path: Path) -> Iterator[Any]:
    started: list[Scheduler] = []

    def start(*options: str) -> Scheduler:
        port = free_port()
        address = f"tcp://127.0.0.1:{port}"
        monitor = f"ipc://{tempfile.gettempdir()}/scaler-conformance-{os.getpid()}-{port}"
        log_path = tmp_path / f"scheduler-{port}.log"
        command = [sys.executable, "-m", "scaler.entry_points.scheduler", address, "--logging-level", "WARNING"]
        command += ["--monitor-address", monitor, "--logging-paths", str(log_path), *options]
        with open(os.devnull, "wb") as devnull:
            process = subprocess.Popen(command, stdout=devnull, stderr=subprocess.STDOUT, cwd=ROOT)
        scheduler = Scheduler(address, monitor, process, log_path)
        started.append(scheduler)
        return scheduler

    yield start
    for scheduler in started:
        if scheduler.process.poll() is None:
            scheduler.process.kill()
        scheduler.process.wait(10)
        try:
            os.unlink(scheduler.monitor[len("ipc://") :])
        except OSError:
            pass
    for scheduler in started:
        if scheduler.clean_log:
            assert "Traceback" not in scheduler.log(), scheduler.log()


@pytest.fixture()
def scheduler(start_scheduler: Any) -> Scheduler:
    started: Scheduler = start_scheduler()
    return started


@pytest.fixture()
def ctx() -> Iterator[zmq.Context[Any]]:
    context: zmq.Context[Any] = zmq.Context()
    try:
        yield context
    finally:
        context.destroy(linger=0)


# ------------------------------------------------------------------------------------------------ raw peers
class Peer:
    """A DEALER socket with a routing id of our choice; frames are [header, payload...] both ways."""

    _count = 0

    def __init__(self, ctx: zmq.Context[Any], scheduler: Scheduler, label: str) -> None:
        Peer._count += 1
        self.scheduler = scheduler
        self.identity = f"{label}|raw|{os.getpid()}|{Peer._count}".encode()
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTING_ID, self.identity)
        self.sock.connect(scheduler.address)

    def send(self, member: str, payloads: list[bytes] | None = None, /, pack: bool = False, **fields: Any) -> None:
        """Send a message; `payloads` (batch messages) travel after the header as payloadSizes says."""
        frames: list[bytes] = []
        if payloads is not None:
            fields["payloadSizes"] = u64([len(p) for p in payloads])
            frames = layout(payloads, pack)
        self.sock.send_multipart([build(member, **fields), *frames])

    def send_frames(self, frames: list[bytes]) -> None:
        self.sock.send_multipart(frames)

    def recv(self, timeout: float = TIMEOUT) -> Msg:
        if not self.sock.poll(int(timeout * 1000)):
            raise AssertionError(
                f"{self.identity!r}: no message within {timeout}s; scheduler log:\n{self.scheduler.log()[-3000:]}"
            )
        return parse(self.sock.recv_multipart())

    def expect(self, name: str, timeout: float = TIMEOUT, ignore: tuple[str, ...] = ("heartbeatEcho",)) -> Msg:
        deadline = time.monotonic() + timeout
        while True:
            message = self.recv(max(0.0, deadline - time.monotonic()))
            if message.name == name:
                return message
            if message.name not in ignore:
                raise AssertionError(f"{self.identity!r}: expected {name}, got {message}")

    def quiet(self, seconds: float = 0.3, ignore: tuple[str, ...] = ("heartbeatEcho",)) -> None:
        """Nothing (but `ignore`d kinds) arrives for `seconds`."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.sock.poll(int(left * 1000) + 1):
                message = parse(self.sock.recv_multipart())
                assert message.name in ignore, f"{self.identity!r}: unexpected {message}"

    def heartbeat(self, **fields: Any) -> None:
        self.send("heartbeat", **fields)

    def close(self) -> None:
        self.sock.close(linger=0)


class RawWorker(Peer):
    def __init__(self, ctx: zmq.Context[Any], scheduler: Scheduler, capacity: int = 10, name: str = "raw") -> None:
        super().__init__(ctx, scheduler, "W")
        self.objects: dict[int, bytes] = {}
        self.welcome = self.hello(capacity, name)

    def hello(self, capacity: int, name: str) -> dict[str, Any]:
        # it runs Python payloads: it offers payload=python, which every task of the Python client requires
        self.send(
            "hello",
            protocolVersion=PROTOCOL_VERSION,
            kind="worker",
            name=name,
            queueCapacity=capacity,
            capabilities=["payload=python"],
        )
        return self.expect("welcome", timeout=10).fields

    def expect(self, name: str, timeout: float = TIMEOUT, ignore: tuple[str, ...] = ("heartbeatEcho",)) -> Msg:
        """Like Peer.expect; objects pushed meanwhile are stored, as a worker must."""
        deadline = time.monotonic() + timeout
        while True:
            message = self.recv(max(0.0, deadline - time.monotonic()))
            if message.name == "putObjects":
                self.objects.update(zip(message.ids("objectIds"), message.payloads, strict=True))
                if name != "putObjects":
                    continue
            if message.name == name:
                return message
            if message.name not in ignore:
                raise AssertionError(f"{self.identity!r}: expected {name}, got {message}")

    def work(self, timeout: float = TIMEOUT) -> list[Task]:
        """The next dispatched batch. Every object it refers to must have been pushed before it."""
        return self.accept(self.expect("dispatchTasks", timeout))

    def accept(self, message: Msg) -> list[Task]:
        tasks = tasks_of(message)
        for task in tasks:
            for ref in (task.function_id, *task.refs):
                assert ref == 0 or ref in self.objects, f"task {task.task_id:#x} dispatched before object {ref:#x}"
        return tasks

    def answer(self, results: list[tuple[int, int, bytes]], durations: list[int] | None = None, **extra: Any) -> None:
        """taskResults; small payloads share one frame, big ones too up to 1 MiB; bigger ones span frames."""
        ids, statuses, payloads = zip(*results, strict=True) if results else ((), (), ())
        fields: dict[str, Any] = {"taskIds": u64(list(ids)), "statuses": bytes(statuses), **extra}
        if durations is not None:
            fields["durationsUs"] = u64(durations)
        self.send("taskResults", list(payloads), pack=True, **fields)


class RawClient(Peer):
    def __init__(self, ctx: zmq.Context[Any], scheduler: Scheduler, name: str = "raw-client") -> None:
        super().__init__(ctx, scheduler, "C")
        self.counter = 0
        self.send("hello", protocolVersion=PROTOCOL_VERSION, kind="client", name=name, heartbeatIntervalMs=2000)
        self.welcome = self.expect("welcome", timeout=10).fields
        self.prefix: int = self.welcome["idPrefix"]

    def mint(self) -> int:
        self.counter += 1
        return (self.prefix << 40) | self.counter

    def put(self, objects: dict[int, bytes], names: list[str] | None = None) -> None:
        fields: dict[str, Any] = {"objectIds": u64(list(objects))}
        if names:
            fields["names"] = names
        self.send("putObjects", list(objects.values()), pack=len(objects) > 1, **fields)

    def function(self, payload: bytes = b"function object") -> int:
        function_id = self.mint()
        self.put({function_id: payload}, ["fn"])
        return function_id

    def submit(self, tasks: list[Task]) -> None:
        keywords = [kw for t in tasks for kw in (t.keywords or [""] * len(t.refs))]
        fields: dict[str, Any] = {
            "taskIds": u64([t.task_id for t in tasks]),
            "functionIds": u64([t.function_id for t in tasks]),
            "flags": bytes(t.flags for t in tasks),
            "argCounts": u16([len(t.refs) for t in tasks]),
            "argRefs": u64([r for t in tasks for r in t.refs]),
        }
        if any(keywords):
            fields["keywords"] = keywords
        self.send("submitTasks", [p for t in tasks for p in t.inline], **fields)

    def task(self, function_id: int, *args: bytes | int, flags: int = 0, keywords: list[str] | None = None) -> Task:
        """A new task: bytes arguments travel inline, int arguments are references to objects or tasks."""
        refs = [0 if isinstance(a, bytes) else a for a in args]
        inline = [a for a in args if isinstance(a, bytes)]
        return Task(self.mint(), function_id, flags, refs, keywords, inline)

    def results(self, ids: list[int], timeout: float = TIMEOUT) -> dict[int, tuple[int, bytes]]:
        """(status, payload) of each of `ids`, from however many taskResults messages they come in."""
        got: dict[int, tuple[int, bytes]] = {}
        deadline = time.monotonic() + timeout
        while set(ids) - set(got):
            message = self.expect("taskResults", max(0.0, deadline - time.monotonic()))
            task_ids, statuses = message.ids("taskIds"), message.fields["statuses"]
            assert len(statuses) == len(task_ids) == len(message.payloads)
            for k, task_id in enumerate(task_ids):
                assert task_id in ids and task_id not in got, f"unexpected result for {task_id:#x}"
                got[task_id] = (statuses[k], message.payloads[k])
        return got


def connect_worker(ctx: zmq.Context[Any], scheduler: Scheduler, capacity: int = 10, name: str = "raw") -> RawWorker:
    return RawWorker(ctx, scheduler, capacity, name)


# ================================================================================================ sessions
def test_hello_welcome_heartbeat(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    client = RawClient(ctx, scheduler)
    w = client.welcome
    assert w["protocolVersion"] == PROTOCOL_VERSION
    assert 1 <= w["idPrefix"] < 2**24
    assert w["schedulerName"]
    assert w["protected"] is True
    assert w["peerTimeoutMs"] == 60_000  # the client timeout
    assert (w["workersStated"], w["workers"], w["workerCapacity"]) == (True, 0, 0)  # to a client: no worker yet
    worker = connect_worker(ctx, scheduler)
    assert worker.welcome["peerTimeoutMs"] == 10_000  # the worker timeout
    assert worker.welcome["idPrefix"] != w["idPrefix"]
    assert worker.welcome["workersStated"] is False  # stated to clients only

    client.heartbeat()
    echo = client.expect("heartbeatEcho", ignore=())
    assert echo.payloads == []
    assert (echo.fields["workersStated"], echo.fields["workers"], echo.fields["workerCapacity"]) == (True, 1, 10)
    worker.heartbeat(cpuPercent=12.5, rssBytes=1 << 30, queued=3, running=1, processors=1)
    worker.expect("heartbeatEcho", ignore=())


def test_message_before_hello_gets_not_connected(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    RawClient(ctx, scheduler)  # the scheduler is up
    stranger = Peer(ctx, scheduler, "X")
    stranger.heartbeat()
    error = stranger.expect("error", ignore=())
    assert error.fields["code"] == "notConnected"
    stranger.send("submitTasks", taskIds=u64([1]), functionIds=u64([1]), flags=b"\0", argCounts=u16([0]))
    assert stranger.expect("error", ignore=()).fields["code"] == "notConnected"
    stranger.send("disconnect", reason="never mind")  # a disconnect without a session is dropped silently
    stranger.quiet(0.3, ignore=())


def test_wrong_protocol_version_is_refused(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    RawClient(ctx, scheduler)
    peer = Peer(ctx, scheduler, "C")
    peer.send("hello", protocolVersion=PROTOCOL_VERSION + 1, kind="client", name="future")
    refused = peer.expect("refused", ignore=())
    assert refused.fields["schedulerProtocolVersion"] == PROTOCOL_VERSION
    assert str(PROTOCOL_VERSION + 1) in refused.fields["reason"]
    peer.heartbeat()  # no session was opened
    assert peer.expect("error", ignore=()).fields["code"] == "notConnected"

    worker = Peer(ctx, scheduler, "W")
    worker.send("hello", protocolVersion=PROTOCOL_VERSION, kind="worker", name="no room", queueCapacity=0)
    assert "queueCapacity" in worker.expect("refused", ignore=()).fields["reason"]

    monitor = Peer(ctx, scheduler, "M")
    monitor.send("hello", protocolVersion=PROTOCOL_VERSION, kind="monitor", name="lost monitor")
    assert "monitor address" in monitor.expect("refused", ignore=()).fields["reason"]


def test_malformed_messages_get_an_error_and_the_scheduler_keeps_serving(
    ctx: zmq.Context[Any], scheduler: Scheduler
) -> None:
    client = RawClient(ctx, scheduler)
    other = RawClient(ctx, scheduler)
    for frames in (
        [b"this is not cap'n proto"],
        [b"\x00" * 8],
        [build("submitTasks", taskIds=u64([client.mint()]), functionIds=u64([])), b"x"],  # column too short
        [build("taskResults", taskIds=u64([1]), statuses=bytes([9]), payloadSizes=u64([0]))],  # unknown status
        [build("taskResults", taskIds=u64([1, 2]), statuses=bytes(2), payloadSizes=u64([2, 2])), b"abc", b"d"],
        [build("putObjects", objectIds=u64([client.mint()]))],  # an object without its frame
        [build("heartbeat")[:-8]],  # truncated header
    ):
        client.send_frames(frames)
        error = client.expect("error", ignore=())
        assert error.fields["code"] == "malformed", error
        assert error.fields["message"]
    stranger = Peer(ctx, scheduler, "X")  # malformed without a session: same answer
    stranger.send_frames([b"garbage!"])
    assert stranger.expect("error", ignore=()).fields["code"] == "malformed"
    client.heartbeat()
    client.expect("heartbeatEcho", ignore=())
    other.heartbeat()
    other.expect("heartbeatEcho", ignore=())


def test_requests_a_peer_may_not_make_get_bad_request(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    client = RawClient(ctx, scheduler)
    worker = connect_worker(ctx, scheduler)
    client.send("dispatchTasks", taskIds=u64([]))
    error = client.expect("error", ignore=())
    assert error.fields["code"] == "badRequest"
    worker.send("submitTasks", taskIds=u64([]))
    assert worker.expect("error").fields["code"] == "badRequest"
    worker.send("putObjects", objectIds=u64([]))
    assert worker.expect("error").fields["code"] == "badRequest"


def test_ids_must_be_the_sessions_own(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    client = RawClient(ctx, scheduler)
    other = RawClient(ctx, scheduler)
    function_id = client.function()
    foreign = (other.prefix << 40) | 1
    zero_counter = client.prefix << 40
    client.submit([Task(foreign, function_id, 0, [], None, []), Task(zero_counter, function_id, 0, [], None, [])])
    error = client.expect("error")
    assert error.fields["code"] == "badRequest"
    assert sorted(error.ids()) == sorted([foreign, zero_counter])

    client.put({(other.prefix << 40) | 7: b"x"})
    error = client.expect("error")
    assert error.fields["code"] == "badRequest" and error.ids() == [(other.prefix << 40) | 7]

    task = client.task(function_id)
    client.submit([task])
    client.submit([task])  # the same id again while the first is unfinished
    error = client.expect("error")
    assert error.fields["code"] == "badRequest" and error.ids() == [task.task_id]
    client.put({function_id: b"again"})  # an object id already in use
    assert client.expect("error").ids() == [function_id]


def test_unknown_reference_fails_the_task(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    client = RawClient(ctx, scheduler)
    missing_function = client.task((client.prefix << 40) | 999_999)
    function_id = client.function()
    missing_argument = client.task(function_id, (client.prefix << 40) | 888_888)
    client.submit([missing_function, missing_argument])
    results = client.results([missing_function.task_id, missing_argument.task_id])
    for status, payload in results.values():
        assert status == FAILED
        assert "which this client does not have" in payload.decode("utf-8")


# ================================================================================================ tasks
def test_submit_payload_bytes_travel_exactly(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    worker = connect_worker(ctx, scheduler, capacity=4)
    client = RawClient(ctx, scheduler)
    function_payload = os.urandom(3000)
    function_id = client.function(function_payload)
    big_argument = os.urandom(2_000_000)
    obj = client.mint()
    client.put({obj: b"an object argument"}, ["table"])
    task = client.task(function_id, b"first", obj, big_argument, flags=PROFILE, keywords=["", "", "big"])
    client.submit([task])

    dispatch = worker.expect("dispatchTasks")
    [got] = worker.accept(dispatch)
    # over 1 MiB, it spans frames: the scheduler forwards the pieces it came in, 1 MiB and the rest
    start = dispatch.frames.index(big_argument[:MAX_FRAME])
    pieces = dispatch.frames[start : start + 2]
    assert [len(piece) for piece in pieces] == [1_048_576, 951_424]
    assert b"".join(pieces) == big_argument
    assert got.task_id == task.task_id and got.function_id == function_id
    assert got.flags == PROFILE
    assert got.refs == [0, obj, 0]
    assert got.keywords == ["", "", "big"]
    assert got.inline == [b"first", big_argument]
    assert worker.objects[function_id] == function_payload
    assert worker.objects[obj] == b"an object argument"

    result = os.urandom(1_500_000)
    worker.answer([(task.task_id, SUCCESS, result)], durations=[1234], peakMemory=u64([4096]))
    message = client.expect("taskResults")
    assert message.ids("taskIds") == [task.task_id]
    assert message.fields["statuses"] == bytes([SUCCESS])
    assert message.payloads == [result]
    assert message.ids("durationsUs") == [1234]
    assert message.ids("peakMemory") == [4096]


def test_map_is_batched_and_respects_queue_capacity(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    client = RawClient(ctx, scheduler)
    function_id = client.function()
    tasks = [client.task(function_id, f"arg {i}".encode()) for i in range(100)]
    client.submit(tasks)  # 100 tasks, one message
    worker = connect_worker(ctx, scheduler, capacity=1000)

    message = worker.expect("dispatchTasks")
    batch = worker.accept(message)
    assert [t.task_id for t in batch] == [t.task_id for t in tasks]  # all of them, in order, in one message
    assert [t.inline for t in batch] == [t.inline for t in tasks]
    assert len(message.frames) == 1  # small payloads share a frame
    worker.answer([(t.task_id, SUCCESS, b"r" + t.inline[0]) for t in batch])
    message = client.expect("taskResults")  # one batch of results in, one batch out
    assert message.ids("taskIds") == [t.task_id for t in tasks]
    assert message.payloads == [b"r" + t.inline[0] for t in tasks]
    assert message.fields["statuses"] == bytes(100)

    small = connect_worker(ctx, scheduler, capacity=4)
    worker.send("disconnect", reason="leaving")
    worker.heartbeat()
    assert worker.expect("error").fields["code"] == "notConnected"  # the disconnect was handled
    more = [client.task(function_id, b"x") for _ in range(30)]
    client.submit(more)
    done: dict[int, tuple[int, bytes]] = {}
    while len(done) < len(more):
        batch = small.work()
        small.quiet(0.05)  # nothing more until some of these end
        assert 1 <= len(batch) <= 4, "the scheduler assigned more tasks than queueCapacity"
        small.answer([(t.task_id, SUCCESS, b"") for t in batch])
        done.update(client.results([t.task_id for t in batch]))
    assert all(status == SUCCESS for status, _ in done.values())


def test_error_and_failed_results_reach_the_client_unchanged(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    worker = connect_worker(ctx, scheduler)
    client = RawClient(ctx, scheduler)
    function_id = client.function()
    a, b, c = (client.task(function_id) for _ in range(3))
    client.submit([a, b, c])
    batch = worker.work()
    assert {t.task_id for t in batch} == {a.task_id, b.task_id, c.task_id}
    error_frame = struct.pack("<I", 4) + b"boom" + b"pickled exception"
    worker.answer([(a.task_id, ERROR, error_frame), (b.task_id, FAILED, b"no such object"), (c.task_id, SUCCESS, b"")])
    results = client.results([a.task_id, b.task_id, c.task_id])
    assert results == {
        a.task_id: (ERROR, error_frame),
        b.task_id: (FAILED, b"no such object"),
        c.task_id: (SUCCESS, b""),
    }


def test_crashed_tasks_are_retried_then_failed(ctx: zmq.Context[Any], start_scheduler: Any) -> None:
    scheduler = start_scheduler("--max-task-retries", "1")
    worker = connect_worker(ctx, scheduler)
    client = RawClient(ctx, scheduler)
    task = client.task(client.function(), b"arg")
    client.submit([task])
    for attempt in range(2):
        [got] = worker.work()
        assert got.task_id == task.task_id and got.inline == [b"arg"], attempt
        worker.answer([(task.task_id, CRASHED, b"the processor died (exit code -9)")])
    [(status, payload)] = client.results([task.task_id]).values()
    assert status == FAILED
    text = payload.decode("utf-8")
    assert "the processor died (exit code -9)" in text and "2 times" in text


def test_graph_task_waits_for_the_task_it_refers_to(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    worker = connect_worker(ctx, scheduler)
    client = RawClient(ctx, scheduler)
    function_id = client.function()
    a = client.task(function_id, b"a-input", flags=SILENT)  # only b needs it: no result for the client
    b = client.task(function_id, a.task_id, b"b-input")
    c = client.task(function_id, b.task_id, a.task_id)
    client.submit([a, b, c])

    [got] = worker.work()
    assert got.task_id == a.task_id
    worker.quiet(0.2)  # b and c wait
    worker.answer([(a.task_id, SUCCESS, b"result of a")])
    [got] = worker.work()
    assert got.task_id == b.task_id and got.refs == [a.task_id, 0] and got.inline == [b"b-input"]
    assert worker.objects[a.task_id] == b"result of a"  # the result travels as an object with the task's id
    worker.answer([(b.task_id, SUCCESS, b"result of b")])
    [got] = worker.work()
    assert got.task_id == c.task_id and got.refs == [b.task_id, a.task_id]
    assert worker.objects[b.task_id] == b"result of b"
    worker.answer([(c.task_id, SUCCESS, b"result of c")])

    results = client.results([b.task_id, c.task_id])
    assert results == {b.task_id: (SUCCESS, b"result of b"), c.task_id: (SUCCESS, b"result of c")}
    freed: set[int] = set()
    while freed != {a.task_id, b.task_id}:  # kept results are freed once nothing needs them
        freed.update(worker.expect("freeObjects").ids())
    client.quiet(0.2)  # and never a result for the silent task


def test_graph_failure_propagates_to_dependents_only(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    worker = connect_worker(ctx, scheduler)
    client = RawClient(ctx, scheduler)
    function_id = client.function()
    bad = client.task(function_id)
    dependent = client.task(function_id, bad.task_id)
    grandchild = client.task(function_id, dependent.task_id)
    unrelated = client.task(function_id)
    client.submit([bad, dependent, grandchild, unrelated])
    batch = worker.work()
    assert {t.task_id for t in batch} == {bad.task_id, unrelated.task_id}
    error_frame = struct.pack("<I", 3) + b"bad"
    worker.answer([(bad.task_id, ERROR, error_frame), (unrelated.task_id, SUCCESS, b"fine")])
    results = client.results([bad.task_id, dependent.task_id, grandchild.task_id, unrelated.task_id])
    assert results[bad.task_id] == results[dependent.task_id] == results[grandchild.task_id] == (ERROR, error_frame)
    assert results[unrelated.task_id] == (SUCCESS, b"fine")


def test_cancel(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    client = RawClient(ctx, scheduler)
    function_id = client.function()
    queued = client.task(function_id, b"x")
    client.submit([queued])  # no worker yet: it stays in the scheduler's queue
    client.send("cancelTasks", ids=u64([queued.task_id]))
    assert client.results([queued.task_id]) == {queued.task_id: (CANCELED, b"")}

    worker = connect_worker(ctx, scheduler, capacity=5)
    assigned, ignored = client.task(function_id), client.task(function_id)
    client.submit([assigned, ignored])
    assert {t.task_id for t in worker.work()} == {assigned.task_id, ignored.task_id}
    client.send("cancelTasks", ids=u64([assigned.task_id, ignored.task_id]))
    assert sorted(worker.expect("cancelTasks").ids()) == sorted([assigned.task_id, ignored.task_id])
    client.quiet(0.2)  # the scheduler waits for the worker's word
    # One was still queued on the worker (it answers canceled); the other was running and finished anyway.
    worker.answer([(assigned.task_id, CANCELED, b""), (ignored.task_id, SUCCESS, b"too late")])
    results = client.results([assigned.task_id, ignored.task_id])
    assert results == {assigned.task_id: (CANCELED, b""), ignored.task_id: (CANCELED, b"")}

    client.send("cancelTasks", ids=u64([assigned.task_id, 12345]))  # unknown or finished ids: ignored
    client.quiet(0.2)


# ================================================================================================ workers
def test_worker_disconnect_redispatches_its_tasks(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    first = connect_worker(ctx, scheduler, capacity=1, name="first")
    client = RawClient(ctx, scheduler)
    task = client.task(client.function(b"fn"), b"payload")
    client.submit([task])
    [got] = first.work()
    assert got.task_id == task.task_id
    second = connect_worker(ctx, scheduler, capacity=1, name="second")
    second.quiet(0.2)
    first.send("disconnect", reason="going away")
    [again] = second.work()
    assert again == got
    assert second.objects[again.function_id] == b"fn"
    second.answer([(task.task_id, SUCCESS, b"from second")])
    assert client.results([task.task_id]) == {task.task_id: (SUCCESS, b"from second")}
    first.answer([(task.task_id, SUCCESS, b"stale")])  # no session any more
    assert first.expect("error").fields["code"] == "notConnected"
    client.quiet(0.2)


def test_worker_whose_connection_closes_is_lost_at_once(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    """No disconnect message, no waiting for the heartbeat timeout (10 s here): the closed connection is noticed."""
    doomed = connect_worker(ctx, scheduler, capacity=1, name="doomed")
    client = RawClient(ctx, scheduler)
    task = client.task(client.function(), b"p")
    client.submit([task])
    assert doomed.work()[0].task_id == task.task_id
    other = connect_worker(ctx, scheduler, capacity=1, name="other")
    other.quiet(0.1)
    doomed.close()
    [again] = other.work(timeout=3)
    assert again.task_id == task.task_id


def test_silent_worker_is_declared_lost(ctx: zmq.Context[Any], start_scheduler: Any) -> None:
    scheduler = start_scheduler("--worker-timeout-seconds", "1")
    silent = connect_worker(ctx, scheduler, capacity=1, name="silent")
    assert silent.welcome["peerTimeoutMs"] == 1000
    client = RawClient(ctx, scheduler)
    task = client.task(client.function(), b"p")
    client.submit([task])
    assert silent.work()[0].task_id == task.task_id
    alive = connect_worker(ctx, scheduler, capacity=1, name="alive")
    deadline = time.monotonic() + 5
    got: list[Task] = []
    while not got and time.monotonic() < deadline:
        alive.heartbeat()
        try:
            got = alive.work(timeout=0.3)
        except AssertionError:
            continue
    assert [t.task_id for t in got] == [task.task_id]
    silent.heartbeat()
    assert silent.expect("error", ignore=("heartbeatEcho", "cancelTasks")).fields["code"] == "notConnected"


def test_balancing_moves_queued_tasks_to_a_new_worker(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    busy = connect_worker(ctx, scheduler, capacity=10, name="busy")
    client = RawClient(ctx, scheduler)
    function_id = client.function()
    tasks = [client.task(function_id, bytes([i])) for i in range(4)]
    client.submit(tasks)
    held = busy.work()
    assert len(held) == 4
    idle = connect_worker(ctx, scheduler, capacity=10, name="idle")
    request = busy.expect("balanceRequest").ids()
    assert request and set(request) <= {t.task_id for t in held}
    given_back = request[:1]  # say the others already started
    busy.send("balanceResponse", ids=u64(given_back))
    moved = idle.work()
    assert [t.task_id for t in moved] == given_back
    assert moved[0] == next(t for t in held if t.task_id == given_back[0])
    kept = [t for t in held if t.task_id not in given_back]
    busy.answer([(t.task_id, SUCCESS, b"busy") for t in kept])
    idle.answer([(t.task_id, SUCCESS, b"idle") for t in moved])
    results = client.results([t.task_id for t in tasks])
    assert {i for i, (_, p) in results.items() if p == b"idle"} == set(given_back)
    busy.answer([(given_back[0], SUCCESS, b"stale")])  # given back: ignored
    client.quiet(0.2)


def test_balance_response_may_be_empty(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    busy = connect_worker(ctx, scheduler, capacity=10)
    client = RawClient(ctx, scheduler)
    function_id = client.function()
    tasks = [client.task(function_id) for _ in range(3)]
    client.submit(tasks)
    assert len(busy.work()) == 3
    idle = connect_worker(ctx, scheduler, capacity=10)
    busy.expect("balanceRequest")
    busy.send("balanceResponse", ids=u64([]))
    idle.quiet(0.2)
    busy.answer([(t.task_id, SUCCESS, b"") for t in tasks])
    assert len(client.results([t.task_id for t in tasks])) == 3


# ================================================================================================ objects
def test_objects_are_pushed_before_dispatch_once_and_freed(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    worker = connect_worker(ctx, scheduler)
    client = RawClient(ctx, scheduler)
    function_id = client.function(b"fn")
    obj = client.mint()
    client.put({obj: b"shared object"}, ["shared"])
    first = client.task(function_id, obj)
    client.submit([first])
    put = worker.expect("putObjects")
    assert sorted(put.ids("objectIds")) == sorted([function_id, obj])
    assert dict(zip(put.ids("objectIds"), put.payloads, strict=True)) == {function_id: b"fn", obj: b"shared object"}
    worker.accept(worker.expect("dispatchTasks", ignore=()))
    worker.answer([(first.task_id, SUCCESS, b"")])
    client.results([first.task_id])

    second = client.task(function_id, obj)
    client.submit([second])
    message = worker.recv()
    assert message.name == "dispatchTasks", "an object the worker holds is not sent again"
    worker.answer([(second.task_id, SUCCESS, b"")])
    client.results([second.task_id])

    client.send("freeObjects", ids=u64([obj, 424242]))  # unknown ids are ignored
    assert worker.expect("freeObjects").ids() == [obj]
    third = client.task(function_id, obj)  # the freed object is gone
    client.submit([third])
    [(status, _)] = client.results([third.task_id]).values()
    assert status == FAILED


def test_object_in_use_is_freed_after_its_last_task(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    worker = connect_worker(ctx, scheduler)
    client = RawClient(ctx, scheduler)
    function_id = client.function()
    obj = client.mint()
    client.put({obj: b"o"})
    task = client.task(function_id, obj)
    client.submit([task])
    worker.work()
    client.send("freeObjects", ids=u64([obj, function_id]))
    worker.quiet(0.2)  # still needed by the running task
    worker.answer([(task.task_id, SUCCESS, b"")])
    client.results([task.task_id])
    freed: set[int] = set()
    while freed != {obj, function_id}:
        freed.update(worker.expect("freeObjects").ids())


def test_client_disconnect_cancels_its_tasks_and_frees_its_objects(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    worker = connect_worker(ctx, scheduler)
    client = RawClient(ctx, scheduler)
    function_id = client.function()
    running = client.task(function_id)
    client.submit([running])
    worker.work()
    client.send("disconnect", reason="bye")
    assert worker.expect("cancelTasks").ids() == [running.task_id]
    worker.answer([(running.task_id, CANCELED, b"")])
    assert worker.expect("freeObjects").ids() == [function_id]
    client.heartbeat()
    assert client.expect("error").fields["code"] == "notConnected"


# ================================================================================================ shutdown, monitor
def test_shutdown_request_is_refused_when_protected(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    client = RawClient(ctx, scheduler)
    client.send("shutdownRequest", reason="please")
    error = client.expect("error")
    assert error.fields["code"] == "protected"
    client.heartbeat()
    client.expect("heartbeatEcho", ignore=())
    assert scheduler.process.poll() is None


def test_shutdown_request_stops_an_unprotected_scheduler(ctx: zmq.Context[Any], start_scheduler: Any) -> None:
    scheduler = start_scheduler("--no-protected")
    worker = connect_worker(ctx, scheduler)
    client = RawClient(ctx, scheduler)
    assert client.welcome["protected"] is False
    client.send("shutdownRequest", reason="done for today")
    assert "shutdown requested by client raw-client" in worker.expect("shutdown").fields["reason"]
    assert "shutdown requested" in client.expect("shutdown").fields["reason"]
    assert scheduler.process.wait(10) == 0


def test_sigterm_tells_every_peer(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    worker = connect_worker(ctx, scheduler)
    client = RawClient(ctx, scheduler)
    scheduler.process.send_signal(signal.SIGTERM)
    assert "SIGTERM" in worker.expect("shutdown").fields["reason"]
    assert "SIGTERM" in client.expect("shutdown").fields["reason"]
    assert scheduler.process.wait(10) == 0


def test_monitor_publishes_status(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    worker = connect_worker(ctx, scheduler, capacity=7, name="watched-worker")
    client = RawClient(ctx, scheduler, name="watched-client")
    worker.heartbeat(cpuPercent=1.5, rssBytes=123, queued=2, running=1, processors=1, lagUs=99)
    worker.expect("heartbeatEcho", ignore=())
    sub = ctx.socket(zmq.DEALER)  # a monitor: a DEALER that says hello (kind monitor) on the monitor address
    sub.setsockopt(zmq.LINGER, 0)
    sub.connect(scheduler.monitor)
    sub.send(build("hello", protocolVersion=PROTOCOL_VERSION, kind="monitor", name="raw-monitor"))
    deadline = time.monotonic() + 5
    seen: list[str] = []
    while True:
        assert sub.poll(max(1, int((deadline - time.monotonic()) * 1000))), f"no status within 5s (got {seen})"
        frames = sub.recv_multipart()
        assert len(frames) == 1
        status = parse(frames)
        seen.append(status.name)
        if status.name == "welcome":
            continue
        assert status.name == "status" and seen[0] == "welcome"
        if status.fields["workers"] and status.fields["clients"]:
            break
    f = status.fields
    assert f["schedulerName"] == client.welcome["schedulerName"]
    [w] = f["workers"]
    assert w["name"] == "watched-worker" and w["free"] == 7 and w["queued"] == 2 and w["lagUs"] == 99
    assert [c["name"] for c in f["clients"]] == ["watched-client"]
    assert {c["name"] for c in f["received"]} >= {"hello", "heartbeat"}
    assert {c["name"] for c in f["tasksByState"]} >= {"queued", "assigned", "success"}
    sub.close(linger=0)


# ================================================================================================ Python payloads
PAYLOAD_SCRIPT = """
import cloudpickle, sys
class Serializer:  # defined in __main__: travels by value, so the other side needs no import
    @staticmethod
    def serialize(obj):
        return cloudpickle.dumps(obj)
    @staticmethod
    def deserialize(payload):
        return cloudpickle.loads(payload)
"""


def _pickle_serializer() -> Any:
    class PickleSerializer:  # local: cloudpickle sends it by value
        @staticmethod
        def serialize(obj: Any) -> bytes:
            import cloudpickle

            pickled: bytes = cloudpickle.dumps(obj)
            return pickled

        @staticmethod
        def deserialize(payload: bytes) -> Any:
            import cloudpickle

            return cloudpickle.loads(payload)

    return PickleSerializer()


@contextmanager
def real_worker(scheduler: Scheduler) -> Iterator[subprocess.Popen[bytes]]:
    """One scaler worker (`scaler_cluster -n 1`) connected to the scheduler, stopped (then killed) at the end."""
    command = [sys.executable, "-m", "scaler.entry_points.cluster", scheduler.address, "-n", "1"]
    process = subprocess.Popen(
        [*command, "--logging-level", "ERROR"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT
    )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def function_object(serializer: Any, function: Any) -> bytes:
    """A Python function object as docs/protocol.md says: cloudpickle((serializer, serializer.serialize(fn)))."""
    pickled: bytes = cloudpickle.dumps((serializer, serializer.serialize(function)))
    return pickled


def test_real_worker_runs_python_payloads_from_a_raw_client(ctx: zmq.Context[Any], start_scheduler: Any) -> None:
    scheduler = start_scheduler("--max-task-retries", "0")
    client = RawClient(ctx, scheduler)
    serializer = _pickle_serializer()

    def square_plus(a: int, b: int = 0) -> int:
        return a * a + b

    def fails(message: str) -> None:
        raise ValueError(message)

    def crashes() -> None:
        os._exit(3)

    functions = {fn.__name__: client.function(function_object(serializer, fn)) for fn in (square_plus, fails, crashes)}
    ok = client.task(functions["square_plus"], serializer.serialize(3), serializer.serialize(1), keywords=["", "b"])
    profiled = client.task(functions["square_plus"], serializer.serialize(4), flags=PROFILE)
    error = client.task(functions["fails"], serializer.serialize("no good"))
    client.submit([ok, profiled, error])
    with real_worker(scheduler):
        results = client.results([ok.task_id, profiled.task_id, error.task_id], timeout=30)
        crash = client.task(functions["crashes"])
        client.submit([crash])
        results.update(client.results([crash.task_id], timeout=30))

    assert results[ok.task_id][0] == SUCCESS
    assert serializer.deserialize(results[ok.task_id][1]) == 10
    assert results[profiled.task_id][0] == SUCCESS
    assert serializer.deserialize(results[profiled.task_id][1]) == 16

    status, frame = results[error.task_id]
    assert status == ERROR
    (length,) = struct.unpack_from("<I", frame)
    text = frame[4 : 4 + length].decode("utf-8")
    assert "ValueError: no good" in text and "Traceback" in text
    exc = cloudpickle.loads(frame[4 + length :])
    assert isinstance(exc, ValueError) and exc.args == ("no good",)

    status, frame = results[crash.task_id]
    assert status == FAILED
    assert "exit code 3" in frame.decode("utf-8")


def test_a_crash_is_charged_to_the_task_that_crashed(ctx: zmq.Context[Any], start_scheduler: Any) -> None:
    scheduler = start_scheduler("--max-task-retries", "0")
    client = RawClient(ctx, scheduler)
    serializer = _pickle_serializer()

    def noop() -> int:
        return 1

    def crashes() -> None:
        os._exit(3)

    noop_id = client.function(function_object(serializer, noop))
    crash_id = client.function(function_object(serializer, crashes))
    with real_worker(scheduler):
        warm = client.task(noop_id)
        client.submit([warm])
        client.results([warm.task_id], timeout=30)
        innocent = [client.task(noop_id) for _ in range(10)]
        culprit = client.task(crash_id)
        client.submit([*innocent, culprit])
        results = client.results([t.task_id for t in [*innocent, culprit]], timeout=30)
    assert [results[t.task_id][0] for t in innocent] == [SUCCESS] * 10
    assert results[culprit.task_id][0] == FAILED


def test_real_client_gets_python_payloads_from_a_raw_worker(
    ctx: zmq.Context[Any], scheduler: Scheduler, tmp_path: Path
) -> None:
    worker = connect_worker(ctx, scheduler)
    script = tmp_path / "client.py"
    script.write_text(
        PAYLOAD_SCRIPT
        + textwrap.dedent(
            """
            from scaler import Client

            def cube(x, y=0):
                return x ** 3 + y

            with Client(address=sys.argv[1], timeout_seconds=20, serializer=Serializer()) as client:
                print(client.submit(cube, 3, y=1).result(), flush=True)
                try:
                    client.submit(cube, 4).result()
                except Exception as exc:
                    print(type(exc).__name__, exc, flush=True)
            """
        )
    )
    process = subprocess.Popen(
        [sys.executable, str(script), scheduler.address], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT
    )
    try:
        for _ in range(2):
            [task] = worker.work(timeout=20)
            serializer, function_bytes = cloudpickle.loads(worker.objects[task.function_id])
            function = serializer.deserialize(function_bytes)
            args = [serializer.deserialize(p) for p in task.inline]
            assert task.refs == [0] * len(args)
            kwargs = {}
            if task.keywords:
                kwargs = {k: v for k, v in zip(task.keywords, args, strict=True) if k}
                args = [v for k, v in zip(task.keywords, args, strict=True) if not k]
            if args == [4]:  # answer the second one with an error frame, as a Python worker would
                text = b"Traceback (most recent call last):\nZeroDivisionError: the raw worker says no\n"
                frame = struct.pack("<I", len(text)) + text + cloudpickle.dumps(ZeroDivisionError("raw worker says no"))
                worker.answer([(task.task_id, ERROR, frame)])
            else:
                worker.answer([(task.task_id, SUCCESS, serializer.serialize(function(*args, **kwargs)))])
        output, _ = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
    lines = output.decode().strip().splitlines()
    assert lines[-2:] == ["28", "ZeroDivisionError raw worker says no"], output.decode()


# ================================================================================================ known bugs
def test_failed_reference_does_not_release_objects_it_never_held(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    scheduler.clean_log = False
    client = RawClient(ctx, scheduler)
    base = client.prefix << 40
    client.counter = 100
    function_id = base | 3  # iterated after base | 2 in the set of references
    client.put({function_id: b"fn"})
    doomed = Task(client.mint(), function_id, 0, [base | 2], None, [])  # base | 2 does not exist
    client.submit([doomed])
    assert client.results([doomed.task_id])[doomed.task_id][0] == FAILED
    waiting = client.task(function_id, b"x")
    client.submit([waiting])
    client.send("freeObjects", ids=u64([function_id]))  # the waiting task still holds it
    worker = connect_worker(ctx, scheduler)
    [got] = worker.work(timeout=2)
    assert got.task_id == waiting.task_id


def test_task_id_may_not_reuse_an_object_id(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    client = RawClient(ctx, scheduler)
    function_id = client.function()
    client.submit([Task(function_id, function_id, 0, [], None, [])])
    error = client.expect("error", timeout=1)
    assert error.fields["code"] == "badRequest"


def test_object_id_counter_zero_is_refused(ctx: zmq.Context[Any], scheduler: Scheduler) -> None:
    client = RawClient(ctx, scheduler)
    client.put({client.prefix << 40: b"x"})
    error = client.expect("error", timeout=1)
    assert error.fields["code"] == "badRequest"


# ================================================================================================ the document
DOC = ROOT / "docs" / "protocol.md"


def test_protocol_doc_covers_the_schema() -> None:
    """docs/protocol.md explains every message, status and error code of the schema, with the diagrams."""
    text = DOC.read_text(encoding="utf-8")
    for member in schema.Message.schema.union_fields:
        assert f"### {member} (" in text, f"docs/protocol.md has no section for {member}"
    for enum in (schema.TaskStatus, schema.ErrorCode, schema.PeerKind):
        for name in enum.schema.enumerants:
            assert f"`{name}`" in text, f"docs/protocol.md does not mention {name}"
    for diagram in ("Connect", "Submit", "Map (batching)", "Graph", "Cancel", "Worker loss", "Balancing"):
        assert f"### {diagram}\n" in text
    for diagram in ("Objects", "Heartbeats", "Shutdown"):
        assert f"### {diagram}\n" in text
    blocks = text.split("```mermaid\n")[1:]
    assert len(blocks) >= 10
    for block in blocks:
        body = block.split("```", 1)[0]
        assert body.startswith("sequenceDiagram\n")
        assert ";" not in body and "#" not in body, "mermaid reads ';' as a line break and '#' as an entity"
