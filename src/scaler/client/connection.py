"""The client's I/O thread: one ZeroMQ DEALER socket, a poll loop, and the ClientCore driving it.

User threads hand requests over through a deque and wake the loop through a pipe only when it is not already
awake, so a burst of submits costs one wake-up and travels as one batch. Results end futures (or map
collectors) right here; decoding the values waits until someone asks for them.

A lone round trip (one task pending, its result waited for) leaves the I/O thread out: the calling thread sends the
task (submit_task) and reads the result (wait_alone) itself, which saves a thread wake-up each way.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import select
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import zmq

from scaler.client.future import ProfilingInfo, ScalerFuture, wake_blocked_waits
from scaler.client.output import OutputPrinter
from scaler.core.client.session import (
    CancelRequest,
    ClientCommand,
    ClientCore,
    Closed,
    CloseKind,
    Completed,
    Connected,
    NewTask,
    Output,
    Rejected,
    Request,
    Send,
    SessionState,
)
from scaler.errors import AuthenticationError, ConnectionFailedError, ProtectedModeError, TaskFailedError
from scaler.errors import task_failure as failure
from scaler.io.curve import HandshakeWatch
from scaler.io.processes import hostname
from scaler.io.sockets import (
    context,
    has_input,
    new_dealer,
    recv_frames,
    recv_message,
    send_message,
    small_to_bytes,
    socket_fd,
)
from scaler.protocol.errors import ProtocolError
from scaler.protocol.messages import (
    ACCEPTED_BY_CLIENT,
    ErrorCode,
    Message,
    Payload,
    TaskResults,
    TaskStatus,
    decode,
    read_lone_result,
)
from scaler.security.keys import PeerKeys
from scaler.serializer import Serializer

logger = logging.getLogger(__name__)

TICK_SECONDS = 0.1


class ResultSink(Protocol):
    """Where one task's outcome goes: a future, or a slot of a map collector."""

    def deliver(self, status: int, payload: Payload, profiling: ProfilingInfo | None) -> None: ...

    def fail(self, exc: BaseException) -> None: ...

    def cancel(self) -> None: ...


class FutureSink:
    __slots__ = ("future", "profiled", "requirement", "serializer")

    def __init__(
        self, future: ScalerFuture, serializer: Serializer, profiled: bool, requirement: Sequence[str] | None = None
    ) -> None:
        self.future = future
        self.serializer = serializer
        self.profiled = profiled
        self.requirement = requirement  # the capabilities the task required: MissingCapabilityError.required

    def deliver(self, status: int, payload: Payload, profiling: ProfilingInfo | None) -> None:
        info = profiling if self.profiled else None
        if status == TaskStatus.SUCCESS:
            self.future._deliver(self.serializer, payload, info)
        elif status == TaskStatus.ERROR:
            self.future._deliver_error(payload, info)
        elif status == TaskStatus.CANCELED:
            self.future._cancel_quietly()
        else:
            self.future._fail(failure(status, payload, self.requirement))

    def fail(self, exc: BaseException) -> None:
        self.future._fail(exc)

    def cancel(self) -> None:
        self.future._cancel_quietly()


class Collector:
    """Outcomes of a map: payloads in order, and one event when the last arrives (cheaper than futures)."""

    def __init__(self, count: int) -> None:
        self.statuses = bytearray(count)
        self.payloads: list[Payload | None] = [None] * count
        self.remaining = count
        self.failed: int | None = None  # index of the first task that did not succeed
        self.error: BaseException | None = None
        self.done = threading.Event()
        if count == 0:
            self.done.set()

    def slot(self, index: int) -> CollectorSlot:
        return CollectorSlot(self, index)

    def fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        self.done.set()


class CollectorSlot:
    __slots__ = ("collector", "index")

    def __init__(self, collector: Collector, index: int) -> None:
        self.collector = collector
        self.index = index

    def deliver(self, status: int, payload: Payload, profiling: ProfilingInfo | None) -> None:
        c = self.collector
        c.statuses[self.index] = status
        c.payloads[self.index] = payload
        c.remaining -= 1
        if status != TaskStatus.SUCCESS and c.failed is None:
            c.failed = self.index  # map() stops waiting at the first failure
            c.done.set()
        if c.remaining == 0:
            c.done.set()

    def fail(self, exc: BaseException) -> None:
        self.collector.fail(exc)

    def cancel(self) -> None:
        self.collector.fail(concurrent.futures.CancelledError())


