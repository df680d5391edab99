"""ClientCore: a client's session with the scheduler as a state machine. It opens the session, heartbeats,
notices a scheduler that went silent or whose connection closed and did not come back, mints ids, and turns the
user's requests into batched messages that keep their order. With a scheduler that keeps a journal it keeps what it
would send again after the scheduler's restart, and sends it again when the scheduler comes back (ADR 0023). Which
Python future a result belongs to is the shell's business.

Pure: events in, commands out; no sockets, no clock, no threads.
"""

from __future__ import annotations

import enum
import operator
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from typing import NamedTuple, cast

from scaler.core.capabilities import PYTHON_REQUIREMENT
from scaler.core.common import Send as Send  # a message for the scheduler
from scaler.protocol.frames import MAX_FRAME
from scaler.protocol.records import (
    DEFAULT_OPTIONS,
    ID_COUNTER_MASK,
    ID_PREFIX_SHIFT,
    MAX_EXPLAINED,
    CancelTasks,
    Disconnect,
    Error,
    ErrorCode,
    ExplainTasks,
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
    TaskExplanations,
    TaskOptions,
    TaskOutput,
    TaskResults,
    Welcome,
)

# How long the connection to the scheduler may stay closed before the session is given up. ZeroMQ reconnects on its
# own (after 0.1 s, then backing off to 2 s between tries), so a connection reset towards a scheduler that is still
# there is mended well within it; a scheduler that died is declared gone this long after its connection closed,
# instead of after timeout_seconds of silence.
RECONNECT_GRACE_SECONDS = 5.0
# The same, with a scheduler that keeps a journal (Welcome.journaled): it comes back after a restart with this session,
# so the client waits this long for it, keeping its unfinished tasks (Client(scheduler_restart_grace_seconds=...)).
SCHEDULER_RESTART_GRACE_SECONDS = 60.0

# Requests per message. A million-node graph handed over at once is then 245 messages, not one: the scheduler reads
# each in a few tens of milliseconds, and answers other peers, signals and ticks in between.
MESSAGE_ITEMS_AT_MOST = 4096
# A message's header must fit in one frame (MAX_FRAME: the scheduler takes no bigger one): requests with many
# arguments or long keyword names go in smaller messages. A task or object whose own header would not fit in this is
# refused where it is made (Client: too many arguments; a name is cut to MAX_NAME_CHARACTERS).
HEADER_BUDGET = MAX_FRAME // 2
MAX_NAME_CHARACTERS = 1024


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
    options: TaskOptions = DEFAULT_OPTIONS  # (timeout in ms or 0, retries, priority): Client.options
    requirement: tuple[str, ...] = PYTHON_REQUIREMENT  # the capabilities it requires, sorted (Client.options)
    key: str = ""  # its idempotency key, or "" (Client.options(idempotency_key=...))


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
class Connected:
    id_prefix: int
    scheduler_name: str
    protected: bool


@dataclass(frozen=True, slots=True)
class Completed:
    results: TaskResults


@dataclass(frozen=True, slots=True)
class Output:
    """Text our tasks flagged stream output wrote, forwarded by the scheduler before their results."""

    message: TaskOutput


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


@dataclass(frozen=True, slots=True)
class WorkersStated:
    """The scheduler said (welcome, heartbeat echo) how many workers may take tasks now: connected and not held back;
    and their queue capacities added up. ClientCore.workers keeps the last statement."""

    workers: int
    capacity: int


@dataclass(frozen=True, slots=True)
class Waiting:
    """(A journaled scheduler.) The connection closed: the session waits up to `grace_seconds` for the scheduler to
    come back, keeping `tasks` unfinished tasks; the shell holds new requests until Resumed."""

    grace_seconds: float
    tasks: int


@dataclass(frozen=True, slots=True)
class Resumed:
    """(A journaled scheduler.) The session goes on over a connection made again: the shell sends the requests it held.
    `recovered`: the scheduler had restarted from its journal, and `objects` objects and `tasks` tasks were sent again
    (the Sends before this command)."""

    recovered: bool
    objects: int = 0
    tasks: int = 0


