"""Random scheduling scenarios replayed on a SchedulerCore, summed up as a digest of every message it sends: the record
of its placement and balancing decisions.

tests/unit/test_scheduler_capabilities.py checks that, when every worker can run every task, the core with
capabilities decides exactly as the plain core does: the digests in placement_digests.json were made by this module
on the plain scenarios (`python tests/unit/placement_scenarios.py SEED...` prints them); they were first made on the
core before capabilities, and made again when placement changed on purpose (issue 25: fair placement between
clients, which every scenario has; 2026-12-05: placement stays fair for FAIR_LINGER_SECONDS after several clients
were busy, which changed 21 of the 60). Only what both cores understand
is used here; `requirement` and `offers` dress the same scenario in capabilities. Pure; no sockets, no clock.
"""

from __future__ import annotations

import hashlib
import random
import sys
from collections.abc import Callable

from scaler.core.scheduler import Event, Received, SchedulerConfig, SchedulerCore, Send, Tick, Undeliverable
from scaler.protocol.messages import (
    ID_PREFIX_SHIFT,
    MESSAGE_NAMES,
    BalanceRequest,
    BalanceResponse,
    Disconnect,
    DispatchTasks,
    Hello,
    PeerKind,
    PutObjects,
    SubmitTasks,
    TaskResults,
    TaskStatus,
)
from tests.helpers import payload_bytes

Dress = Callable[[random.Random, SubmitTasks], None]  # adds requirements to a batch (with its own random draws)
Offer = Callable[[random.Random], list[str]]  # a worker's capabilities


def _plain_submit(rng: random.Random, batch: SubmitTasks) -> None:
    return None


def _no_offer(rng: random.Random) -> list[str]:
    return []


def _summary(message: object) -> tuple[object, ...]:
    """What a sent message decides: its kind and ids (and outcomes), not the fields one core has and the other lacks."""
    name = MESSAGE_NAMES[type(message)]
    if isinstance(message, (DispatchTasks, SubmitTasks)):
        return (name, tuple(message.task_ids), tuple(message.arg_refs), tuple(message.payloads))
    if isinstance(message, TaskResults):
        return (
            name,
            tuple(message.task_ids),
            bytes(message.statuses),
            tuple(payload_bytes(p) for p in message.payloads),
        )
    if isinstance(message, PutObjects):
        return (name, tuple(message.object_ids))
    ids = getattr(message, "ids", None)
    if ids is not None:
        return (name, tuple(ids))
    return (name, getattr(message, "id_prefix", None))