class Connection:
    """Owns the socket and the I/O thread of one client."""

    def __init__(
        self, address: str, name: str, heartbeat_interval: float, timeout: float, keys: PeerKeys | None = None
    ) -> None:
        self.address = address
        self.keys = keys
        self.core = ClientCore(name, heartbeat_interval, timeout)
        # The routing id: 128 random bits nobody else learns (with it, a peer could take this client's route).
        self.identity = f"C|{hostname()}|{os.getpid()}|{os.urandom(16).hex()}".encode()
        self.sinks: dict[int, ResultSink] = {}
        self.output = OutputPrinter()  # prints what tasks flagged stream_output wrote (I/O thread)
        self.connected = threading.Event()
        self.closed = threading.Event()
        self.close_kind: CloseKind | None = None
        self.close_reason = ""
        self.protected = True
        self.scheduler_name = ""
        self._requests: deque[Request] = deque()
        self._control: deque[Callable[[float], list[ClientCommand]]] = deque()
        self._wake_pending = False
        self._wake_read, self._wake_write = os.pipe()
        # The socket, and who may use it: the I/O thread holds this lock except while it sleeps in epoll, so a user
        # thread that takes it (without waiting) may send straight away (see submit_task).
        self._sock: zmq.Socket[Any] | None = None
        self._sock_fd = -1
        self._sock_lock = threading.Lock()
        self._epoll: select.epoll | None = None  # the I/O thread's: sleeps on the socket's FD and the wake pipe
        # A user thread waiting for its lone task reads the socket itself meanwhile (wait_alone): one at a time,
        # the I/O thread no longer watching the socket. What it reads and is not its result waits in the inbox
        # for the I/O thread, in order.
        self._receiving = threading.Lock()
        self._receiver_active = False
        self._inbox: deque[list[Payload]] = deque()
        self._alone_read, self._alone_write = os.pipe()
        self._alone_poller = select.poll()
        self._alone_poller.register(self._alone_read, select.POLLIN)
        self._sinks_lock = threading.Lock()
        self._mint_lock = threading.Lock()
        self._sinks_closed = False
        self._shutdown_answer: list[BaseException | None] = []
        self._shutdown_event = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"scaler-client-io-{name}", daemon=True)

    # ------------------------------------------------------------------------------------------- user side
    def start(self) -> None:
        self._thread.start()

    @property
    def io_thread(self) -> int | None:
        """The ident of the I/O thread (None before start): results, and done-callbacks, run there (except for a
        lone result read by the thread waiting for it, see wait_alone)."""
        return self._thread.ident

    def wait_connected(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.connected.is_set():
            if self.closed.is_set():
                break
            if not self.connected.wait(min(0.05, max(0.0, deadline - time.monotonic()))):
                if time.monotonic() >= deadline:
                    break
        if not self.connected.is_set():
            reason = self.close_reason or f"no scheduler answered within {timeout:g}s (is one running there?)"
            self.close(wait=True)
            error = AuthenticationError if self.close_kind == CloseKind.UNAUTHENTICATED else ConnectionFailedError
            raise error(f"could not connect to {self.address}: {reason}")

    def register(self, items: Iterable[tuple[int, ResultSink]]) -> None:
        """File where results go; raises if the session already ended (no future may wait forever)."""
        with self._sinks_lock:
            if self._sinks_closed:
                error = AuthenticationError if self.close_kind == CloseKind.UNAUTHENTICATED else ConnectionFailedError
                raise error(f"{self.close_reason} (scheduler {self.address})")
            self.sinks.update(items)

    def mint(self, count: int = 1) -> range:
        with self._mint_lock:  # user threads mint concurrently; ids must never repeat
            return self.core.mint(count)

    def submit(self, requests: Iterable[Request]) -> None:
        self._requests.extend(requests)
        self._wake()

    def submit_one(self, request: Request) -> None:
        self._requests.append(request)
        self._wake()

    def submit_task(self, task: NewTask) -> None:
        """Hand a task over whose result is registered already. If it is the only task pending (a round trip, not a
        burst: bursts are batched), it is sent at once from this thread when the I/O thread sleeps and holds
        nothing back, which spares waking that thread to send it (a tenth of a round trip on a small machine).
        Otherwise, or if this thread is the I/O thread (a done-callback), it goes the usual way. Requests keep
        their order either way: this sends only when nothing handed over earlier waits to be sent."""
        if len(self.sinks) != 1 or self._requests or self._control or not self._sock_lock.acquire(blocking=False):
            self.submit_one(task)
            return
        try:
            sock = self._sock
            if sock is None or self._requests or self._control or self.core.state != SessionState.CONNECTED:
                self._requests.append(task)
            else:
                for message in self.core.batch((task,)):
                    self._send(sock, message)
                # Sending made ZeroMQ read the socket's FD: input that came meanwhile no longer wakes the I/O
                # thread's poll, so it is woken here to read it.
                if not has_input(sock):
                    return
        finally:
            self._sock_lock.release()
        self._wake()

    def wait_alone(self, future: ScalerFuture, timeout: float | None) -> None:
        """Wait (at most `timeout` seconds, None: no limit) for the result of `future`, the only task this client
        waits for, by reading the socket in this thread: the result then wakes this thread straight away, not the
        I/O thread, which would wake this one in turn (on a small machine, that wake-up and the I/O thread's work
        are a tenth of a round trip). Returns when the future is done, when the time is up, or at
        once if another thread reads already, or other tasks are pending: then the caller waits the usual way.

        Only a lone result of `future` (one result, no profiling) is handled here; anything else read meanwhile
        goes to the I/O thread, in order, and it ends the future as usual (waking this thread)."""
        task_id = future.task_id
        if len(self.sinks) != 1 or task_id not in self.sinks or task_id in self.output.labels:
            return  # (a task's output is printed by the I/O thread, before its result is delivered)
        if not self._receiving.acquire(blocking=False):
            return
        delivery: tuple[ResultSink, int, Payload] | None = None
        try:
            with self._sock_lock:
                if self._sock is None or self._epoll is None:
                    return
                self._epoll.modify(self._sock_fd, 0)  # the I/O thread stops watching the socket
                self._receiver_active = True
            try:
                delivery = self._read_alone(future, task_id, timeout)
            finally:
                with self._sock_lock:
                    self._receiver_active = False
                    if self._sock is not None and self._epoll is not None:
                        self._epoll.modify(self._sock_fd, select.EPOLLIN)
                        # What came meanwhile and was not read here no longer wakes the I/O thread's poll.
                        if self._inbox or has_input(self._sock):
                            self._wake()
        finally:
            self._receiving.release()
        if delivery is not None:  # outside every lock: done-callbacks may do anything
            sink, status, payload = delivery
            sink.deliver(status, payload, None)
            wake_blocked_waits()

    def _read_alone(
        self, future: ScalerFuture, task_id: int, timeout: float | None
    ) -> tuple[ResultSink, int, Payload] | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        poller = self._alone_poller
        poller.register(self._sock_fd, select.POLLIN)
        # Whoever used the socket last looked for input before letting go of it (the I/O thread before it sleeps,
        # submit_task after it sent): a message waits unread only if the socket's FD says so. So the first look
        # is the poll.
        look = False
        try:
            while True:
                if look:
                    with self._sock_lock:
                        if self._sock is None:
                            return None
                        delivery = self._read_waiting(self._sock, task_id)
                    if delivery is not None:
                        return delivery
                if future.done():
                    return None
                wait = 0.1
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                    if wait <= 0:
                        return None
                for fd, _ in poller.poll(wait * 1000):
                    if fd == self._alone_read:
                        os.read(self._alone_read, 4096)
                look = True
        finally:
            poller.unregister(self._sock_fd)

    def _read_waiting(self, sock: zmq.Socket[Any], task_id: int) -> tuple[ResultSink, int, Payload] | None:
        """For wait_alone, with the socket's lock held: read what waits, up to the lone result of `task_id` (then
        returned, with its sink, for delivery); anything else goes to the I/O thread's inbox, in order."""
        while has_input(sock):
            parts = small_to_bytes(recv_frames(sock))
            message = read_lone_result(parts) if not self._inbox else None
            if message is not None and message.task_ids[0] == task_id:
                commands = self.core.received(time.monotonic(), message)
                sink = self.sinks.pop(task_id, None)
                if commands and sink is not None:
                    return sink, message.statuses[0], message.payloads[0]
                continue  # read by the session already (counted): nothing is left to deliver
            self._inbox.append(parts)
            self._wake()
        return None

    def _wake_receiver(self) -> None:
        if self._alone_write < 0:
            return
        try:
            os.write(self._alone_write, b"x")
        except OSError:
            pass

    def cancel(self, task_id: int) -> None:
        """Hand a cancellation over; a thread waiting in wait_alone (for that future, say) looks again."""
        self.submit_one(CancelRequest(task_id))
        if self._receiver_active:
            self._wake_receiver()

    def cancel_all(self) -> None:
        """Cancel every task whose result is awaited, here and now (Client.clear): its future is cancelled, or its
        map raises CancelledError, before this returns, and the scheduler is asked to cancel the tasks. Each sink
        stays filed until the scheduler answers for its task; the answer changes nothing (a cancelled future takes
        no result, and the map has raised already)."""
        pending = list(self.sinks.items())  # one step under the GIL: the I/O thread may pop sinks meanwhile
        if not pending:
            return
        self.submit([CancelRequest(task_id) for task_id, _ in pending])
        for _, sink in pending:
            sink.cancel()
        wake_blocked_waits()  # a task in a processor may wait on one of them
        if self._receiver_active:
            self._wake_receiver()

    def end_output(self, task_ids: list[int]) -> None:
        """Print nothing more of these tasks (graph nodes whose results never reach this client), in the I/O
        thread, after what it read so far."""
        self._call(lambda now: self._end_output(task_ids))

    def _end_output(self, task_ids: list[int]) -> list[ClientCommand]:
        self.output.end(task_ids)
        return []

    def request_shutdown(self, reason: str, timeout: float) -> None:
        """Ask the scheduler to stop the cluster; raises ProtectedModeError if it refuses."""
        self._call(lambda now: self.core.request_shutdown(reason))
        if not self._shutdown_event.wait(timeout) and not self.closed.is_set():
            raise ConnectionFailedError(f"the scheduler did not answer the shutdown request within {timeout:g}s")
        if self._shutdown_answer and self._shutdown_answer[0] is not None:
            raise self._shutdown_answer[0]

    def close(self, reason: str = "", wait: bool = True) -> None:
        if self._thread.is_alive():
            self._call(lambda now: self.core.disconnect(reason))
            if wait and threading.current_thread() is not self._thread:
                self._thread.join(5)
        self.closed.set()

    def _call(self, action: Callable[[float], list[ClientCommand]]) -> None:
        self._control.append(action)
        self._wake()

    def _wake(self) -> None:
        if not self._wake_pending:
            self._wake_pending = True
            try:
                os.write(self._wake_write, b"x")
            except OSError:
                pass

    # ------------------------------------------------------------------------------------------- I/O thread
    def _run(self) -> None:
        sock = new_dealer(self.identity, context(), self.keys)
        # Before connecting, so no failed handshake goes unseen; it also reports connections made and closed.
        # It also tells when nothing listens there: the client then fails (see _check_handshakes) instead of logging.
        watch = HandshakeWatch(sock, self.address, self.keys, "client", links=True, log_refusals=False)
        sock.connect(self.address)
        lock = self._sock_lock
        lock.acquire()  # held whenever this thread is not asleep in epoll (see submit_task)
        self._sock = sock
        self._sock_fd = socket_fd(sock)
        # A plain epoll on the socket's FD and the wake pipe: cheaper than zmq.Poller. The FD only tells that
        # something changed, so input is looked for after every use of the socket, before sleeping again. (epoll,
        # not poll: wait_alone turns the socket's FD off and on while this thread sleeps.)
        self._epoll = poller = select.epoll()
        poller.register(self._sock_fd, select.EPOLLIN)
        poller.register(self._wake_read, select.EPOLLIN)
        poller.register(watch.fd, select.EPOLLIN)
        try:
            self._execute(sock, self.core.start(time.monotonic(), hostname(), os.getpid()))
            next_tick = time.monotonic() + TICK_SECONDS
            sent = True  # the socket was used since input was last looked for
            while self.core.state != SessionState.CLOSED:
                if self._inbox:
                    self._take_inbox(sock)
                    sent = True
                if sent and has_input(sock):
                    self._receive(sock)  # reads until ZeroMQ says nothing waits
                sent = False
                timeout_ms = max(0, int((next_tick - time.monotonic()) * 1000))
                lock.release()
                try:
                    events = poller.poll(timeout_ms / 1000)
                finally:
                    lock.acquire()
                if self._inbox:  # read before anything this thread reads now
                    self._take_inbox(sock)
                    sent = True  # handling them may have used the socket
                for fd, _ in events:
                    if fd == self._wake_read:
                        os.read(self._wake_read, 4096)
                        self._wake_pending = False
                        self._forward(sock)
                        sent = True
                    elif fd == watch.fd:
                        self._check_handshakes(sock, watch)
                        sent = True  # a connection made again sends a heartbeat
                    elif self._session_open():  # _forward may have closed it
                        self._receive(sock)
                now = time.monotonic()
                if now >= next_tick:
                    self._check_handshakes(sock, watch)
                    self._execute(sock, self.core.tick(now))
                    next_tick = now + TICK_SECONDS
                    sent = True
        except Exception as exc:  # a bug here must not leave futures hanging
            logger.exception("client I/O thread failed")
            self._on_closed(Closed(CloseKind.UNREACHABLE, f"the client's I/O thread failed: {exc!r}"))
        finally:
            self._sock = None
            poller.close()
            self._epoll = None
            watch.close(sock)
            sock.close(linger=2000)
            lock.release()
            self._wake_receiver()
            # A thread in wait_alone sees the socket gone and leaves; then nobody polls the pipe it was woken by.
            if self._receiving.acquire(timeout=5):  # kept: no thread waits alone on a closed connection
                read, write = self._alone_read, self._alone_write
                self._alone_read = self._alone_write = -1
                os.close(read)
                os.close(write)
            os.close(self._wake_read)
            os.close(self._wake_write)
            self.closed.set()

    def _check_handshakes(self, sock: zmq.Socket[Any], watch: HandshakeWatch) -> None:
        """A failed handshake ends the session; connections closed and made again tell the core whether the
        scheduler is still there (ClientCore.link_down, link_up). A client still connecting gives up as soon as the
        watch finds nothing listening at the address (io.curve.Attempts: refused again and again for
        REFUSED_SECONDS), instead of waiting timeout_seconds for a scheduler that is not there."""
        failure = watch.failure()
        now = time.monotonic()
        for made in watch.take_links():
            self._execute(sock, self.core.link_up(now) if made else self.core.link_down(now))
        if failure is not None:
            self._execute(sock, self.core.unauthenticated(failure))
        elif watch.refused is not None and self.core.state == SessionState.CONNECTING:
            self._give_up(sock, watch.refused)

    def _give_up(self, sock: zmq.Socket[Any], reason: str) -> None:
        """End a session still connecting as unreachable: the core's disconnect, whose close (LOCAL: nothing to send
        while connecting) is told as UNREACHABLE, so the caller gets ConnectionFailedError with `reason`."""
        for command in self.core.disconnect(reason):
            if isinstance(command, Closed):
                command = Closed(CloseKind.UNREACHABLE, reason)
            self._execute(sock, [command])

    def _session_open(self) -> bool:
        return self.core.state != SessionState.CLOSED

    def _forward(self, sock: zmq.Socket[Any]) -> None:
        while self._control:
            self._execute(sock, self._control.popleft()(time.monotonic()))
        if not self._requests or self.core.state != SessionState.CONNECTED:
            return
        requests = self._requests
        batch = [requests.popleft() for _ in range(len(requests))]
        for message in self.core.batch(batch):
            self._send(sock, message)

    def _send(self, sock: zmq.Socket[Any], message: Message) -> None:
        """Every message to the scheduler goes here, with the socket's lock held: the session counts them. A message
        ZeroMQ has nowhere to put (the connection ended for good: a handshake failed, and the watch says why at its
        next look, at the latest on the next tick) is dropped by send_message rather than waited on for ever."""
        send_message(sock, message)
        self.core.count_sent(message)

    def _take_inbox(self, sock: zmq.Socket[Any]) -> None:
        """Messages a thread in wait_alone read and left to this thread, in the order they came."""
        while self._inbox and self.core.state != SessionState.CLOSED:
            parts = self._inbox.popleft()
            try:
                message = decode(parts, ACCEPTED_BY_CLIENT)
            except ProtocolError as exc:
                logger.warning("dropped a malformed message from the scheduler: %s", exc)
                continue
            self._execute(sock, self.core.received(time.monotonic(), message))

    def _receive(self, sock: zmq.Socket[Any]) -> None:
        """Read what waits until ZeroMQ says nothing does (the first read does not ask: the caller knows, or the
        FD said something changed)."""
        first = True
        while first or has_input(sock):
            try:
                message = recv_message(sock, zmq.NOBLOCK if first else 0, ACCEPTED_BY_CLIENT)
            except zmq.Again:
                return
            except ProtocolError as exc:
                logger.warning("dropped a malformed message from the scheduler: %s", exc)
                continue
            finally:
                first = False
            self._execute(sock, self.core.received(time.monotonic(), message))
            if self.core.state == SessionState.CLOSED:
                return

    def _execute(self, sock: zmq.Socket[Any], commands: list[ClientCommand]) -> None:
        for command in commands:
            if isinstance(command, Completed):
                self._on_results(command.results)
                wake_blocked_waits()
                if self._receiver_active:
                    self._wake_receiver()
            elif isinstance(command, Send):
                self._send(sock, command.message)
            elif isinstance(command, Connected):
                self.protected = command.protected
                self.scheduler_name = command.scheduler_name
                self.connected.set()
                self._forward(sock)
            elif isinstance(command, Rejected):
                self._on_rejected(command)
                wake_blocked_waits()
                if self._receiver_active:
                    self._wake_receiver()
            elif isinstance(command, Closed):
                self._on_closed(command)
            elif isinstance(command, Output):
                self.output.write(command.message)

    def _on_results(self, results: TaskResults) -> None:
        if self.output.labels:  # the last line a task printed, if it did not end it, comes before its result
            self.output.end(results.task_ids)
        sinks = self.sinks
        durations, peaks, cpu_times = results.durations_us, results.peak_memory, results.cpu_times_us
        for k, task_id in enumerate(results.task_ids):
            sink = sinks.pop(task_id, None)
            if sink is None:
                continue
            info = None
            if durations is not None and peaks is not None:
                info = ProfilingInfo(durations[k], peaks[k], cpu_times[k] if cpu_times is not None else 0)
            sink.deliver(results.statuses[k], results.payloads[k], info)

    def _on_rejected(self, command: Rejected) -> None:
        if command.code == ErrorCode.PROTECTED:
            self._shutdown_answer.append(ProtectedModeError(command.text))
            self._shutdown_event.set()
            return
        logger.error("the scheduler refused a request: %s", command.text)
        if self.output.labels:
            self.output.end(command.ids)
        error = TaskFailedError(f"the scheduler refused the task: {command.text}")
        for task_id in command.ids:
            sink = self.sinks.pop(task_id, None)
            if sink is not None:
                sink.fail(error)

    def _on_closed(self, command: Closed) -> None:
        self.close_kind = command.kind
        self.close_reason = command.reason
        if command.kind != CloseKind.LOCAL:
            log = logger.info if command.kind == CloseKind.SHUTDOWN else logger.error
            log("client session ended: %s", command.reason)
        kind = AuthenticationError if command.kind == CloseKind.UNAUTHENTICATED else ConnectionFailedError
        error = kind(f"{command.reason} (scheduler {self.address})")
        with self._sinks_lock:
            sinks, self.sinks = self.sinks, {}
            self._sinks_closed = True
        self.output.end_all()
        for sink in sinks.values():
            if command.kind == CloseKind.LOCAL:  # we closed it ourselves: what was pending is cancelled
                sink.cancel()
            else:
                sink.fail(error)
        if command.kind == CloseKind.SHUTDOWN:
            self._shutdown_answer.append(None)
        self._shutdown_event.set()
        self.closed.set()
        wake_blocked_waits()
        self._wake_receiver()
