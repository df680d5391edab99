"""Client mode: the kit binds an address as a fake scheduler (ROUTER), waits for one client's hello, serves it (running
its tasks itself) until it says `disconnect`, and checks what it sent against docs/protocol.md's rules for clients.

Tasks of the convention `payload=json` run the four conformance functions (section 16); tasks of `payload=python`
are unpickled and called in this process (section 11): run the kit only against clients whose code you trust.
"""

from __future__ import annotations

import itertools
import json
import pickle
import struct
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from scaler.conformance.wire import (
    CANCELED,
    ERROR,
    FAILED,
    MAX_FRAME,
    PROTOCOL_VERSION,
    SILENT,
    SUCCESS,
    CheckFailed,
    CheckSkipped,
    Deadline,
    Keys,
    Msg,
    Report,
    Task,
    expect,
    tasks_of,
    u64,
    unpack_u16,
)
from scaler.conformance.worker_checks import PEER_TIMEOUT_MS, FakeScheduler

ID_PREFIX = 7
SHARED_ARGUMENTS = 8
CLIENT_MAY_SEND = (
    "hello",
    "heartbeat",
    "submitTasks",
    "cancelTasks",
    "putObjects",
    "freeObjects",
    "disconnect",
    "shutdownRequest",
    "explainTasks",
)
MAX_EXPLAINED = 1024  # ids one explainTasks may name (docs/protocol.md section 6)
CONVENTIONS = ("payload=python", "payload=json")
SERVE_TIMEOUTS = 30  # serving ends after this many --timeout in all, however busy the client is
RESULTS_A_MESSAGE = 10_000  # taskResults to the client carry at most this many results: headers far below 1 MiB

CHECKS: list[tuple[str, str]] = [
    ("hello", "the client's hello: version 1, kind client, queueCapacity 0, no capabilities"),
    ("ids", "every task and object id carries the welcome's idPrefix, n > 0, and is used once (one name space)"),
    ("references", "every functionId and non-zero argRef names an object put earlier (not freed) or an earlier task"),
    ("well_formed", "every message decoded, is one a client may send, with consistent columns and payloadSizes"),
    (
        "frame_limit",
        "every frame the client sent is at most 1 MiB: bigger payloads span frames (SKIP when it sent none over 1 MiB)",
    ),
    ("heartbeats", "heartbeats at least every peerTimeoutMs / 2 (SKIP when connected for less than that)"),
    ("conventions", "every task requires exactly one payload convention (payload=python or payload=json)"),
    ("results_answered", "every non-silent task got exactly one result from the kit; no task id submitted twice"),
    ("disconnect", "the client sent disconnect before closing its connection"),
]


@dataclass
class Job:
    task: Task
    convention: str | None
    result: tuple[int, bytes] | None = None  # once ended
    due: float | None = None  # a json sleep: when it ends
    sleep_value: Any = None
    sent: int = 0  # results sent to the client


@dataclass
class Served:
    hello: dict[str, Any] = field(default_factory=dict)
    welcomed_at: float = 0.0
    ended_at: float = 0.0
    heartbeats: list[float] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    references: list[str] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)
    conventions: list[str] = field(default_factory=list)
    used: dict[str, int] = field(default_factory=dict)
    resubmitted: list[str] = field(default_factory=list)
    disconnected: bool = False  # said disconnect
    closed: bool = False  # its connection closed
    timed_out: str = ""