@dataclass(frozen=True, slots=True)
class Explained:
    """The scheduler's answer to explain(): one text per task id, in the order asked."""

    message: TaskExplanations


ClientCommand = (
    Send | Connected | Completed | Rejected | Closed | Output | WorkersStated | Explained | Waiting | Resumed
)


class ClientCore:
    def __init__(
        self,
        name: str,
        heartbeat_interval_seconds: float,
        timeout_seconds: float,
        reconnect_grace_seconds: float = RECONNECT_GRACE_SECONDS,
        restart_grace_seconds: float = SCHEDULER_RESTART_GRACE_SECONDS,
    ) -> None:
        self.name = name
        self.heartbeat_interval = heartbeat_interval_seconds
        self.timeout = timeout_seconds
        self.reconnect_grace = reconnect_grace_seconds
        self.restart_grace = restart_grace_seconds  # the grace with a journaled scheduler
        self.state = SessionState.CONNECTING
        self.id_prefix = 0
        self.max_payload_bytes = 0  # the scheduler's limit per payload (0: it stated none)
        self.workers: WorkersStated | None = None  # None: the scheduler never said (one older than these fields)
        self._started = 0.0
        self._last_heard = 0.0
        self._last_heartbeat = 0.0
        self._counter = 0
        self._closed_since: float | None = None  # when the connection closed, while it has not been made again
        # Messages of this session each way, heartbeats, echoes and the hello excluded (the welcome included): after
        # a connection reset, both sides check that nothing was lost (docs/protocol.md "Connection resets").
        self.messages_sent = 0  # counted by the shell as it sends (count_sent), the core's and the batches alike
        self.messages_received = 0
        # With a journaled scheduler (Welcome.journaled; else all stay empty): what the session would send again if the
        # scheduler restarts, in the order it was first sent (dicts): each unfinished task (until its result, or
        # rejection), the cancels of those, and each object not freed. `resuming`: the connection closed and the
        # session has not resumed yet (its resumed heartbeat's echo): new requests wait in the shell meanwhile, so
        # that what is sent again goes first.
        self.journaled = False
        self.resuming = False
        self.kept_tasks: dict[int, NewTask] = {}
        self.kept_objects: dict[int, NewObject] = {}
        self.kept_cancels: dict[int, None] = {}
        # Frees not known to be in the journal yet: (heartbeats sent before it, object id), oldest first. The echo of
        # the next heartbeat says the scheduler read it, and journaled it before it answered (the echo's own flush).
        self.kept_frees: deque[tuple[int, int]] = deque()
        self._heartbeats = self._echoes = 0  # heartbeats sent (not resumed ones), and their echoes received
        self._sent_at_link_up = 0  # messages_sent when the connection was made again

    # ------------------------------------------------------------------------------------------- events
    def start(self, now: float, hostname: str = "", pid: int = 0) -> list[ClientCommand]:
        self._started = self._last_heard = self._last_heartbeat = now
        hello = Hello(PeerKind.CLIENT, self.name, hostname, pid, int(self.heartbeat_interval * 1000))
        return [Send(hello)]

    def count_sent(self, message: Message) -> None:
        """The shell hands `message` to the socket now."""
        if type(message) is not Heartbeat and type(message) is not Hello:
            self.messages_sent += 1

    def received(self, now: float, message: Message) -> list[ClientCommand]:
        if self.state == SessionState.CLOSED:
            return []
        self._last_heard = now
        if type(message) is not HeartbeatEcho:
            self.messages_received += 1
        if isinstance(message, TaskResults):
            if self.kept_tasks:  # (a journaled scheduler: done with; else empty)
                self._forget(message.task_ids)
            return [Completed(message)]
        if isinstance(message, HeartbeatEcho):
            return self._on_echo(message)
        if isinstance(message, TaskOutput):
            return [Output(message)]
        if isinstance(message, Welcome):
            return self._on_welcome(message)
        if isinstance(message, TaskExplanations):
            return [Explained(message)]
        if isinstance(message, Refused):
            return self._on_refused(message)
        if isinstance(message, Shutdown):
            return self._on_shutdown(now, message)
        if isinstance(message, Error):
            return self._on_error(message)
        return []

    def _on_shutdown(self, now: float, message: Shutdown) -> list[ClientCommand]:
        if message.workers_stay and self.journaled:  # it stops, and comes back with this session (its journal)
            return self.link_down(now)
        return self._close(CloseKind.SHUTDOWN, f"the scheduler shut down ({message.reason})")

    def _on_error(self, message: Error) -> list[ClientCommand]:
        if message.code == ErrorCode.NOT_CONNECTED:
            return self._close(CloseKind.UNREACHABLE, _not_connected_text(message.message, self.journaled))
        if self.journaled and message.ids:  # they will never get results (objects: never exist)
            self._forget(message.ids)
            deque(map(self.kept_objects.pop, message.ids, repeat(None)), maxlen=0)
        return [Rejected(message.code, message.message, message.ids)]

    def _forget(self, task_ids: Iterable[int]) -> None:
        """These tasks are finished: nothing of them is sent again. (C loops: a dict pop per task.)"""
        deque(map(self.kept_tasks.pop, task_ids, repeat(None)), maxlen=0)
        if self.kept_cancels:
            deque(map(self.kept_cancels.pop, task_ids, repeat(None)), maxlen=0)

    def _on_refused(self, message: Refused) -> list[ClientCommand]:
        if message.key_problem:
            text = f"authentication failed: the scheduler refused this client's key: {message.reason}"
            return self._close(CloseKind.UNAUTHENTICATED, text)
        return self._close(CloseKind.REFUSED, f"the scheduler refused this client: {message.reason}")

    def _on_welcome(self, welcome: Welcome) -> list[ClientCommand]:
        self.state = SessionState.CONNECTED
        self.id_prefix = welcome.id_prefix
        self.max_payload_bytes = welcome.max_payload_bytes
        self.journaled = welcome.journaled
        if welcome.peer_timeout_ms:  # beat often enough for the scheduler's patience
            self.heartbeat_interval = min(self.heartbeat_interval, welcome.peer_timeout_ms / 4000)
        connected: list[ClientCommand] = [Connected(welcome.id_prefix, welcome.scheduler_name, welcome.protected)]
        return connected + self._stated(welcome) if welcome.workers_stated else connected

    def _stated(self, message: Welcome | HeartbeatEcho) -> list[ClientCommand]:
        self.workers = WorkersStated(message.workers, message.worker_capacity)
        return [self.workers]

    def ask_workers(self, now: float) -> list[ClientCommand]:
        """The user asks how many workers there are now: a heartbeat at once, whose echo says (WorkersStated)."""
        if self.state != SessionState.CONNECTED:
            return []
        self._last_heartbeat = now
        self._heartbeats += 1
        return [Send(Heartbeat())]

    def explain(self, task_ids: Sequence[int]) -> list[ClientCommand]:
        """The user asks why these tasks are where they are: explainTasks, MAX_EXPLAINED ids a message, each
        answered by one taskExplanations (Explained) in order."""
        if self.state != SessionState.CONNECTED:
            return []
        ids = list(task_ids)
        return [Send(ExplainTasks(ids[i : i + MAX_EXPLAINED])) for i in range(0, len(ids), MAX_EXPLAINED)]

    def _on_echo(self, echo: HeartbeatEcho) -> list[ClientCommand]:
        """The answer to a heartbeat: says how many workers there are now, or (resumed) answers the one sent on a
        connection made again: did everything the scheduler sent come? (Others, the scheduler's probes: nothing.)"""
        stated = self._stated(echo) if echo.workers_stated else []
        if echo.workers_stated and not echo.resumed:  # the answer to our heartbeat (a probe's states nothing)
            self._echoes += 1
            frees = self.kept_frees
            while frees and frees[0][0] < self._echoes:
                frees.popleft()  # read and journaled before the heartbeat the echo answers
        if echo.resumed and self.journaled:
            if echo.recovered:
                return stated + self._recovered(echo)
            if echo.sent == self.messages_received and self.resuming:
                self.resuming = False
                return [*stated, Resumed(recovered=False)]
        if not echo.resumed or echo.sent == self.messages_received:
            return stated
        text = (
            f"the connection to the scheduler was reset and messages from it were lost (it sent {echo.sent}, "
            f"{self.messages_received} came): results may be missing, so the session ends"
        )
        return [Send(Disconnect("messages were lost in a connection reset")), *self._close(CloseKind.UNREACHABLE, text)]

    def _recovered(self, echo: HeartbeatEcho) -> list[ClientCommand]:
        """The scheduler restarted from its journal and resumed this session: it may have lost what came last, so
        every object not freed, then every unfinished task, then the cancels of those, are sent again (batched as
        usual; it ignores the ids it holds). The counts are not compared: they start again from the restart (the
        scheduler's: echo.sent; ours: what went since the connection was made again)."""
        self.resuming = False
        self.messages_received = echo.sent
        self.messages_sent -= self._sent_at_link_up
        self._sent_at_link_up = 0
        cancels = [CancelRequest(task_id) for task_id in self.kept_cancels]
        self._echoes = self._heartbeats  # (those in flight at the restart are never answered)
        frees = [FreeRequest(object_id) for _, object_id in self.kept_frees]
        self.kept_frees = deque((self._heartbeats, request.object_id) for request in frees)  # not known journaled
        again = self.batch(chain(self.kept_objects.values(), self.kept_tasks.values(), cancels, frees))
        resumed = Resumed(recovered=True, objects=len(self.kept_objects), tasks=len(self.kept_tasks))
        return [*map(Send, again), resumed]

    def link_down(self, now: float) -> list[ClientCommand]:
        """The connection to the scheduler closed (ZeroMQ tries to make it again by itself). With a journaled
        scheduler the session waits for it (restart_grace), holding new requests until it resumes."""
        if self.state == SessionState.CLOSED or self._closed_since is not None:
            return []
        self._closed_since = now
        if not self.journaled or self.state != SessionState.CONNECTED:
            return []
        commands: list[ClientCommand] = [] if self.resuming else [Waiting(self.restart_grace, len(self.kept_tasks))]
        self.resuming = True
        return commands

    def link_up(self, now: float) -> list[ClientCommand]:
        """A connection to the scheduler's address was made (its handshake succeeded). After a closed one, a
        heartbeat goes at once: a scheduler that restarted there answers that it does not know this client; one that
        kept the session checks that every message this client sent since its hello came (`sent`), and answers with
        how many it sent, for this client to check in turn (docs/protocol.md "Connection resets")."""
        if self._closed_since is None:
            return []
        self._closed_since = None
        if self.state != SessionState.CONNECTED:
            return []
        self._last_heartbeat = now
        if self.journaled:  # the silence is counted again from now (suspended while the connection was closed)
            self._last_heard = now
            self._sent_at_link_up = self.messages_sent
        return [Send(Heartbeat(resumed=True, sent=self.messages_sent))]

    def tick(self, now: float) -> list[ClientCommand]:
        if self.state == SessionState.CLOSED:
            return []
        waiting = self.journaled and self._closed_since is not None  # for a scheduler that restarts: not silent
        lost = self._connection_lost(now) or (None if waiting else self._silence(now))
        if lost is not None:
            return self._close(CloseKind.UNREACHABLE, lost)
        if waiting:
            return []  # (no heartbeats piled up for the connection: the resumed one goes when it is made)
        if self.state == SessionState.CONNECTED and now - self._last_heartbeat >= self.heartbeat_interval:
            self._last_heartbeat = now
            self._heartbeats += 1
            return [Send(Heartbeat())]
        return []

    def _connection_lost(self, now: float) -> str | None:
        """Why the session is over, if its connection closed more than the grace period ago and was not made again.
        Only for a session: a client still connecting waits timeout_seconds for a scheduler, as it was told to."""
        closed_since = self._closed_since
        grace = self.restart_grace if self.journaled else self.reconnect_grace
        if self.state != SessionState.CONNECTED or closed_since is None or now - closed_since <= grace:
            return None
        return (
            f"the connection to the scheduler closed and was not made again within {grace:g}s: the scheduler "
            "stopped, or cannot be reached"
        )

    def _silence(self, now: float) -> str | None:
        silent = now - self._last_heard
        if silent <= self.timeout:
            return None
        if self.state == SessionState.CONNECTING:
            return f"no scheduler answered within {self.timeout:g}s (is it running at that address?)"
        return f"the scheduler has not answered for {silent:.0f}s (timeout_seconds={self.timeout:g})"

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
        self.resuming = False
        self.kept_tasks, self.kept_objects, self.kept_cancels = {}, {}, {}  # nothing is sent again
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

    def sending(self, requests: list[Request]) -> list[Message]:
        """The shell sends `requests` now: their messages (batch). With a journaled scheduler they are kept until
        they are done with (a task: its result; an object: its free), to be sent again after its restart."""
        if self.journaled:
            self._keep(requests)
        return self.batch(requests)

    def _keep(self, requests: list[Request]) -> None:
        """A dict insert (or pop) per request; no copy of a payload. A batch of tasks only (a map): in C loops."""
        tasks = self.kept_tasks
        if set(map(type, requests)) == {NewTask}:
            tasks.update(zip(map(_task_id_of, requests), cast(list[NewTask], requests)))
            return
        objects = self.kept_objects
        for request in requests:
            if isinstance(request, NewTask):
                tasks[request.task_id] = request
            elif isinstance(request, NewObject):
                objects[request.object_id] = request
            elif isinstance(request, FreeRequest):
                objects.pop(request.object_id, None)
                self.kept_frees.append((self._heartbeats, request.object_id))
            elif request.task_id in tasks:  # a cancel: sent again with its task, until the task's answer comes
                self.kept_cancels[request.task_id] = None

    @staticmethod
    def batch(requests: Iterable[Request]) -> list[Message]:
        """Messages for `requests`, in their order; consecutive requests of one kind share one message, up to
        MESSAGE_ITEMS_AT_MOST of them and HEADER_BUDGET bytes of header (estimated: header_bytes)."""
        messages: list[Message] = []
        run: list[Request] = []
        for request in requests:
            if run and (type(run[0]) is not type(request) or len(run) >= MESSAGE_ITEMS_AT_MOST):
                messages += map(_message_for, _within_budget(run))
                run = []
            run.append(request)
        if run:
            messages += map(_message_for, _within_budget(run))
        return messages


