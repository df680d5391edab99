"""The processor: the only process that runs user code. It receives tasks and objects from its agent over an
ipc socket, runs tasks one after another, and sends results back in small batches.

A task that blocks on nested tasks (future.result() inside the task) tells the agent, which hands the
remaining work to another processor; when no other processor may start, the agent hands tasks to the blocked
one, which runs them inside the wait (help). If user code crashes this process, the agent sees it and carries on.
"""

from __future__ import annotations

import gc
import logging
import mmap
import os
import pickletools
import select
import signal
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from scaler import task_context
from scaler.client import client as client_module
from scaler.core.outbox import MeasuredResultColumns, OutputColumns, Pieces
from scaler.core.worker import messages as pm
from scaler.io.lifetime import die_with_parent
from scaler.io.loop import DEFAULT_GC_THRESHOLDS
from scaler.payloads import pack_exception, unpack_function
from scaler.protocol.messages import FLAG_PROFILING, FLAG_STREAM_OUTPUT, Payload, TaskStatus
from scaler.protocol.records import FLAG_SHARED_ARGUMENTS, FLAG_SHARED_RESULT, OUTPUT_ERROR
from scaler.serializer import DEFAULT_SERIALIZER, Serializer, _is_plain, serializer_input
from scaler.shm import (
    TAG_INLINE,
    MalformedReference,
    Parts,
    Reply,
    SharedMemoryUnreachable,
    decode_reference,
    host_token,
    may_be_big,
    parse_reply,
    pickle_object,
    read_argument,
    share_result,
    split_payload,
)
from scaler.source_lines import register_shipped
from scaler.worker import pipe_codec
from scaler.worker.link import BlockingLink
from scaler.worker.output import Sender, TaskCapture, error_text

# Results are sent when the local queue empties, when this many wait, when a task took this long, or when the
# oldest waiting result is this old: few messages for tiny tasks, no delay for long ones.
FLUSH_COUNT = 64
FLUSH_AFTER_NS = 1_000_000
PARENT_CHECK_SECONDS = 1.0
WATCH_AFTER_SECONDS = 0.005  # user code running longer than this has its messages received by the watcher
HELP_LOOK_SECONDS = 0.5  # a blocked wait looks again this often, should a wake-up have been missed
HELP_LEVELS_PER_THREAD = 16  # tasks run inside waits inside waits...: a new thread (a fresh stack) every this many
_RUNNING = struct.Struct("<Q")

logger = logging.getLogger(__name__)


def run_processor(link: socket.socket, running: mmap.mmap, processor: int, parent_pid: int) -> None:
    """Entry point of a processor process (forked by the agent); `link` is its end of the socket pair."""
    die_with_parent(signal.SIGKILL)
    signal.set_wakeup_fd(-1)  # the agent's event loop owns that pipe, not us
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the agent decides when we stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    gc.unfreeze()  # user code runs here: the collector as Python sets it, not as the agent tuned it
    gc.set_threshold(*DEFAULT_GC_THRESHOLDS)
    Processor(BlockingLink(link), running, processor, parent_pid).run()


