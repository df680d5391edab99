"""Scheduler mode: the kit plays raw clients and raw workers against a running scheduler.

Every check opens its own peers (fresh routing ids), and ends them when it is done (clients first, then workers,
each confirmed with a `heartbeat` answered `notConnected`), so checks do not see each other's tasks. The scheduler
must have no other worker connected while the kit runs: the kit's tasks carry opaque payloads only its raw workers
can "run".
"""

from __future__ import annotations

import json
import os
import struct
import time
from collections.abc import Sequence
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from scaler.conformance.wire import (
    CANCELED,
    ERROR,
    FAILED,
    MAX_FRAME,
    PROTOCOL_VERSION,
    SILENT,
    STATUS_NAMES,
    STREAM_OUTPUT,
    SUCCESS,
    TIMED_OUT,
    Check,
    CheckFailed,
    CheckSkipped,
    Deadline,
    Keys,
    Msg,
    Task,
    advise,
    build,
    expect,
    i32,
    layout,
    parse,
    pieces,
    random_id,
    task_batch_fields,
    tasks_of,
    u16,
    u64,
)

PROFILE = 1
WORKER_NOISE = ("heartbeatEcho",)
BIG = 3 * MAX_FRAME + 5  # a payload that spans four frames


# ------------------------------------------------------------------------------------------------ raw peers
class Peer:
    """A DEALER socket with a random routing id; frames are [header, payload...] both ways."""

    rank = 9  # the order in which the kit's cleanup ends sessions (clients first); a plain Peer is only closed

    def __init__(self, kit: SchedulerKit, label: str, role: str) -> None:
        self.kit = kit
        self.identity = random_id(label)
        self.sock: zmq.Socket[Any] = kit.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDTIMEO, max(1, int(kit.timeout * 1000)))  # no connection: a send fails, not hangs
        self.sock.setsockopt(zmq.ROUTING_ID, self.identity)
        if kit.keys is not None:
            kit.keys.make_client(self.sock, role)
        self.sock.connect(kit.address)
        self.closed = False
        self.largest_frame = 0  # the biggest frame received from the scheduler
        kit.peers.append(self)

    def send(self, member: str, payloads: Sequence[bytes] | None = None, /, pack: bool = False, **fields: Any) -> None:
        frames: list[bytes] = []
        if payloads is not None:
            fields["payloadSizes"] = u64(len(p) for p in payloads)
            frames = layout(payloads, pack)
        self.send_frames([build(member, **fields), *frames])

    def send_frames(self, frames: Sequence[bytes]) -> None:
        try:
            self.sock.send_multipart(list(frames))
        except zmq.Again:
            raise CheckFailed(
                f"{self.label()}: could not send within {self.kit.timeout}s: no connection to {self.kit.address} "
                "(is the scheduler there? does it need --keys?)"
            ) from None

    def recv(self, timeout: float | None = None) -> Msg:
        wait = self.kit.timeout if timeout is None else timeout
        if not self.sock.poll(int(wait * 1000)):
            raise CheckFailed(f"{self.label()}: no message within {wait:.1f}s")
        return self.take()

    def take(self) -> Msg:
        """The message waiting on the socket, parsed (its largest frame noted)."""
        frames = self.sock.recv_multipart()
        self.largest_frame = max(self.largest_frame, *(len(f) for f in frames))
        return parse(frames)

    def label(self) -> str:
        return self.identity.decode().split("|")[0]

    def expect(self, name: str, timeout: float | None = None, ignore: tuple[str, ...] = WORKER_NOISE) -> Msg:
        deadline = Deadline(self.kit.timeout if timeout is None else timeout)
        while True:
            if deadline.passed():
                raise CheckFailed(
                    f"{self.label()}: no {name} within {self.kit.timeout if timeout is None else timeout}s"
                )
            try:
                message = self.recv(deadline.left())
            except CheckFailed as exc:
                raise CheckFailed(f"{self.label()}: expected {name}: {exc}") from None
            if message.name == name:
                return message
            if message.name not in ignore:
                raise CheckFailed(f"{self.label()}: expected {name}, got {message}")

    def quiet(self, seconds: float = 0.3, ignore: tuple[str, ...] = WORKER_NOISE) -> None:
        """Nothing (but `ignore`d kinds) arrives for `seconds`."""
        deadline = Deadline(seconds)
        while not deadline.passed():
            if self.sock.poll(deadline.ms() + 1):
                message = self.take()
                if message.name not in ignore:
                    raise CheckFailed(f"{self.label()}: unexpected {message}")

    def heartbeat(self, **fields: Any) -> None:
        self.send("heartbeat", **fields)

    def error(self, code: str, timeout: float | None = None, ignore: tuple[str, ...] = WORKER_NOISE) -> Msg:
        message = self.expect("error", timeout, ignore)
        expect(message.fields.get("code") == code, f"expected error {code}, got {message}")
        return message

    def leave(self) -> None:
        """disconnect, confirmed: a heartbeat after it is answered notConnected."""
        if self.closed:
            return
        try:
            self.send("disconnect", reason="conformance check done")
            self.heartbeat()
            noise = ("heartbeatEcho", "putObjects", "dispatchTasks", "cancelTasks", "freeObjects", "balanceRequest")
            self.expect("error", ignore=(*noise, "taskResults", "taskOutput"))
        finally:
            self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.sock.close(linger=0)


class RawWorker(Peer):
    rank = 1

    def __init__(
        self,
        kit: SchedulerKit,
        capacity: int = 10,
        name: str = "conformance-worker",
        capabilities: Sequence[str] = (),
        unit: str = "",
    ) -> None:
        super().__init__(kit, "W", "worker")
        self.name = name
        self.objects: dict[int, bytes] = {}
        self.send(
            "hello",
            protocolVersion=PROTOCOL_VERSION,
            kind="worker",
            name=name,
            hostname="conformance",
            pid=os.getpid(),
            heartbeatIntervalMs=2000,
            queueCapacity=capacity,
            capabilities=list(capabilities),
            unit=unit,
        )
        self.welcome = self.expect("welcome", ignore=()).fields

    def expect(self, name: str, timeout: float | None = None, ignore: tuple[str, ...] = WORKER_NOISE) -> Msg:
        """Like Peer.expect; objects pushed meanwhile are stored, as a worker must."""
        deadline = Deadline(self.kit.timeout if timeout is None else timeout)
        while True:
            try:
                message = self.recv(deadline.left())
            except CheckFailed as exc:
                raise CheckFailed(f"worker {self.name}: expected {name}: {exc}") from None
            if message.name == "putObjects":
                self.objects.update(zip(message.ids("objectIds"), message.payloads, strict=True))
                if name != "putObjects":
                    continue
            if message.name == name:
                return message
            if message.name not in ignore:
                raise CheckFailed(f"worker {self.name}: expected {name}, got {message}")

    def work(self, timeout: float | None = None) -> list[Task]:
        """The next dispatched batch; every object it refers to must have been pushed before it."""
        return self.accept(self.expect("dispatchTasks", timeout))

    def accept(self, message: Msg) -> list[Task]:
        tasks = tasks_of(message)
        for task in tasks:
            for ref in (task.function_id, *task.refs):
                expect(
                    ref == 0 or ref in self.objects,
                    f"task {task.task_id:#x} dispatched before object {ref:#x} was pushed to the worker",
                )
        return tasks

    def answer(self, results: Sequence[tuple[int, int, bytes]], pack: bool = True, **extra: Any) -> None:
        fields: dict[str, Any] = {
            "taskIds": u64(r[0] for r in results),
            "statuses": bytes(r[1] for r in results),
            **extra,
        }
        self.send("taskResults", [r[2] for r in results], pack=pack, **fields)