class ClientFake(FakeScheduler):
    """The fake scheduler of client mode: it records and serves a client's messages."""

    def __init__(self, address: str, timeout: float, keys: Keys | None) -> None:
        super().__init__(address, timeout, keys)
        self.served = Served()
        self.minted: set[int] = set()
        self.objects: dict[int, bytes] = {}
        self.jobs: dict[int, Job] = {}
        self.outbox: list[tuple[int, int, bytes]] = []

    # -------------------------------------------------------------------------------------------- receiving
    def record(self, message: Msg) -> None:
        served = self.served
        if message.name not in CLIENT_MAY_SEND:
            served.malformed.append(f"a client sent {message.name}")
        elif message.name == "heartbeat":
            served.heartbeats.append(time.monotonic())
            self.send("heartbeatEcho", sentAtUs=0)
        elif message.name == "hello":
            served.malformed.append("a second hello while its session was open (the kit never ended it)")
        elif message.name == "putObjects":
            self._put(message)
        elif message.name == "freeObjects":
            for object_id in message.ids():
                self.objects.pop(object_id, None)
        elif message.name == "submitTasks":
            self._submit(message)
        elif message.name == "cancelTasks":
            self._cancel(message.ids())
        elif message.name == "disconnect":
            served.disconnected = True
        elif message.name == "shutdownRequest":
            self.send("error", code="protected", message="conformance kit: a protected fake scheduler")
        elif message.name == "explainTasks":
            self._explain(message.ids())

    def _explain(self, ids: list[int]) -> None:
        """One text per id, in order: the kit runs every task it holds at once, so that is all it can say."""
        if len(ids) > MAX_EXPLAINED:
            self.served.malformed.append(f"an explainTasks of {len(ids)} ids (at most {MAX_EXPLAINED})")
            self.send("error", code="badRequest", message=f"explainTasks names at most {MAX_EXPLAINED} ids")
            return
        texts = []
        for task_id in ids:
            job = self.jobs.get(task_id)
            held = job is not None and job.result is None
            texts.append("running in the conformance kit (a fake scheduler)" if held else "not in the scheduler")
        self.send("taskExplanations", taskIds=u64(ids), texts=texts)

    def _cancel(self, ids: list[int]) -> None:
        for task_id in ids:
            job = self.jobs.get(task_id)
            if job is not None and job.result is None:
                self._end(job, CANCELED, b"")

    def _mint(self, kind: str, ident: int) -> bool:
        """Record id `ident`; False (and an ids problem) if it is not a fresh id of the session."""
        problem = None
        if ident >> 40 != ID_PREFIX:
            problem = f"{kind} id {ident:#x} does not carry idPrefix {ID_PREFIX}"
        elif ident & ((1 << 40) - 1) == 0:
            problem = f"{kind} id {ident:#x} has n = 0"
        elif ident in self.minted:
            problem = f"{kind} id {ident:#x} was used before"
        if problem is not None:
            self.served.ids.append(problem)
            return False
        self.minted.add(ident)
        return True

    def _put(self, message: Msg) -> None:
        ids = message.ids("objectIds")
        names = list(message.fields.get("names", []))
        if len(ids) != len(message.payloads) or (names and len(names) != len(ids)):
            self.served.malformed.append(f"putObjects columns of different lengths: {message}")
            return
        for object_id, payload in zip(ids, message.payloads, strict=True):
            if self._mint("object", object_id):
                self.objects[object_id] = payload

    def _submit(self, message: Msg) -> None:
        served = self.served
        try:
            tasks = tasks_of(message)
            requirements = [list(r.get("capabilities", [])) for r in message.fields.get("requirements", [])]
            index = unpack_u16(message.fields.get("requirementIndex", b""), "requirementIndex")
            expect(not index or len(index) == len(tasks), "requirementIndex is neither empty nor one per task")
            expect(all(i < len(requirements) for i in index), f"requirementIndex {index} past {len(requirements)}")
        except CheckFailed as exc:
            served.malformed.append(f"submitTasks: {exc}")
            return
        for k, task in enumerate(tasks):
            required = requirements[index[k] if index else 0] if requirements else []
            payload_caps = [c for c in required if c.startswith("payload=")]
            convention = None
            if len(payload_caps) == 1 and payload_caps[0] in CONVENTIONS:
                convention = payload_caps[0]
                served.used[convention] = served.used.get(convention, 0) + 1
            else:
                served.conventions.append(f"task {task.task_id:#x} requires {required}")
            if task.task_id in self.jobs:
                served.resubmitted.append(f"{task.task_id:#x}")
            if not self._mint("task", task.task_id):
                continue
            job = Job(task, convention)
            self.jobs[task.task_id] = job
            bad = [r for r in [task.function_id, *(r for r in task.refs if r)] if not self._known(r, task.task_id)]
            if bad:
                served.references.append(
                    f"task {task.task_id:#x} refers to {', '.join(f'{r:#x}' for r in bad)}: no object or earlier task"
                )
                self._end(job, FAILED, f"conformance kit: unknown reference(s) {bad}".encode())
            elif convention is None:
                self._end(job, FAILED, b"missing capabilities: payload=python or payload=json")

    def _known(self, ref: int, task_id: int) -> bool:
        job = self.jobs.get(ref)
        return ref in self.objects or (job is not None and ref != task_id)

    # -------------------------------------------------------------------------------------------- running
    def _end(self, job: Job, status: int, payload: bytes) -> None:
        job.result = (status, payload)
        if not job.task.flags & SILENT:
            job.sent += 1
            self.outbox.append((job.task.task_id, status, payload))

    def advance(self) -> None:
        """Run every task that can run now (in dependency order), end due sleeps, send the results."""
        progress = True
        while progress:
            progress = False
            for job in self.jobs.values():
                if job.result is not None:
                    continue
                if job.due is not None:
                    if time.monotonic() >= job.due:
                        self._end(job, SUCCESS, json.dumps(job.sleep_value).encode())
                        progress = True
                    continue
                refs = [job.task.function_id, *(r for r in job.task.refs if r)]
                waiting = [self.jobs[r] for r in refs if r in self.jobs and r not in self.objects]
                if any(w.result is None for w in waiting):
                    continue
                failed = [w.result for w in waiting if w.result is not None and w.result[0] != SUCCESS]
                if failed:
                    self._end(job, *failed[0])
                else:
                    self._run(job)
                progress = True
        outbox, self.outbox = self.outbox, []
        for at in range(0, len(outbox), RESULTS_A_MESSAGE):
            ids, statuses, payloads = zip(*outbox[at : at + RESULTS_A_MESSAGE], strict=True)
            self.send("taskResults", list(payloads), taskIds=u64(ids), statuses=bytes(statuses))

    def _payload(self, ref: int) -> bytes:
        if ref in self.objects:
            return self.objects[ref]
        result = self.jobs[ref].result
        assert result is not None
        return result[1]

    def _run(self, job: Job) -> None:
        task = job.task
        function = self._payload(task.function_id)
        inline = iter(task.inline)
        args = [next(inline) if r == 0 else self._payload(r) for r in task.refs]
        keywords = task.keywords or [""] * len(args)
        if job.convention == "payload=json":
            self._run_json(job, function, args, keywords)
        else:
            status, payload = run_python(function, args, keywords, bool(task.flags & SHARED_ARGUMENTS))
            self._end(job, status, payload)

    def _run_json(self, job: Job, function: bytes, args: list[bytes], keywords: list[str]) -> None:
        try:
            name = json.loads(function.decode("utf-8"))["function"]
            values = [json.loads(a.decode("utf-8")) for a, kw in zip(args, keywords, strict=True) if not kw]
            named = {kw: json.loads(a.decode("utf-8")) for a, kw in zip(args, keywords, strict=True) if kw}
        except Exception as exc:
            self._end(job, ERROR, error_frame(f"a payload that is not JSON: {exc}"))
            return
        if named:
            values.append(named)
        try:
            if name == "sleep":
                job.due, job.sleep_value = time.monotonic() + float(values[0]) / 1000, values[0]
                return
            value = JSON_FUNCTIONS[name](*values) if name in JSON_FUNCTIONS else None
        except Exception as exc:
            self._end(job, ERROR, error_frame(f"Error: {exc}"))
            return
        if name not in JSON_FUNCTIONS:
            self._end(job, ERROR, error_frame(f"unknown function {name}"))
        else:
            self._end(job, SUCCESS, json.dumps(value).encode())

    def next_due(self) -> float:
        dues = [j.due for j in self.jobs.values() if j.result is None and j.due is not None]
        return max(0.0, min(dues) - time.monotonic()) if dues else 0.2