class Processor:
    def __init__(self, link: BlockingLink, running: mmap.mmap, processor: int, parent_pid: int) -> None:
        self.parent_pid = parent_pid
        self.link = link
        self.running_task = running  # shared with the agent: which task runs now, should we die running it
        self.raw_objects: dict[int, Payload] = {}
        self.functions: dict[int, tuple[Serializer, Any]] = {}
        # function object id -> where its client takes results by shared memory (its reply trailer), if it does
        self.replies: dict[int, Reply | None] = {}
        # object id -> {serializer identity: deserialized object}: a free message forgets an object's values by id
        self.values: dict[int, dict[int, Any]] = {}
        self.pending: deque[tuple[pm.ProcessorTask, tuple[Payload, ...]]] = deque()
        self.pending_lock = threading.Lock()  # a task is either started (popped) or discarded, never both
        self.send_lock = threading.Lock()
        self.receive_lock = threading.Lock()  # the main thread receives, or the watcher during long user code
        self.resumes_owed = 0
        self.epoch = 0  # the number of our latest Blocked
        self.blocked = False  # a Blocked was sent, and no Unblocked since
        self.stack: list[int] = []  # tasks started and not finished (more than one: tasks run inside waits)
        self.help: deque[tuple[pm.ProcessorTask, tuple[Payload, ...]]] = deque()  # to run inside the wait
        self.wake = threading.Event()  # a waiting task should look again: results came, or help
        self.running = True
        self.user_code_since: float | None = None
        self.last_started = 0.0  # when the latest task started: the watcher looks often only while work flows
        self.wake_read, self.wake_write = os.pipe()
        self.watching = False
        self._results = MeasuredResultColumns()  # its `profiled`: some result waiting was, send the CPU times too
        self._oldest_ns = 0
        self._runner = threading.main_thread()  # the thread running the latest started task
        self._output = OutputColumns()  # text tasks wrote or raised, sent just before the results it goes with
        self.capture: TaskCapture | None = None  # of the flagged task running now (the innermost one)
        self.sender = Sender()
        self.streams = (sys.stdout, sys.stderr)  # the processor's own

    # ------------------------------------------------------------------------------------------- loop
    def run(self) -> None:
        self._send(pm.Ready(os.getpid()))
        # Code run here is in a task (scaler.task_context): its waits help, a nested client leaves with its task.
        hooks = (self._current_task, self._enter_blocking, self._exit_blocking, self._wait_helping, self.wake.set)
        task_context.install(task_context.ProcessorHooks(*hooks))
        threading.Thread(target=self._watch, name="scaler-processor-watcher", daemon=True).start()
        fresh = False  # tasks were just received: nothing else (a Discard) can be waiting behind them yet
        try:
            while self.running:
                item = self._next_task()
                if item is None:
                    self._flush()
                    with self.receive_lock:
                        # the watcher may have received tasks (or a Resume) after _next_task looked
                        message = None if self._runnable() else self.link.receive(PARENT_CHECK_SECONDS)
                    if message is None and self._runnable():
                        continue
                    if message is None:
                        if os.getppid() != self.parent_pid:
                            return  # the agent is gone
                        continue
                    self._on_message(pipe_codec.decode(message))
                    fresh = True
                    continue
                if not fresh or self.link.pending:  # look for messages that came while the last task ran
                    with self.receive_lock:
                        self._drain()
                fresh = False
                self._run(*item)
                self._maybe_flush()
            self._flush()
        except EOFError:
            return  # the agent is gone
        finally:
            self.running = False
            task_context.install(None)

    def _current_task(self) -> int | None:
        """The innermost task running now (any thread may ask), None between tasks."""
        try:
            return self.stack[-1]
        except IndexError:
            return None

    def _runnable(self) -> bool:
        with self.pending_lock:
            return bool(self.pending) and not self.resumes_owed

    def _next_task(self) -> tuple[pm.ProcessorTask, tuple[Payload, ...]] | None:
        with self.pending_lock:
            if self.pending and not self.resumes_owed:
                return self.pending.popleft()
        return None

    def _run(self, task: pm.ProcessorTask, payloads: tuple[Payload, ...]) -> None:
        outer_since = self.user_code_since  # set when this task runs inside another task's wait
        self.stack.append(task[0])
        _RUNNING.pack_into(self.running_task, 0, task[0])
        self.user_code_since = self.last_started = time.monotonic()
        try:
            self._run_one(task, payloads)
        finally:
            self.stack.pop()
            self._release_clients(task[0])
            self.user_code_since = outer_since  # None between tasks
            if self.watching:  # the watcher is serving messages: take the socket back
                os.write(self.wake_write, b"x")
            _RUNNING.pack_into(self.running_task, 0, self.stack[-1] if self.stack else 0)

    def _release_clients(self, task_id: int) -> None:
        """The task ended: the clients passed to it (docs/security.md) are closed and forgotten, with their keys."""
        try:
            client_module.release_nested_clients(task_id)
        except Exception:  # a bug: say so, and serve the next task
            logger.exception("processor: closing the clients of task %#x failed", task_id)

    def _drain(self) -> None:
        while True:
            message = self.link.receive(0)
            if message is None:
                return
            self._on_message(pipe_codec.decode(message))

    def _watch(self) -> None:
        """While user code runs for long, receive here: tasks can be discarded (balanced away, cancelled) and
        new ones queued meanwhile."""
        while self.running:
            # Look every few milliseconds while tasks flow, ten times a second when idle: no signal per task.
            active = time.monotonic() - self.last_started < 1.0
            time.sleep(WATCH_AFTER_SECONDS if active else 0.1)
            since = self.user_code_since
            if since is None or time.monotonic() - since < WATCH_AFTER_SECONDS:
                continue
            with self.receive_lock:
                self.watching = True
                try:
                    while self.running and self.user_code_since == since:
                        link_fd = self.link.sock.fileno()
                        ready, _, _ = select.select([link_fd, self.wake_read], [], [], 1.0)
                        if self.wake_read in ready:
                            os.read(self.wake_read, 64)
                        if link_fd in ready:
                            self._drain()
                except EOFError:
                    os._exit(1)  # the agent is gone; so is any reason to finish the user's code
                finally:
                    self.watching = False

    def _on_message(self, message: Any) -> None:
        if isinstance(message, pm.RunTasks):
            self._on_run(message)
        elif isinstance(message, pm.DropObjects):
            self._on_drop(message.object_ids)
        elif isinstance(message, pm.Discard):
            self._on_discard(message)
        elif isinstance(message, pm.Resume):
            with self.pending_lock:
                self.resumes_owed -= 1
        elif isinstance(message, pm.Exit):
            self.running = False

    def _on_run(self, message: pm.RunTasks) -> None:
        payloads = message.payloads
        for k, object_id in enumerate(message.object_ids):
            self.raw_objects[object_id] = payloads[k]
        pos = len(message.object_ids)
        tasks = []
        for task in message.tasks:
            inline = task[3].count(0)
            tasks.append((task, tuple(payloads[pos : pos + inline])))
            pos += inline
        with self.pending_lock:
            if not message.help_epoch:
                self.pending.extend(tasks)
            elif message.help_epoch == self.epoch:
                # Help for our current wait; if that wait ended meanwhile, they run after its task.
                (self.help if self.blocked else self.pending).extend(tasks)
                self.wake.set()
            # else: help for a wait we left since; our later Blocked gave these tasks back to the agent

    def _on_drop(self, object_ids: list[int]) -> None:
        for object_id in object_ids:
            self.raw_objects.pop(object_id, None)
            self.functions.pop(object_id, None)
            self.replies.pop(object_id, None)
            self.values.pop(object_id, None)

    def _on_discard(self, message: pm.Discard) -> None:
        discard = set(message.task_ids)
        with self.pending_lock:
            removed = [item[0][0] for item in (*self.pending, *self.help) if item[0][0] in discard]
            self.pending = deque(item for item in self.pending if item[0][0] not in discard)
            self.help = deque(item for item in self.help if item[0][0] not in discard)
        if message.confirm:
            self._send(pm.Discarded(removed, message.task_ids))

    def _send(self, message: pm.FromProcessor) -> None:
        frames = pipe_codec.encode(message)
        with self.send_lock:
            self.link.send(frames)

    # ------------------------------------------------------------------------------------------- tasks
    def _run_one(self, task: pm.ProcessorTask, payloads: tuple[Payload, ...]) -> None:
        task_id, function_id, flags, arg_refs, keywords = task
        profiling = bool(flags & FLAG_PROFILING)
        start = time.perf_counter_ns()
        baseline = cpu_start = 0
        try:
            try:
                serializer, function = self._function(function_id)
            except ImportError as exc:  # a module the function needs is not on this worker: say which, and what to do
                raise _not_loadable(exc, "the task's function", self.raw_objects.get(function_id)) from exc
            try:
                if flags & FLAG_SHARED_ARGUMENTS:
                    args, kwargs = self._shared_arguments(serializer, arg_refs, keywords, payloads)
                else:
                    args, kwargs = self._arguments(serializer, arg_refs, keywords, payloads)
            except SharedMemoryUnreachable as unreachable:  # an argument or object: the client sends it again inline
                self._add(task_id, TaskStatus.FAILED, unreachable.payload(), 0, 0, False)
                return
            except ImportError as exc:
                raise _not_loadable(exc, f"an argument of {_name_of(function)}", None) from exc
            if profiling:
                baseline = _reset_peak_memory()
                cpu_start = time.process_time_ns()
            start = time.perf_counter_ns()
            if flags & FLAG_STREAM_OUTPUT or self.capture is not None:
                result = self._call_captured(task_id, flags, function, args, kwargs)
            else:
                result = function(*args, **kwargs)
        except BaseException as exc:
            duration = time.perf_counter_ns() - start
            cpu = time.process_time_ns() - cpu_start if profiling else 0
            error = _trim(exc)
            self._stage_output(task_id, [(OUTPUT_ERROR, error_text(error))])  # for monitors: before the result
            self._add(task_id, TaskStatus.ERROR, pack_exception(error), duration, baseline, profiling, cpu)
            return
        duration = time.perf_counter_ns() - start
        cpu = time.process_time_ns() - cpu_start if profiling else 0
        try:
            reply = self.replies.get(function_id) if flags & FLAG_SHARED_RESULT else None
            if reply is not None and may_be_big(result, reply.threshold):  # its client is on this host
                payload: Payload = _shared_result(result, reply)
            else:
                payload = serializer.serialize(result)
        except BaseException as exc:
            error = TypeError(f"the task's result ({type(result).__name__}) could not be serialized: {exc}")
            error.__cause__ = exc
            self._stage_output(task_id, [(OUTPUT_ERROR, error_text(error))])
            self._add(task_id, TaskStatus.ERROR, pack_exception(error), duration, baseline, profiling, cpu)
            return
        self._add(task_id, TaskStatus.SUCCESS, payload, duration, baseline, profiling, cpu)

    def _call_captured(
        self, task_id: int, flags: int, function: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]
    ) -> Any:
        """Call a task's function with sys.stdout and sys.stderr capturing what it writes (a task flagged
        FLAG_STREAM_OUTPUT), or with the processor's own streams (a task run inside a flagged task's wait); they are
        put back after. What is captured and not yet sent goes with the task's result."""
        outer, saved = self.capture, (sys.stdout, sys.stderr)
        capture = None
        if flags & FLAG_STREAM_OUTPUT:
            capture = TaskCapture(task_id, self._send_output, self.sender, self.streams)
            sys.stdout, sys.stderr = capture.stdout, capture.stderr
        else:
            sys.stdout, sys.stderr = self.streams
        self.capture = capture
        try:
            return function(*args, **kwargs)
        finally:
            sys.stdout, sys.stderr = saved
            self.capture = outer
            if capture is not None:
                self._stage_output(task_id, capture.close())

    def _send_output(self, task_id: int, pieces: Pieces) -> None:
        """Output of a task still running (a capture's call, in the thread that wrote or in the sender's)."""
        output = OutputColumns()
        output.add_pieces(task_id, pieces)
        message = output.take()
        if message is not None:
            self._send(message)

    def _stage_output(self, task_id: int, pieces: Pieces) -> None:
        self._output.add_pieces(task_id, pieces)

    def _function(self, function_id: int) -> tuple[Serializer, Any]:
        entry = self.functions.get(function_id)
        if entry is None:
            raw = self.raw_objects.get(function_id)
            if raw is None:
                raise RuntimeError(f"function object {function_id:#x} never reached this worker")
            made = client_module.nested_clients_made()
            function_object = bytes(raw)  # type: ignore[call-overload]
            entry = unpack_function(function_object)
            register_shipped(function_object)  # for tracebacks: the lines of code that came by value
            reply = parse_reply(function_object) if entry[0] is DEFAULT_SERIALIZER else None
            self.replies[function_id] = reply if reply is not None and reply.token == host_token() else None
            if client_module.nested_clients_made() == made:  # one that brought a client is unpickled for every task
                self.functions[function_id] = entry
        return entry

    def _arguments(
        self,
        serializer: Serializer,
        arg_refs: tuple[int, ...],
        keywords: tuple[str, ...] | None,
        payloads: tuple[Payload, ...],
        values: list[Any] | None = None,
    ) -> tuple[list[Any], dict[str, Any]]:
        """values: the inline arguments deserialized already (in place of payloads)."""
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        pos = 0
        for k, ref in enumerate(arg_refs):
            if ref:
                value = self._object(serializer, ref)
            elif values is not None:
                value = values[pos]
                pos += 1
            else:
                value = serializer.deserialize(serializer_input(serializer, payloads[pos]))
                pos += 1
            if keywords is not None and keywords[k]:
                kwargs[keywords[k]] = value
            else:
                args.append(value)
        return args, kwargs

    def _shared_arguments(
        self,
        serializer: Serializer,
        arg_refs: tuple[int, ...],
        keywords: tuple[str, ...] | None,
        payloads: tuple[Payload, ...],
    ) -> tuple[list[Any], dict[str, Any]]:
        """The arguments of a task flagged FLAG_SHARED_ARGUMENTS: each payload is tagged inline or a reference to a
        shared-memory segment (scaler.shm), read and deserialized with the segment mapped only meanwhile."""

        def deserialize(view: memoryview) -> Any:
            return serializer.deserialize(serializer_input(serializer, view))

        values = []
        for payload in payloads:
            try:
                tag, view = split_payload(payload)
                ref = None if tag == TAG_INLINE else decode_reference(view)
            except MalformedReference as exc:  # the task's error: a builtin type, which any client can unpickle
                raise ValueError(str(exc)) from None
            if ref is None:
                values.append(deserialize(view[1:]))
            else:
                values.append(read_argument(ref, deserialize))
        return self._arguments(serializer, arg_refs, keywords, (), values)

    def _object(self, serializer: Serializer, object_id: int) -> Any:
        key = id(serializer)
        values = self.values.get(object_id)
        if values is not None and key in values:
            return values[key]
        raw = self.raw_objects.get(object_id)
        if raw is None:
            raise RuntimeError(f"object {object_id:#x} never reached this worker")
        made = client_module.nested_clients_made()
        value = serializer.deserialize(serializer_input(serializer, raw))
        if client_module.nested_clients_made() != made:  # it brought a client: unpickled for every task, not kept
            return value
        if values is None:
            values = self.values[object_id] = {}
        values[key] = value
        return value

    # ------------------------------------------------------------------------------------------- results
    def _add(
        self,
        task_id: int,
        status: int,
        payload: Payload,
        duration_ns: int,
        baseline: int,
        profiled: bool,
        cpu_ns: int = 0,
    ) -> None:
        """cpu_ns: the processor's CPU time (user + system, all threads: time.process_time) during a profiled run.
        MeasuredResultColumns.add's work, done here: this is the one call per task."""
        results = self._results
        if not results.ids:
            self._oldest_ns = time.perf_counter_ns()
        results.ids.append(task_id)
        results.statuses.append(status)
        results.payloads.append(payload)
        results.durations.append(max(1, duration_ns // 1000))
        results.peaks.append(max(0, _peak_memory() - baseline) if profiled else 0)
        results.cpu.append(cpu_ns // 1000)
        if profiled:
            results.profiled = True
        if duration_ns >= FLUSH_AFTER_NS:
            self._flush()

    def _maybe_flush(self) -> None:
        if not self._results.ids:
            return
        if (
            not self.pending
            or len(self._results.ids) >= FLUSH_COUNT
            or time.perf_counter_ns() - self._oldest_ns >= FLUSH_AFTER_NS
        ):
            self._flush()

    def _flush(self) -> None:
        results = self._results
        if not results.ids:
            return
        output = self._output.take() if self._output.ids else None  # staged only with a result, and goes before it
        if output is not None:
            self._send(output)
        cpu_times = results.cpu if results.profiled else None
        statuses = bytes(results.statuses)
        self._send(pm.Results(results.ids, statuses, results.durations, results.peaks, results.payloads, cpu_times))
        results.clear()

    # ------------------------------------------------------------------------------------------- nesting
    def _enter_blocking(self) -> bool:
        """A task is about to wait on a nested future: let another processor take our other tasks."""
        if threading.current_thread() is not self._runner:  # a thread of the user's: it keeps the processor
            return False
        self._announce_blocked()
        return True

    def _announce_blocked(self) -> None:
        self._flush()
        with self.pending_lock:
            # The agent re-queues every task we hold and have not started, and sends Discard for them.
            self.pending.clear()
            self.help.clear()
            self.epoch += 1
            self.blocked = True
            blocked = pm.Blocked(self.epoch, list(self.stack))
        self._send(blocked)

    def _wait_helping(self, is_done: Callable[[], bool], timeout: float | None) -> None:
        """The wait of a blocked task (in the runner thread): until is_done() or the timeout, running the tasks the
        agent hands over for this wait (it does so when no other processor may start). A task run here delays the
        waiting one until it ends, and may block and be helped in turn."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.wake.clear()  # before looking: a wake-up that comes after the look is kept
            if is_done():
                return
            with self.pending_lock:
                item = self.help.popleft() if self.help and self.blocked else None
            if item is not None:
                if len(self.stack) % HELP_LEVELS_PER_THREAD:
                    self._run(*item)
                else:
                    self._run_on_new_thread(item)
                self._flush()  # the waiting task may need this very result
                if not self.blocked and not is_done():  # a wait inside that task ended: we wait again
                    self._announce_blocked()
                continue
            left = HELP_LOOK_SECONDS if deadline is None else min(HELP_LOOK_SECONDS, deadline - time.monotonic())
            if left <= 0:
                return
            self.wake.wait(left)

    def _run_on_new_thread(self, item: tuple[pm.ProcessorTask, tuple[Payload, ...]]) -> None:
        """Run a task inside a wait on a thread of its own, and wait for it: tasks run inside waits pile up on
        one stack, which would otherwise outgrow the thread's stack and Python's recursion limit."""
        outer = self._runner
        failure: list[BaseException] = []

        def run() -> None:
            self._runner = threading.current_thread()
            try:
                self._run(*item)
            except BaseException as exc:  # ours, not the user's (_run_one keeps those): raised below
                failure.append(exc)

        thread = threading.Thread(target=run, name=f"scaler-processor-level-{len(self.stack)}", daemon=True)
        thread.start()
        thread.join()
        self._runner = outer
        if failure:
            raise failure[0]

    def _exit_blocking(self) -> None:
        with self.pending_lock:
            if not self.blocked:
                return  # a wait of a task run inside this one's wait ended last, and said so
            self.blocked = False
            # Help not started runs after the waiting task, in the order given (the agent keeps it in our window).
            self.pending.extendleft(reversed(self.help))
            self.help.clear()
            self.resumes_owed += 1
        self._send(pm.Unblocked())


WORKER_NAME_VARIABLE = "SCALER_WORKER_NAME"  # the agent's name, which its processors inherit (errors name it)


def _not_loadable(exc: ImportError, what: str, raw: Any) -> ImportError:
    """The error of a task whose function or argument needs a module this worker cannot import: of the same class
    (except ModuleNotFoundError: still works), naming what could not be loaded, the worker, and what to do."""
    module = exc.name or "the module"
    if raw is not None:
        qualname = _pickled_name(bytes(raw), exc.name)
        if qualname:
            what = f"the task's function {qualname}"
    worker = os.environ.get(WORKER_NAME_VARIABLE) or f"pid {os.getppid()}"
    text = (
        f"{what} cannot be loaded on worker {worker} (host {socket.gethostname()}): {exc}. Install {module!r} on the "
        f"workers (the version the client has), or send its code along: cloudpickle.register_pickle_by_value({module})"
        " in the client before submitting (docs/guide/errors.md, 'Functions and modules the workers lack')"
    )
    try:
        return type(exc)(text, name=exc.name, path=exc.path)
    except TypeError:  # (a subclass that takes other arguments)
        return ImportError(text, name=exc.name, path=exc.path)


def _pickled_name(raw: bytes, module: str | None) -> str:
    """module.qualname of the first global a pickle names from `module` (or a submodule of it): what the function
    is, when it cannot be unpickled here. "" if none is found (only read on this error's path)."""
    if not module:
        return ""
    strings: list[str] = []
    try:
        for opcode, argument, _ in pickletools.genops(raw):
            if isinstance(argument, bytes) and argument[:1] == b"\x80":  # a pickle inside (the function's own bytes)
                inner = _pickled_name(argument, module)
                if inner:
                    return inner
            elif isinstance(argument, str):
                strings.append(argument)
            elif opcode.name == "STACK_GLOBAL" and len(strings) >= 2:
                owner, name = strings[-2], strings[-1]
                if owner == module or owner.startswith(module + "."):
                    return f"{owner}.{name}"
            if opcode.name == "GLOBAL" and isinstance(argument, str) and " " in argument:
                owner, name = argument.split(" ", 1)
                if owner == module or owner.startswith(module + "."):
                    return f"{owner}.{name}"
    except Exception:  # (a pickle this reader does not follow)
        return ""
    return ""


def _shared_result(result: Any, reply: Reply) -> Payload:
    """A result pickled into a segment its client reads in place, when it is big enough (its big buffers copied once,
    into the segment: scaler.shm.pickle_object); else its ordinary pickle, inline (also if no segment could be
    made)."""
    payload = pickle_object(result, _is_plain(result), reply.threshold)
    if isinstance(payload, Parts):
        return share_result(payload, reply) or DEFAULT_SERIALIZER.serialize(result)
    return payload


def _name_of(function: Any) -> str:
    name = getattr(function, "__qualname__", None) or type(function).__name__
    module = getattr(function, "__module__", None)
    return f"{module}.{name}" if module and module != "__main__" else str(name)


def _trim(exc: BaseException) -> BaseException:
    """Drop this module's own frames from the head of the traceback: the user's frames are what matter."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    if tb is not None:
        exc.__traceback__ = tb
    return exc


def _status_kb(field: str) -> int:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _reset_peak_memory() -> int:
    """Reset the kernel's peak-RSS mark (Linux) and return the current RSS, the baseline of a profiled run."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        pass
    return _status_kb("VmRSS:")


def _peak_memory() -> int:
    """Peak RSS since the last reset (VmHWM), or the current RSS where the kernel does not tell."""
    return _status_kb("VmHWM:") or _status_kb("VmRSS:")