def _within_budget(run: list[Request]) -> list[list[Request]]:
    """`run` (requests of one kind) cut where its header would pass HEADER_BUDGET. A quick bound first (C loops over
    the run: tasks without keywords, their most arguments; objects' names), each request's own size only past it."""
    first = run[0]
    if len(run) == 1:
        return [run]  # one request cannot be cut (a task too big alone is refused where it is made)
    if type(first) is NewTask:
        tasks = cast(list[NewTask], run)
        if not any(map(_keywords_of, tasks)):
            if len(tasks) * task_header_bytes(max(map(len, map(_arg_refs_of, tasks))), None) <= HEADER_BUDGET:
                return [run]
    elif type(first) is NewObject:
        objects = cast(list[NewObject], run)
        if 40 * len(objects) + 4 * sum(map(len, map(_name_of, objects))) <= HEADER_BUDGET:
            return [run]
    else:
        return [run]  # ids only: MESSAGE_ITEMS_AT_MOST of them fit many times over
    pieces: list[list[Request]] = [[]]
    weight = 0
    for request in run:
        size = header_bytes(request)
        if pieces[-1] and weight + size > HEADER_BUDGET:
            pieces.append([])
            weight = 0
        pieces[-1].append(request)
        weight += size
    return pieces


def header_bytes(request: Request) -> int:
    """At least what `request` adds to its message's header (Cap'n Proto columns; a text is its pointer, its bytes
    and its terminating zero, padded to 8): a task's (task_header_bytes), or an object's id, size and name."""
    if type(request) is NewTask:
        return task_header_bytes(len(request.arg_refs), request.keywords) + (
            12 + 4 * len(request.key) if request.key else 0
        )
    if type(request) is NewObject:
        return 40 + 4 * len(request.name)
    return 8


