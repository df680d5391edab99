"""ClientCore: a client's session with the scheduler as a state machine. It opens the session, heartbeats,
notices a scheduler that went silent, mints ids, and turns the user's requests into batched messages that keep
their order. Which Python future a result belongs to is the shell's business.

Pure: events in, commands out; no sockets, no clock, no threads.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple, cast

from scaler.protocol.records import (
    ID_COUNTER_MASK,
    ID_PREFIX_SHIFT,
    CancelTasks,
    Disconnect,
    Error,
    ErrorCode,
    FreeObjects,
    Heartbeat,
    HeartbeatEcho,
    Hello,
    Message,
    Payload,
    PeerKind,
    PutObjects,
    Refused,
    Shutdown,
    ShutdownRequest,
    SubmitTasks,
    TaskResults,
    Welcome,
)

# Requests per message. A million-node graph handed over at once is then 245 messages, not one: the scheduler reads
# each in a few tens of milliseconds, and answers other peers, signals and ticks in between.
MESSAGE_ITEMS_AT_MOST = 4096


class SessionState(enum.Enum):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    CLOSED = "closed"


class CloseKind(enum.Enum):
    UNREACHABLE = "unreachable"  # never answered, or stopped answering
    REFUSED = "refused"  # said no to our hello
    UNAUTHENTICATED = "unauthenticated"  # did not accept our keys (or we have none and it needs them)
    SHUTDOWN = "shutdown"  # the scheduler is stopping
    LOCAL = "local"  # we disconnected


# ---------------------------------------------------------------------------------------------- user requests
class NewTask(NamedTuple):
    task_id: int
    function_id: int
    flags: int
    arg_refs: tuple[int, ...]
    keywords: tuple[str, ...] | None
    payloads: tuple[Payload, ...]


class NewObject(NamedTuple):
    object_id: int
    payload: Payload
    name: str = ""


class CancelRequest(NamedTuple):
    task_id: int


class FreeRequest(NamedTuple):
    object_id: int


Request = NewTask | NewObject | CancelRequest | FreeRequest


# ---------------------------------------------------------------------------------------------- commands
@dataclass(frozen=True, slots=True)
class Send:
    message: Message


@dataclass(frozen=True, slots=True)
class Connected:
    id_prefix: int
    scheduler_name: str
    protected: bool


@dataclass(frozen=True, slots=True)
class Completed:
    results: TaskResults


@dataclass(frozen=True, slots=True)
class Rejected:
    """The scheduler refused one of our messages (the ids concerned, if any, will never get results)."""

    code: ErrorCode
    text: str
    ids: list[int]


@dataclass(frozen=True, slots=True)
class Closed:
    kind: CloseKind
    reason: str


ClientCommand = Send | Connected | Completed | Rejected | Closed


class ClientCore:
    def __init__(self, name: str, heartbeat_interval_seconds: float, timeout_seconds: float) -> None:
        self.name = name
        self.heartbeat_interval = heartbeat_interval_seconds
        self.timeout = timeout_seconds
        self.state = SessionState.CONNECTING
        self.id_prefix = 0
        self.max_payload_bytes = 0  # the scheduler's limit per payload (0: it stated none)
        self._started = 0.0
        self._last_heard = 0.0
        self._last_heartbeat = 0.0
        self._counter = 0

    # ------------------------------------------------------------------------------------------- events
    def start(self, now: float, hostname: str = "", pid: int = 0) -> list[ClientCommand]:
        self._started = self._last_heard = self._last_heartbeat = now
        hello = Hello(PeerKind.CLIENT, self.name, hostname, pid, int(self.heartbeat_interval * 1000))
        return [Send(hello)]

    def received(self, now: float, message: Message) -> list[ClientCommand]:
        if self.state == SessionState.CLOSED:
            return []
        self._last_heard = now
        if isinstance(message, TaskResults):
            return [Completed(message)]
        if isinstance(message, HeartbeatEcho):
            return []
        if isinstance(message, Welcome):
            self.state = SessionState.CONNECTED
            self.id_prefix = message.id_prefix
            self.max_payload_bytes = message.max_payload_bytes
            if message.peer_timeout_ms:  # beat often enough for the scheduler's patience
                self.heartbeat_interval = min(self.heartbeat_interval, message.peer_timeout_ms / 4000)
            return [Connected(message.id_prefix, message.scheduler_name, message.protected)]
        if isinstance(message, Refused):
            if message.key_problem:
                text = f"authentication failed: the scheduler refused this client's key: {message.reason}"
                return self._close(CloseKind.UNAUTHENTICATED, text)
            return self._close(CloseKind.REFUSED, f"the scheduler refused this client: {message.reason}")
        if isinstance(message, Shutdown):
            return self._close(CloseKind.SHUTDOWN, f"the scheduler shut down ({message.reason})")
        if isinstance(message, Error):
            if message.code == ErrorCode.NOT_CONNECTED:
                text = "the scheduler no longer knows this client (it restarted, or timed the client out)"
                return self._close(CloseKind.UNREACHABLE, text)
            return [Rejected(message.code, message.message, message.ids)]
        return []

    def tick(self, now: float) -> list[ClientCommand]:
        if self.state == SessionState.CLOSED:
            return []
        silent = now - self._last_heard
        if silent > self.timeout:
            if self.state == SessionState.CONNECTING:
                text = f"no scheduler answered within {self.timeout:g}s (is it running at that address?)"
            else:
                text = f"the scheduler has not answered for {silent:.0f}s (timeout_seconds={self.timeout:g})"
            return self._close(CloseKind.UNREACHABLE, text)
        if self.state == SessionState.CONNECTED and now - self._last_heartbeat >= self.heartbeat_interval:
            self._last_heartbeat = now
            return [Send(Heartbeat())]
        return []

    def disconnect(self, reason: str = "") -> list[ClientCommand]:
        if self.state == SessionState.CLOSED:
            return []
        commands: list[ClientCommand] = [Send(Disconnect(reason))] if self.state == SessionState.CONNECTED else []
        return commands + self._close(CloseKind.LOCAL, reason or "the client disconnected")

    def unauthenticated(self, reason: str) -> list[ClientCommand]:
        """The connection's handshake failed: the scheduler did not accept our keys (`reason` says why)."""
        if self.state == SessionState.CLOSED:
            return []
        return self._close(CloseKind.UNAUTHENTICATED, reason)

    def request_shutdown(self, reason: str) -> list[ClientCommand]:
        return [Send(ShutdownRequest(reason))] if self.state == SessionState.CONNECTED else []

    def _close(self, kind: CloseKind, reason: str) -> list[ClientCommand]:
        self.state = SessionState.CLOSED
        return [Closed(kind, reason)]

    # ------------------------------------------------------------------------------------------- ids and batches
    def mint(self, count: int = 1) -> range:
        """`count` fresh task/object ids of this session."""
        if self.state != SessionState.CONNECTED:
            raise RuntimeError("ids are minted only in a connected session")
        first = self._counter + 1
        if self._counter + count > ID_COUNTER_MASK:
            raise RuntimeError("this session has used all its ids; connect a new client")
        self._counter += count
        base = self.id_prefix << ID_PREFIX_SHIFT
        return range(base | first, base | (first + count))

    @staticmethod
    def batch(requests: Iterable[Request]) -> list[Message]:
        """Messages for `requests`, in their order; consecutive requests of one kind share one message, up to
        MESSAGE_ITEMS_AT_MOST of them."""
        messages: list[Message] = []
        run: list[Request] = []
        for request in requests:
            if run and (type(run[0]) is not type(request) or len(run) >= MESSAGE_ITEMS_AT_MOST):
                messages.append(_message_for(run))
                run = []
            run.append(request)
        if run:
            messages.append(_message_for(run))
        return messages


def _message_for(run: list[Request]) -> Message:
    first = run[0]
    if isinstance(first, NewTask):
        tasks = cast(list[NewTask], run)  # batch() puts requests of one kind in a run
        keywords: list[str] | None = None
        if any(t.keywords for t in tasks):
            keywords = [kw for t in tasks for kw in (t.keywords or ("",) * len(t.arg_refs))]
        return SubmitTasks(
            [t.task_id for t in tasks],
            [t.function_id for t in tasks],
            bytes(t.flags for t in tasks),
            [len(t.arg_refs) for t in tasks],
            [ref for t in tasks for ref in t.arg_refs],
            keywords,
            [p for t in tasks for p in t.payloads],
        )
    if isinstance(first, NewObject):
        objects = cast(list[NewObject], run)
        names = [o.name for o in objects] if any(o.name for o in objects) else None
        return PutObjects([o.object_id for o in objects], [o.payload for o in objects], names)
    if isinstance(first, CancelRequest):
        return CancelTasks([r.task_id for r in cast(list[CancelRequest], run)])
    return FreeObjects([r.object_id for r in cast(list[FreeRequest], run)])
