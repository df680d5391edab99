"""The life of a session: a hello opens it (or is refused), heartbeats keep it, and it ends by a goodbye, by silence,
by the loss of its connection, by a key no longer authorized, or when its peer says hello again. An ended worker's
tasks go back to the queue (charged an attempt only if they may have run); an ended client's tasks are cancelled and
its objects freed.

SessionLifecycle is a component of a SchedulerCore: the core hands it these events, and it reads and changes the
core's state as the core's own methods would (core.py keeps the path of a task). Pure, like the core. Python 3.9 (the
scheduler runs on PyPy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scaler.core.scheduler import notices
from scaler.core.scheduler.events import JournalSession, Log, PeerKey
from scaler.core.scheduler.fleet_size import with_workers
from scaler.core.scheduler.hello import PEER_KIND_NAMES, refusal
from scaler.core.scheduler.sessions import ClientSession, WorkerSession
from scaler.core.scheduler.tasks import TaskEvent, TaskState
from scaler.protocol.records import (
    Error,
    ErrorCode,
    Heartbeat,
    HeartbeatEcho,
    Hello,
    PeerKind,
    Refused,
    ShutdownRequest,
    TaskStatus,
    Welcome,
)

if TYPE_CHECKING:
    from scaler.core.scheduler.core import SchedulerCore

_EMPTY = b""


class SessionLifecycle:
    __slots__ = ("core",)

    def __init__(self, core: SchedulerCore) -> None:
        self.core = core

    # ------------------------------------------------------------------------------------------- opening
    def on_hello(self, peer: bytes, hello: Hello, key: PeerKey | None) -> None:
        core = self.core
        current = core.clients.get(peer) or core.workers.get(peer) or core.managers.sessions.get(peer)
        refused = refusal(hello, key, (current.key,) if current is not None else None, core.names)
        if refused is not None:
            core.refused += refused.counted
            self._refuse_hello(peer, hello, refused.reason, refused.key_problem, key)
            return
        kind = PEER_KIND_NAMES[hello.kind]
        public = key.public if key is not None else None
        if peer in core.clients:
            self.client_gone(core.clients[peer], "it said hello again")
        if peer in core.workers:
            self.worker_lost(core.workers[peer], "it said hello again", count_attempt=False)
        if hello.kind == PeerKind.MANAGER:
            core.managers.on_hello(peer, hello, key)  # (a manager mints no ids: no prefix)
            return
        if peer in core.managers.sessions:
            core.managers.gone(core.managers.sessions[peer], "it said hello again")
        prefix = core.prefixes.take()
        if prefix is None:
            self._refuse_hello(peer, hello, "this scheduler has as many sessions open as it can hold (2**24 - 1)")
            return
        name = hello.name or f"unnamed-{kind}-{prefix}"
        who = f"{kind} {name}" + (f" (key {key.name})" if key is not None else "")
        if hello.kind == PeerKind.CLIENT:
            core.clients[peer] = ClientSession(peer, name, prefix, core.now, public)
            notices.info(core, "session", peer, f"{who} connected")
            timeout = core.config.client_timeout_seconds
            if core.config.journaled:
                core.journal.append(JournalSession(peer, name, prefix, public))
        else:
            caps = core.needs.offer(frozenset(hello.capabilities))
            worker = core.workers[peer] = WorkerSession(
                peer, name, hello.queue_capacity, core.now, prefix, public, caps
            )
            worker.held_until = core.names.join(worker)
            held = f"; held back for {worker.held_until - core.now:.0f}s" if worker.held_until > core.now else ""
            offers = f"; capabilities: {', '.join(sorted(caps))}" if caps else ""
            unit = f"; unit {hello.unit}" if hello.unit else ""
            notices.info(
                core, "session", peer, f"{who} joined (queue capacity {hello.queue_capacity}{offers}{unit}){held}"
            )
            core.managers.worker_joined(worker, hello.unit)
            core._balance_due = True
            timeout = core.config.worker_timeout_seconds
        limit = core.config.max_payload_bytes
        welcome = Welcome(prefix, core.config.name, core.config.protected, int(timeout * 1000), max_payload_bytes=limit)
        if hello.kind == PeerKind.CLIENT:  # the workers that may take its tasks (fleet_size.py)
            welcome = with_workers(welcome, core.workers.values(), core.now)
            welcome.journaled = core.config.journaled
        core._send(peer, welcome)

    def _refuse_hello(
        self, peer: bytes, hello: Hello, reason: str, key_problem: bool = False, key: PeerKey | None = None
    ) -> None:
        core = self.core
        if core._limiter.allow(core.now, "refused hello", peer):
            core._send(peer, Refused(reason, key_problem=key_problem))
            kind = PEER_KIND_NAMES.get(hello.kind, hello.kind.name.lower())
            who = f"{kind} {hello.name!r}" + (f" (key {key.name})" if key is not None else "")
            core._out.append(Log.warning(f"refused {who}: {reason}"))

    # ------------------------------------------------------------------------------------------- keeping
    def on_worker_heartbeat(self, worker: WorkerSession, message: Heartbeat) -> None:
        core = self.core
        if message.resumed:  # answered always (outside the echo's rate limit), or the session ends
            if not self.resumed(worker, message):
                return
            worker.echoed_at = core.now
        core.waiting_total += message.waiting_tasks - worker.heartbeat.waiting_tasks
        worker.heartbeat = message
        worker.heartbeat_sent = len(worker.assigned)  # what the scheduler had sent it, at the heartbeat's moment
        worker.heartbeat_at = core.now
        worker.allowance_peak = max(worker.allowance_peak, message.waiting_tasks)
        # Answered at most once per quarter of the worker timeout (the echo is most of an idle fleet's cost: one send
        # and one TCP write per worker): workers beat every quarter at most (Welcome.peerTimeoutMs), so one still
        # hears from the scheduler at least every half of the timeout after which it gives its session up.
        if core.now - worker.echoed_at >= core.config.worker_timeout_seconds / 4:
            worker.echoed_at = core.now
            core._send(worker.identity, HeartbeatEcho())

    def resumed(self, session: ClientSession | WorkerSession, message: Heartbeat) -> bool:
        """A peer's connection closed and was made again, and its session went on (the probe reached the new
        connection). Messages in flight at the reset may be lost: what the peer says it sent must be what came, and
        the echo says what was sent to it, for the peer to check (docs/protocol.md section 10). False: something was
        lost, so the session must end at once (the caller ends it; the peer is told here) instead of leaving a
        future, or a task, waiting for ever on it."""
        core = self.core
        if isinstance(session, ClientSession) and session.awaiting:  # back after the scheduler's restart
            session.awaiting = False
            core.send_held(session)  # first: the echo has it send its unfinished work again
            core._send(session.identity, HeartbeatEcho(resumed=True, sent=session.messages_sent, recovered=True))
            notices.info(core, "session", session.identity, f"client {session.name} resumed its session")
            return True
        if message.sent == session.messages_received:
            core._send(session.identity, HeartbeatEcho(resumed=True, sent=session.messages_sent))
            return True
        reason = (
            f"its connection was reset and messages were lost (it sent {message.sent}, "
            f"{session.messages_received} came)"
        )
        if isinstance(session, ClientSession):
            self.client_gone(session, reason)
        else:
            self.worker_lost(session, reason, count_attempt=True)
        core._send(session.identity, Error(ErrorCode.NOT_CONNECTED, f"session ended: {reason}"))
        return False

    # ------------------------------------------------------------------------------------------- ending
    def time_out_silent(self, now: float) -> None:
        """End the sessions silent longer than their timeout, and note the oldest last_seen of those left."""
        core = self.core
        worker_timeout, client_timeout = core.config.worker_timeout_seconds, core.config.client_timeout_seconds
        for worker in [w for w in core.workers.values() if now - w.last_seen > worker_timeout]:
            silence = now - worker.last_seen
            self.worker_lost(worker, f"no heartbeat for {silence:.1f}s", count_attempt=True)
        for client in [c for c in core.clients.values() if now - c.last_seen > client_timeout]:
            self.client_gone(client, f"no heartbeat for {now - client.last_seen:.1f}s")
        core.oldest_seen = (
            min((w.last_seen for w in core.workers.values()), default=now),  # now: a session that starts later
            min((c.last_seen for c in core.clients.values()), default=now),
        )

    def on_undeliverable(self, peer: bytes, reason: str) -> None:
        core = self.core
        if peer in core.workers:
            self.worker_lost(core.workers[peer], reason, count_attempt=True)
        elif peer in core.clients:
            self.client_gone(core.clients[peer], reason)
        elif peer in core.managers.sessions:
            core.managers.gone(core.managers.sessions[peer], reason)

    def on_shutdown_request(self, client: ClientSession, message: ShutdownRequest) -> None:
        core = self.core
        if core.config.protected:
            text = "the scheduler runs in protected mode and refuses to shut down; start it unprotected to allow this"
            core._send(client.identity, Error(ErrorCode.PROTECTED, text))
            core._out.append(Log.warning(f"refused a shutdown request from client {client.name} (protected mode)"))
            return
        reason = f"shutdown requested by client {client.name}"
        core._out.append(Log.info(reason))
        core.stop(reason)

    def worker_lost(self, worker: WorkerSession, reason: str, count_attempt: bool) -> None:
        core = self.core
        del core.workers[worker.identity]
        core.managers.worker_left(worker)
        core.waiting_total -= worker.heartbeat.waiting_tasks
        if worker.prefix:  # a worker mints no ids: its prefix is free at once
            core.prefixes.release(worker.prefix)
            worker.prefix = 0
        tasks = list(worker.assigned.values())
        worker.assigned.clear()
        if core._log.error_texts:
            core._log.forget_texts([task.task_id for task in tasks])
        if core.monitored:
            core._log.departure(worker.name, reason, count_attempt, int(core.now * 1e6))
        core.object_store.forget_holder(worker)
        # Only tasks its agent said it handed to a processor (tasksStarted) may have started: they count an
        # attempt; the others never ran and go back untouched.
        requeued = []
        for task in tasks:
            task.worker = None
            if task.state == TaskState.CANCELING:
                core._end(task, TaskStatus.CANCELED, _EMPTY, worker=worker)
            elif count_attempt and task.started:
                if core._retry_or_fail(task, f"worker {worker.name} was lost ({reason})", worker):
                    requeued.append(task)
            else:
                core._move(task, TaskEvent.REQUEUE)
                requeued.append(task)
        core.needs.withdraw(worker.capabilities)
        core.needs.requeue_front(requeued)  # in their original order, ahead of everything else
        notices.info(
            core,
            "session",
            worker.identity,
            f"worker {worker.name} left ({reason}); {len(tasks)} of its tasks go back to the queue",
        )
        core._balance_due = True
        self._leave_name(worker, count_attempt)

    def _leave_name(self, worker: WorkerSession, count_attempt: bool) -> None:
        """A worker session ended: its name's record no longer counts it; a loss (not a goodbye) may hold it back."""
        core = self.core
        record = worker.record
        hold = core.names.leave(worker, core.now if count_attempt else None)
        if not hold or record is None:
            return
        minutes = core.config.loss_window_seconds / 60
        core._out.append(
            Log.warning(
                f"worker {worker.name} was lost {len(record.losses)} times in {minutes:g} min: no new tasks for it for "
                f"{hold:g}s if it comes back (its tasks that had not started were not charged an attempt)"
            )
        )
        for other in core.workers.values():  # another session of the same name, already back
            if other.record is record:
                other.held_until = max(other.held_until, record.held_until)  # (inf: draining, scaling.py)

    def client_gone(self, client: ClientSession, reason: str) -> None:
        core = self.core
        del core.clients[client.identity]
        client.gone = True
        if core.config.journaled:
            core.journal.append(JournalSession(client.identity))
        client.output.take()  # printed output nobody will read
        mine = [t for t in core.tasks.values() if t.client is client]
        for task in mine:
            core._cancel(task)
        core.object_store.release_all(client)
        notices.info(
            core,
            "session",
            client.identity,
            f"client {client.name} left ({reason}); {len(mine)} unfinished tasks cancelled",
        )
        core.prefixes.reclaim(client)

    # ------------------------------------------------------------------------------------------- keys
    def wrong_key(self, peer: bytes, key: PeerKey | None) -> None:
        """A message for a session that was opened with another key (or none): its connection is not that session's.
        Dropped without an answer (the answer would go to whoever holds the routing id now)."""
        core = self.core
        core.refused += 1
        core.dropped += 1
        notices.warn(
            core,
            "message with another key",
            peer,
            f"dropped a message for {notices.label(core, peer)}: it came with {key!r}, not the key of that session",
        )

    def on_forbidden(self, peer: bytes, public: bytes, reason: str) -> None:
        core = self.core
        core.refused += 1
        core.dropped += 1
        who = notices.label(core, peer)  # before its session ends
        for sessions in (core.clients, core.workers):
            session = sessions.get(peer)
            if session is not None and session.key == public:
                self._end_session(session, reason)
        manager = core.managers.sessions.get(peer)
        if manager is not None and manager.key == public:
            core.managers.gone(manager, reason)
        if core._limiter.allow(core.now, "refused key", peer):
            core._send(peer, Refused(reason, key_problem=True))
            core._out.append(Log.warning(f"refused a message from {who}: {reason}"))

    def on_revoked(self, keys: frozenset[bytes]) -> None:
        core = self.core
        sessions: list[ClientSession | WorkerSession] = [*core.clients.values(), *core.workers.values()]
        for session in sessions:
            if session.key is not None and session.key in keys:
                reason = "its key was removed from the authorized keys"
                core._send(session.identity, Refused(reason, key_problem=True))
                self._end_session(session, reason)
        for manager in list(core.managers.sessions.values()):
            if manager.key is not None and manager.key in keys:
                reason = "its key was removed from the authorized keys"
                core._send(manager.identity, Refused(reason, key_problem=True))
                core.managers.gone(manager, reason)
        core.names.forget_keys(keys)

    def _end_session(self, session: ClientSession | WorkerSession, reason: str) -> None:
        if isinstance(session, ClientSession):
            self.client_gone(session, reason)
        else:
            self.worker_lost(session, reason, count_attempt=False)
