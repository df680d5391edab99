"""Worker mode: the kit binds an address as a fake scheduler (ROUTER), waits for one worker's hello and checks it.

The payload convention comes from the hello's capabilities: `payload=python` (function objects made with cloudpickle,
values pickled) or `payload=json` (the functions `echo`, `add`, `fail` and `sleep` named in JSON). Every task the kit
sends runs one of those four functions.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from scaler.conformance.wire import (
    CANCELED,
    ERROR,
    FAILED,
    MAX_FRAME,
    PAYLOAD_KINDS,
    PROTOCOL_VERSION,
    STATUS_NAMES,
    SUCCESS,
    TIMED_OUT,
    CheckFailed,
    CheckSkipped,
    Deadline,
    Keys,
    Msg,
    Report,
    Task,
    advise,
    build,
    expect,
    layout,
    parse,
    refuse_unknown,
    task_batch_fields,
    u64,
    unpack_u64,
)

CLIENT_PREFIX = 0x42  # the prefix of the (imaginary) client whose tasks and objects the kit sends
PEER_TIMEOUT_MS = 10_000
POLL_SECONDS = 0.2  # a wait looks at the worker's connection this often
BIG = 3 * MAX_FRAME + 5  # the size of the frame_limit check's argument (and result): it spans four frames
WORKER_MAY_SEND = ("hello", "heartbeat", "taskResults", "balanceResponse", "disconnect", "tasksStarted", "taskOutput")

PYTHON_FUNCTIONS = """
def echo(value=None):
    return value

def add(*numbers):
    return sum(numbers)

def fail(message):
    raise RuntimeError(message)

def sleep(ms):
    import time
    time.sleep(ms / 1000)
    return ms

def say(text):  # Python only: prints to stdout and stderr (the stream_output check)
    import sys
    print(text)
    print(text.upper(), file=sys.stderr)
    return len(text)

class Serializer:  # the old function-object format names a serializer; this one travels by value
    @staticmethod
    def serialize(obj):
        import cloudpickle
        return cloudpickle.dumps(obj)

    @staticmethod
    def deserialize(data):
        import cloudpickle
        return cloudpickle.loads(data)
"""


def status_name(status: int) -> str:
    return STATUS_NAMES[status] if status < len(STATUS_NAMES) else str(status)


def capability_problem(capabilities: Sequence[str]) -> str | None:
    """Why a capability list is invalid (the spec's rules), or None."""
    if len(capabilities) > 256:
        return f"{len(capabilities)} capabilities (at most 256)"
    for cap in capabilities:
        size = len(cap.encode("utf-8"))
        if not 1 <= size <= 256:
            return f"capability {cap[:40]!r} has {size} bytes (1..256)"
        if any(ord(c) < 32 or ord(c) == 127 for c in cap):
            return f"capability {cap[:40]!r} holds a control character"
        if cap != cap.strip():
            return f"capability {cap[:40]!r} has whitespace at an end"
    return None


# ------------------------------------------------------------------------------------------------ conventions
class Convention:
    """How payloads are made and read for one payload convention."""

    name = ""

    def function(self, name: str) -> bytes:
        raise NotImplementedError

    def value(self, value: Any) -> bytes:
        raise NotImplementedError

    def decode(self, payload: bytes) -> Any:
        raise NotImplementedError

    def keyword_result(self, keyword: str, value: Any) -> Any:
        """What echo returns when called with only the keyword argument `keyword`=`value`."""
        raise NotImplementedError

    def big_value(self, size: int) -> Any:
        """A random value whose payload is `size` bytes or a little more."""
        raise NotImplementedError


class PythonConvention(Convention):
    name = "python"

    def __init__(self) -> None:
        namespace: dict[str, Any] = {"__name__": "scaler_conformance_payload_functions"}  # not importable: by value
        exec(compile(PYTHON_FUNCTIONS, "<scaler conformance functions>", "exec"), namespace)
        self.functions = namespace
        self.old_format = False

    def function(self, name: str) -> bytes:
        import cloudpickle

        fn = self.functions[name]
        if self.old_format:
            serializer = self.functions["Serializer"]()
            return bytes(cloudpickle.dumps((serializer, serializer.serialize(fn)), protocol=pickle.HIGHEST_PROTOCOL))
        return pickle.dumps((None, cloudpickle.dumps(fn, protocol=pickle.HIGHEST_PROTOCOL)), pickle.HIGHEST_PROTOCOL)

    def value(self, value: Any) -> bytes:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)

    def decode(self, payload: bytes) -> Any:
        return pickle.loads(payload)

    def keyword_result(self, keyword: str, value: Any) -> Any:
        return value

    def big_value(self, size: int) -> Any:
        return os.urandom(size)


