"""A real worker (agent process and processor) against a raw ROUTER socket playing the scheduler, byte for byte:
lone dispatches run one after another, each result coming back as a TaskResults of its own."""

from __future__ import annotations

import multiprocessing
import os
import signal
from typing import Any

import pytest
import zmq

from scaler.core.worker.agent import AgentConfig
from scaler.io.sockets import bind_router, recv_frames, send_frames, small_to_bytes
from scaler.payloads import pack_function
from scaler.protocol.messages import (
    DispatchTasks,
    Hello,
    Message,
    PutObjects,
    Shutdown,
    TaskResults,
    TasksStarted,
    TaskStatus,
    Welcome,
    decode,
    encode,
)
from scaler.serializer import DEFAULT_SERIALIZER
from scaler.worker.agent import run_worker
from tests.helpers import free_address, payload_bytes

pytestmark = pytest.mark.timeout(60)
F = (1 << 40) | 1  # the function object's id


def triple(x: int) -> int:
    return 3 * x


class FakeScheduler:
    def __init__(self) -> None:
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.address = free_address()
        self.router = bind_router(self.address, self.ctx)
        self.worker = b""

    def receive(self, timeout_ms: int = 10_000) -> Message:
        """The next message from the worker that is not a heartbeat."""
        while True:
            if not self.router.poll(timeout_ms):
                raise TimeoutError("the worker sent nothing")
            frames = recv_frames(self.router)
            self.worker = frames[0].bytes
            message = decode(small_to_bytes(frames[1:]))
            if type(message).__name__ != "Heartbeat":
                return message

    def send(self, message: Message) -> None:
        send_frames(self.router, [self.worker, *encode(message)])

    def close(self) -> None:
        self.router.close(linger=0)
        self.ctx.term()


def test_lone_dispatches_reach_the_processor_and_their_results_come_back() -> None:
    scheduler = FakeScheduler()
    config = AgentConfig(name="w", hostname="h", pid=os.getpid(), heartbeat_interval_seconds=5)
    worker = multiprocessing.get_context("fork").Process(target=run_worker, args=(scheduler.address, config, "builtin"))
    worker.start()
    try:
        assert isinstance(scheduler.receive(), Hello)
        scheduler.send(Welcome(7, "fake"))
        scheduler.send(PutObjects([F], [pack_function(DEFAULT_SERIALIZER, triple)]))
        for k, x in enumerate([4, 5, 6]):
            task_id = (7 << 40) | (10 + k)
            argument = DEFAULT_SERIALIZER.serialize(x)
            scheduler.send(DispatchTasks([task_id], [F], b"\x00", [1], [0], None, [argument]))
            if k == 0:  # run times unknown: it says at once that the task may have started (later ones end fast)
                assert scheduler.receive() == TasksStarted([task_id])
            result = scheduler.receive()
            assert isinstance(result, TaskResults)
            assert result.task_ids == [task_id] and result.statuses == bytes([TaskStatus.SUCCESS])
            assert result.durations_us is None  # not profiled: the same message as the slow path's
            assert DEFAULT_SERIALIZER.deserialize(payload_bytes(result.payloads[0])) == 3 * x
        scheduler.send(Shutdown("test over"))
        worker.join(10)
        assert worker.exitcode == 0
    finally:
        if worker.is_alive():
            os.kill(worker.pid or 0, signal.SIGKILL)  # (a started process has a pid)
            worker.join(5)
        scheduler.close()
