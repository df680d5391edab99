"""The client's I/O thread: one ZeroMQ DEALER socket, a poll loop, and the ClientCore driving it.

User threads hand requests over through a deque and wake the loop through a pipe only when it is not already
awake, so a burst of submits costs one wake-up and travels as one batch. Results end futures (or map
collectors) right here; decoding the values waits until someone asks for them.

One way to use the socket, whoever uses it: the thread holding the socket's lock may send (_send_requests) and read
(_receive: decode(), the ClientCore, the commands), and the I/O thread holds it except while it sleeps. In a lone
round trip (one task pending, its result waited for) the calling thread takes the lock to send its task
(submit_task), and then to read in the I/O thread's place while it waits (wait: leader/follower), which saves a
thread wake-up each way. Done-callbacks always run in the I/O thread: a reading thread hands them over.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import select
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, Protocol

import zmq

from scaler.client.future import ProfilingInfo, ScalerFuture, callback_route, run_callback
from scaler.client.output import OutputPrinter
from scaler.core.client.session import (
    SCHEDULER_RESTART_GRACE_SECONDS,
    CancelRequest,
    ClientCommand,
    ClientCore,
    Closed,
    CloseKind,
    Completed,
    Connected,
    Explained,
    NewTask,
    Output,
    Rejected,
    Request,
    Resumed,
    Send,
    SessionState,
    Waiting,
    WorkersStated,
)
from scaler.errors import AuthenticationError, ConnectionFailedError, ProtectedModeError, TaskFailedError
from scaler.errors import task_failure as failure
from scaler.io.addresses import hostname
from scaler.io.curve import HandshakeWatch
from scaler.io.sockets import context, has_input, new_dealer, recv_message, send_message, socket_fd
from scaler.protocol.errors import ProtocolError
from scaler.protocol.messages import (
    ACCEPTED_BY_CLIENT,
    MAX_EXPLAINED,
    ErrorCode,
    Message,
    Payload,
    TaskResults,
    TaskStatus,
)
from scaler.security.keys import PeerKeys
from scaler.serializer import Serializer
from scaler.task_context import wake_blocked_waits

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

    def fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        self.done.set()


class EndSink:
    """(A graph watched for progress.) A silent task's end: its key is told to `ended`, nothing else is kept."""

    __slots__ = ("ended", "key")

    def __init__(self, ended: Callable[[Hashable], None], key: Hashable) -> None:
        self.ended = ended
        self.key = key

    def deliver(self, status: int, payload: Payload, profiling: ProfilingInfo | None) -> None:
        self.ended(self.key)

    def fail(self, exc: BaseException) -> None:
        self.ended(self.key)

    def cancel(self) -> None:
        self.ended(self.key)


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


class _ExplainRequest:
    __slots__ = ("task_ids", "texts")

    def __init__(self, task_ids: Sequence[int]) -> None:
        self.task_ids = task_ids
        self.texts: list[str] | None = None  # the answer, when it came