class JsonConvention(Convention):
    name = "json"

    def function(self, name: str) -> bytes:
        return json.dumps({"function": name}).encode()

    def value(self, value: Any) -> bytes:
        return json.dumps(value).encode()

    def decode(self, payload: bytes) -> Any:
        return json.loads(payload.decode("utf-8"))

    def keyword_result(self, keyword: str, value: Any) -> Any:
        return {keyword: value}

    def big_value(self, size: int) -> Any:
        return os.urandom(size // 2).hex()[: size - 2]  # a JSON string: its payload is `size` bytes with the quotes


# ------------------------------------------------------------------------------------------------ fake scheduler
@dataclass
class Seen:
    """What the worker sent, recorded as it arrives."""

    heartbeats: list[float] = field(default_factory=list)
    hellos: list[dict[str, Any]] = field(default_factory=list)
    started: dict[int, float] = field(default_factory=dict)  # task id -> when tasksStarted named it
    outputs: list[tuple[int, int, str]] = field(default_factory=list)
    results: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    durations: dict[int, int] = field(default_factory=dict)  # task id -> durationsUs, when the batch had the column
    result_messages: int = 0
    balance_responses: list[list[int]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    disconnects: list[str] = field(default_factory=list)
    oversized: list[str] = field(default_factory=list)  # frames over MAX_FRAME: which, how big
    largest_payload: int = 0


class FakeScheduler:
    def __init__(self, address: str, timeout: float, keys: Keys | None) -> None:
        self.address = address
        self.timeout = timeout
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.router: zmq.Socket[Any] = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.setsockopt(zmq.ROUTER_HANDOVER, 1)
        if keys is not None:
            keys.make_server(self.router)
        self.monitor: zmq.Socket[Any] = self.router.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        self.disconnected = 0
        self.router.bind(address)
        self.worker: bytes | None = None
        self.seen = Seen()
        self.dispatched: set[int] = set()
        self.tolerated: set[int] = set()  # tasks of an ended session: a late result for them is no violation
        self.counter = 0
        self.prefix = 0

    def close(self) -> None:
        self.router.disable_monitor()
        self.monitor.close(linger=0)
        self.router.close(linger=0)
        self.ctx.destroy(linger=0)

    def mint(self) -> int:
        self.counter += 1
        return (CLIENT_PREFIX << 40) | self.counter

    # -------------------------------------------------------------------------------------------- sending
    def send(self, member: str, payloads: Sequence[bytes] | None = None, /, **fields: Any) -> None:
        expect(self.worker is not None, "no worker")
        assert self.worker is not None
        frames: list[bytes] = []
        if payloads is not None:
            fields["payloadSizes"] = u64(len(p) for p in payloads)
            frames = layout(payloads, pack=False)
        try:
            self.router.send_multipart([self.worker, build(member, **fields), *frames])
        except zmq.ZMQError as exc:
            raise CheckFailed(f"could not send {member} to the worker: {exc}") from None

    def welcome(self) -> None:
        self.prefix += 1
        self.send(
            "welcome",
            protocolVersion=PROTOCOL_VERSION,
            idPrefix=self.prefix,
            schedulerName="conformance-kit",
            protected=True,
            peerTimeoutMs=PEER_TIMEOUT_MS,
            maxPayloadBytes=8 << 30,
        )

    def put(self, objects: dict[int, bytes]) -> None:
        self.send("putObjects", list(objects.values()), objectIds=u64(objects))

    def dispatch(self, tasks: Sequence[Task], **extra: Any) -> None:
        fields, payloads = task_batch_fields(tasks)
        self.dispatched.update(t.task_id for t in tasks)
        self.send("dispatchTasks", payloads, **fields, **extra)

    # -------------------------------------------------------------------------------------------- receiving
    def first_hello(
        self, who: str, names: Sequence[str], only: Sequence[str], report: Report, timeout: float
    ) -> Msg | None:
        """The one peer's hello, once the names in `only` are known to be check names (SystemExit otherwise); None,
        said on the report, if no `who` said hello within `timeout`. The start of the worker and client modes."""
        refuse_unknown(names, only)
        hello = self.wait_hello(timeout)
        if hello is None:
            report.line(f"no {who} said hello on {self.address} within {timeout:g}s")
        return hello

    def wait_hello(self, timeout: float) -> Msg | None:
        deadline = Deadline(timeout)
        while not deadline.passed():
            if not self.router.poll(deadline.ms() + 1):
                continue
            frames = self.router.recv_multipart()
            identity, rest = frames[0], frames[1:]
            try:
                message = parse(rest)
            except CheckFailed:
                continue
            if message.name == "hello":
                self.note_frames("hello", rest)
                self.worker = identity
                self.seen.hellos.append(message.fields)
                return message
            if message.name != "disconnect":
                self.router.send_multipart([identity, build("error", code="notConnected", message="say hello first")])
        return None

    def pump(self, seconds: float) -> list[Msg]:
        """Receive and record for `seconds`; the messages other than heartbeats."""
        got: list[Msg] = []
        deadline = Deadline(seconds)
        while not deadline.passed():
            message = self.receive(deadline.left())
            if message is not None:
                got.append(message)
        return got

    def receive(self, timeout: float) -> Msg | None:
        """One message from the worker within `timeout` (recorded; heartbeats answered), or None."""
        self._watch_monitor()
        if not self.router.poll(int(timeout * 1000) + 1):
            return None
        frames = self.router.recv_multipart()
        identity, rest = frames[0], frames[1:]
        if identity != self.worker:
            return None  # another peer: not the worker under test
        try:
            message = parse(rest)
        except CheckFailed as exc:
            self.seen.violations.append(f"a malformed message: {exc}")
            self.note_frames("a malformed message", rest)
            return None
        self.note_frames(message.name, rest)
        if message.name in PAYLOAD_KINDS and message.payloads:
            self.seen.largest_payload = max(self.seen.largest_payload, *map(len, message.payloads))
        self.record(message)
        return message

    def note_frames(self, name: str, frames: Sequence[bytes]) -> None:
        """Record the frames over MAX_FRAME of a message from the peer (the scheduler would drop its connection)."""
        for k, frame in enumerate(frames):
            if len(frame) > MAX_FRAME:
                what = "header" if k == 0 else f"payload frame {k}"
                self.seen.oversized.append(f"{name} {what} of {len(frame):,} bytes")

    def _watch_monitor(self) -> None:
        while self.monitor.poll(0):
            event = recv_monitor_message(self.monitor)
            if event["event"] == zmq.EVENT_DISCONNECTED:
                self.disconnected += 1

    def record(self, message: Msg) -> None:
        seen = self.seen
        now = time.monotonic()
        if message.name not in WORKER_MAY_SEND:
            seen.violations.append(f"a worker sent {message.name}")
        elif message.name == "heartbeat":
            seen.heartbeats.append(now)
            self.send("heartbeatEcho", sentAtUs=0)
        elif message.name == "hello":
            seen.hellos.append(message.fields)
        elif message.name == "tasksStarted":
            for task_id in message.ids():
                seen.started.setdefault(task_id, now)
        elif message.name == "taskOutput":
            self._record_output(message)
        elif message.name == "taskResults":
            self._record_results(message)
        elif message.name == "balanceResponse":
            seen.balance_responses.append(message.ids())
        elif message.name == "disconnect":
            seen.disconnects.append(str(message.fields.get("reason", "")))

    def _record_output(self, message: Msg) -> None:
        seen = self.seen
        ids, streams, texts = message.ids("taskIds"), message.fields["streams"], message.fields["texts"]
        if not len(ids) == len(streams) == len(texts):
            seen.violations.append(f"taskOutput columns of different lengths: {message}")
        for k, task_id in enumerate(ids[: min(len(streams), len(texts))]):
            if streams[k] not in (1, 2, 3):
                seen.violations.append(f"taskOutput stream {streams[k]}")
            seen.outputs.append((task_id, streams[k], texts[k]))

    def _record_results(self, message: Msg) -> None:
        seen = self.seen
        seen.result_messages += 1
        ids, statuses = message.ids("taskIds"), message.fields["statuses"]
        if not len(ids) == len(statuses) == len(message.payloads):
            seen.violations.append(f"taskResults columns of different lengths: {message}")
            return
        durations = unpack_u64(message.fields.get("durationsUs", b""), "durationsUs")
        if durations and len(durations) != len(ids):
            seen.violations.append(f"taskResults durationsUs of {len(durations)} values for {len(ids)} results")
            durations = []
        for k, task_id in enumerate(ids):
            if durations:
                seen.durations[task_id] = durations[k]
            if statuses[k] > 6:
                seen.violations.append(f"status byte {statuses[k]} for task {task_id:#x}")
            if task_id in self.tolerated:
                continue
            if task_id not in self.dispatched:
                seen.violations.append(f"a result for task {task_id:#x}, which the worker does not hold")
            elif task_id in seen.results:
                seen.violations.append(f"a second result for task {task_id:#x}")
            seen.results.setdefault(task_id, []).append((statuses[k], message.payloads[k]))

    def results(self, ids: Sequence[int], timeout: float | None = None) -> dict[int, tuple[int, bytes]]:
        """The result of each of `ids` (waiting for them)."""
        deadline = Deadline(self.timeout if timeout is None else timeout)
        while not all(i in self.seen.results for i in ids):
            if deadline.passed():
                missing = [f"{i:#x}" for i in ids if i not in self.seen.results]
                raise CheckFailed(
                    f"no result for task(s) {', '.join(missing)} within {deadline_seconds(timeout, self)}s"
                )
            self.receive(min(deadline.left(), POLL_SECONDS))
            self.alive()
        return {i: self.seen.results[i][0] for i in ids}

    def wait_for(self, what: str, condition: Callable[[], bool], timeout: float | None = None) -> None:
        deadline = Deadline(self.timeout if timeout is None else timeout)
        while not condition():
            if deadline.passed():
                raise CheckFailed(f"{what} did not happen within {deadline_seconds(timeout, self)}s")
            self.receive(min(deadline.left(), POLL_SECONDS))
            if not condition():
                self.alive()

    def alive(self) -> None:
        """Fail the check now, not at its deadline, once the worker's connection closed (it cannot answer)."""
        self._watch_monitor()
        if self.disconnected:
            raise CheckFailed("the worker closed its connection")


def deadline_seconds(timeout: float | None, fake: FakeScheduler) -> float:
    return fake.timeout if timeout is None else timeout


# ------------------------------------------------------------------------------------------------ the kit
CHECKS: list[tuple[str, str]] = [
    ("hello", "the worker's hello: version 1, kind worker, queueCapacity >= 1, valid capabilities, a payload=..."),
    ("payload_format", "a function object in the convention's format runs (python: pickle((None, cloudpickle(fn))))"),
    ("run_task", "echo of inline arguments comes back success, value intact"),
    ("object_argument", "an argument given as an object reference (putObjects before dispatchTasks) is used"),
    ("keyword_arguments", "keyword arguments reach the function (json: as one last object argument)"),
    ("add_numbers", "add(1, 2, 3.5) = 6.5"),
    ("unknown_function", "json: an unknown function name ends error 'unknown function <name>'"),
    ("forwarded_layout", "a dispatchTasks carrying submitTasks-only columns (retries, priorities, requirements) runs"),
    ("duplicate_dispatch", "a task id dispatched again while the worker holds it is ignored: one result"),
    ("profiling", "a task flagged profile (bit 0) is answered with durationsUs > 0"),
    ("stream_output", "python: a task flagged streamOutput (bit 2) sends what it prints (taskOutput 1 and 2) first"),
    ("error_payload", "a raised error ends error: u32 little-endian length + UTF-8 text (json: nothing after)"),
    ("error_text_stream", "taskOutput stream 3 carries the error text before the error result"),
    ("missing_object", "a task referring to an object it was not sent ends failed (UTF-8 text)"),
    ("tasks_started", "tasksStarted names a task handed to execution, before its result"),
    (
        "results_batched",
        "many quick tasks: every result exactly once, correct payloadSizes; advice if not fewer messages than tasks",
    ),
    ("cancel_before_start", "cancelTasks of a task not started → exactly one result, canceled, empty payload"),
    (
        "balance",
        "balanceRequest → exactly one balanceResponse, a subset, unstarted only; given-back tasks never answered",
    ),
    ("timeout", "timeoutsMs → timedOut (UTF-8 text), and the worker runs tasks afterwards"),
    ("heartbeat", "heartbeats at least every peerTimeoutMs / 2; unasked heartbeatEchos are tolerated"),
    ("free_objects", "after freeObjects, a task referring to the object ends failed"),
    ("not_connected", "error notConnected → one new hello; the new session starts from nothing"),
    (
        "frame_limit",
        "echo of a 3 MiB + 5 argument (sent spanning frames of 1 MiB) comes back intact, and every frame the worker "
        "sent is at most 1 MiB",
    ),
    ("well_formed", "everything the worker sent decoded, was a worker's message, and answered each task at most once"),
    ("shutdown", "shutdown → the worker closes its connection"),
]


class WorkerKit:
    def __init__(self, address: str, timeout: float, connect_timeout: float, keys: Keys | None) -> None:
        self.fake = FakeScheduler(address, timeout, keys)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.convention: Convention | None = None
        self.capacity = 1
        self.functions: dict[str, int] = {}  # function name -> object id held by the worker this session

    @staticmethod
    def describe() -> list[tuple[str, str]]:
        return list(CHECKS)

    def close(self) -> None:
        self.fake.close()

    def run(self, report: Report, only: Sequence[str]) -> bool:
        """Run the checks; False if no worker said hello."""
        names = [name for name, _ in CHECKS]
        hello = self.fake.first_hello("worker", names, only, report, self.connect_timeout)
        if hello is None:
            return False
        self.fake.welcome()
        selected = [n for n in names if not only or n in only]
        report.outcome("hello", lambda: self.check_hello(hello))
        for name in selected:
            if name == "hello":
                continue
            if self.convention is None:
                report.outcome(name, self._no_convention)
                continue
            self.fake.receive(0)
            if self.fake.disconnected:
                report.outcome(name, self._gone)
                continue
            report.outcome(name, getattr(self, "check_" + name))
        return True

    def _gone(self) -> None:
        raise CheckFailed("the worker closed its connection during an earlier check")

    def _no_convention(self) -> None:
        raise CheckSkipped("the worker's hello names no payload convention the kit knows (payload=python/json)")

    # -------------------------------------------------------------------------------------------- helpers
    def conv(self) -> Convention:
        assert self.convention is not None
        return self.convention

    def fn(self, name: str) -> int:
        """The object id of function `name`, put to the worker the first time (this session)."""
        if name not in self.functions:
            function_id = self.fake.mint()
            self.fake.put({function_id: self.conv().function(name)})
            self.functions[name] = function_id
        return self.functions[name]

    def task(self, function: str, *args: Any, keywords: dict[str, Any] | None = None, refs: Sequence[int] = ()) -> Task:
        """A task running `function` with inline `args` (encoded), then object `refs`, then `keywords`."""
        conv = self.conv()
        inline = [conv.value(a) for a in args]
        all_refs = [0] * len(args) + list(refs)
        kws: list[str] | None = None
        if keywords:
            kws = [""] * len(all_refs) + list(keywords)
            all_refs += [0] * len(keywords)
            inline += [conv.value(v) for v in keywords.values()]
            # refs must come after inline positional ones: keep the positional payload order
        return Task(self.fake.mint(), self.fn(function), 0, all_refs, kws, inline)

    def run_tasks(self, tasks: Sequence[Task], timeout: float | None = None) -> dict[int, tuple[int, bytes]]:
        self.fake.dispatch(tasks)
        return self.fake.results([t.task_id for t in tasks], timeout)

    def success(self, result: tuple[int, bytes], what: str) -> Any:
        status, payload = result
        if status != SUCCESS:
            raise CheckFailed(f"{what} ended {status_name(status)}: {describe_payload(payload)}")
        try:
            return self.conv().decode(payload)
        except Exception as exc:
            raise CheckFailed(f"{what}: the result does not decode as {self.conv().name}: {exc}") from None

    # -------------------------------------------------------------------------------------------- checks
    def check_hello(self, hello: Msg) -> None:
        f = hello.fields
        capabilities = list(f.get("capabilities", []))
        conventions = [c.split("=", 1)[1] for c in capabilities if c.startswith("payload=")]
        if "python" in conventions:
            self.convention = PythonConvention()
        elif "json" in conventions:
            self.convention = JsonConvention()
        self.capacity = int(f.get("queueCapacity", 0))
        expect(f.get("protocolVersion") == PROTOCOL_VERSION, f"protocolVersion {f.get('protocolVersion')}")
        expect(f.get("kind") == "worker", f"kind {f.get('kind')}")
        expect(self.capacity >= 1, f"queueCapacity {self.capacity}")
        problem = capability_problem(capabilities)
        expect(problem is None, f"invalid capabilities: {problem}")
        expect(len(conventions) == 1, f"capabilities {capabilities} name {len(conventions)} payload conventions, not 1")
        expect(self.convention is not None, f"unknown payload convention payload={conventions[0]}")

    def check_payload_format(self) -> None:
        conv = self.conv()
        probe = self.task("echo", "format probe")
        result = self.run_tasks([probe])[probe.task_id]
        if result[0] == SUCCESS:
            expect(conv.decode(result[1]) == "format probe", f"echo returned {conv.decode(result[1])!r}")
            return
        if isinstance(conv, PythonConvention):
            conv.old_format = True
            self.functions.clear()
            old = self.task("echo", "format probe")
            if self.run_tasks([old])[old.task_id][0] == SUCCESS:
                raise CheckFailed(
                    "the worker cannot run a function object pickle.dumps((None, cloudpickle.dumps(fn))) "
                    f"({describe_payload(result[1])}); it runs the old cloudpickle((serializer, bytes)) format, "
                    "which the remaining checks use"
                )
            conv.old_format = False
            self.functions.clear()
        raise CheckFailed(f"echo ended {status_name(result[0])}: {describe_payload(result[1])}")

    def check_run_task(self) -> None:
        values: list[Any] = ["héllo ✓ " + os.urandom(4).hex(), {"a": [1, 2.5, None, "x"], "b": True}, 12345678901]
        tasks = [self.task("echo", v) for v in values]
        results = self.run_tasks(tasks)
        for task, value in zip(tasks, values, strict=True):
            got = self.success(results[task.task_id], f"echo({value!r})")
            expect(got == value, f"echo({value!r}) returned {got!r}")

    def check_object_argument(self) -> None:
        value = {"object": "conformance " + os.urandom(4).hex(), "n": [1, 2, 3]}
        obj = self.fake.mint()
        self.fake.put({obj: self.conv().value(value)})
        task = self.task("echo", refs=[obj])
        got = self.success(self.run_tasks([task])[task.task_id], "echo(object)")
        expect(got == value, f"echo(object) returned {got!r}")

    def check_keyword_arguments(self) -> None:
        task = self.task("echo", keywords={"value": "by keyword"})
        got = self.success(self.run_tasks([task])[task.task_id], "echo(value='by keyword')")
        wanted = self.conv().keyword_result("value", "by keyword")
        expect(got == wanted, f"echo(value='by keyword') returned {got!r}, not {wanted!r}")

    def check_add_numbers(self) -> None:
        task = self.task("add", 1, 2, 3.5)
        got = self.success(self.run_tasks([task])[task.task_id], "add(1, 2, 3.5)")
        expect(got == 6.5, f"add(1, 2, 3.5) returned {got!r}")

    def check_forwarded_layout(self) -> None:
        task = self.task("echo", "forwarded")
        self.fake.dispatch(
            [task],
            retries=bytes([2]),
            priorities=struct.pack("<i", 7),
            requirements=[[f"payload={self.conv().name}"]],
            requirementIndex=b"\0\0",
        )
        got = self.success(self.fake.results([task.task_id])[task.task_id], "echo with forwarded columns")
        expect(got == "forwarded", f"returned {got!r}")

    def check_duplicate_dispatch(self) -> None:
        task = self.task("sleep", 300)
        self.fake.dispatch([task])
        self.fake.dispatch([task])
        self.success(self.fake.results([task.task_id], self.timeout + 0.3)[task.task_id], "sleep(300)")
        self.fake.pump(0.8)
        count = len(self.fake.seen.results[task.task_id])
        expect(count == 1, f"{count} results for a task dispatched twice")

    def check_profiling(self) -> None:
        task = self.task("sleep", 50)
        task.flags = 1
        self.success(self.run_tasks([task], self.timeout + 0.05)[task.task_id], "sleep(50) profiled")
        duration = self.fake.seen.durations.get(task.task_id)
        expect(duration is not None, "the result batch of a profiled task has no durationsUs column")
        expect(duration is not None and duration >= 1, f"durationsUs {duration} for a profiled task")

    def check_stream_output(self) -> None:
        if not isinstance(self.conv(), PythonConvention):
            raise CheckSkipped("payload=python only (no JSON conformance function prints)")
        text = "conformance output " + os.urandom(4).hex()
        task = self.task("say", text)
        task.flags = 4
        before = len(self.fake.seen.outputs)
        self.success(self.run_tasks([task])[task.task_id], "say()")
        pieces = [p for p in self.fake.seen.outputs[before:] if p[0] == task.task_id]
        out = "".join(p[2] for p in pieces if p[1] == 1)
        err = "".join(p[2] for p in pieces if p[1] == 2)
        expect(text in out, f"stdout pieces before the result: {out[:200]!r}")
        expect(text.upper() in err, f"stderr pieces before the result: {err[:200]!r}")
        plain = self.task("say", "not streamed")
        before = len(self.fake.seen.outputs)
        self.success(self.run_tasks([plain])[plain.task_id], "say() unflagged")
        self.fake.pump(0.2)
        leaked = [p for p in self.fake.seen.outputs[before:] if p[0] == plain.task_id and p[1] in (1, 2)]
        expect(not leaked, f"output of a task not flagged streamOutput was sent: {leaked}")

    def check_unknown_function(self) -> None:
        if not isinstance(self.conv(), JsonConvention):
            raise CheckSkipped("payload=json only")
        name = "no_such_function_" + os.urandom(4).hex()
        function_id = self.fake.mint()
        self.fake.put({function_id: json.dumps({"function": name}).encode()})
        task = Task(self.fake.mint(), function_id)
        status, payload = self.run_tasks([task])[task.task_id]
        expect(status == ERROR, f"ended {status_name(status)}, not error")
        text = error_text(payload, trailer_allowed=False)
        expect(f"unknown function {name}" in text, f"the error text does not say 'unknown function {name}': {text!r}")

    def check_error_payload(self) -> None:
        message = "conformance failure " + os.urandom(4).hex()
        task = self.task("fail", message)
        status, payload = self.run_tasks([task])[task.task_id]
        expect(status == ERROR, f"fail() ended {status_name(status)}, not error")
        text = error_text(payload, trailer_allowed=isinstance(self.conv(), PythonConvention))
        expect(message in text, f"the error text does not hold the message: {text[:300]!r}")

    def check_error_text_stream(self) -> None:
        message = "conformance stream " + os.urandom(4).hex()
        task = self.task("fail", message)
        self.fake.dispatch([task])
        before = len(self.fake.seen.outputs)
        self.fake.results([task.task_id])
        pieces = [p for p in self.fake.seen.outputs[before:] if p[0] == task.task_id]
        expect(bool(pieces), "no taskOutput stream 3 for the task that raised, before its result")
        expect(any(p[1] == 3 and message in p[2] for p in pieces), f"stream 3 pieces do not hold the message: {pieces}")

    def check_missing_object(self) -> None:
        missing = (CLIENT_PREFIX << 40) | 0xFFFFFF
        task = self.task("echo", refs=[missing])
        status, payload = self.run_tasks([task])[task.task_id]
        expect(status == FAILED, f"ended {status_name(status)}, not failed: {describe_payload(payload)}")
        try:
            payload.decode("utf-8")
        except UnicodeDecodeError:
            raise CheckFailed("the failed payload is not UTF-8 text") from None

    def check_tasks_started(self) -> None:
        task = self.task("sleep", 800)
        self.fake.dispatch([task])
        deadline = Deadline(self.timeout + 0.8)
        while task.task_id not in self.fake.seen.results and not deadline.passed():
            self.fake.receive(deadline.left())
        started = self.fake.seen.started.get(task.task_id)
        expect(started is not None, "no tasksStarted named the task before its result")
        self.success(self.fake.results([task.task_id], 0.1)[task.task_id], "sleep(800)")

    def check_results_batched(self) -> None:
        n = min(50, self.capacity)
        tasks = [self.task("echo", k) for k in range(n)]
        before = self.fake.seen.result_messages
        results = self.run_tasks(tasks, self.timeout + n * 0.05)
        for k, task in enumerate(tasks):
            got = self.success(results[task.task_id], f"echo({k})")
            expect(got == k, f"echo({k}) returned {got!r}")
        messages = self.fake.seen.result_messages - before
        if n >= 10:  # section 3 says "should": advice, not a failure
            advise(messages < n, f"{n} results came in {messages} taskResults messages: workers should batch them")

    def _blocked(self, follow: int) -> tuple[Task, list[Task]] | None:
        """A sleeping task and up to `follow` echo tasks dispatched together (as many as the worker has room for), then
        0.4 s for it to start what it starts at once; None if the worker has no room for a second task."""
        follow = min(follow, self.capacity - 1)
        if follow < 1:
            return None
        blocker = self.task("sleep", 1500)
        blocker.timeout_ms = 60_000  # (the Python agent runs a task with a timeout alone in its processor)
        rest = [self.task("echo", k) for k in range(follow)]
        self.fake.dispatch([blocker, *rest])
        self.fake.pump(0.4)
        return blocker, rest

    def _unstarted(self, tasks: Sequence[Task]) -> list[Task]:
        seen = self.fake.seen
        return [t for t in tasks if t.task_id not in seen.started and t.task_id not in seen.results]

    def check_cancel_before_start(self) -> None:
        blocked = self._blocked(20)
        if blocked is None:
            raise CheckSkipped(f"queueCapacity {self.capacity}: the worker cannot hold a second task")
        blocker, rest = blocked
        unstarted = self._unstarted(rest)
        target = unstarted[-1] if unstarted else rest[-1]
        self.fake.send("cancelTasks", ids=u64([target.task_id]))
        ids = [blocker.task_id, *(t.task_id for t in rest)]
        results = self.fake.results(ids, self.timeout + 1.5)
        self.fake.pump(0.3)
        expect(len(self.fake.seen.results[target.task_id]) == 1, "more than one result for the cancelled task")
        if not unstarted:
            raise CheckSkipped(f"the worker started all {len(rest) + 1} tasks at once: none was left to cancel")
        status, payload = results[target.task_id]
        expect(
            status == CANCELED and payload == b"", f"the unstarted task ended {status_name(status)} {payload[:80]!r}"
        )
        self.success(results[blocker.task_id], "the running sleep task")
        for task in rest:
            if task is not target:
                self.success(results[task.task_id], "a task not cancelled")

    def check_balance(self) -> None:
        blocked = self._blocked(10)
        if blocked is None:
            raise CheckSkipped(f"queueCapacity {self.capacity}: the worker cannot hold a second task")
        blocker, rest = blocked
        seen = self.fake.seen
        before = len(seen.balance_responses)
        request = [t.task_id for t in [*rest, blocker]]
        unstarted = self._unstarted(rest)
        self.fake.send("balanceRequest", ids=u64(request))
        self.fake.wait_for("a balanceResponse", lambda: len(seen.balance_responses) > before)
        started_then = set(seen.started) | set(seen.results)
        response = seen.balance_responses[before]
        expect(set(response) <= set(request), f"balanceResponse {response} lists tasks not requested")
        expect(len(set(response)) == len(response), f"balanceResponse {response} lists a task twice")
        wrongly = [f"{t:#x}" for t in response if t in started_then]
        expect(not wrongly, f"the worker gave back tasks it had started or answered: {wrongly}")
        kept = [t for t in request if t not in response]
        self.fake.results(kept, self.timeout + 1.5)
        self.fake.pump(0.5)
        answered = [f"{t:#x}" for t in response if t in seen.results]
        expect(not answered, f"tasks given back were answered anyway: {answered}")
        expect(len(seen.balance_responses) == before + 1, "more than one balanceResponse for one balanceRequest")
        self.fake.tolerated.update(response)
        if not unstarted:
            raise CheckSkipped(f"the worker started all {len(rest) + 1} tasks at once: nothing was left to give back")

    def check_timeout(self) -> None:
        task = self.task("sleep", 5000)
        task.timeout_ms = 500
        status, payload = self.run_tasks([task], self.timeout + 0.5)[task.task_id]
        expect(status == TIMED_OUT, f"ended {status_name(status)}, not timedOut: {describe_payload(payload)}")
        try:
            payload.decode("utf-8")
        except UnicodeDecodeError:
            raise CheckFailed("the timedOut payload is not UTF-8 text") from None
        after = self.task("echo", "after the timeout")
        got = self.success(self.run_tasks([after], self.timeout + 5)[after.task_id], "a task after the timeout")
        expect(got == "after the timeout", f"returned {got!r}")

    def check_heartbeat(self) -> None:
        seen = self.fake.seen
        limit = PEER_TIMEOUT_MS / 2000
        self.fake.wait_for("a second heartbeat", lambda: len(seen.heartbeats) >= 2, PEER_TIMEOUT_MS / 1000)
        gaps = [b - a for a, b in zip(seen.heartbeats, seen.heartbeats[1:], strict=False)]
        expect(max(gaps) <= limit, f"heartbeats {max(gaps):.1f}s apart; peerTimeoutMs is {PEER_TIMEOUT_MS}")
        for _ in range(2):
            self.fake.send("heartbeatEcho", sentAtUs=0)
        count = len(seen.heartbeats)
        task = self.task("echo", "after unasked echoes")
        self.success(self.run_tasks([task])[task.task_id], "a task after unasked heartbeatEchos")
        self.fake.wait_for("a heartbeat after unasked echoes", lambda: len(seen.heartbeats) > count, limit + 1)

    def check_free_objects(self) -> None:
        obj = self.fake.mint()
        self.fake.put({obj: self.conv().value("to be freed")})
        first = self.task("echo", refs=[obj])
        got = self.success(self.run_tasks([first])[first.task_id], "echo(object)")
        expect(got == "to be freed", f"echo(object) returned {got!r}")
        self.fake.send("freeObjects", ids=u64([obj]))
        second = self.task("echo", refs=[obj])
        status, _ = self.run_tasks([second])[second.task_id]
        expect(status == FAILED, f"a task referring to a freed object ended {status_name(status)}, not failed")

    def check_not_connected(self) -> None:
        fake = self.fake
        obj = fake.mint()
        fake.put({obj: self.conv().value("old session")})
        blocked = self._blocked(1)
        old = [] if blocked is None else [blocked[0].task_id]
        queued = [] if blocked is None else [blocked[1][0].task_id]
        started_queued = [t for t in queued if t in fake.seen.started or t in fake.seen.results]
        fake.tolerated.update(old + started_queued)  # a running task may still be answered, or not
        answered_before = set(fake.seen.results)
        hellos = len(fake.seen.hellos)
        for _ in range(3):
            fake.send("error", code="notConnected", message="conformance: your session is gone")
        fake.wait_for("a new hello after error notConnected", lambda: len(fake.seen.hellos) > hellos)
        fake.welcome()
        self.functions.clear()
        fake.pump(1.0)
        expect(len(fake.seen.hellos) == hellos + 1, f"{len(fake.seen.hellos) - hellos} hellos for 3 notConnected")
        fresh = fake.seen.hellos[-1]
        expect(fresh.get("kind") == "worker" and fresh.get("queueCapacity", 0) >= 1, f"the new hello {fresh}")
        lost = self.task("echo", refs=[obj])
        status, _ = self.run_tasks([lost])[lost.task_id]
        expect(status == FAILED, f"an object of the old session was still held (task ended {status_name(status)})")
        late = [f"{t:#x}" for t in queued if t not in started_queued and t in set(fake.seen.results) - answered_before]
        expect(not late, f"a task queued (not started) when notConnected came was still answered: {late}")
        task = self.task("echo", "new session")
        got = self.success(self.run_tasks([task], self.timeout + 5)[task.task_id], "a task in the new session")
        expect(got == "new session", f"returned {got!r}")

    def check_frame_limit(self) -> None:
        value = self.conv().big_value(BIG)
        task = self.task("echo", value)
        status, payload = self.run_tasks([task], self.timeout * 3)[task.task_id]
        got = self.success((status, payload), f"echo of an argument of {len(task.inline[0]):,} bytes (spanning frames)")
        expect(got == value, f"echo of an argument of {len(task.inline[0]):,} bytes returned another value")
        oversized = self.fake.seen.oversized
        expect(
            not oversized,
            f"{len(oversized)} frame(s) over 1 MiB ({MAX_FRAME:,} bytes), which a scheduler drops the connection for "
            f"(payloads over 1 MiB must span frames): {'; '.join(oversized[:5])}",
        )

    def check_well_formed(self) -> None:
        self.fake.pump(0.2)
        violations = self.fake.seen.violations
        expect(not violations, f"{len(violations)} problem(s): " + "; ".join(violations[:5]))

    def check_shutdown(self) -> None:
        fake = self.fake
        before = fake.disconnected
        fake.send("shutdown", reason="conformance kit: shutdown check")
        deadline = Deadline(self.timeout)
        while fake.disconnected == before and not deadline.passed():
            fake.receive(min(0.1, deadline.left()))
        expect(fake.disconnected > before, f"the worker did not close its connection within {self.timeout}s")


def error_text(payload: bytes, trailer_allowed: bool) -> str:
    """The text of an `error` payload (u32 LE length + UTF-8 text [+ Python's pickled exception])."""
    expect(len(payload) >= 4, f"the error payload has {len(payload)} bytes: no u32 length")
    (length,) = struct.unpack_from("<I", payload)
    expect(4 + length <= len(payload), f"the error payload's length {length} runs past its {len(payload)} bytes")
    try:
        text = payload[4 : 4 + length].decode("utf-8")
    except UnicodeDecodeError:
        raise CheckFailed("the error text is not UTF-8") from None
    if not trailer_allowed:
        expect(4 + length == len(payload), f"{len(payload) - 4 - length} bytes follow the error text")
    return text


def describe_payload(payload: bytes) -> str:
    if len(payload) >= 4:
        (length,) = struct.unpack_from("<I", payload)
        if 4 + length <= len(payload):
            try:
                return payload[4 : 4 + length].decode("utf-8")[-400:]
            except UnicodeDecodeError:
                pass
    return payload[:400].decode("utf-8", errors="replace")
