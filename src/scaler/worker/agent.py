"""The worker agent's shell: a DEALER socket to the scheduler, a ROUTER socket (ipc) to its processors, the
processors themselves, and AgentCore deciding everything.

User code never runs here, so the agent keeps heartbeating while a task runs, and survives its processor.
"""

from __future__ import annotations

import functools
import logging
import mmap
import multiprocessing
import os
import signal
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import psutil
import zmq

from scaler.core.common import Log, unreachable
from scaler.core.worker.agent import (
    AgentConfig,
    AgentCore,
    AgentEvent,
    FromProcessor,
    FromScheduler,
    KillIfRunning,
    KillProcessor,
    ProcessorExited,
    SchedulerLink,
    Started,
    StartProcessor,
    Stop,
    StopRequested,
    Tick,
    ToProcessor,
    ToScheduler,
)
from scaler.io.curve import HandshakeWatch
from scaler.io.driver import Driver
from scaler.io.sockets import (
    context,
    has_input,
    new_dealer,
    read_waiting,
    send_message,
    small_to_bytes,
    socket_fd,
)
from scaler.protocol.errors import ProtocolError
from scaler.protocol.messages import ACCEPTED_BY_WORKER, Refused, decode
from scaler.security.keys import PeerKeys
from scaler.task_context import SCHEDULER_ADDRESS_VARIABLE
from scaler.worker import link, pipe_codec
from scaler.worker.processor import WORKER_NAME_VARIABLE, run_processor

logger = logging.getLogger(__name__)

TICK_SECONDS = 0.1
DRAIN_LIMIT = 64