class Connection:
    """Owns the socket and the I/O thread of one client."""

    def __init__(
        self,
        address: str,
        name: str,
        heartbeat_interval: float,
        timeout: float,
        keys: PeerKeys | None = None,
        restart_grace: float = SCHEDULER_RESTART_GRACE_SECONDS,
    ) -> None:
        self.address = address
        self.keys = keys
        self.core = ClientCore(name, heartbeat_interval, timeout, restart_grace_seconds=restart_grace)
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
        # The socket and the session core, and who may use them: whoever holds this lock. The I/O thread holds it
        # except while it sleeps in epoll, so a user thread that takes it may send (submit_task) or read (wait).
        self._sock: zmq.Socket[Any] | None = None
        self._sock_fd = -1
        self._sock_lock = threading.Lock()
        self._epoll: select.epoll | None = None  # the I/O thread's: sleeps on the socket's FD and the wake pipe
        # The future of the user thread that reads in the I/O thread's place (wait), if one does: set and cleared
        # with the lock held; meanwhile the I/O thread's epoll does not watch the socket, the reader's poll does.
        # The reader is woken through its pipe, by whoever holds the lock and sees its future done.
        self._reader: ScalerFuture | None = None
        self._reader_read, self._reader_write = os.pipe()
        self._reader_poller = select.poll()
        self._reader_poller.register(self._reader_read, select.POLLIN)
        self._callbacks: deque[tuple[Callable[[ScalerFuture], object], ScalerFuture]] = deque()  # (see _hand_over)
        self._sinks_lock = threading.Lock()
        self._mint_lock = threading.Lock()
        self._sinks_closed = False
        self._shutdown_answer: list[BaseException | None] = []
        self._shutdown_event = threading.Event()
        self._workers_told = threading.Condition()  # notified when the scheduler states its workers, or on close
        self._workers_statements = 0
        self._explained = threading.Condition()  # notified when an answer to explainTasks comes, or on close
        self._explaining: deque[_ExplainRequest] = deque()  # asked, not answered, in the order asked
        self._thread = threading.Thread(target=self._run, name=f"scaler-client-io-{name}", daemon=True)

    # ------------------------------------------------------------------------------------------- user side
    def start(self) -> None:
        self._thread.start()

    @property
    def io_thread(self) -> int | None:
        """The ident of the I/O thread (None before start): done-callbacks of results run there, always."""
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
        burst: bursts are batched) and the I/O thread sleeps and has no control action to run first, this thread
        takes the socket's lock and sends what waits itself, which spares waking that thread to send it (with
        wait's reading, some 7 % of a round trip on a small machine: ADR 0008). Requests keep their order either
        way: they wait in one deque."""
        self._requests.append(task)
        if len(self.sinks) == 1 and not self._control and self._sock_lock.acquire(blocking=False):
            try:
                sock = self._sock
                if sock is not None:
                    self._send_requests(sock)
                    # Sending made ZeroMQ read the socket's FD: input that came meanwhile no longer wakes the I/O
                    # thread's poll, so it is woken here to read it.
                    if not has_input(sock):
                        return
            finally:
                self._sock_lock.release()
        self._wake()

    def wait(self, future: ScalerFuture, timeout: float | None) -> bool:
        """Wait (at most `timeout` seconds, None: no limit) for `future`, the only task this client waits for, by
        reading the socket in this thread, in the I/O thread's place (leader/follower): the result then wakes this
        thread straight away, not the I/O thread, which would wake this one in turn (with submit_task's sending,
        some 7 % of a round trip on a small machine: ADR 0008). It reads as the I/O thread does
        (_receive: every message, decode(), the ClientCore, the commands), with the socket's lock held while it
        reads, not while it sleeps; done-callbacks go to the I/O thread (_hand_over).

        Returns whether it read: False at once if `future` is not the only task pending, another thread reads
        already, or the session ended (the caller then waits on the future as usual). When it returns True the
        future is done, or the time is up."""
        if len(self.sinks) != 1 or future.task_id not in self.sinks:
            return False
        with self._sock_lock:  # held only for moments (user code runs under it only as done-callbacks)
            if self._sock is None or self._epoll is None or self._reader is not None or future._ended():
                return False
            self._epoll.modify(self._sock_fd, 0)  # the I/O thread stops watching the socket
            self._reader = future
            callback_route.hand_over = self._hand_over
        try:
            self._read_until(future, timeout)
        finally:
            with self._sock_lock:
                callback_route.hand_over = None
                self._reader = None
                if self._sock is None:  # the I/O thread ended while this one read: the last one out closes
                    self._close_reader_pipe()
                elif self._epoll is not None:
                    self._epoll.modify(self._sock_fd, select.EPOLLIN)
                    # What came meanwhile and was not read here no longer wakes the I/O thread's poll.
                    if has_input(self._sock):
                        self._wake()
        return True

    def _read_until(self, future: ScalerFuture, timeout: float | None) -> None:
        """Sleep on the socket's FD and the reader's pipe, and read what comes, until `future` is done or the time is
        up. Whoever used the socket last looked for input before letting go of it (the I/O thread before it sleeps,
        submit_task after it sent): a message waits unread only if the socket's FD says so. So the first look is
        the poll."""
        deadline = None if timeout is None else time.monotonic() + timeout
        poller = self._reader_poller
        while not future._ended():
            wait_ms = None
            if deadline is not None:
                wait_ms = (deadline - time.monotonic()) * 1000
                if wait_ms <= 0:
                    return
            for fd, _ in poller.poll(wait_ms):
                if fd == self._reader_read:
                    os.read(fd, 4096)
            with self._sock_lock:
                if self._sock is None:
                    return
                self._receive(self._sock, future)  # the first read does not ask: nothing, if only the pipe woke it

    def _hand_over(self, fn: Callable[[ScalerFuture], object], future: ScalerFuture) -> None:
        """A done-callback of a future that a reading thread ended (with the socket's lock held): to the I/O thread,
        which runs it next time it wakes, or here if that thread has ended."""
        if self._sock is None:
            run_callback(fn, future)
            return
        self._callbacks.append((fn, future))
        self._wake()

    def _run_callbacks(self) -> None:
        while self._callbacks:
            run_callback(*self._callbacks.popleft())

    def _wake_reader(self) -> None:
        """With the socket's lock held: the reader's future is done (ended or cancelled by another thread), or the
        session ended."""
        os.write(self._reader_write, b"x")

    def _close_reader_pipe(self) -> None:
        """With the socket's lock held, once the I/O thread ended and no thread reads (it may not start again)."""
        self._reader_poller.unregister(self._reader_read)
        os.close(self._reader_read)
        os.close(self._reader_write)

    def cancel(self, task_id: int) -> None:
        """Hand a cancellation over (the I/O thread then wakes a thread reading for the cancelled future)."""
        self.submit_one(CancelRequest(task_id))

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

    def ask_workers(self, timeout: float | None) -> bool:
        """Ask the scheduler how many workers may take tasks now (a heartbeat at once: its echo says) and wait for the
        answer, at most `timeout` seconds (None: no limit); whether it came (core.workers holds it). False also if the
        session ended."""
        with self._workers_told:
            seen = self._workers_statements
        self._call(self.core.ask_workers)
        with self._workers_told:
            told = lambda: self._workers_statements != seen or self.closed.is_set()  # noqa: E731
            return self._workers_told.wait_for(told, timeout) and not self.closed.is_set()

    def explain(self, task_ids: Sequence[int], timeout: float | None) -> list[str] | None:
        """Ask the scheduler why these tasks are where they are and wait for its answer, at most `timeout` seconds
        (None: no limit): one text per id, or None if it did not come in time or the session ended."""
        requests = [_ExplainRequest(task_ids[i : i + MAX_EXPLAINED]) for i in range(0, len(task_ids), MAX_EXPLAINED)]
        with self._explained:
            self._explaining.extend(requests)
        self._call(lambda now: self._explain_now(task_ids))
        answered = lambda: all(r.texts is not None for r in requests) or self.closed.is_set()  # noqa: E731
        with self._explained:
            if not self._explained.wait_for(answered, timeout) or self.closed.is_set():
                return None
        return [text for r in requests for text in r.texts or ()]

    def _explain_now(self, task_ids: Sequence[int]) -> list[ClientCommand]:
        """(With the socket's lock held.) The tasks submitted before the question go before it."""
        if self._sock is not None:
            self._send_requests(self._sock)
        return self.core.explain(task_ids)

    def _on_explained(self, answer: Explained) -> None:
        """Requests are answered in order; one whose answer never came (an old scheduler refused it) is skipped."""
        ids = answer.message.task_ids
        with self._explained:
            while self._explaining:
                request = self._explaining.popleft()
                if list(request.task_ids) == ids:
                    request.texts = answer.message.texts
                    break
            self._explained.notify_all()

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
        lock.acquire()  # held whenever this thread is not asleep in epoll (see submit_task, wait)
        self._sock = sock
        self._sock_fd = socket_fd(sock)
        self._reader_poller.register(self._sock_fd, select.POLLIN)  # only ever polled by one reader at a time
        # A plain epoll on the socket's FD and the wake pipe: cheaper than zmq.Poller. The FD only tells that
        # something changed, so input is looked for after every use of the socket, before sleeping again. (epoll,
        # not poll: wait turns the socket's FD off and on while this thread sleeps.)
        self._epoll = poller = select.epoll()
        poller.register(self._sock_fd, select.EPOLLIN)
        poller.register(self._wake_read, select.EPOLLIN)
        poller.register(watch.fd, select.EPOLLIN)
        try:
            self._execute(sock, self.core.start(time.monotonic(), hostname(), os.getpid()))
            next_tick = time.monotonic() + TICK_SECONDS
            sent = True  # the socket was used since input was last looked for
            while self.core.state != SessionState.CLOSED:
                if sent and has_input(sock):
                    self._receive(sock)  # reads until ZeroMQ says nothing waits
                sent = False
                reader = self._reader
                if reader is not None and reader._ended():  # ended here, cancelled, or the session ended
                    self._wake_reader()
                # In seconds: epoll rounds it up to whole milliseconds (cut down to 0 ms, it spun until the tick).
                timeout = max(0.0, next_tick - time.monotonic())
                lock.release()
                try:
                    events = poller.poll(timeout)
                finally:
                    lock.acquire()
                if self._callbacks:  # handed over by a reader while this thread slept: before what it reads now
                    self._run_callbacks()
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
            self._sock = None  # no thread uses the socket any more (a reader leaves when it looks next)
            poller.close()
            self._epoll = None
            watch.close(sock)
            sock.close(linger=2000)
            self._wake_pending = True  # nobody writes to the wake pipe any more (_wake)
            os.close(self._wake_read)
            os.close(self._wake_write)
            if self._reader is None:
                self._close_reader_pipe()
            else:
                self._wake_reader()  # it sees the socket gone, leaves, and closes its pipe
            self._run_callbacks()  # handed over before the end; later ones run where they are handed over
            lock.release()
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
        self._send_requests(sock)

    def _send_requests(self, sock: zmq.Socket[Any]) -> None:
        """Send what user threads handed over, in one batch, with the socket's lock held (I/O thread or
        submit_task). Held while a session with a journaled scheduler waits for it to come back (core.resuming):
        what it sends again goes first (Resumed)."""
        core = self.core
        if not self._requests or core.state != SessionState.CONNECTED or core.resuming:
            return
        requests = self._requests
        batch = [requests.popleft() for _ in range(len(requests))]
        for message in core.sending(batch):
            self._send(sock, message)

    def _send(self, sock: zmq.Socket[Any], message: Message) -> None:
        """Every message to the scheduler goes here, with the socket's lock held: the session counts them. A message
        ZeroMQ has nowhere to put (the connection ended for good: a handshake failed, and the watch says why at its
        next look, at the latest on the next tick) is dropped by send_message rather than waited on for ever."""
        send_message(sock, message)
        self.core.count_sent(message)

    def _receive(self, sock: zmq.Socket[Any], until: ScalerFuture | None = None) -> None:
        """Read what waits until ZeroMQ says nothing does (the first read does not ask: the caller knows, or the
        FD said something changed), or until the future a reader waits for is done (it looks for more input when
        it lets go of the socket, see wait)."""
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
            if self.core.state == SessionState.CLOSED or (until is not None and until._ended()):
                return

    def _execute(self, sock: zmq.Socket[Any], commands: list[ClientCommand]) -> None:
        for command in commands:
            if isinstance(command, Completed):
                self._on_results(command.results)
                wake_blocked_waits()
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
            elif isinstance(command, Closed):
                self._on_closed(command)
            elif isinstance(command, Output):
                self.output.write(command.message)
            elif isinstance(command, Explained):
                self._on_explained(command)
            elif isinstance(command, WorkersStated):
                with self._workers_told:
                    self._workers_statements += 1
                    self._workers_told.notify_all()
            elif isinstance(command, Waiting):
                logger.warning(
                    "the connection to the scheduler at %s closed; it keeps a journal: waiting up to %gs for it to "
                    "come back, unfinished tasks are kept (%d)",
                    self.address,
                    command.grace_seconds,
                    command.tasks,
                )
            elif isinstance(command, Resumed):
                self._on_resumed(sock, command)

    def _on_resumed(self, sock: zmq.Socket[Any], command: Resumed) -> None:
        """The session with the journaled scheduler goes on (what it needed sent again went just before): the
        requests held meanwhile go now."""
        if command.recovered:
            logger.info(
                "resumed the session with the scheduler at %s: it restarted from its journal; sent again %d objects "
                "and %d unfinished tasks",
                self.address,
                command.objects,
                command.tasks,
            )
        else:
            logger.info("resumed the session with the scheduler at %s over a new connection", self.address)
        self._send_requests(sock)

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
        with self._workers_told:
            self._workers_told.notify_all()
        with self._explained:
            self._explained.notify_all()
        wake_blocked_waits()
        self._wake()  # read by a reader, the close must wake the I/O thread, which ends