class _Scenario:
    def __init__(self, seed: int, dress: Dress, offer: Offer) -> None:
        self.rng = random.Random(seed)
        self.extra = random.Random(-seed - 1)  # for dress and offer: the scenario's own draws stay the same
        self.dress, self.offer = dress, offer
        grain = self.rng.choice([2, 4, 64])
        config = SchedulerConfig(worker_timeout_seconds=1e9, client_timeout_seconds=1e9, placement_grain=grain)
        self.core = SchedulerCore(config)
        self.now = 0.0
        self.digest = hashlib.sha256()
        self.prefixes: dict[bytes, int] = {}
        self.counters: dict[bytes, int] = {}
        self.functions: dict[bytes, int] = {}
        self.workers: list[bytes] = []
        self.held: dict[bytes, list[int]] = {}  # what each worker was sent and has not answered
        self.asked: dict[bytes, list[int]] = {}  # balance requests unanswered
        self.clients = [b"c1", b"c2"]

    def feed(self, event: Event) -> None:
        for command in self.core.handle(event):
            if not isinstance(command, Send):
                continue
            message = command.message
            self.digest.update(repr((command.peer, _summary(message))).encode())
            if isinstance(message, DispatchTasks):
                self.held.setdefault(command.peer, []).extend(message.task_ids)
            elif isinstance(message, BalanceRequest):
                self.asked[command.peer] = list(message.ids)
            elif hasattr(message, "id_prefix"):
                self.prefixes[command.peer] = message.id_prefix

    def mint(self, client: bytes) -> int:
        self.counters[client] = self.counters.get(client, 0) + 1
        return (self.prefixes[client] << ID_PREFIX_SHIFT) | self.counters[client]

    def start(self) -> None:
        for client in self.clients:
            self.feed(Received(self.now, client, Hello(PeerKind.CLIENT, client.decode()), None))
            function = self.functions[client] = self.mint(client)
            self.feed(Received(self.now, client, PutObjects([function], [b"fn"]), None))

    def join(self, step: int) -> None:
        peer = b"w%d" % step
        hello = Hello(PeerKind.WORKER, peer.decode(), queue_capacity=self.rng.randrange(1, 6))
        capabilities = self.offer(self.extra)
        if capabilities:  # (the core before capabilities has no such field)
            hello.capabilities = capabilities
        self.workers.append(peer)
        self.feed(Received(self.now, peer, hello, None))

    def leave(self) -> None:
        peer = self.workers.pop(self.rng.randrange(len(self.workers)))
        self.held.pop(peer, None)
        self.asked.pop(peer, None)
        if self.rng.random() < 0.5:
            self.feed(Undeliverable(self.now, peer))
        else:
            self.feed(Received(self.now, peer, Disconnect("bye"), None))

    def submit(self) -> None:
        rng = self.rng
        client = rng.choice(self.clients)
        n = rng.choice([1, 1, 2, 5, 20, 60])
        ids = [self.mint(client) for _ in range(n)]
        priorities = [rng.choice([0, 0, 0, 1, -1]) for _ in ids] if rng.random() < 0.3 else None
        functions = [self.functions[client]] * n
        batch = SubmitTasks(ids, functions, bytes(n), [1] * n, [0] * n, None, [b"a"] * n, None, None, priorities)
        self.dress(self.extra, batch)
        self.feed(Received(self.now, client, batch, None))

    def answer(self) -> None:
        rng = self.rng
        busy = [w for w in self.workers if self.held.get(w)]
        if busy:
            peer = rng.choice(busy)
            tasks = self.held[peer]
            done = [tasks.pop(rng.randrange(len(tasks))) for _ in range(rng.randrange(1, len(tasks) + 1))]
            outcomes = [TaskStatus.SUCCESS] * 6 + [TaskStatus.ERROR, TaskStatus.CRASHED]
            statuses = bytes(rng.choice(outcomes) for _ in done)
            self.feed(Received(self.now, peer, TaskResults(done, statuses, [b"r"] * len(done)), None))

    def give_back(self) -> None:
        pending = [w for w in self.workers if w in self.asked]
        if pending:
            peer = self.rng.choice(pending)
            ids = [i for i in self.asked.pop(peer) if i in self.held.get(peer, []) and self.rng.random() < 0.8]
            for i in ids:
                self.held[peer].remove(i)
            self.feed(Received(self.now, peer, BalanceResponse(ids), None))

    def step(self, step: int) -> None:
        self.now += self.rng.choice([0.0, 0.01, 0.05, 0.2])
        action = self.rng.random()
        if action < 0.12 or not self.workers:
            self.join(step)
        elif action < 0.17 and len(self.workers) > 1:
            self.leave()
        elif action < 0.45:
            self.submit()
        elif action < 0.85:
            self.answer()
        elif action < 0.93:
            self.give_back()
        else:
            self.feed(Tick(self.now))


def run(seed: int, dress: Dress = _plain_submit, offer: Offer = _no_offer, steps: int = 300) -> str:
    """The digest of the messages the core sends in scenario `seed`."""
    scenario = _Scenario(seed, dress, offer)
    scenario.start()
    for step in range(steps):
        scenario.step(step)
    return scenario.digest.hexdigest()


if __name__ == "__main__":
    for seed in map(int, sys.argv[1:]):
        print(f'"{seed}": "{run(seed)}",')