def task_header_bytes(arguments: int, keywords: Sequence[str] | None) -> int:
    """At least what a task adds to its message's header: its ids, flags and option columns, and each argument's
    reference, size and keyword slot (keyword names up to 4 bytes a character in UTF-8)."""
    return 40 + 32 * arguments + (4 * sum(map(len, keywords)) if keywords else 0)


# NewTask's fields, without a property each
_task_id_of = operator.itemgetter(NewTask._fields.index("task_id"))
_function_id_of = operator.itemgetter(NewTask._fields.index("function_id"))
_flags_of = operator.itemgetter(NewTask._fields.index("flags"))
_arg_refs_of = operator.itemgetter(NewTask._fields.index("arg_refs"))
_keywords_of = operator.itemgetter(NewTask._fields.index("keywords"))
_payloads_of = operator.itemgetter(NewTask._fields.index("payloads"))
_options_of = operator.itemgetter(NewTask._fields.index("options"))
_requirement_of = operator.itemgetter(NewTask._fields.index("requirement"))
_key_of = operator.itemgetter(NewTask._fields.index("key"))
_name_of = operator.itemgetter(NewObject._fields.index("name"))


def requirement_columns(tasks: list[NewTask]) -> tuple[list[list[str]], list[int] | None]:
    """A batch's requirements: each distinct one once, in the order first met, and each task's index into them, or
    None when every task has the first (the common case: a batch of one map, or one client's default)."""
    required = list(map(_requirement_of, tasks))
    first = required[0]
    if required.count(first) == len(required):  # a C loop; shared tuples (core.capabilities) compare by identity
        return [list(first)], None
    index: dict[tuple[str, ...], int] = {}
    column = [index.setdefault(r, len(index)) for r in required]
    return [list(r) for r in index], column