def _fail(message: Any = "") -> Any:
    raise RuntimeError(message)


JSON_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "echo": lambda *values: values[0] if values else None,
    "add": lambda *values: sum(values),
    "fail": _fail,
    "worker_info": lambda *values: {"name": "conformance-kit", "lang": "python"},  # what ts/src/example.ts asks
}


def error_frame(text: str, pickled: bytes = b"") -> bytes:
    encoded = text.encode("utf-8", errors="replace")
    return struct.pack("<I", len(encoded)) + encoded + pickled


def run_python(function: bytes, args: list[bytes], keywords: list[str], shared: bool) -> tuple[int, bytes]:
    """Run a payload=python task (docs/protocol.md section 11): its status and result payload."""
    try:
        serializer, data = pickle.loads(function)
        load: Callable[[bytes], Any] = pickle.loads if serializer is None else serializer.deserialize
        fn = load(data)
        values = []
        for payload in args:
            if shared:
                if payload[:1] != b"\x00":
                    raise ValueError("conformance kit: arguments in shared memory are not read here")
                payload = payload[1:]
            values.append(load(payload))
    except Exception as exc:
        return ERROR, python_error(exc)
    positional = [v for v, kw in zip(values, keywords, strict=True) if not kw]
    named = {kw: v for v, kw in zip(values, keywords, strict=True) if kw}
    try:
        value = fn(*positional, **named)
    except Exception as exc:
        return ERROR, python_error(exc)
    try:
        if serializer is not None:
            return SUCCESS, bytes(serializer.serialize(value))
        try:
            return SUCCESS, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            import cloudpickle

            return SUCCESS, bytes(cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception as exc:
        return ERROR, python_error(TypeError(f"the result cannot be serialized: {exc}"))


def python_error(exc: BaseException) -> bytes:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        import cloudpickle

        pickled = bytes(cloudpickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:
        pickled = b""
    return error_frame(text, pickled)


# ------------------------------------------------------------------------------------------------ the kit
class ClientKit:
    def __init__(self, address: str, timeout: float, connect_timeout: float, keys: Keys | None) -> None:
        self.fake = ClientFake(address, timeout, keys)
        self.timeout = timeout
        self.connect_timeout = connect_timeout

    @staticmethod
    def describe() -> list[tuple[str, str]]:
        return list(CHECKS)

    def close(self) -> None:
        self.fake.close()

    def run(self, report: Report, only: Sequence[str]) -> bool:
        """Serve one client, then report the checks; False if no client said hello."""
        names = [name for name, _ in CHECKS]
        hello = self.fake.first_hello("client", names, only, report, self.connect_timeout)
        if hello is None:
            return False
        self.fake.served.hello = hello.fields
        self.fake.send(
            "welcome",
            protocolVersion=PROTOCOL_VERSION,
            idPrefix=ID_PREFIX,
            schedulerName="conformance-kit",
            protected=True,
            peerTimeoutMs=PEER_TIMEOUT_MS,
            maxPayloadBytes=8 << 30,
        )
        self.serve()
        report.line(self.summary())
        for name in names:
            if not only or name in only:
                report.outcome(name, getattr(self, "check_" + name))
        return True

    def serve(self) -> None:
        fake, served = self.fake, self.fake.served
        served.welcomed_at = last = time.monotonic()
        total = Deadline(self.timeout * SERVE_TIMEOUTS)
        while not served.disconnected:
            message = fake.receive(min(fake.next_due(), 0.2))
            now = time.monotonic()
            if message is not None:
                last = now
            fake.advance()
            fake._watch_monitor()
            if fake.disconnected:  # what it sent before closing is still to be read
                while not served.disconnected and fake.router.poll(50):
                    fake.receive(0)
                fake.advance()
                served.closed = True
                break
            if now - last > self.timeout:
                served.timed_out = f"the client sent nothing for {self.timeout:g}s"
                break
            if total.passed():
                served.timed_out = f"the client was still connected after {self.timeout * SERVE_TIMEOUTS:g}s"
                break
        served.ended_at = time.monotonic()

    def summary(self) -> str:
        served, jobs = self.fake.served, self.fake.jobs.values()
        used = ", ".join(f"{name} {count}" for name, count in sorted(served.used.items())) or "none"
        silent = sum(1 for j in jobs if j.task.flags & SILENT)
        seconds = served.ended_at - served.welcomed_at
        return (
            f"served {len(jobs)} task(s) ({silent} silent; conventions: {used}), {len(self.fake.minted) - len(jobs)} "
            f"object id(s), {len(served.heartbeats)} heartbeat(s) in {seconds:.1f}s"
        )

    # -------------------------------------------------------------------------------------------- checks
    def check_hello(self) -> None:
        hello = self.fake.served.hello
        expect(hello.get("protocolVersion") == PROTOCOL_VERSION, f"protocolVersion {hello.get('protocolVersion')}")
        expect(hello.get("kind") == "client", f"kind {hello.get('kind')}, not client")
        expect(hello.get("queueCapacity", 0) == 0, f"queueCapacity {hello.get('queueCapacity')}, not 0")
        expect(not hello.get("capabilities"), f"a client's hello lists capabilities {hello.get('capabilities')}")

    @staticmethod
    def _none(problems: list[str]) -> None:
        expect(not problems, f"{len(problems)} problem(s): " + "; ".join(problems[:5]))

    def check_ids(self) -> None:
        self._none(self.fake.served.ids)

    def check_references(self) -> None:
        self._none(self.fake.served.references)

    def check_well_formed(self) -> None:
        self._none(self.fake.served.malformed + self.fake.seen.violations)

    def check_frame_limit(self) -> None:
        seen = self.fake.seen
        expect(
            not seen.oversized,
            f"{len(seen.oversized)} frame(s) over 1 MiB ({MAX_FRAME:,} bytes), which a scheduler drops the connection "
            f"for (payloads over 1 MiB must span frames): {'; '.join(seen.oversized[:5])}",
        )
        if seen.largest_payload <= MAX_FRAME:
            raise CheckSkipped(
                f"the client sent no payload over 1 MiB (the largest: {seen.largest_payload:,} bytes): run one that "
                "submits an argument over 1 MiB to see it cut"
            )

    def check_heartbeats(self) -> None:
        served = self.fake.served
        limit = PEER_TIMEOUT_MS / 2000
        times = [served.welcomed_at, *served.heartbeats, served.ended_at]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        expect(max(gaps) <= limit + 0.5, f"{max(gaps):.1f}s without a heartbeat; peerTimeoutMs is {PEER_TIMEOUT_MS}")
        if served.ended_at - served.welcomed_at < limit:
            raise CheckSkipped(f"connected {served.ended_at - served.welcomed_at:.1f}s, less than peerTimeoutMs / 2")

    def check_conventions(self) -> None:
        served = self.fake.served
        self._none(served.conventions)
        if not served.used:
            raise CheckSkipped("the client submitted no task")

    def check_results_answered(self) -> None:
        served = self.fake.served
        expect(not served.resubmitted, f"task id(s) submitted again: {', '.join(served.resubmitted[:5])}")
        twice = [f"{i:#x}" for i, j in self.fake.jobs.items() if j.sent > 1]
        expect(not twice, f"the kit answered task(s) twice: {twice[:5]}")
        open_jobs = [j for j in self.fake.jobs.values() if j.result is None and not j.task.flags & SILENT]
        if open_jobs and not served.disconnected:
            raise CheckFailed(f"{len(open_jobs)} task(s) still running when the client went away")

    def check_disconnect(self) -> None:
        served = self.fake.served
        if served.disconnected:
            return
        expect(not served.timed_out, served.timed_out)
        raise CheckFailed("the connection closed without a disconnect")