class WorkerAgent:
    def __init__(
        self,
        address: str,
        config: AgentConfig,
        keys: PeerKeys | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.address = address
        self.config = config
        self.keys = keys
        self.core = AgentCore(config)
        self.ctx = context()
        # The routing id: 128 random bits nobody else learns (with it, a peer could take this worker's route).
        self.identity = f"W|{config.hostname}|{os.getpid()}|{os.urandom(16).hex()}".encode()
        self.scheduler: zmq.Socket[Any] | None = None
        self.watch: HandshakeWatch | None = None
        self.processes: dict[int, multiprocessing.process.BaseProcess] = {}
        self.links: dict[int, link.AsyncLink] = {}
        self.running_slots: dict[int, mmap.mmap] = {}
        self.me = psutil.Process()
        self.driver: Driver[int] = Driver(f"Worker[{config.name}]", clock)
        self._last_stats = -1e18
        self._stats_now = (0.0, 0, 0.0, 0)
        self._mp = multiprocessing.get_context("fork")
        self._burst = True  # whether more messages were waiting at the last look
        self._watched: dict[int, psutil.Process] = {}  # processors whose memory is read, by number

    async def run(self) -> int:
        try:
            return await self.driver.serve(self._start)
        finally:
            self._close()

    def _start(self) -> None:
        driver = self.driver
        # its processors inherit these (fork): Client() in a task connects to this scheduler; errors name the worker
        os.environ[SCHEDULER_ADDRESS_VARIABLE] = self.address
        os.environ[WORKER_NAME_VARIABLE] = self.config.name
        self.scheduler = new_dealer(self.identity, self.ctx, self.keys)
        self.watch = HandshakeWatch(self.scheduler, self.address, self.keys, "worker", links=True)
        self.scheduler.connect(self.address)
        self.me.cpu_percent()
        driver.on_signals(self._on_signal)
        driver.reader(socket_fd(self.scheduler), "reading the scheduler's messages", self._on_scheduler_readable)
        driver.reader(self.watch.fd, "the handshake watch", self._on_handshake)
        self._handle(Started(driver.clock()))
        driver.soon("reading the scheduler's messages", self._on_scheduler_readable)  # a ZeroMQ FD signals edges
        driver.every(TICK_SECONDS, "the tick", self._tick)

    def _close(self) -> None:
        # Let Disconnect and the last results leave, within a session. Without one there is nothing to say (the
        # scheduler sees the connection close), and messages for a scheduler not reached would hold the exit 2 s.
        linger = 2000 if self.core.reachable() else 0
        if self.watch is not None and self.scheduler is not None:
            self.watch.close(self.scheduler)
        self._kill_all()
        if self.scheduler is not None:
            self.scheduler.close(linger=linger)
        self.ctx.destroy(linger=linger)

    # ------------------------------------------------------------------------------------------- events
    def _on_signal(self, sig: int) -> None:
        self._handle(StopRequested(self.driver.clock(), f"received {signal.Signals(sig).name}"))

    def _on_handshake(self) -> None:
        """A failed handshake is the scheduler refusing this worker's keys: the agent stops, saying why."""
        failure = self.watch.failure() if self.watch is not None else None
        if failure is not None and not self.core.stopped:
            self._handle(FromScheduler(self.driver.clock(), Refused(failure, key_problem=True)))
        links = self.watch.take_links() if self.watch is not None else []
        if links and not self.core.stopped:  # the connection closed or was made again (see SchedulerLink)
            now = self.driver.clock()
            for made in links:
                self.driver.guard("the scheduler link", self.core.feed, SchedulerLink(now, made))
            self._act()

    def _on_scheduler_readable(self) -> None:
        sock = self.scheduler
        if sock is None or self.core.stopped:
            return
        now = self.driver.clock()
        for frames in read_waiting(sock, self._burst, DRAIN_LIMIT):
            parts = small_to_bytes(frames)
            try:
                message = decode(parts, ACCEPTED_BY_WORKER)
            except ProtocolError as exc:
                logger.warning("Worker: dropped a malformed message from the scheduler: %s", exc)
                continue
            self.driver.guard("handling a message", self.core.feed, FromScheduler(now, message))
        self._act()

    def _on_processor_messages(self, processor: int, messages: list[list[bytearray]]) -> None:
        if self.core.stopped:
            return
        now = self.driver.clock()
        for frames in messages:
            event = FromProcessor(now, processor, pipe_codec.decode(frames))  # type: ignore[arg-type]
            self.driver.guard("handling a processor's message", self.core.feed, event)
        self._act()

    def _tick(self) -> None:
        now = self.driver.clock()
        if now - self._last_stats >= self.config.heartbeat_interval_seconds:
            self._stats_now = self._stats()
            self._last_stats = now
        self._on_handshake()  # its FD may have fired before the loop watched it
        memory = self._processor_memory() if self.config.memory_limit_bytes else ()
        self._handle(Tick(now, *self._stats_now, processor_rss=memory))

    def _watch(self) -> dict[int, psutil.Process]:
        """A psutil handle per live processor, kept from one reading to the next: cpu_percent() measures since the
        previous call on the same handle (a new handle each time always read 0 %)."""
        for processor, process in self.processes.items():
            watched = self._watched.get(processor)
            if (watched is None or watched.pid != process.pid) and process.pid is not None:
                try:
                    self._watched[processor] = psutil.Process(process.pid)
                    self._watched[processor].cpu_percent(interval=None)  # the baseline
                except psutil.Error:
                    continue
        for processor in [p for p in self._watched if p not in self.processes]:
            del self._watched[processor]
        return self._watched

    def _processor_memory(self) -> tuple[tuple[int, int], ...]:
        """(processor, RSS) of each live processor, read every tick when there is a memory limit (a /proc read)."""
        samples = []
        for processor, watched in self._watch().items():
            try:
                samples.append((processor, watched.memory_info().rss))
            except psutil.Error:
                continue
        return tuple(samples)

    def _stats(self) -> tuple[float, int, float, int]:
        cpu, rss = self.me.cpu_percent(), self.me.memory_info().rss
        p_cpu, p_rss = 0.0, 0
        for ps in self._watch().values():
            try:
                p_cpu += ps.cpu_percent(interval=None)
                p_rss += ps.memory_info().rss
            except psutil.Error:
                continue
        return cpu, rss, p_cpu, p_rss

    def _on_process_exit(self, processor: int) -> None:
        process, task_id = self._forget(processor)
        if process is None:
            return
        process.join(1)
        self._handle(ProcessorExited(self.driver.clock(), processor, process.exitcode, task_id))

    def _forget(self, processor: int) -> tuple[multiprocessing.process.BaseProcess | None, int]:
        """Drop our handles on a processor: (its process, the task it was running when we looked, 0 if none)."""
        running = self.running_slots.pop(processor, None)
        task_id = struct.unpack_from("<Q", running)[0] if running is not None else 0
        if running is not None:
            running.close()
        channel = self.links.pop(processor, None)
        if channel is not None:
            channel.close()
        process = self.processes.pop(processor, None)
        if process is not None:
            self.driver.drop_reader(process.sentinel)
        return process, task_id

    # ------------------------------------------------------------------------------------------- commands
    def _handle(self, event: AgentEvent) -> None:
        self.core.feed(event)
        self._act()

    def _act(self) -> None:
        """Carry out the core's commands (with SCALER_DEBUG, its invariants are checked first), then look again for
        input from the scheduler that arrived meanwhile: ZeroMQ's FD is edge-triggered, and a send may have consumed
        its edge. One call after each event or burst of messages (every call costs on the round trip's path)."""
        core, driver = self.core, self.driver
        commands = core.flush()
        if driver.debug:
            core.validate()
        for command in commands:
            match command:
                case ToScheduler():
                    assert self.scheduler is not None
                    send_message(self.scheduler, command.message)
                case ToProcessor():
                    self._to_processor(command)
                case StartProcessor():
                    self._start_processor(command.processor)
                case KillProcessor():
                    self._kill(command.processor)
                case KillIfRunning():
                    self._kill_if_running(command.processor, command.task_id)
                case Log():
                    logger.log(command.level, "Worker[%s]: %s", self.config.name, command.text)
                case Stop():
                    self.driver.stop(command.exit_code)
                case _:
                    unreachable(command)
        if driver.loop is None or core.stopped:
            return
        self._burst = self.scheduler is not None and has_input(self.scheduler)
        if self._burst:
            driver.soon("reading the scheduler's messages", self._on_scheduler_readable)

    def _to_processor(self, command: ToProcessor) -> None:
        channel = self.links.get(command.processor)
        if channel is not None:  # else the processor is gone; its exit is reported through its sentinel
            channel.send(pipe_codec.encode(command.message))

    def _start_processor(self, processor: int) -> None:
        loop = self.driver.loop
        assert loop is not None
        ours, theirs = socket.socketpair()
        running = mmap.mmap(-1, 8)  # shared with the child: the id of the task it is running, 0 between tasks
        process = self._mp.Process(
            target=run_processor,
            args=(theirs, running, processor, os.getpid()),
            name=f"scaler-processor-{processor}",
            daemon=False,
        )
        process.start()
        theirs.close()
        self.processes[processor] = process
        self.running_slots[processor] = running
        self.driver.reader(process.sentinel, f"processor {processor}'s exit", lambda: self._on_process_exit(processor))
        self.links[processor] = link.AsyncLink(
            loop,
            ours,
            # guard(what, handler, processor, messages) for each batch read, made in C (a lambda: one more Python call)
            functools.partial(
                self.driver.guard, "reading a processor's messages", self._on_processor_messages, processor
            ),
        )

    def _kill_if_running(self, processor: int, task_id: int) -> None:
        """Kill the processor if it runs `task_id` now; its exit is then reported like any other."""
        running = self.running_slots.get(processor)
        process = self.processes.get(processor)
        if running is not None and process is not None and struct.unpack_from("<Q", running)[0] == task_id:
            logger.info("Worker[%s]: stopping processor %d to cancel task %#x", self.config.name, processor, task_id)
            process.kill()

    def _kill(self, processor: int) -> None:
        process, _ = self._forget(processor)
        if process is not None:
            process.kill()
            process.join(5)

    def _kill_all(self) -> None:
        for processor in list(self.processes):
            self._kill(processor)


def run_worker(address: str, config: AgentConfig, event_loop: str, keys: PeerKeys | None = None) -> int:
    """Entry point of a worker process: runs the agent until it stops; returns its exit code."""
    from scaler.io.loop import run

    return run(WorkerAgent(address, config, keys).run(), event_loop)