def _message_for(run: list[Request]) -> Message:
    first = run[0]
    if isinstance(first, NewTask):
        tasks = cast(list[NewTask], run)  # batch() puts requests of one kind in a run
        # Each column in C loops (map over the tuples' fields): no Python frame per task.
        arg_refs = list(map(_arg_refs_of, tasks))
        keywords: list[str] | None = None
        if any(map(_keywords_of, tasks)):
            keywords = [kw for t in tasks for kw in (t.keywords or ("",) * len(t.arg_refs))]
        message = SubmitTasks(
            list(map(_task_id_of, tasks)),
            list(map(_function_id_of, tasks)),
            bytes(map(_flags_of, tasks)),
            list(map(len, arg_refs)),
            list(chain.from_iterable(arg_refs)),
            keywords,
            list(chain.from_iterable(map(_payloads_of, tasks))),
        )
        options = list(map(_options_of, tasks))
        if options.count(DEFAULT_OPTIONS) != len(options):  # each option travels only if some task sets it
            timeouts, retries, priorities = zip(*options, strict=True)
            message.timeouts_ms = list(timeouts) if any(timeouts) else None
            message.retries = bytes(retries) if any(retries) else None
            message.priorities = list(priorities) if any(priorities) else None
        message.requirements, message.requirement_index = requirement_columns(tasks)
        keys = list(map(_key_of, tasks))
        if any(keys):
            message.idempotency_keys = keys
        return message
    if isinstance(first, NewObject):
        objects = cast(list[NewObject], run)
        names = [o.name[:MAX_NAME_CHARACTERS] for o in objects] if any(o.name for o in objects) else None
        return PutObjects([o.object_id for o in objects], [o.payload for o in objects], names)
    if isinstance(first, CancelRequest):
        return CancelTasks([r.task_id for r in cast(list[CancelRequest], run)])
    return FreeObjects([r.object_id for r in cast(list[FreeRequest], run)])


def _not_connected_text(said: str, journaled: bool = False) -> str:
    """Why the session is over, from the scheduler's notConnected error: its reason when it gives one (a loss found
    after a connection reset), else the usual causes."""
    if said.startswith("session ended: "):
        return f"the scheduler ended this client's session: {said.removeprefix('session ended: ')}"
    if journaled:  # a scheduler that keeps a journal forgets a session only so
        return (
            "the scheduler no longer knows this client (it restarted without the journal that held this session, "
            "or timed the client out)"
        )
    return "the scheduler no longer knows this client (it restarted, or timed the client out)"
