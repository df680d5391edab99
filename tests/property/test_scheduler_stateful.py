"""SchedulerCore under random sequences of events (Hypothesis stateful testing).

The machine plays every client and worker. After each step it checks the core's own invariants (validate) and
its own model of the protocol, built only from the commands the core emitted:
- a task is never held by two live workers at once, and never dispatched after its result went out;
- a worker never holds more tasks than its capacity, and holds every object its tasks need;
- what each worker holds agrees with what the core thinks it assigned to that worker;
- each task's result goes to its own client, at most once, after every piece of printed output its worker sent for
  it (tasks flagged stream output), in order;
- the status adds up: tasks running by function = tasks assigned; nothing is recorded for monitors unless monitored.
At the end (teardown) every worker answers everything: no task may be left, and every task of a client that
is still connected must have ended exactly once at that client.

Half the machines also send every message through the codec as the scheduler's shell reads it (encoded, then
decoded: the record fed is the one decode gives, checked equal to the message). Half the machines run monitored.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from scaler.core.scheduler import (
    Command,
    Malformed,
    Received,
    SchedulerConfig,
    SchedulerCore,
    Send,
    Tick,
    Undeliverable,
)
from scaler.core.scheduler.sessions import WorkerSession
from scaler.protocol.messages import (
    FLAG_STREAM_OUTPUT,
    OUTPUT_ERROR,
    OUTPUT_STDERR,
    OUTPUT_STDOUT,
    BalanceRequest,
    BalanceResponse,
    CancelTasks,
    Disconnect,
    DispatchTasks,
    Error,
    ErrorCode,
    FreeObjects,
    Heartbeat,
    Hello,
    Message,
    PeerKind,
    PutObjects,
    TaskOutput,
    TaskResults,
    TasksStarted,
    TaskStatus,
    Welcome,
    decode,
    encode,
)
from tests.helpers import payload_bytes
from tests.unit.scheduler_driver import TaskSpec, ok, results, submit, tid

CONFIG = SchedulerConfig(
    worker_timeout_seconds=5.0, client_timeout_seconds=20.0, max_task_retries=2, balance_interval_seconds=0.5
)


@dataclass
class ClientModel:
    peer: bytes
    prefix: int
    counter: int = 0
    open_tasks: set[int] = field(default_factory=set)  # submitted, no result yet
    submitted: set[int] = field(default_factory=set)

    def mint(self) -> int:
        self.counter += 1
        return tid(self.prefix, self.counter)


@dataclass
class WorkerModel:
    peer: bytes
    capacity: int
    session: WorkerSession | None = None
    held: dict[int, tuple[int, ...]] = field(default_factory=dict)  # task id -> references, in dispatch order
    waiting: int = 0  # tasks it said wait on nested tasks, in its latest heartbeat: room on top of its capacity
    objects: set[int] = field(default_factory=set)
    balance: list[int] = field(default_factory=list)  # ids of the unanswered balance request


def some(data: st.DataObject, items: list[int], most: int) -> list[int]:
    """Up to `most` of `items` (none if there are none)."""
    return data.draw(st.lists(st.sampled_from(items), max_size=most)) if items else []


def _plain(message: Message) -> Message:
    """A copy of a message with its payloads as bytes (what came over a socket and what a core holds compare)."""
    plain = copy.copy(message)
    if hasattr(plain, "payloads"):
        plain.payloads = [payload_bytes(p) for p in plain.payloads]
    return plain


class SchedulerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.core = SchedulerCore(CONFIG)
        self.now = 0.0
        self.clients: dict[bytes, ClientModel] = {}  # connected ones
        self.workers: dict[bytes, WorkerModel] = {}  # connected ones
        self.owner: dict[int, bytes] = {}  # task id -> client peer
        self.delivered: Counter[int] = Counter()  # task id -> results sent to its client
        self.peers = 0
        self.through_codec = False  # whether messages are encoded and decoded on their way in (set by start)
        self.flagged: set[int] = set()  # tasks submitted with FLAG_STREAM_OUTPUT
        self.printed: Counter[int] = Counter()  # task id -> pieces of output forwarded to its client, expected
        self.shown: Counter[int] = Counter()  # task id -> pieces of output its client got

    # ------------------------------------------------------------------------------------------- plumbing
    def fresh_peer(self, kind: str) -> bytes:
        self.peers += 1
        return f"{kind}{self.peers}".encode()

    def send(self, peer: bytes, message: Message) -> list[Command]:
        if self.through_codec:
            came = decode(encode(message))
            assert _plain(came) == _plain(message), f"decode read {came!r} from the frames of {message!r}"
            message = came
        return self.apply(self.core.handle(Received(self.now, peer, message)))

    def apply(self, commands: list[Command]) -> list[Command]:
        """Check the commands against the model and update it."""
        self.core.validate()
        for worker in list(self.workers.values()):
            if worker.session is not None and self.core.workers.get(worker.peer) is not worker.session:
                del self.workers[worker.peer]  # lost: the core re-queued what it held
        for command in commands:
            if isinstance(command, Send):
                self.on_send(command.peer, command.message)
        return commands

    def on_send(self, peer: bytes, message: Message) -> None:
        worker = self.workers.get(peer)
        if isinstance(message, Welcome) and worker is not None:
            worker.session = self.core.workers[peer]
        elif isinstance(message, PutObjects) and worker is not None:
            worker.objects.update(message.object_ids)
        elif isinstance(message, DispatchTasks):
            assert worker is not None, f"dispatch to {peer!r}, not a live worker"
            position = 0
            for k, task_id in enumerate(message.task_ids):
                refs = tuple(message.arg_refs[position : position + message.arg_counts[k]])
                position += message.arg_counts[k]
                assert self.delivered[task_id] == 0, f"{task_id:#x} dispatched after its result went out"
                for other in self.workers.values():
                    assert task_id not in other.held, f"{task_id:#x} sent to {peer!r} but {other.peer!r} holds it"
                needed = {message.function_ids[k], *refs} - {0}
                assert needed <= worker.objects, f"{task_id:#x} needs {needed - worker.objects} on {peer!r}"
                worker.held[task_id] = tuple(needed)
            assert len(worker.held) <= worker.capacity + worker.waiting
        elif isinstance(message, FreeObjects) and worker is not None:
            for object_id in message.ids:
                users = [t for t, refs in worker.held.items() if object_id in refs]
                assert not users, f"object {object_id:#x} freed on {peer!r} while {users} need it"
                worker.objects.discard(object_id)
        elif isinstance(message, BalanceRequest):
            assert worker is not None and not worker.balance, "a second balance request before the answer"
            assert set(message.ids) <= set(worker.held)
            worker.balance = list(message.ids)
        elif isinstance(message, TaskOutput):
            self.on_output(peer, message)
        elif isinstance(message, TaskResults):
            self.on_results(peer, message)

    def on_output(self, peer: bytes, message: TaskOutput) -> None:
        for task_id, text in zip(message.task_ids, message.texts, strict=True):
            assert self.owner.get(task_id) == peer and task_id in self.flagged, f"output of {task_id:#x} to {peer!r}"
            assert self.delivered[task_id] == 0, f"output of {task_id:#x} after its result"
            assert text == f"{task_id:#x}:{self.shown[task_id]}", f"output of {task_id:#x} out of order"
            self.shown[task_id] += 1

    def on_results(self, peer: bytes, message: TaskResults) -> None:
        for task_id in message.task_ids:
            assert self.owner.get(task_id) == peer, f"result of {task_id:#x} sent to {peer!r}"
            assert self.shown[task_id] == self.printed[task_id], f"result of {task_id:#x} before its output"
            self.delivered[task_id] += 1
            assert self.delivered[task_id] == 1, f"{task_id:#x} ended twice at its client"
            client = self.clients.get(peer)
            if client is not None:
                client.open_tasks.discard(task_id)

    # ------------------------------------------------------------------------------------------- peers
    @initialize(capacity=st.integers(1, 6), through_codec=st.booleans(), monitored=st.booleans())
    def start(self, capacity: int, through_codec: bool, monitored: bool) -> None:
        self.through_codec = through_codec
        self.core.monitored = monitored
        self.connect_client()
        self.connect_worker(capacity)

    @precondition(lambda self: len(self.clients) < 2)
    @rule()
    def connect_client(self) -> None:
        peer = self.fresh_peer("c")
        commands = self.send(peer, Hello(PeerKind.CLIENT, peer.decode()))
        # the last command a client's hello causes is its Welcome
        prefix = commands[-1].message.id_prefix  # type: ignore[union-attr]
        client = self.clients[peer] = ClientModel(peer, prefix)
        function = client.mint()
        self.send(peer, PutObjects([function], [b"function"]))

    @precondition(lambda self: len(self.workers) < 3)
    @rule(capacity=st.integers(1, 6))
    def connect_worker(self, capacity: int) -> None:
        peer = self.fresh_peer("w")
        self.workers[peer] = WorkerModel(peer, capacity)
        self.send(peer, Hello(PeerKind.WORKER, peer.decode(), queue_capacity=capacity))

    @precondition(lambda self: self.workers)
    @rule(data=st.data())
    def worker_says_hello_again(self, data: st.DataObject) -> None:
        worker = data.draw(st.sampled_from(sorted(self.workers.values(), key=lambda w: w.peer)))
        del self.workers[worker.peer]
        self.workers[worker.peer] = WorkerModel(worker.peer, worker.capacity)
        self.send(worker.peer, Hello(PeerKind.WORKER, "again", queue_capacity=worker.capacity))

    @precondition(lambda self: self.clients or self.workers)
    @rule(data=st.data(), how=st.sampled_from(["disconnect", "undeliverable"]))
    def peer_leaves(self, data: st.DataObject, how: str) -> None:
        peer = data.draw(st.sampled_from(sorted([*self.clients, *self.workers])))
        self.clients.pop(peer, None)
        if how == "disconnect":
            self.send(peer, Disconnect("bye"))
        else:
            self.apply(self.core.handle(Undeliverable(self.now, peer)))
        assert peer not in self.core.clients and peer not in self.core.workers

    @rule(data=st.data(), malformed=st.booleans())
    def heartbeat(self, data: st.DataObject, malformed: bool) -> None:
        peer = data.draw(st.sampled_from(sorted([*self.clients, *self.workers, b"stranger"])))
        if malformed:
            self.apply(self.core.handle(Malformed(self.now, peer, "garbage")))
        else:
            # A worker's tasks waiting on nested tasks widen its room (the core's invariants bound what it holds).
            waiting = data.draw(st.sampled_from([0, 0, 1, 3])) if peer in self.workers else 0
            if peer in self.workers:
                self.workers[peer].waiting = waiting
            self.send(peer, Heartbeat(waiting_tasks=waiting))

    @rule(dt=st.sampled_from([0.1, 0.6, 2.0, 6.0, 25.0]))
    def time_passes(self, dt: float) -> None:
        self.now += dt
        self.apply(self.core.handle(Tick(self.now)))
        for peer in list(self.clients):
            if peer not in self.core.clients:
                del self.clients[peer]  # timed out

    # ------------------------------------------------------------------------------------------- clients' requests
    @precondition(lambda self: self.clients)
    @rule(data=st.data(), count=st.integers(1, 8), named=st.booleans(), flags=st.sampled_from([0, FLAG_STREAM_OUTPUT]))
    def submit_tasks(self, data: st.DataObject, count: int, named: bool, flags: int) -> None:
        client = data.draw(st.sampled_from(sorted(self.clients.values(), key=lambda c: c.peer)))
        function = tid(client.prefix, 1)
        specs: list[TaskSpec] = []
        for _ in range(count):
            # its objects and tasks, and now and then one that is gone (a freed object, an ended task): refused
            usable = sorted(
                [o for o, obj in self.core.objects.items() if obj.owner.identity == client.peer and o != function]
                + [t for t, task in self.core.tasks.items() if task.client.identity == client.peer]
                + [t for t, _, _ in specs]
                + [t for t in client.submitted if t not in self.core.tasks and t not in self.core.objects][:1]
            )
            refs = data.draw(st.lists(st.sampled_from(usable), max_size=2)) if usable else []
            task_id = client.mint()
            specs.append((task_id, function, [b"inline", *refs]))
            self.owner[task_id] = client.peer
            client.open_tasks.add(task_id)
            client.submitted.add(task_id)
            if flags:
                self.flagged.add(task_id)
        keywords = [f"k{i}" if i else "" for _, _, args in specs for i in range(len(args))] if named else None
        self.send(client.peer, submit(*specs, keywords=keywords, flags=flags))

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), inline=st.integers(0, 2), flags=st.sampled_from([0, FLAG_STREAM_OUTPUT]))
    def submit_one(self, data: st.DataObject, inline: int, flags: int) -> None:
        """A lone task, all of its arguments inline (a round trip's submit)."""
        client = data.draw(st.sampled_from(sorted(self.clients.values(), key=lambda c: c.peer)))
        task_id = client.mint()
        self.owner[task_id] = client.peer
        client.open_tasks.add(task_id)
        client.submitted.add(task_id)
        if flags:
            self.flagged.add(task_id)
        self.send(client.peer, submit((task_id, tid(client.prefix, 1), [b"inline"] * inline), flags=flags))

    def bad_requests(self, data: st.DataObject, client: ClientModel) -> None:
        """Ids in use, of another session, or 0: refused, and nothing else changes."""
        function = tid(client.prefix, 1)
        live = sorted(t for t, task in self.core.tasks.items() if task.client.identity == client.peer)
        objects = sorted(o for o, obj in self.core.objects.items() if obj.owner.identity == client.peer)
        bad = [*some(data, live, 1), *some(data, objects, 1), tid(client.prefix + 100, 1), tid(client.prefix, 0)]
        commands = self.send(client.peer, submit(*((task_id, function, []) for task_id in bad)))
        errors = [c.message for c in commands if isinstance(c, Send) and isinstance(c.message, Error)]
        assert [(e.code, e.ids) for e in errors] == [(ErrorCode.BAD_REQUEST, bad)]
        bad = [*some(data, live + objects, 1), tid(client.prefix + 100, 2), tid(client.prefix, 0)]
        commands = self.send(client.peer, PutObjects(bad, [b"taken"] * len(bad)))
        errors = [c.message for c in commands if isinstance(c, Send) and isinstance(c.message, Error)]
        assert [(e.code, e.ids) for e in errors] == [(ErrorCode.BAD_REQUEST, bad)]

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), bad=st.booleans())
    def put_object(self, data: st.DataObject, bad: bool) -> None:
        client = data.draw(st.sampled_from(sorted(self.clients.values(), key=lambda c: c.peer)))
        if bad:
            self.bad_requests(data, client)
        else:
            self.send(client.peer, PutObjects([client.mint()], [b"object"]))

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def free_object(self, data: st.DataObject) -> None:
        client = data.draw(st.sampled_from(sorted(self.clients.values(), key=lambda c: c.peer)))
        mine = sorted(o for o, obj in self.core.objects.items() if obj.owner.identity == client.peer)
        if mine:
            self.send(client.peer, FreeObjects(data.draw(st.lists(st.sampled_from(mine), min_size=1, max_size=2))))

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        client = data.draw(st.sampled_from(sorted(self.clients.values(), key=lambda c: c.peer)))
        pool = sorted(client.open_tasks) or sorted(client.submitted)  # mostly tasks still running
        if pool:
            ids = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))
            self.send(client.peer, CancelTasks(ids))

    # ------------------------------------------------------------------------------------------- workers' answers
    @precondition(lambda self: any(w.held for w in self.workers.values()))
    @rule(data=st.data(), everything=st.booleans())
    def worker_reports(self, data: st.DataObject, everything: bool) -> None:
        worker = data.draw(st.sampled_from(sorted((w for w in self.workers.values() if w.held), key=lambda w: w.peer)))
        held = sorted(worker.held)
        ids = held if everything else data.draw(st.lists(st.sampled_from(held), min_size=1, max_size=3, unique=True))
        statuses = data.draw(
            st.lists(
                st.sampled_from([TaskStatus.SUCCESS, TaskStatus.ERROR, TaskStatus.CRASHED, TaskStatus.FAILED]),
                min_size=len(ids),
                max_size=len(ids),
            )
        )
        for task_id in ids:
            del worker.held[task_id]
            if task_id in worker.balance:
                worker.balance.remove(task_id)
        items = [(t, s, b"result") for t, s in zip(ids, statuses, strict=True)]
        strays = [t for t in self.owner if t not in worker.held]  # cancelled or moved meanwhile: stale results
        items += [(t, TaskStatus.SUCCESS, b"stale") for t in some(data, strays, 1)]
        stale = self.core.stale_results
        self.send(worker.peer, results(*items))
        assert self.core.stale_results == stale + len(items) - len(ids)

    @precondition(lambda self: any(w.held for w in self.workers.values()))
    @rule(data=st.data(), status=st.sampled_from([TaskStatus.SUCCESS, TaskStatus.ERROR, TaskStatus.CRASHED]))
    def worker_reports_one(self, data: st.DataObject, status: int) -> None:
        """A lone result (a round trip's result)."""
        worker = data.draw(st.sampled_from(sorted((w for w in self.workers.values() if w.held), key=lambda w: w.peer)))
        task_id = data.draw(st.sampled_from(sorted(worker.held)))
        del worker.held[task_id]
        if task_id in worker.balance:
            worker.balance.remove(task_id)
        self.send(worker.peer, results((task_id, status, b"result")))

    @precondition(lambda self: any(w.held for w in self.workers.values()))
    @rule(data=st.data())
    def worker_prints(self, data: st.DataObject) -> None:
        """Printed output and error texts of tasks it holds (and of one it does not: ignored); then, often, the
        result of one of them, as a worker sends them: output first."""
        worker = data.draw(st.sampled_from(sorted((w for w in self.workers.values() if w.held), key=lambda w: w.peer)))
        ids = data.draw(st.lists(st.sampled_from(sorted(worker.held)), min_size=1, max_size=4))
        streams = data.draw(
            st.lists(
                st.sampled_from([OUTPUT_STDOUT, OUTPUT_STDERR, OUTPUT_ERROR]), min_size=len(ids), max_size=len(ids)
            )
        )
        texts = []
        for task_id, stream in zip(ids, streams, strict=True):
            client = self.owner[task_id]
            if stream != OUTPUT_ERROR and task_id in self.flagged and client in self.clients:
                texts.append(f"{task_id:#x}:{self.printed[task_id]}")
                self.printed[task_id] += 1
            else:
                texts.append("not forwarded")
        stray = some(data, [t for t in self.owner if t not in worker.held], 1)
        pieces = TaskOutput(
            [*ids, *stray], bytes([*streams, *(OUTPUT_STDOUT for _ in stray)]), [*texts, *["-"] * len(stray)]
        )
        if not data.draw(st.booleans()):
            self.send(worker.peer, pieces)
            return
        # Its result right behind, read in the same wake-up of the shell: one flush, the output first.
        self.core.feed(Received(self.now, worker.peer, pieces))
        shown = [t for t, text in zip(ids, texts, strict=True) if text != "not forwarded"]
        task_id = shown[-1] if shown else ids[-1]
        del worker.held[task_id]
        if task_id in worker.balance:
            worker.balance.remove(task_id)
        status = data.draw(st.sampled_from([TaskStatus.SUCCESS, TaskStatus.ERROR]))
        self.send(worker.peer, results((task_id, status, b"result")))

    @precondition(lambda self: any(w.held for w in self.workers.values()))
    @rule(data=st.data())
    def worker_starts(self, data: st.DataObject) -> None:
        worker = data.draw(st.sampled_from(sorted((w for w in self.workers.values() if w.held), key=lambda w: w.peer)))
        self.send(worker.peer, TasksStarted(data.draw(st.lists(st.sampled_from(sorted(worker.held)), max_size=3))))

    @precondition(lambda self: any(w.balance for w in self.workers.values()))
    @rule(data=st.data())
    def worker_answers_balance(self, data: st.DataObject) -> None:
        worker = data.draw(
            st.sampled_from(sorted((w for w in self.workers.values() if w.balance), key=lambda w: w.peer))
        )
        # partly: the worker may have started some of them already
        keep = data.draw(st.lists(st.booleans(), min_size=len(worker.balance), max_size=len(worker.balance)))
        given = [task_id for task_id, started in zip(worker.balance, keep, strict=True) if not started]
        for task_id in given:
            del worker.held[task_id]
        worker.balance = []
        self.send(worker.peer, BalanceResponse(given))

    # ------------------------------------------------------------------------------------------- checks
    @invariant()
    def workers_hold_what_the_core_assigned(self) -> None:
        for peer, worker in self.workers.items():
            assert set(worker.held) == set(self.core.workers[peer].assigned), peer

    @invariant()
    def queries_answer(self) -> None:
        status = self.core.status()
        assert sum(status.tasks_by_state[s] for s in ("waiting", "queued", "assigned", "canceling")) == len(
            self.core.tasks
        )
        assert sum(f.running for f in status.functions) == sum(len(w.assigned) for w in self.core.workers.values())
        in_flight = sum(f.submitted - f.success - f.error - f.canceled - f.failed for f in status.functions)
        assert in_flight == len(self.core.tasks)  # a handful of functions: all of them are listed
        if not self.core.monitored:
            assert not (status.events.task_ids or status.failures or status.outputs or status.departed)
        events = status.events
        assert len(events.kinds) == len(events.task_ids) == len(events.workers) == len(events.times_us)
        for task_id in self.core.tasks:
            assert f"{task_id:#x}" in self.core.explain(task_id)

    def teardown(self) -> None:
        """Every worker answers everything until nothing is left; then count what each client got."""
        self.connect_worker(1000)  # room for everything, so that the drain ends
        for _ in range(1000):
            if not self.core.tasks:
                break
            for worker in list(self.workers.values()):
                if worker.peer not in self.workers:
                    continue
                if worker.balance:
                    worker.balance = []
                    self.send(worker.peer, BalanceResponse([]))
                if worker.held:
                    ids = list(worker.held)
                    worker.held.clear()
                    self.send(worker.peer, ok(*ids))
            self.now += 0.01
            self.apply(self.core.handle(Tick(self.now)))
        assert self.core.tasks == {}, [self.core.explain(t) for t in self.core.tasks]
        for client in self.clients.values():
            assert client.open_tasks == set()
            assert all(self.delivered[t] == 1 for t in client.submitted)
        for obj in self.core.objects.values():
            assert not obj.released and obj.owner.identity in self.clients, obj


SchedulerMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_scheduler_core_stateful = SchedulerMachine.TestCase
