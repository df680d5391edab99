"""The scheduler's shell: a ROUTER socket for clients and workers, another for monitors (scheduler/monitors.py), an
asyncio loop, and SchedulerCore deciding everything. With --journal, what the journal holds (client sessions, their
work, the results held for them) is replayed into the core before anything is served, and each flush's journal
entries are written before the flush's sends (scheduler/journaling.py).

Each wake-up drains a bounded number of messages into the core, then flushes once: one placement pass and one
message per peer for everything decided. A peer that cannot be delivered to is reported back to the core.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import psutil
import zmq
from zmq.utils.monitor import parse_monitor_message

from scaler.core.common import unreachable
from scaler.core.limiter import LogLimiter
from scaler.core.scheduler import (
    Command,
    Forbidden,
    Log,
    Malformed,
    PeerKey,
    Received,
    Revoked,
    SchedulerConfig,
    SchedulerCore,
    Send,
    Stop,
    Tick,
    Undeliverable,
)
from scaler.io.addresses import is_loopback
from scaler.io.cpus import pin_to_cpu
from scaler.io.driver import Driver
from scaler.io.frameinfo import frame_get, user_id
from scaler.io.memory import MemoryTrimmer, malloc_trim
from scaler.io.sockets import (
    bind_router,
    context,
    has_input,
    read_waiting,
    send_frames,
    small_to_bytes,
    socket_fd,
)
from scaler.protocol.errors import ProtocolError, UnexpectedMessage
from scaler.protocol.messages import (
    ACCEPTED_BY_SCHEDULER,
    HeartbeatEcho,
    Message,
    clear_caches,
    decode,
    encode,
)
from scaler.scheduler.connections import (
    AUDIT_EVERY,
    ConnectionLimits,
    ConnectionTable,
    audit,
    default_limits,
    descriptor_limit,
    end_silent,
    raise_descriptor_limit,
    socket_inode,
)
from scaler.scheduler.gate import KeyGate
from scaler.scheduler.journal import JournalError
from scaler.scheduler.journaling import DEFAULT_SYNC, Journaling
from scaler.scheduler.monitors import MonitorChannel, bind_monitor_router, withheld_because
from scaler.security.keys import ServerKeys

logger = logging.getLogger(__name__)

DRAIN_LIMIT = 64  # messages read per wake-up before the core flushes
SLICE_SECONDS = 0.05  # a wake-up reads no more messages after this long: signals, ticks and flushes get their turn
TICK_SECONDS = 0.05
STATUS_SECONDS = 1.0
PROBE_DELAYS = (0.05, 0.5)  # a closed connection may take a moment to leave the router's table
BACKLOG_ROUNDS = 50  # wake-ups' worth of waiting messages read before a tick judges anyone silent
_NOBLOCK = int(zmq.NOBLOCK)
_CONNECTION_EVENTS = (
    zmq.EVENT_ACCEPTED
    | zmq.EVENT_ACCEPT_FAILED
    | zmq.EVENT_DISCONNECTED
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
_NOT_READING = "it does not read what it is sent (too many messages wait for it)"


class SchedulerFailed(Exception):
    """The scheduler stopped on a failure it logged already (its journal could not be written)."""


class SchedulerServer:
    def __init__(
        self,
        address: str,
        monitor_address: str,
        config: SchedulerConfig,
        on_ready: Callable[[], None] | None = None,
        keys: ServerKeys | None = None,
        clock: Callable[[], float] = time.monotonic,
        limits: ConnectionLimits | None = None,
        monitor_task_data: str = "auto",
        journal: str | None = None,
        journal_sync: str = DEFAULT_SYNC,
    ) -> None:
        self.on_ready = on_ready
        self.address = address
        self.monitor_address = monitor_address
        if journal is not None and not config.journaled:
            config = dataclasses.replace(config, journaled=True)  # clients are told, and sessions go to the journal
        self.core = SchedulerCore(config)
        self.started_us = int(time.time() * 1e6)  # (Status.started_us: a monitor sees a restart)
        self.journal_path = journal
        self.journal_sync = journal_sync
        self.journaling: Journaling | None = None
        self.failure: str | None = None  # why it stopped, when it stopped on a failure (the journal's)
        self.ctx = context()
        self.keys = keys
        self.gate: KeyGate | None = None
        self.failed_handshakes = 0  # connections that failed their handshake other than by the gate's refusal
        self._limiter = LogLimiter()
        self.router: zmq.Socket[Any] | None = None
        self.withheld = withheld_because(monitor_task_data, monitor_address, keys is not None)
        self.monitors: MonitorChannel | None = None
        self.monitor_events: zmq.Socket[Any] | None = None
        self.process = psutil.Process()
        self.driver: Driver[str] = Driver("Scheduler", clock)
        self.trimmer = MemoryTrimmer(lambda: int(self.process.memory_info().rss), malloc_trim(), before=self._let_go)
        self._fd_of: dict[int, bytes] = {}  # connection fd -> the peer that last sent on it
        self._also_on: dict[int, set[bytes]] = {}  # fd -> other peers seen on it since its last close (_spoke_over)
        self._accept_error = 0  # errno of the last failed accept not yet answered by _shed
        # Open connections, and those that have sent nothing yet: a flood of them is ended oldest first (_shed).
        self.connections = ConnectionTable(limits or default_limits(descriptor_limit()))
        self.ended_connections = 0  # silent connections ended for being too many
        self._audited = 0.0
        self.disconnects: zmq.Socket[Any] | None = None
        self._burst = True  # whether more messages were waiting at the last look

    async def run(self) -> str:
        """Serve until told to stop; returns why it stopped. SchedulerFailed: it stopped on a failure (logged)."""
        try:
            reason = await self.driver.serve(self._start)
        finally:
            self._close()
        if self.failure is not None:
            raise SchedulerFailed(self.failure)
        return reason

    def _start(self) -> None:
        driver = self.driver
        driver.on_signals(self._on_signal)
        secret = None
        if self.keys is not None:
            self.gate = KeyGate(self.ctx, self.keys)
            zap = self.gate.start()  # before any CURVE socket binds
            driver.reader(socket_fd(zap), "the key gate", self.gate.on_readable)
            driver.soon("the key gate", self.gate.on_readable)
            driver.on_signals(lambda _: self._reload_keys(True), (signal.SIGHUP,))
            secret = self.keys.pair.secret
        if self.journal_path is not None:  # before binding: a journal that cannot be used stops the start
            self.journaling = Journaling.recover(
                self.journal_path, self.address, self.journal_sync, self.core, driver.clock()
            )
            if self.journal_sync == "interval":
                journaling = self.journaling
                driver.thread("syncing the journal", journaling.run_sync, journaling.stop_sync, self._journal_failed)
        self.router = _bind(lambda a, c: bind_router(a, c, secret), self.address, self.ctx, "listen on")
        monitor = _bind(
            lambda a, c: bind_monitor_router(a, c, secret), self.monitor_address, self.ctx, "publish the monitor on"
        )
        key_name = (
            self.gate.monitor_name if self.gate is not None and self.monitor_address.startswith("tcp://") else None
        )
        self.monitors = MonitorChannel(monitor, self.core.config.name, self.withheld, self._spoke, key_name)
        logger.info("Scheduler: listening on %s%s", self.address, " (CurveZMQ keys required)" if secret else "")
        logger.info(
            "Scheduler: monitor address is %s%s",
            self.monitor_address,
            "" if not self.withheld else " (task data is not published there: see --monitor-task-data)",
        )
        _warn_if_exposed(self.address, self.monitor_address, secret is not None, not self.withheld)
        self.process.cpu_percent()
        driver.reader(socket_fd(self.router), "reading messages", self._on_readable)
        self.disconnects = self.router.get_monitor_socket(_CONNECTION_EVENTS)
        driver.reader(socket_fd(self.disconnects), "connection events", self._on_disconnect_events)
        driver.soon("connection events", self._on_disconnect_events)  # drain once: a ZeroMQ FD only signals edges
        self.monitor_events = monitor.get_monitor_socket(_CONNECTION_EVENTS)
        driver.reader(socket_fd(self.monitor_events), "monitor connection events", self._on_monitor_events)
        driver.soon("monitor connection events", self._on_monitor_events)
        driver.reader(socket_fd(monitor), "monitors' hellos", self._on_monitor_readable)
        driver.soon("monitors' hellos", self._on_monitor_readable)
        if self.on_ready is not None:
            self.on_ready()
        driver.every(TICK_SECONDS, "the tick", self._tick)
        driver.every(STATUS_SECONDS, "the status", self._publish_status)
        driver.soon("reading messages", self._on_readable)

    def _close(self) -> None:
        if self.router is not None:
            if self.disconnects is not None:
                self.router.disable_monitor()
                self.disconnects.close(linger=0)
            # Let the last messages (Shutdown to every peer) leave before the process ends.
            self.router.close(linger=2000)
        if self.monitors is not None:
            if self.monitor_events is not None:
                self.monitors.sock.disable_monitor()
                self.monitor_events.close(linger=0)
            self.monitors.sock.close(linger=0)
        if self.gate is not None:
            self.gate.close()
        if self.journaling is not None:  # (its sync thread was joined when the driver stopped)
            self.journaling.close()
        self.ctx.destroy(linger=2000)

    def _on_signal(self, sig: int) -> None:
        logger.info("Scheduler: received %s, stopping", signal.Signals(sig).name)
        if self.router is None:  # not serving yet: nobody to tell
            self.driver.stop(f"received {signal.Signals(sig).name} while starting")
            return
        self.core.stop(f"the scheduler received {signal.Signals(sig).name}", workers_stay=True)
        self._execute(self._flush())

    def _on_readable(self) -> None:
        router = self.router
        if router is None or self.driver.stopping:
            return
        core = self.core
        gate = self.gate
        guard = self.driver.guard
        clock = self.driver.clock
        now = clock()
        fd_of = self._fd_of
        silent = self.connections.silent
        deadline = now + SLICE_SECONDS
        key: PeerKey | None = None
        for frames in read_waiting(router, self._burst, DRAIN_LIMIT):
            peer: bytes = frames[0].bytes
            fd = frame_get(frames[0], zmq.SRCFD)
            if fd_of.get(fd) != peer:
                self._spoke_over(fd, peer)
            if silent:
                silent.pop(fd, None)  # it has spoken (ConnectionTable.spoke, inline)
            if gate is not None:  # which key this connection authenticated with, and is it still authorized?
                user = user_id(frames[0])
                key = gate.key_of(user)
                if key is None:
                    reason = f"authentication failed: its key {user} is no longer authorized"
                    guard("handling a message", core.feed, Forbidden(now, peer, user.encode(), reason))
                    continue
            message: Message | ProtocolError
            parts = small_to_bytes(frames[1:])
            try:
                message = decode(parts, ACCEPTED_BY_SCHEDULER)
            except ProtocolError as exc:
                message = exc
            event = (
                Malformed(now, peer, str(message), isinstance(message, UnexpectedMessage))
                if isinstance(message, ProtocolError)
                else Received(now, peer, message, key, parts)  # (its frames: a journal writes a client's work as is)
            )
            guard("handling a message", core.feed, event)  # a bug handling one message must not stop the others
            if clock() >= deadline:
                break  # the rest stays in the socket; _recheck finds it and comes back after the loop's other work
        self._execute(self._flush())
        self._recheck()

    def _flush(self) -> list[Command]:
        """The core's commands; with SCALER_DEBUG, the core's invariants are checked after every flush. With a
        journal, the core's journal entries are written first (none of the commands go out if they cannot be)."""
        core = self.core
        commands = core.flush()
        if self.driver.debug:
            core.validate()
        if core.journal:
            entries, core.journal = core.journal, []
            if self.failure is None:
                assert self.journaling is not None
                try:
                    self.journaling.write(entries)
                except JournalError as exc:
                    self._journal_failed(exc)
        if self.failure is not None:
            return [command for command in commands if isinstance(command, Log)]
        return commands

    def _journal_failed(self, exc: Exception) -> None:
        """The journal cannot be written or synced (a full disk): stop at once, sending nothing more, as a crash
        would (the same command recovers from what was written once the cause is fixed; ADR 0022: no retry)."""
        if self.failure is not None:
            return
        assert self.journaling is not None
        self.failure = self.journaling.failure(exc)
        logger.error("Scheduler: stopping: %s", self.failure)
        self.driver.stop(self.failure)

    def _recheck(self) -> None:
        """Sending may have taken the FD's edge: look once more, or a message could wait for the next tick."""
        self._burst = self.router is not None and has_input(self.router)
        if self._burst and self.driver.loop is not None:
            self.driver.soon("reading messages", self._on_readable)

    def _spoke_over(self, fd: int, peer: bytes) -> None:
        """`peer` sent over descriptor `fd`, which another peer (or none) sent over last. Descriptors are reused: a
        worker restarted at once gets the number its predecessor's connection had. libzmq reports a connection's end
        before it closes the descriptor (stream_engine_base_t::error), and a number is reused only once closed, so the
        event saying the previous connection over `fd` ended is already waiting: read it first, or it would name this
        peer's connection (_on_closed). A peer still there after that (the rest of a closed connection's messages,
        read after the new one's) is remembered with the descriptor, and probed when it closes."""
        self._read_connection_events(self.disconnects, self._on_closed)
        if self._accept_error or self._over_limits():
            self.driver.soon("connection events", self._on_disconnect_events)  # not from inside the read loop
        previous = self._fd_of.get(fd)
        if previous is not None and previous != peer:
            self._also_on.setdefault(fd, set()).add(previous)
        self._fd_of[fd] = peer

    def _on_disconnect_events(self) -> None:
        """A connection was accepted: count it (ConnectionTable). A connection closed (a peer died or left): probe
        its peer now instead of waiting for its timeout. A connection failed its handshake: count it (the key gate
        logs those it refused itself). Then end silent connections past the limits (_shed)."""
        self._read_connection_events(self.disconnects, self._on_closed)
        self._shed_if_needed()

    def _on_monitor_events(self) -> None:
        """The same for the monitor socket's connections (a monitor whose connection closed is forgotten)."""
        self._read_connection_events(self.monitor_events, self.monitors.closed if self.monitors is not None else None)
        self._shed_if_needed()

    def _shed_if_needed(self) -> None:
        if self._accept_error or self._over_limits():
            accept_error, self._accept_error = self._accept_error, 0
            self._shed(accept_error)

    def _read_connection_events(self, sock: zmq.Socket[Any] | None, on_closed: Callable[[int], None] | None) -> None:
        while sock is not None:
            try:
                event = parse_monitor_message(sock.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                break
            kind, value = int(event["event"]), int(event["value"])
            if kind == zmq.EVENT_ACCEPTED:
                inode = socket_inode(value)
                if inode is not None:
                    self.connections.accepted(value, inode, self.driver.clock())
            elif kind == zmq.EVENT_DISCONNECTED:
                self.connections.closed(value)
                if on_closed is not None:
                    on_closed(value)
            elif kind == zmq.EVENT_ACCEPT_FAILED:
                self._accept_error = value
            else:
                self._on_failed_handshake(kind, value)

    def _spoke(self, fd: int) -> None:
        self.connections.spoke(fd)

    def _on_monitor_readable(self) -> None:
        if self.monitors is not None and not self.driver.stopping:
            # ends first: a hello over a reused descriptor must not be forgotten for its predecessor's end
            self._read_connection_events(self.monitor_events, self.monitors.closed)
            self._shed_if_needed()
            self.monitors.on_readable(self.driver.clock())
            self._update_monitored()
            if has_input(self.monitors.sock):  # more than one wake-up's worth: the loop's other work first
                self.driver.soon("monitors' hellos", self._on_monitor_readable)

    def _on_closed(self, fd: int) -> None:
        peer = self._fd_of.pop(fd, None)
        peers = self._also_on.pop(fd, set())
        if peer is not None:
            peers.add(peer)
        logger.debug("Scheduler: connection %s closed (peers %r)", fd, peers)
        for peer in peers:
            self._probe(peer)
            for delay in PROBE_DELAYS:
                self.driver.later(delay, "probing a peer", self._probe, peer)

    def _over_limits(self) -> bool:
        table = self.connections
        return len(table.open) > table.limits.connections or len(table.silent) > table.limits.silent

    def _shed(self, accept_error: int = 0) -> None:
        """End the oldest silent connections past the limits; after a failed accept (descriptors used up by something
        else), a tenth of the silent ones at least. Messages waiting are read first: their connections have spoken."""
        table = self.connections
        for _ in range(BACKLOG_ROUNDS):
            if self.router is None or not has_input(self.router):
                break
            self._burst = True
            self._on_readable()
        # A connection whose first message was read before its ACCEPTED event (events lag behind messages in a burst)
        # was counted silent after it spoke: the descriptors messages came over have spoken.
        spoken = self._fd_of.keys() | (self.monitors.descriptors() if self.monitors is not None else set())
        for fd in [fd for fd in table.silent if fd in spoken]:
            table.spoke(fd)
        chosen = table.excess()
        if accept_error and len(chosen) < 16:
            chosen += table.take_oldest(max(16, len(table.silent) // 10) - len(chosen))
        ended = end_silent(chosen)
        self.ended_connections += ended
        now = self.driver.clock()
        if accept_error and self._limiter.allow(now, "accept failed", accept_error):
            logger.warning(
                "Scheduler: could not accept a connection (%s); ended %d connections that had sent nothing",
                os.strerror(accept_error),
                ended,
            )
        if ended and self._limiter.allow(now, "too many connections", 0):
            limits = table.limits
            logger.warning(
                "Scheduler: too many connections: ended the %d oldest that had sent nothing (now %d open, %d silent; "
                "limits %d and %d: --max-connections, --max-silent-connections)",
                ended,
                len(table.open),
                len(table.silent),
                limits.connections,
                limits.silent,
            )

    def _on_failed_handshake(self, kind: int, code: int) -> None:
        if kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            return  # refused by the gate, which counted and logged it with the peer's address
        self.failed_handshakes += 1
        if not self._limiter.allow(self.driver.clock(), "failed handshake", kind):
            return
        # Either end may see a mismatch of keys first; when the peer does, it closes and this end sees NO_DETAIL.
        mismatch = kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL and code == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
        if mismatch or kind == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            why = "it has no keys" if self.keys is not None else "it uses keys and this scheduler runs without"
            if not mismatch:
                why = f"the connection ended in its handshake ({os.strerror(code)}): {why}, or it is no Scaler peer"
            why += f" (scaler_top and scaler_ui connect to the monitor address, {self.monitor_address})"
        else:
            why = f"ZeroMQ reports {zmq.Event(kind).name} (code {code:#x}): wrong scheduler key, or not a Scaler peer"
        logger.warning("Scheduler: a connection to %s failed its handshake: %s", self.address, why)

    def _reload_keys(self, force: bool = False) -> None:
        """Re-read the authorized keys (SIGHUP: now; else only if their folders changed); sessions of keys that were
        removed end at once."""
        if self.gate is None or self.router is None:
            return
        if force:
            logger.info("Scheduler: reloading the authorized keys")
        try:
            revoked = self.gate.reload(force)
        except OSError as exc:
            logger.error("Scheduler: could not read the authorized keys: %s (keeping the ones loaded)", exc)
            return
        if revoked:
            logger.warning("Scheduler: %d keys are no longer authorized; their sessions end", len(revoked))
            self.core.feed(Revoked(self.driver.clock(), revoked))
            self._execute(self._flush())
            self._recheck()

    def _probe(self, peer: bytes) -> None:
        """Send a harmless message: if the peer's connection is gone, the router refuses it (ROUTER_MANDATORY)."""
        if self.router is None or self.driver.stopping:
            return
        if peer not in self.core.workers and peer not in self.core.clients:
            return
        try:
            send_frames(self.router, [peer, *encode(HeartbeatEcho())], _NOBLOCK)
        except zmq.Again:
            self.core.feed(Undeliverable(self.driver.clock(), peer, _NOT_READING))
            self._execute(self._flush())
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                raise
            self.core.feed(Undeliverable(self.driver.clock(), peer))
            self._execute(self._flush())
        self._recheck()

    def _execute(self, commands: list[Command]) -> None:
        router = self.router
        assert router is not None
        while commands:
            undeliverable: dict[bytes, str] = {}
            for command in commands:
                # an isinstance chain, not `match`: this module runs on Python 3.9 too (PyPy); unreachable() keeps
                # mypy's check that every kind of command is handled
                if isinstance(command, Send):
                    try:
                        send_frames(router, [command.peer, *encode(command.message)], _NOBLOCK)
                    except zmq.Again:
                        undeliverable.setdefault(command.peer, _NOT_READING)
                    except zmq.ZMQError as exc:
                        if exc.errno != zmq.EHOSTUNREACH:
                            raise
                        undeliverable.setdefault(command.peer, "its connection closed")
                elif isinstance(command, Log):
                    logger.log(command.level, "Scheduler: %s", command.text)
                elif isinstance(command, Stop):
                    logger.info("Scheduler: stopping (%s)", command.reason)
                    self.driver.stop(command.reason)
                else:
                    unreachable(command)
            now = self.driver.clock()
            for peer, reason in undeliverable.items():
                self.core.feed(Undeliverable(now, peer, reason))
            commands = self._flush() if undeliverable else []

    def _tick(self) -> None:
        # Read what is waiting first: a heartbeat stuck behind a backlog is not a silent peer.
        for _ in range(BACKLOG_ROUNDS):
            if self.router is None or not has_input(self.router):
                break
            self._burst = True
            self._on_readable()
        self.core.feed(Tick(self.driver.clock()))
        self._execute(self._flush())
        if self.journaling is not None and self.failure is None:
            self.journaling.tick(self.core)  # compacted when it has grown (in a thread), between flushes
        self._recheck()

    def _publish_status(self) -> None:
        self._reload_keys()
        for line in self._limiter.summary(self.driver.clock()) + (self.gate.summary() if self.gate else []):
            logger.warning("Scheduler: %s", line)
        cpu_percent = self.process.cpu_percent()  # each period, so that a status reports the last one's
        rss_bytes = int(self.process.memory_info().rss)
        now = self.driver.clock()
        if now - self._audited >= AUDIT_EVERY:
            self._audited = now
            audit(self.connections)
        if self.monitors is not None and len(self.monitors):
            status = self.core.status()
            status.refused_peers += (
                self.failed_handshakes + self.ended_connections + (self.gate.denied if self.gate else 0)
            )
            status.handler_errors = self.driver.errors
            status.cpu_percent = cpu_percent
            status.rss_bytes = rss_bytes
            status.time_us = int(time.time() * 1e6)
            status.started_us = self.started_us
            status.recovered = self.journaling.restored if self.journaling is not None else ""
            self.monitors.publish(status)
            self._update_monitored()
        else:
            # Nobody would read it: a status is O(workers) to build and encode (113 KB at 1,000 workers). The period
            # still ends, as it would with one (SchedulerCore.end_period).
            self.core.end_period()
        # After a burst, give back what glibc keeps of it (payload frames): rate-limited, only once quiet.
        self.trimmer.check(self.driver.clock(), rss_bytes, len(self.core.tasks) + len(self.core.objects))

    def _update_monitored(self) -> None:
        """The core records task events, failures and output while a monitor subscribes."""
        monitored = self.monitors is not None and len(self.monitors) > 0
        if monitored != self.core.monitored:
            logger.info(
                "Scheduler: %s",
                "a monitor subscribes: recording task events"
                if monitored
                else "no monitor subscribes any more: task events are not recorded",
            )
            self.core.monitored = monitored

    def _let_go(self) -> None:
        """Before a trim: the core's emptied tables and the codec's learnt message shapes."""
        self.core.compact()
        clear_caches()


def _bind(
    bind: Callable[[str, zmq.Context[Any]], zmq.Socket[Any]], address: str, ctx: zmq.Context[Any], what: str
) -> zmq.Socket[Any]:
    try:
        return bind(address, ctx)
    except zmq.ZMQError as exc:
        hint = " (is that host one of this machine's addresses?)" if exc.errno == errno.ENODEV else ""
        raise OSError(f"cannot {what} {address}: {exc.strerror}{hint}") from exc


def _warn_if_exposed(address: str, monitor_address: str, keys: bool, task_data: bool) -> None:
    """Without keys, anyone who can reach a non-loopback address runs code on the workers: say so, and the fix."""
    if keys:
        return
    status = "the cluster's status (workers, clients, counts)"
    if task_data:
        status += " and its tasks' exception texts and printed output (--monitor-task-data on)"
    for what, where, risk in (
        ("listens on", address, "can run any code on the workers (as the user they run as) and read every task's data"),
        ("publishes its monitor on", monitor_address, f"can read {status}"),
    ):
        if not is_loopback(where):
            logger.warning(
                "Scheduler: %s %s without keys: anyone who can connect to it %s. Create keys with `scaler_keygen "
                "DIR` and start the scheduler, workers and clients with --keys DIR (see docs/security.md)",
                what,
                where,
                risk,
            )


def run_scheduler(
    address: str,
    monitor_address: str,
    config: SchedulerConfig,
    event_loop: str,
    *,
    cpu: str | int | None,
    monitor_task_data: str,
    on_ready: Callable[[], None] | None = None,
    keys: ServerKeys | None = None,
    max_connections: int | None = None,
    max_silent_connections: int | None = None,
    journal: str | None = None,
    journal_sync: str = DEFAULT_SYNC,
) -> str:
    """Run a scheduler in this process until it stops. `cpu`: the CPU it keeps to, with its ZeroMQ I/O thread (see
    scaler.io.cpus.pin_to_cpu): "auto", "none" or a CPU number. `max_connections`, `max_silent_connections`:
    see scheduler.connections.default_limits (None: from the file descriptor limit, raised to its hard limit).
    `journal`: the journal's path (None: none), `journal_sync`: interval, always or none (scheduler/journaling.py).
    SchedulerFailed: it stopped on a failure, logged (its journal could not be written)."""
    from scaler.io.loop import run

    pinned = pin_to_cpu(cpu)  # before ZeroMQ starts its I/O thread, which inherits it
    before, descriptors = raise_descriptor_limit()
    limits = default_limits(descriptors, max_connections, max_silent_connections)
    logger.info(
        "Scheduler: at most %d connections, %d of them before their first message (file descriptor limit %d%s)",
        limits.connections,
        limits.silent,
        descriptors,
        f", raised from {before}" if descriptors != before else "",
    )
    logger.info(
        "Scheduler: starting, pid %d, event loop %s, %s",
        os.getpid(),
        event_loop,
        "on any CPU" if pinned is None else f"on CPU {pinned}",
    )
    if config.name == SchedulerConfig.name:
        config = dataclasses.replace(config, name=f"scheduler@{address}")
    server = SchedulerServer(
        address,
        monitor_address,
        config,
        on_ready,
        keys,
        limits=limits,
        monitor_task_data=monitor_task_data,
        journal=journal,
        journal_sync=journal_sync,
    )
    return run(server.run(), event_loop)