class RawClient(Peer):
    rank = 0

    def __init__(self, kit: SchedulerKit, name: str = "conformance-client") -> None:
        super().__init__(kit, "C", "client")
        self.counter = 0
        self.send(
            "hello",
            protocolVersion=PROTOCOL_VERSION,
            kind="client",
            name=name,
            hostname="conformance",
            pid=os.getpid(),
            heartbeatIntervalMs=2000,
        )
        self.welcome = self.expect("welcome", ignore=()).fields
        self.prefix: int = self.welcome["idPrefix"]

    def mint(self) -> int:
        self.counter += 1
        return (self.prefix << 40) | self.counter

    def put(self, objects: dict[int, bytes], names: list[str] | None = None) -> None:
        fields: dict[str, Any] = {"objectIds": u64(objects)}
        if names:
            fields["names"] = names
        self.send("putObjects", list(objects.values()), pack=len(objects) > 1, **fields)

    def function(self, payload: bytes = b"conformance function object") -> int:
        function_id = self.mint()
        self.put({function_id: payload}, ["conformance_fn"])
        return function_id

    def task(self, function_id: int, *args: bytes | int, flags: int = 0, keywords: list[str] | None = None) -> Task:
        """A new task: bytes arguments travel inline, int arguments refer to objects or tasks."""
        refs = [0 if isinstance(a, bytes) else a for a in args]
        inline = [a for a in args if isinstance(a, bytes)]
        return Task(self.mint(), function_id, flags, refs, keywords, inline)

    def submit(self, tasks: Sequence[Task], pack: bool = False, **extra: Any) -> None:
        fields, payloads = task_batch_fields(tasks)
        self.send("submitTasks", payloads, pack=pack, **fields, **extra)

    def results(
        self, ids: Sequence[int], timeout: float | None = None, ignore: tuple[str, ...] = WORKER_NOISE
    ) -> dict[int, tuple[int, bytes]]:
        """(status, payload) of each of `ids`, from however many taskResults they come in; exactly one each."""
        got: dict[int, tuple[int, bytes]] = {}
        deadline = Deadline(self.kit.timeout if timeout is None else timeout)
        while set(ids) - set(got):
            try:
                message = self.expect("taskResults", deadline.left(), ignore)
            except CheckFailed as exc:
                missing = ", ".join(f"{i:#x}" for i in ids if i not in got)
                raise CheckFailed(f"no result for {missing}: {exc}") from None
            task_ids, statuses = message.ids("taskIds"), message.fields["statuses"]
            expect(len(statuses) == len(task_ids) == len(message.payloads), f"inconsistent taskResults {message}")
            for k, task_id in enumerate(task_ids):
                expect(task_id in ids, f"a result for task {task_id:#x}, which was not expected")
                expect(task_id not in got, f"a second result for task {task_id:#x}")
                got[task_id] = (statuses[k], message.payloads[k])
        return got


def json_quoted(text: str) -> str:
    return json.dumps(text)[1:-1]


def status_name(status: int) -> str:
    return STATUS_NAMES[status] if status < len(STATUS_NAMES) else str(status)


def first_of(peers: Sequence[Peer], timeout: float) -> tuple[Peer, Msg]:
    """The first message any of `peers` receives (heartbeatEcho skipped)."""
    poller = zmq.Poller()
    for peer in peers:
        poller.register(peer.sock, zmq.POLLIN)
    deadline = Deadline(timeout)
    while not deadline.passed():
        ready = dict(poller.poll(deadline.ms() + 1))
        for peer in peers:
            if peer.sock in ready:
                message = peer.take()
                if isinstance(peer, RawWorker) and message.name == "putObjects":
                    peer.objects.update(zip(message.ids("objectIds"), message.payloads, strict=True))
                    continue
                if message.name != "heartbeatEcho":
                    return peer, message
    raise CheckFailed(f"nothing arrived within {timeout:.1f}s")


