"""Builders and a small driver for tests of SchedulerCore: build state only by feeding events, read commands back.

Shared by the unit, property and simulation tiers. Pure; no sockets, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from scaler.core.scheduler import (
    Command,
    Log,
    PeerKey,
    Received,
    SchedulerConfig,
    SchedulerCore,
    Send,
    Tick,
    Undeliverable,
)
from scaler.protocol.messages import (
    ID_PREFIX_SHIFT,
    DispatchTasks,
    Hello,
    Message,
    PeerKind,
    PutObjects,
    SubmitTasks,
    TaskResults,
    TaskStatus,
    Welcome,
)
from scaler.protocol.records import Payload

# One task as tests write it: (task id, function id, arguments). An int argument is a reference (object or task
# id); a bytes argument is an inline value travelling as a payload frame.
TaskSpec = tuple[int, int, Sequence["int | bytes"]]


def tid(prefix: int, counter: int) -> int:
    """The id a session with `prefix` mints as its `counter`-th id."""
    return (prefix << ID_PREFIX_SHIFT) | counter


Columns = tuple[list[int], list[int], bytes, list[int], list[int], list[Payload]]


def _columns(specs: Iterable[TaskSpec], flags: int = 0) -> Columns:
    ids: list[int] = []
    functions: list[int] = []
    counts: list[int] = []
    refs: list[int] = []
    payloads: list[Payload] = []
    flag_column = bytearray()
    for task_id, function_id, args in specs:
        ids.append(task_id)
        functions.append(function_id)
        flag_column.append(flags)
        counts.append(len(args))
        for arg in args:
            if isinstance(arg, bytes):
                refs.append(0)
                payloads.append(arg)
            else:
                refs.append(arg)
    return ids, functions, bytes(flag_column), counts, refs, payloads


def submit(*specs: TaskSpec, flags: int = 0, keywords: list[str] | None = None) -> SubmitTasks:
    ids, functions, flag_column, counts, refs, payloads = _columns(specs, flags)
    return SubmitTasks(ids, functions, flag_column, counts, refs, keywords, payloads)


def dispatch(*specs: TaskSpec, flags: int = 0, keywords: list[str] | None = None) -> DispatchTasks:
    ids, functions, flag_column, counts, refs, payloads = _columns(specs, flags)
    return DispatchTasks(ids, functions, flag_column, counts, refs, keywords, payloads)


def results(*items: tuple[int, int, bytes]) -> TaskResults:
    """TaskResults for (task id, status, payload) items, without profiling columns."""
    return TaskResults([i for i, _, _ in items], bytes(s for _, s, _ in items), [p for _, _, p in items])


def ok(*task_ids: int, payload: bytes = b"r") -> TaskResults:
    return results(*((t, TaskStatus.SUCCESS, payload) for t in task_ids))


def sends(commands: list[Command]) -> list[tuple[bytes, Message]]:
    """The messages among `commands`, as (peer, message), in order."""
    return [(c.peer, c.message) for c in commands if isinstance(c, Send)]


def logs(commands: list[Command]) -> list[Log]:
    return [c for c in commands if isinstance(c, Log)]


M = TypeVar("M")


def of_type(commands: list[Command], kind: type[M]) -> list[tuple[bytes, M]]:
    return [(peer, m) for peer, m in sends(commands) if isinstance(m, kind)]


class Driver:
    """A SchedulerCore, a settable clock, and one-line helpers to connect peers and exchange messages.

    Every call checks the core's invariants (validate) after the event, as the dask tests do.
    """

    def __init__(self, config: SchedulerConfig | None = None, **settings: Any) -> None:
        self.core = SchedulerCore(config or SchedulerConfig(**settings))
        self.now = 0.0
        self.prefixes: dict[bytes, int] = {}

    def _after(self, commands: list[Command]) -> list[Command]:
        self.core.validate()
        return commands

    def recv(self, peer: bytes, message: Message, key: PeerKey | None = None) -> list[Command]:
        return self._after(self.core.handle(Received(self.now, peer, message, key)))

    def tick(self, now: float) -> list[Command]:
        self.now = now
        return self._after(self.core.handle(Tick(now)))

    def gone(self, peer: bytes) -> list[Command]:
        return self._after(self.core.handle(Undeliverable(self.now, peer)))

    def client(self, peer: bytes = b"c1", name: str = "", key: PeerKey | None = None) -> int:
        """Connect a client; returns its id prefix."""
        commands = self.recv(peer, Hello(PeerKind.CLIENT, name or peer.decode()), key)
        welcome = sends(commands)[-1][1]
        assert isinstance(welcome, Welcome), welcome
        self.prefixes[peer] = welcome.id_prefix
        return welcome.id_prefix

    def worker(
        self, peer: bytes = b"w1", capacity: int = 4, key: PeerKey | None = None, capabilities: Sequence[str] = ()
    ) -> list[Command]:
        """Connect a worker; returns every command the hello caused (its welcome, and any dispatch)."""
        hello = Hello(PeerKind.WORKER, peer.decode(), queue_capacity=capacity, capabilities=list(capabilities))
        commands = self.recv(peer, hello, key)
        welcome = sends(commands)[0][1]
        assert isinstance(welcome, Welcome), welcome
        self.prefixes[peer] = welcome.id_prefix
        return commands

    def put(self, client: bytes, *objects: tuple[int, bytes]) -> list[Command]:
        return self.recv(client, PutObjects([o for o, _ in objects], [p for _, p in objects]))