# ------------------------------------------------------------------------------------------------ the kit
class SchedulerKit:
    def __init__(self, address: str, timeout: float, keys: Keys | None) -> None:
        self.address = address
        self.timeout = timeout
        self.keys = keys
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.peers: list[Peer] = []
        self.losses_to_fail: int | None = None  # measured by tasks_started_counts_attempts
        self.tag = os.urandom(4).hex()

    def close(self) -> None:
        for peer in self.peers:
            peer.close()
        self.ctx.destroy(linger=0)

    def client(self, name: str = "conformance-client") -> RawClient:
        return RawClient(self, name)

    def worker(self, capacity: int = 10, name: str = "", capabilities: Sequence[str] = (), unit: str = "") -> RawWorker:
        return RawWorker(self, capacity, name or f"conformance-worker-{self.tag}-{len(self.peers)}", capabilities, unit)

    def stranger(self, label: str = "X", role: str = "client") -> Peer:
        return Peer(self, label, role)

    def cleanup(self) -> None:
        """End every peer of the last check: clients first (their tasks are cancelled), then workers, then managers;
        peers without a session are closed."""
        peers, self.peers = self.peers, []
        for peer in sorted(peers, key=lambda p: p.rank):
            if peer.closed:
                continue
            try:
                if peer.rank == Peer.rank:
                    peer.close()
                else:
                    peer.leave()
            except CheckFailed:
                peer.close()

    def checks(self) -> list[Check]:
        names = [
            "hello_welcome",
            "heartbeat_echo",
            "resumed_heartbeat",
            "refused_wrong_version",
            "refused_zero_capacity",
            "refused_invalid_capability",
            "not_connected",
            "refused_key_role",
            "malformed_garbage",
            "malformed_column_length",
            "malformed_payload_frames",
            "bad_request_foreign_prefix",
            "bad_request_zero_counter",
            "bad_request_duplicate_id",
            "bad_request_worker_sends_client_messages",
            "bad_request_client_sends_worker_messages",
            "too_large",
            "frame_limit",
            "round_trip",
            "payload_layouts",
            "spanning_payloads",
            "queue_capacity_respected",
            "crashed_is_retried",
            "hello_again_resets_session",
            "dependencies",
            "failure_propagation",
            "unresolvable_reference",
            "cancel_queued",
            "cancel_assigned",
            "balance",
            "objects_pushed_once_and_freed",
            "client_disconnect_cancels",
            "worker_disconnect_requeues",
            "worker_loss_redispatch",
            "tasks_started_counts_attempts",
            "disconnect_costs_no_attempt",
            "capability_placement",
            "capability_missing",
            "bad_request_invalid_requirement",
            "timeouts_forwarded",
            "retries",
            "priorities",
            "stream_output",
            "shutdown_protected",
        ]
        from scaler.conformance.scheduler_manager_checks import ManagerChecks  # (it imports this module)

        checks = [
            Check(n, getattr(self, "check_" + n), (getattr(self, "check_" + n).__doc__ or "").strip()) for n in names
        ]
        return [*checks[:-1], *ManagerChecks(self).checks(), checks[-1]]  # shutdown_protected stays last

    def run_one(self, check: Check) -> None:
        try:
            check.run()
        finally:
            self.cleanup()

    # -------------------------------------------------------------------------------------------- sessions
    def check_hello_welcome(self) -> None:
        """welcome's fields: version 1, distinct idPrefix in 1..2^24-1, peerTimeoutMs > 0."""
        client, other = self.client(), self.client()
        worker = self.worker()
        for who, w in (("client", client.welcome), ("worker", worker.welcome)):
            expect(w.get("protocolVersion") == PROTOCOL_VERSION, f"{who} welcome protocolVersion {w}")
            expect(1 <= w.get("idPrefix", 0) < 2**24, f"{who} welcome idPrefix out of range: {w}")
            expect(w.get("peerTimeoutMs", 0) > 0, f"{who} welcome peerTimeoutMs is 0")
            expect(isinstance(w.get("schedulerName"), str), f"{who} welcome schedulerName {w}")
        prefixes = {client.prefix, other.prefix, worker.welcome["idPrefix"]}
        expect(len(prefixes) == 3, f"sessions share an idPrefix: {prefixes}")

    def check_heartbeat_echo(self) -> None:
        """heartbeat → heartbeatEcho (sentAtUs 0, no frames), for a client and a worker's first one."""
        client = self.client()
        client.heartbeat()
        echo = client.expect("heartbeatEcho", ignore=())
        expect(echo.fields.get("sentAtUs", 0) == 0 and not echo.frames, f"echo {echo}")
        worker = self.worker()
        worker.heartbeat(cpuPercent=1.0, rssBytes=1 << 20, queued=0, running=0, processors=1)
        worker.expect("heartbeatEcho", ignore=())

    def check_resumed_heartbeat(self) -> None:
        """heartbeat(resumed, sent=what came) → heartbeatEcho(resumed, sent=what the scheduler sent: the welcome, not
        echoes); a resumed heartbeat counting more than came → error notConnected "session ended: ..." (section 10)."""
        client = self.client()
        client.heartbeat()
        client.expect("heartbeatEcho", ignore=())
        client.function()  # one message (putObjects): heartbeats do not count
        client.heartbeat(resumed=True, sent=1)
        echo = client.expect("heartbeatEcho", ignore=())
        resumed, sent = echo.fields.get("resumed"), echo.fields.get("sent")
        expect(resumed is True and sent == 1, f"expected heartbeatEcho(resumed, sent=1: the welcome), got {echo}")
        client.heartbeat(resumed=True, sent=3)  # two of its messages were lost
        error = client.error("notConnected", ignore=())
        said = str(error.fields.get("message", ""))
        expect(said.startswith("session ended: "), f"notConnected should start 'session ended: ', got {said!r}")
        client.heartbeat()
        client.error("notConnected", ignore=())  # the session is gone

    def check_refused_wrong_version(self) -> None:
        """hello with protocolVersion 2 → refused(schedulerProtocolVersion 1), and no session opens."""
        peer = self.stranger("C")
        peer.send("hello", protocolVersion=PROTOCOL_VERSION + 1, kind="client", name="from the future")
        refused = peer.expect("refused", ignore=())
        expect(refused.fields.get("schedulerProtocolVersion") == PROTOCOL_VERSION, f"{refused}")
        expect(bool(refused.fields.get("reason")), "refused without a reason")
        peer.heartbeat()
        peer.error("notConnected", ignore=())

    def check_refused_zero_capacity(self) -> None:
        """a worker's hello with queueCapacity 0 → refused."""
        peer = self.stranger("W", "worker")
        peer.send("hello", protocolVersion=PROTOCOL_VERSION, kind="worker", name="no room", queueCapacity=0)
        refused = peer.expect("refused", ignore=())
        expect(bool(refused.fields.get("reason")), "refused without a reason")

    def check_refused_invalid_capability(self) -> None:
        """a worker's hello with an invalid capability text → refused naming it; a valid list → welcome."""
        bad_ones = ["", " padded", "trailing ", "tab\tinside", "x" * 257]
        for bad in bad_ones:
            peer = self.stranger("W", "worker")
            capabilities = ["fine", bad]
            peer.send(
                "hello",
                protocolVersion=PROTOCOL_VERSION,
                kind="worker",
                name="bad caps",
                queueCapacity=1,
                capabilities=capabilities,
            )
            message = peer.recv()
            expect(message.name == "refused", f"capability {bad[:20]!r}: expected refused, got {message}")
            reason = message.fields.get("reason", "")
            if bad.strip() and len(bad) <= 256:
                named = bad in reason or repr(bad)[1:-1] in reason or json_quoted(bad) in reason
                expect(named, f"the reason does not name {bad!r}: {reason!r}")
            peer.close()
        too_many = [f"c{k}" for k in range(257)]
        peer = self.stranger("W", "worker")
        peer.send(
            "hello",
            protocolVersion=PROTOCOL_VERSION,
            kind="worker",
            name="many",
            queueCapacity=1,
            capabilities=too_many,
        )
        message = peer.recv()
        expect(message.name == "refused", f"257 capabilities: expected refused, got {message}")
        self.worker(capabilities=["gpu", "lang=ts", "payload=conformance"])  # a valid list: welcome

    def check_not_connected(self) -> None:
        """messages without a session → error notConnected; a disconnect without one → nothing."""
        stranger = self.stranger()
        stranger.heartbeat()
        stranger.error("notConnected", ignore=())
        stranger.send("submitTasks", taskIds=u64([1]), functionIds=u64([1]), flags=b"\0", argCounts=u16([0]))
        stranger.error("notConnected", ignore=())
        stranger.send("disconnect", reason="never mind")
        stranger.quiet(0.3, ignore=())

    def check_refused_key_role(self) -> None:
        """with --keys: a hello of kind worker over a client key → refused with keyProblem set."""
        if self.keys is None:
            raise CheckSkipped("needs --keys (a scheduler started with keys)")
        peer = Peer(self, "W", "client")
        peer.send("hello", protocolVersion=PROTOCOL_VERSION, kind="worker", name="wrong key", queueCapacity=1)
        refused = peer.expect("refused", ignore=())
        expect(refused.fields.get("keyProblem") is True, f"refused without keyProblem: {refused}")

    def _malformed(self, peer: Peer, frames: list[bytes], what: str) -> None:
        peer.send_frames(frames)
        try:
            message = peer.expect("error", ignore=WORKER_NOISE)
        except CheckFailed as exc:
            raise CheckFailed(f"{what}: {exc}") from None
        expect(message.fields.get("code") == "malformed", f"{what}: expected error malformed, got {message}")

    def _still_serving(self, *peers: Peer) -> None:
        for peer in peers:
            peer.heartbeat()
            peer.expect("heartbeatEcho", ignore=())

    def check_malformed_garbage(self) -> None:
        """a header that is not Cap'n Proto, or truncated → error malformed (with and without a session); the session
        stays open."""
        client = self.client()
        self._malformed(client, [b"this is not cap'n proto"], "garbage header")
        self._malformed(client, [b"\x00" * 8], "zero header")
        self._malformed(client, [build("heartbeat")[:-8]], "truncated header")
        self._malformed(client, [build("heartbeat"), b"extra"], "a frame after a heartbeat")
        stranger = self.stranger()
        self._malformed(stranger, [b"garbage!"], "garbage without a session")
        self._still_serving(client)

    def check_malformed_column_length(self) -> None:
        """a column whose length does not match the batch → error malformed."""
        client = self.client()
        fn = client.function()
        self._malformed(
            client, [build("submitTasks", taskIds=u64([client.mint()]), functionIds=u64([]))], "functionIds too short"
        )
        self._malformed(
            client,
            [build("submitTasks", taskIds=u64([client.mint()]), functionIds=u64([fn]), flags=b"\0", argCounts=b"\0")],
            "argCounts of 1 byte",
        )
        self._malformed(client, [build("cancelTasks", ids=b"1234567")], "an ids column of 7 bytes")
        worker = self.worker()
        self._malformed(
            worker, [build("taskResults", taskIds=u64([1, 2]), statuses=bytes(1), payloadSizes=u64([0, 0]))], "statuses"
        )
        self._still_serving(client, worker)

    def check_malformed_payload_frames(self) -> None:
        """payload frames that do not match payloadSizes (missing, a payload that starts inside a frame and does not fit
        in it, one spanning frames it does not fill exactly, extra bytes), or an unknown status byte → error
        malformed."""
        client = self.client()
        self._malformed(client, [build("putObjects", objectIds=u64([client.mint()]), payloadSizes=u64([5]))], "missing")
        self._malformed(
            client,
            [build("putObjects", objectIds=u64([client.mint()]), payloadSizes=u64([2])), b"abc"],
            "a frame with bytes no payload accounts for",
        )
        for frames, what in (
            ([b"abc", b"defg"], "a payload of 5 bytes spanning frames of 3 and 4 bytes (it ends inside the second)"),
            ([b"abc", b"d"], "a payload of 5 bytes spanning frames of 3 and 1 bytes (missing a byte)"),
        ):
            header = build("putObjects", objectIds=u64([client.mint()]), payloadSizes=u64([5]))
            self._malformed(client, [header, *frames], what)
        worker = self.worker()
        self._malformed(
            worker,
            [build("taskResults", taskIds=u64([1, 2]), statuses=bytes(2), payloadSizes=u64([2, 2])), b"abc", b"d"],
            "a payload that starts inside a frame and spans the next one",
        )
        self._malformed(
            worker,
            [build("taskResults", taskIds=u64([1]), statuses=bytes([9]), payloadSizes=u64([0]))],
            "status byte 9",
        )
        self._still_serving(client, worker)

    def check_bad_request_foreign_prefix(self) -> None:
        """task and object ids with another session's prefix → error badRequest listing them."""
        client, other = self.client(), self.client()
        fn = client.function()
        foreign = (other.prefix << 40) | 1
        client.submit([Task(foreign, fn)])
        error = client.error("badRequest")
        expect(error.ids() == [foreign], f"error ids {error.ids()} != [{foreign:#x}]")
        client.put({(other.prefix << 40) | 7: b"x"})
        error = client.error("badRequest")
        expect(error.ids() == [(other.prefix << 40) | 7], f"object error ids {error.ids()}")

    def check_bad_request_zero_counter(self) -> None:
        """task and object ids whose counter is 0 → error badRequest listing them; the batch's other tasks go on."""
        client = self.client()
        worker = self.worker()
        fn = client.function()
        zero = client.prefix << 40
        good = client.task(fn)
        client.submit([Task(zero, fn), good])
        error = client.error("badRequest")
        expect(error.ids() == [zero], f"error ids {error.ids()} != [{zero:#x}]")
        [got] = worker.work()
        expect(got.task_id == good.task_id, "the other task of the batch was not accepted")
        client.put({zero: b"x"})
        expect(client.error("badRequest").ids() == [zero], "object id with counter 0 not refused")

    def check_bad_request_duplicate_id(self) -> None:
        """a task id of an unfinished task, an object id in use, a task id equal to an object id → badRequest."""
        client = self.client()
        fn = client.function()
        task = client.task(fn)
        client.submit([task])
        client.submit([task])
        expect(client.error("badRequest").ids() == [task.task_id], "a duplicate task id was not refused")
        client.put({fn: b"again"})
        expect(client.error("badRequest").ids() == [fn], "an object id in use was not refused")
        client.submit([Task(fn, fn)])
        expect(client.error("badRequest").ids() == [fn], "a task id equal to an object id was not refused")

    def check_bad_request_worker_sends_client_messages(self) -> None:
        """a worker sending submitTasks / putObjects / cancelTasks → error badRequest."""
        worker = self.worker()
        worker.send("submitTasks", taskIds=u64([]))
        worker.error("badRequest")
        worker.send("putObjects", [], objectIds=u64([]))
        worker.error("badRequest")
        worker.send("cancelTasks", ids=u64([]))
        worker.error("badRequest")
        self._still_serving(worker)

    def check_bad_request_client_sends_worker_messages(self) -> None:
        """a client sending taskResults / dispatchTasks / balanceResponse → error badRequest."""
        client = self.client()
        client.send("taskResults", [], taskIds=u64([]), statuses=b"")
        client.error("badRequest")
        client.send("dispatchTasks", taskIds=u64([]))
        client.error("badRequest")
        client.send("balanceResponse", ids=u64([]))
        client.error("badRequest")
        client.send("taskOutput", taskIds=u64([]), streams=b"", texts=[])
        client.error("badRequest")
        self._still_serving(client)

    def check_too_large(self) -> None:
        """with a stated maxPayloadBytes up to 16 MiB: a bigger object, argument or result is refused (tooLarge /
        failed)."""
        client = self.client()
        limit = int(client.welcome.get("maxPayloadBytes", 0))
        if limit == 0 or limit > 16 << 20:
            raise CheckSkipped(f"the welcome states maxPayloadBytes {limit}; start the scheduler with a limit ≤ 16 MiB")
        worker = self.worker()
        big = b"\xab" * (limit + 1)
        obj = client.mint()
        client.put({obj: big})
        error = client.error("tooLarge")
        expect(error.ids() == [obj], f"tooLarge ids {error.ids()} != [{obj:#x}]")
        fn = client.function()
        over, fine = client.task(fn, big), client.task(fn, b"small")
        client.submit([over, fine])
        error = client.error("tooLarge")
        expect(error.ids() == [over.task_id], f"tooLarge ids {error.ids()} != [{over.task_id:#x}]")
        [got] = worker.work()
        expect(got.task_id == fine.task_id, "the batch's other task was not accepted")
        worker.answer([(fine.task_id, SUCCESS, big)])
        [(status, payload)] = client.results([fine.task_id]).values()
        expect(status == FAILED, f"a result over the limit ended {status_name(status)}, not failed")
        expect(
            str(limit) in payload.decode(errors="replace") or "limit" in payload.decode(errors="replace"),
            f"the failure does not name the limit: {payload[:200]!r}",
        )

    def check_frame_limit(self) -> None:
        """a connection that sends a frame of 1 MiB + 1 bytes is dropped before the frame is read (no answer; the
        connection closes); a frame of exactly 1 MiB is read (garbage: error malformed); other peers are still
        served."""
        client = self.client()
        answer = self._send_watched(self.stranger(), b"\xff" * MAX_FRAME)
        expect(
            answer is not None,
            f"the scheduler dropped a connection that sent a frame of exactly {MAX_FRAME:,} bytes: the limit is 1 MiB, "
            "not less (with CurveZMQ, ZMQ_MAXMSGSIZE must allow the 33 bytes encryption adds to a frame)",
        )
        expect(
            answer is not None and answer.name == "error" and answer.fields.get("code") == "malformed",
            f"a garbage frame of exactly 1 MiB: expected error malformed, got {answer}",
        )
        answer = self._send_watched(self.stranger(), b"\xff" * (MAX_FRAME + 1))
        expect(
            answer is None,
            f"the scheduler read a frame of {MAX_FRAME + 1:,} bytes and answered {answer}: it must drop a connection "
            "that sends a frame over 1 MiB before reading it (docs/protocol.md section 2)",
        )
        self._still_serving(client)
        self.client()  # and a new session opens

    def _send_watched(self, peer: Peer, frame: bytes) -> Msg | None:
        """Over `peer`'s connection, known to be up and read (a heartbeat answered notConnected), send `frame` alone:
        the scheduler's answer, or None once the connection closes; CheckFailed if neither happens in time."""
        peer.heartbeat()
        peer.error("notConnected", ignore=())
        monitor: zmq.Socket[Any] = peer.sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        poller = zmq.Poller()
        poller.register(peer.sock, zmq.POLLIN)
        poller.register(monitor, zmq.POLLIN)
        try:
            peer.send_frames([frame])
            deadline = Deadline(self.timeout)
            while not deadline.passed():
                ready = dict(poller.poll(deadline.ms() + 1))
                if peer.sock in ready:
                    return peer.take()
                if monitor in ready and recv_monitor_message(monitor)["event"] == zmq.EVENT_DISCONNECTED:
                    return None
        finally:
            peer.sock.disable_monitor()
            monitor.close(linger=0)
        raise CheckFailed(
            f"a connection that sent a frame of {len(frame):,} bytes was neither dropped nor answered within "
            f"{self.timeout}s"
        )

    # -------------------------------------------------------------------------------------------- tasks
    def check_round_trip(self) -> None:
        """putObjects → submitTasks → (putObjects, dispatchTasks) → taskResults → client: payloads byte-exact,
        keywords, flags and profiling columns passed through."""
        worker = self.worker(capacity=4)
        client = self.client()
        limit = int(client.welcome.get("maxPayloadBytes", 0)) or (1 << 62)
        function_payload = os.urandom(3000)
        fn = client.function(function_payload)
        big = os.urandom(min(2_000_000, limit))
        obj = client.mint()
        client.put({obj: b"an object argument"}, ["table"])
        task = client.task(fn, b"first", obj, big, flags=PROFILE, keywords=["", "", "big"])
        client.submit([task])
        [got] = worker.work()
        expect(got.task_id == task.task_id and got.function_id == fn, "wrong task or function id")
        expect(got.flags == PROFILE, f"flags {got.flags} != {PROFILE}")
        expect(got.refs == [0, obj, 0], f"argRefs {got.refs}")
        expect(got.keywords == ["", "", "big"], f"keywords {got.keywords}")
        expect(got.inline == [b"first", big], "inline payloads changed on the way")
        expect(worker.objects.get(fn) == function_payload, "function object payload changed")
        expect(worker.objects.get(obj) == b"an object argument", "object payload changed")
        result = os.urandom(min(1_500_000, limit))
        worker.answer([(task.task_id, SUCCESS, result)], durationsUs=u64([1234]), peakMemory=u64([4096]))
        message = client.expect("taskResults")
        expect(message.ids("taskIds") == [task.task_id], f"{message}")
        expect(message.fields["statuses"] == bytes([SUCCESS]), f"{message}")
        expect(message.payloads == [result], "the result payload changed on the way")
        expect(message.ids("durationsUs") == [1234], f"durationsUs {message.ids('durationsUs')}")
        expect(message.ids("peakMemory") == [4096], f"peakMemory {message.ids('peakMemory')}")

    def check_payload_layouts(self) -> None:
        """every valid frame layout (one per payload, packed, mixed with empty frames and empty payloads) is read the
        same, both ways."""
        worker = self.worker(capacity=20)
        client = self.client()
        fn = client.function()
        variants: list[tuple[str, list[Task], list[bytes]]] = []
        for kind in ("separate", "packed", "mixed"):
            args = [b"", b"a", os.urandom(100_000), b"bc", b"", b"d" * 70_000]
            tasks = [client.task(fn, *args[:3]), client.task(fn, *args[3:])]
            payloads = [p for t in tasks for p in t.inline]
            if kind == "separate":
                frames = layout(payloads, pack=False)
            elif kind == "packed":
                frames = layout(payloads, pack=True)
            else:
                frames = [b"", payloads[1], b"", payloads[2] + payloads[3], b"", payloads[5], b""]
            variants.append((kind, tasks, frames))
        for _, tasks, frames in variants:
            fields, payloads = task_batch_fields(tasks)
            fields["payloadSizes"] = u64(len(p) for p in payloads)
            client.send_frames([build("submitTasks", **fields), *frames])
        wanted = {t.task_id: (kind, t) for kind, tasks, _ in variants for t in tasks}
        seen: dict[int, Task] = {}
        deadline = Deadline(self.timeout)
        while set(wanted) - set(seen):
            for got in worker.work(deadline.left()):
                seen[got.task_id] = got
        for task_id, (kind, task) in wanted.items():
            expect(seen[task_id].inline == task.inline, f"{kind} layout: inline payloads changed")
        results = [(task_id, SUCCESS, b"r" * (k % 3) + bytes([k]) * (k * 1000)) for k, task_id in enumerate(wanted)]
        frames = [b"", b"".join(r[2] for r in results[:3]), b""] + [r[2] for r in results[3:] if r[2]] + [b""]
        header = build(
            "taskResults",
            taskIds=u64(r[0] for r in results),
            statuses=bytes(len(results)),
            payloadSizes=u64(len(r[2]) for r in results),
        )
        worker.send_frames([header, *frames])
        got_results = client.results(list(wanted))
        for task_id, status, payload in results:
            expect(got_results[task_id] == (status, payload), f"result of {task_id:#x} changed on the way")

    def check_spanning_payloads(self) -> None:
        """payloads of 3 MiB + 5 bytes span frames (pieces of 1 MiB, or cut unevenly, beside small payloads): as an
        object, an argument and a result they travel through the scheduler byte-exact (advice if it sends a frame
        over 1 MiB)."""
        client = self.client()
        limit = int(client.welcome.get("maxPayloadBytes", 0)) or (1 << 62)
        if limit <= MAX_FRAME:
            raise CheckSkipped(f"the welcome states maxPayloadBytes {limit}: no payload may span frames")
        size = min(BIG, limit)
        worker = self.worker(capacity=4)
        fn = client.function()
        obj, big_object = client.mint(), os.urandom(size)
        client.put({obj: big_object}, ["big"])  # in pieces of 1 MiB
        big_argument = os.urandom(size)
        task, small = client.task(fn, b"before", big_argument, obj, b"after"), client.task(fn, b"tiny")
        fields, payloads = task_batch_fields([task, small])
        fields["payloadSizes"] = u64(len(p) for p in payloads)
        frames = [b"before", *pieces(big_argument, first=300_000), b"after" + b"tiny"]
        client.send_frames([build("submitTasks", **fields), *frames])
        client.heartbeat()
        try:
            client.expect("heartbeatEcho", ignore=())  # no error: both messages were read, the session goes on
        except CheckFailed as exc:
            raise CheckFailed(f"after payloads of {size:,} bytes sent in frames of up to 1 MiB: {exc}") from None
        got: dict[int, Task] = {}
        deadline = Deadline(self.timeout)
        while len(got) < 2:
            got.update((t.task_id, t) for t in worker.work(deadline.left()))
        expect(worker.objects.get(obj) == big_object, f"the object of {size:,} bytes changed on the way")
        expect(got[task.task_id].inline == task.inline, f"the argument of {size:,} bytes changed on the way")
        expect(got[small.task_id].inline == [b"tiny"], "a small argument beside it changed on the way")
        big_result = os.urandom(size)
        worker.answer([(small.task_id, SUCCESS, b"small result"), (task.task_id, SUCCESS, big_result)])
        results = client.results([task.task_id, small.task_id])
        expect(results[small.task_id] == (SUCCESS, b"small result"), "a small result beside it changed on the way")
        expect(results[task.task_id] == (SUCCESS, big_result), f"the result of {size:,} bytes changed on the way")
        largest = max(client.largest_frame, worker.largest_frame)
        advise(largest <= MAX_FRAME, f"the scheduler sent a frame of {largest:,} bytes: frames stay within 1 MiB")

    def check_queue_capacity_respected(self) -> None:
        """a worker never holds more unfinished tasks than its queueCapacity: the rest come as results free room."""
        worker = self.worker(capacity=2)
        client = self.client()
        fn = client.function()
        tasks = [client.task(fn, bytes([k])) for k in range(7)]
        client.submit(tasks)
        done: set[int] = set()
        deadline = Deadline(self.timeout * 2)
        while len(done) < len(tasks):
            batch = worker.work(deadline.left())
            worker.quiet(0.1, ignore=("heartbeatEcho", "balanceRequest"))
            expect(1 <= len(batch) <= 2, f"the worker was sent {len(batch)} tasks at once; its queueCapacity is 2")
            worker.answer([(t.task_id, SUCCESS, t.inline[0]) for t in batch])
            done.update(t.task_id for t in batch)
        results = client.results([t.task_id for t in tasks])
        expect(all(results[t.task_id] == (SUCCESS, t.inline[0]) for t in tasks), f"{results}")

    def check_crashed_is_retried(self) -> None:
        """a crashed result is never forwarded: the task runs again (needs --max-task-retries >= 1, the default 3)."""
        worker = self.worker()
        client = self.client()
        task = client.task(client.function(), b"arg")
        client.submit([task])
        [got] = worker.work()
        worker.answer([(got.task_id, 3, b"the process died (conformance)")])
        peer, message = first_of([worker, client], self.timeout)
        expect(peer is worker and message.name == "dispatchTasks", f"after a crash the {peer.label()} got {message}")
        [again] = worker.accept(message)
        expect(again.task_id == task.task_id and again.inline == [b"arg"], f"{again}")
        worker.answer([(again.task_id, SUCCESS, b"second run")])
        expect(client.results([task.task_id]) == {task.task_id: (SUCCESS, b"second run")}, "result")

    def check_hello_again_resets_session(self) -> None:
        """a second hello from a worker ends its session (new idPrefix) and re-queues its tasks; from a client it
        cancels the client's tasks (cancelTasks to their worker)."""
        worker = self.worker(capacity=1)
        client = self.client()
        fn = client.function()
        task = client.task(fn, b"x")
        client.submit([task])
        expect([t.task_id for t in worker.work()] == [task.task_id], "dispatch")
        old_prefix = worker.welcome["idPrefix"]
        worker.objects.clear()
        worker.send("hello", protocolVersion=PROTOCOL_VERSION, kind="worker", name=worker.name, queueCapacity=1)
        welcome = worker.expect("welcome", ignore=("heartbeatEcho", "cancelTasks", "freeObjects"))
        expect(welcome.fields["idPrefix"] != old_prefix, "the new session kept the old idPrefix")
        [again] = worker.work()
        expect(again.task_id == task.task_id, "the task was not dispatched again in the new session")
        expect(worker.objects.get(fn) is not None, "the function object was not pushed again to the new session")
        client.send("hello", protocolVersion=PROTOCOL_VERSION, kind="client", name="again")
        client.expect("welcome", ignore=("heartbeatEcho", "taskResults"))
        expect(worker.expect("cancelTasks").ids() == [task.task_id], "the old client session's task was not cancelled")
        worker.answer([(task.task_id, CANCELED, b"")])
        client.quiet(0.3, ignore=("heartbeatEcho",))

    def check_dependencies(self) -> None:
        """a task referring to an unfinished task waits; it gets that task's result as an object with the task's id;
        kept results are freed on the worker once nothing needs them; a silent task sends no result."""
        worker = self.worker()
        client = self.client()
        fn = client.function()
        a = client.task(fn, b"a-input", flags=SILENT)
        b = client.task(fn, a.task_id, b"b-input")
        c = client.task(fn, b.task_id, a.task_id)
        client.submit([a, b, c])
        [got] = worker.work()
        expect(got.task_id == a.task_id, "a dependent task was dispatched before its dependency ended")
        worker.quiet(0.2, ignore=("heartbeatEcho", "balanceRequest"))
        worker.answer([(a.task_id, SUCCESS, b"result of a")])
        [got] = worker.work()
        expect(got.task_id == b.task_id and got.refs == [a.task_id, 0] and got.inline == [b"b-input"], f"{got}")
        expect(worker.objects.get(a.task_id) == b"result of a", "a's result did not arrive as object with a's id")
        worker.answer([(b.task_id, SUCCESS, b"result of b")])
        [got] = worker.work()
        expect(got.task_id == c.task_id and got.refs == [b.task_id, a.task_id], f"{got}")
        expect(worker.objects.get(b.task_id) == b"result of b", "b's result did not arrive as object with b's id")
        worker.answer([(c.task_id, SUCCESS, b"result of c")])
        results = client.results([b.task_id, c.task_id])
        expect(results == {b.task_id: (SUCCESS, b"result of b"), c.task_id: (SUCCESS, b"result of c")}, f"{results}")
        freed: set[int] = set()
        deadline = Deadline(self.timeout)
        while not {a.task_id, b.task_id} <= freed:
            freed.update(worker.expect("freeObjects", deadline.left()).ids())
        client.quiet(0.2)

    def check_failure_propagation(self) -> None:
        """a task that ends error takes its dependents (and theirs) with it, same status and payload; others go on."""
        worker = self.worker()
        client = self.client()
        fn = client.function()
        bad = client.task(fn)
        dependent = client.task(fn, bad.task_id)
        grandchild = client.task(fn, dependent.task_id)
        unrelated = client.task(fn)
        client.submit([bad, dependent, grandchild, unrelated])
        batch = worker.work()
        expect({t.task_id for t in batch} == {bad.task_id, unrelated.task_id}, "dependents were dispatched")
        error_frame = struct.pack("<I", 3) + b"bad"
        worker.answer([(bad.task_id, ERROR, error_frame), (unrelated.task_id, SUCCESS, b"fine")])
        results = client.results([bad.task_id, dependent.task_id, grandchild.task_id, unrelated.task_id])
        for t in (bad, dependent, grandchild):
            expect(results[t.task_id] == (ERROR, error_frame), f"task {t.task_id:#x} ended {results[t.task_id]}")
        expect(results[unrelated.task_id] == (SUCCESS, b"fine"), "the unrelated task was affected")

    def check_unresolvable_reference(self) -> None:
        """a reference to an unknown id, another session's object, or a freed object → failed at once (UTF-8 text)."""
        client, other = self.client(), self.client()
        other_obj = other.mint()
        other.put({other_obj: b"theirs"})
        other.heartbeat()
        other.expect("heartbeatEcho", ignore=())
        fn = client.function()
        freed = client.mint()
        client.put({freed: b"gone"})
        client.send("freeObjects", ids=u64([freed]))
        tasks = [
            client.task((client.prefix << 40) | 999_999),
            client.task(fn, (client.prefix << 40) | 888_888),
            client.task(fn, other_obj),
            client.task(fn, freed),
        ]
        client.submit(tasks)
        results = client.results([t.task_id for t in tasks])
        for task in tasks:
            status, payload = results[task.task_id]
            expect(status == FAILED, f"task {task.task_id:#x} ended {status_name(status)}, not failed")
            try:
                payload.decode("utf-8")
            except UnicodeDecodeError:
                raise CheckFailed("a failed payload is not UTF-8 text") from None

    def check_cancel_queued(self) -> None:
        """cancelTasks of a queued task (no worker) → canceled at once, empty payload; its dependents too."""
        client = self.client()
        fn = client.function()
        queued = client.task(fn, b"x")
        dependent = client.task(fn, queued.task_id)
        client.submit([queued, dependent])
        client.send("cancelTasks", ids=u64([queued.task_id]))
        results = client.results([queued.task_id, dependent.task_id])
        expect(results[queued.task_id] == (CANCELED, b""), f"queued task ended {results[queued.task_id]}")
        expect(results[dependent.task_id] == (CANCELED, b""), f"its dependent ended {results[dependent.task_id]}")

    def check_cancel_assigned(self) -> None:
        """cancelTasks of assigned tasks → cancelTasks to the worker; the client gets canceled whatever it answers."""
        worker = self.worker(capacity=5)
        client = self.client()
        fn = client.function()
        a, b = client.task(fn), client.task(fn)
        client.submit([a, b])
        got: set[int] = set()
        while len(got) < 2:
            got.update(t.task_id for t in worker.work())
        client.send("cancelTasks", ids=u64([a.task_id, b.task_id]))
        asked: set[int] = set()
        while len(asked) < 2:
            asked.update(worker.expect("cancelTasks").ids())
        expect(asked == {a.task_id, b.task_id}, f"the worker was asked to cancel {asked}")
        client.quiet(0.2)
        worker.answer([(a.task_id, CANCELED, b""), (b.task_id, SUCCESS, b"too late")])
        results = client.results([a.task_id, b.task_id])
        expect(results == {a.task_id: (CANCELED, b""), b.task_id: (CANCELED, b"")}, f"{results}")
        client.send("cancelTasks", ids=u64([a.task_id, 12345]))  # ended or unknown ids: ignored
        client.quiet(0.2)

    def check_balance(self) -> None:
        """an idle worker joins: the busy one gets balanceRequest; what it gives back in balanceResponse goes to the
        idle one; a result for a given-back task is ignored."""
        busy = self.worker(capacity=10, name=f"busy-{self.tag}")
        client = self.client()
        fn = client.function()
        tasks = [client.task(fn, bytes([i])) for i in range(4)]
        client.submit(tasks)
        held: list[Task] = []
        while len(held) < 4:
            held += busy.work()
        idle = self.worker(capacity=10, name=f"idle-{self.tag}")
        request = busy.expect("balanceRequest").ids()
        expect(bool(request) and set(request) <= {t.task_id for t in held}, f"balanceRequest {request}")
        given_back = request[:1]
        busy.send("balanceResponse", ids=u64(given_back))
        moved = idle.work()
        expect([t.task_id for t in moved] == given_back, f"the idle worker got {[t.task_id for t in moved]}")
        original = next(t for t in held if t.task_id == given_back[0])
        expect(moved[0].inline == original.inline, "the moved task's payloads changed")
        kept = [t for t in held if t.task_id not in given_back]
        busy.answer([(t.task_id, SUCCESS, b"busy") for t in kept])
        idle.answer([(t.task_id, SUCCESS, b"idle") for t in moved])
        results = client.results([t.task_id for t in tasks])
        expect({i for i, (_, p) in results.items() if p == b"idle"} == set(given_back), f"{results}")
        busy.answer([(given_back[0], SUCCESS, b"stale")])
        client.quiet(0.2)

    def check_objects_pushed_once_and_freed(self) -> None:
        """objects go to a worker once, before the dispatch that needs them; freed ones get freeObjects there."""
        worker = self.worker()
        client = self.client()
        fn = client.function(b"fn")
        obj = client.mint()
        client.put({obj: b"shared object"}, ["shared"])
        first = client.task(fn, obj)
        client.submit([first])
        put = worker.expect("putObjects")
        pushed = dict(zip(put.ids("objectIds"), put.payloads, strict=True))
        expect(pushed == {fn: b"fn", obj: b"shared object"}, f"pushed {put}")
        worker.accept(worker.expect("dispatchTasks", ignore=()))
        worker.answer([(first.task_id, SUCCESS, b"")])
        client.results([first.task_id])
        second = client.task(fn, obj)
        client.submit([second])
        message = worker.recv()
        expect(message.name == "dispatchTasks", f"an object the worker holds was sent again: {message}")
        worker.answer([(second.task_id, SUCCESS, b"")])
        client.results([second.task_id])
        client.send("freeObjects", ids=u64([obj, (client.prefix << 40) | 424242]))
        expect(worker.expect("freeObjects").ids() == [obj], "freeObjects to the worker")

    def check_client_disconnect_cancels(self) -> None:
        """a client's disconnect cancels its assigned tasks (cancelTasks to the worker) and frees its objects."""
        worker = self.worker()
        client = self.client()
        fn = client.function()
        running = client.task(fn)
        client.submit([running])
        worker.work()
        client.send("disconnect", reason="bye")
        expect(worker.expect("cancelTasks").ids() == [running.task_id], "cancelTasks to the worker")
        worker.answer([(running.task_id, CANCELED, b"")])
        expect(worker.expect("freeObjects").ids() == [fn], "freeObjects of the gone client's function")
        client.heartbeat()
        client.error("notConnected")
        client.close()

    def check_worker_disconnect_requeues(self) -> None:
        """a worker's disconnect puts its tasks back: another worker gets them (and the objects); the first one's late
        result gets notConnected."""
        first = self.worker(capacity=1)
        client = self.client()
        task = client.task(client.function(b"fn"), b"payload")
        client.submit([task])
        first.work()
        second = self.worker(capacity=1)
        second.quiet(0.2)
        first.send("disconnect", reason="going away")
        [again] = second.work()
        expect(again.task_id == task.task_id and again.inline == [b"payload"], f"{again}")
        expect(second.objects.get(again.function_id) == b"fn", "the function object did not follow")
        second.answer([(task.task_id, SUCCESS, b"from second")])
        expect(client.results([task.task_id]) == {task.task_id: (SUCCESS, b"from second")}, "result")
        first.answer([(task.task_id, SUCCESS, b"stale")])
        first.error("notConnected")
        first.close()
        client.quiet(0.2)

    def check_worker_loss_redispatch(self) -> None:
        """a worker whose connection closes (no disconnect) is lost: its task goes to another worker."""
        doomed = self.worker(capacity=1)
        client = self.client()
        task = client.task(client.function(), b"p")
        client.submit([task])
        expect(doomed.work()[0].task_id == task.task_id, "dispatch")
        other = self.worker(capacity=1)
        other.quiet(0.1)
        doomed.close()
        [again] = other.work()
        expect(again.task_id == task.task_id, f"{again}")

    def check_tasks_started_counts_attempts(self) -> None:
        """a task its worker reported in tasksStarted counts an attempt when the worker is lost: lost often enough
        (at most 10 times here), it ends failed with a text."""
        client = self.client()
        task = client.task(client.function(), b"p")
        client.submit([task])
        for loss in range(1, 11):
            worker = self.worker(capacity=1, name=f"lossy-{self.tag}-{loss}")
            peer, message = first_of([worker, client], self.timeout)
            if peer is client:
                expect(message.name == "taskResults", f"client got {message}")
                expect(message.ids("taskIds") == [task.task_id], f"{message}")
                status = message.fields["statuses"][0]
                expect(status == FAILED, f"the task ended {status_name(status)} after {loss - 1} losses")
                expect(bool(message.payloads[0]), "failed without a text")
                self.losses_to_fail = loss - 1
                return
            expect(message.name == "dispatchTasks", f"worker got {message}")
            [got] = worker.accept(message)
            expect(got.task_id == task.task_id, f"{got}")
            worker.send("tasksStarted", ids=u64([task.task_id]))
            worker.heartbeat()
            worker.expect("heartbeatEcho", ignore=())
            worker.close()
        raise CheckFailed("the task was still re-run after 10 losses of workers that had started it")

    def check_disconnect_costs_no_attempt(self) -> None:
        """a worker that says disconnect (even after tasksStarted) costs its task no attempt: after more disconnects
        than the losses that fail a task, the task still runs."""
        rounds = (self.losses_to_fail if self.losses_to_fail is not None else 4) + 1
        client = self.client()
        task = client.task(client.function(), b"p")
        client.submit([task])
        for round_ in range(rounds + 1):
            worker = self.worker(capacity=1, name=f"polite-{self.tag}-{round_}")
            peer, message = first_of([worker, client], self.timeout)
            expect(peer is worker, f"after {round_} disconnects the client got {message}")
            expect(message.name == "dispatchTasks", f"worker got {message}")
            [got] = worker.accept(message)
            worker.send("tasksStarted", ids=u64([got.task_id]))
            if round_ == rounds:
                worker.answer([(got.task_id, SUCCESS, b"finally")])
                break
            worker.leave()
        expect(client.results([task.task_id]) == {task.task_id: (SUCCESS, b"finally")}, "the final result")

    # -------------------------------------------------------------------------------------------- capabilities
    def check_capability_placement(self) -> None:
        """tasks requiring a capability only one worker offers all go to it (requirements + requirementIndex); tasks
        requiring nothing may go anywhere."""
        cap = f"conformance-{self.tag}=yes"
        able = self.worker(capacity=10, name=f"able-{self.tag}", capabilities=[cap])
        plain = self.worker(capacity=10, name=f"plain-{self.tag}")
        client = self.client()
        fn = client.function()
        tasks = [client.task(fn, bytes([k])) for k in range(8)]
        index = [1, 0, 1, 0, 1, 0, 1, 1]
        client.submit(tasks, requirements=[[], [cap]], requirementIndex=u16(index))
        needing = {t.task_id for t, i in zip(tasks, index, strict=True) if i == 1}
        placed: dict[int, str] = {}
        deadline = Deadline(self.timeout)
        while len(placed) < len(tasks) and not deadline.passed():
            peer, message = first_of([able, plain, client], deadline.left())
            if message.name == "balanceRequest":
                peer.send("balanceResponse", ids=u64([]))
                continue
            expect(message.name == "dispatchTasks", f"{peer.label()} got {message}")
            worker = able if peer is able else plain
            for got in worker.accept(message):
                placed[got.task_id] = worker.name
        wrong = [t for t in needing if placed.get(t) != able.name]
        expect(not wrong, f"{len(wrong)} of {len(needing)} tasks requiring {cap!r} went to a worker without it")
        expect(len(placed) == len(tasks), f"only {len(placed)} of {len(tasks)} tasks were dispatched")
        for worker in (able, plain):
            mine = [t for t, w in placed.items() if w == worker.name]
            if mine:
                worker.answer([(t, SUCCESS, b"") for t in mine])
        client.results([t.task_id for t in tasks])

    def check_capability_missing(self) -> None:
        """a task requiring a capability no connected worker offers ends failed, text "missing capabilities: ..."."""
        worker = self.worker(capabilities=[f"conformance-{self.tag}"])
        client = self.client()
        fn = client.function()
        nobody = f"nobody-has-{self.tag}"
        doomed, fine = client.task(fn), client.task(fn)
        client.submit([doomed, fine], requirements=[[nobody], []], requirementIndex=u16([0, 1]))
        dispatched = [t.task_id for t in worker.work()]
        expect(
            dispatched == [fine.task_id], f"the worker got {[hex(t) for t in dispatched]}, not only {fine.task_id:#x}"
        )
        worker.answer([(fine.task_id, SUCCESS, b"")])
        results = client.results([doomed.task_id, fine.task_id])
        status, payload = results[doomed.task_id]
        expect(status == FAILED, f"the task ended {status_name(status)}")
        text = payload.decode("utf-8", errors="replace")
        expect(text.startswith("missing capabilities:"), f"text {text[:200]!r}")
        expect(nobody in text, f"the text does not name {nobody!r}: {text[:200]!r}")

    def check_bad_request_invalid_requirement(self) -> None:
        """a task whose requirement has an invalid capability text → badRequest listing it; the others are accepted."""
        worker = self.worker()
        client = self.client()
        fn = client.function()
        bad, good = client.task(fn), client.task(fn)
        client.submit([bad, good], requirements=[[" bad capability"], []], requirementIndex=u16([0, 1]))
        error = client.error("badRequest")
        expect(error.ids() == [bad.task_id], f"badRequest ids {error.ids()}")
        [got] = worker.work()
        expect(got.task_id == good.task_id, f"{got}")

    # -------------------------------------------------------------------------------------------- options
    def check_timeouts_forwarded(self) -> None:
        """timeoutsMs reaches the worker in dispatchTasks; its timedOut result reaches the client."""
        worker = self.worker()
        client = self.client()
        task = client.task(client.function())
        task.timeout_ms = 1234
        client.submit([task])
        [got] = worker.work()
        expect(got.timeout_ms == 1234, f"timeoutsMs at the worker: {got.timeout_ms}")
        worker.answer([(task.task_id, TIMED_OUT, b"ran longer than 1.234 s")])
        expect(
            client.results([task.task_id]) == {task.task_id: (TIMED_OUT, b"ran longer than 1.234 s")}, "timedOut result"
        )

    def check_retries(self) -> None:
        """a task with retries 1 that ends error runs again; the client sees only the last run's result."""
        worker = self.worker()
        client = self.client()
        task = client.task(client.function(), b"arg")
        client.submit([task], retries=bytes([1]))
        [got] = worker.work()
        worker.answer([(got.task_id, ERROR, struct.pack("<I", 4) + b"oops")])
        [again] = worker.work()
        expect(again.task_id == task.task_id and again.inline == [b"arg"], f"{again}")
        worker.answer([(again.task_id, SUCCESS, b"second time")])
        expect(client.results([task.task_id]) == {task.task_id: (SUCCESS, b"second time")}, "result")
        client.quiet(0.2)

    def check_priorities(self) -> None:
        """among one client's ready tasks, higher priorities are dispatched first."""
        client = self.client()
        fn = client.function()
        tasks = [client.task(fn, bytes([k])) for k in range(4)]
        priorities = [0, 5, -1, 10]
        client.submit(tasks, priorities=i32(priorities))
        client.heartbeat()
        client.expect("heartbeatEcho", ignore=())
        worker = self.worker(capacity=1)
        order: list[int] = []
        for _ in tasks:
            [got] = worker.work()
            order.append(priorities[[t.task_id for t in tasks].index(got.task_id)])
            worker.answer([(got.task_id, SUCCESS, b"")])
        expect(order == sorted(priorities, reverse=True), f"dispatched in priority order {order}")
        client.results([t.task_id for t in tasks])

    def check_stream_output(self) -> None:
        """taskOutput streams 1/2 of a task flagged streamOutput reach its client before its result; an unflagged
        task's output does not."""
        worker = self.worker()
        client = self.client()
        fn = client.function()
        flagged, plain = client.task(fn, flags=STREAM_OUTPUT), client.task(fn)
        client.submit([flagged, plain])
        got: set[int] = set()
        while len(got) < 2:
            got.update(t.task_id for t in worker.work())
        worker.send(
            "taskOutput",
            taskIds=u64([flagged.task_id, plain.task_id, flagged.task_id]),
            streams=bytes([1, 1, 2]),
            texts=["out of flagged\n", "out of plain\n", "err of flagged\n"],
        )
        worker.answer([(flagged.task_id, SUCCESS, b"f"), (plain.task_id, SUCCESS, b"p")])
        pieces: list[tuple[int, int, str]] = []
        results: dict[int, int] = {}
        deadline = Deadline(self.timeout)
        while len(results) < 2:
            message = client.recv(deadline.left())
            if message.name == "taskOutput":
                ids, streams = message.ids("taskIds"), message.fields["streams"]
                for k, task_id in enumerate(ids):
                    expect(task_id not in results, "output arrived after its task's result")
                    pieces.append((task_id, streams[k], message.fields["texts"][k]))
            elif message.name == "taskResults":
                for task_id in message.ids("taskIds"):
                    results[task_id] = 1
            elif message.name != "heartbeatEcho":
                raise CheckFailed(f"client got {message}")
        expected = [(flagged.task_id, 1, "out of flagged\n"), (flagged.task_id, 2, "err of flagged\n")]
        expect(pieces == expected, f"client got output pieces {pieces}")

    def check_shutdown_protected(self) -> None:
        """shutdownRequest to a protected scheduler → error protected, and it carries on."""
        client = self.client()
        if not client.welcome.get("protected"):
            raise CheckSkipped("the scheduler is not protected (--no-protected): the kit does not stop it")
        client.send("shutdownRequest", reason="conformance check")
        client.error("protected")
        time.sleep(0.2)
        self._still_serving(client)
