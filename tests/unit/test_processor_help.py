"""The processor's side of help (tasks run inside a blocked task's wait), driven message by message.

A real Processor runs in a thread of this process, on one end of a real socket pair; the test plays its agent on the
other end. Tasks wait on futures this test ends, so every step happens in an order the test chooses.
"""

from __future__ import annotations

import mmap
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from scaler import task_context
from scaler.client.future import ScalerFuture
from scaler.core.worker import messages as pm
from scaler.payloads import pack_function
from scaler.protocol.records import Payload
from scaler.serializer import DefaultSerializer
from scaler.worker import pipe_codec
from scaler.worker.link import BlockingLink
from scaler.worker.processor import Processor

pytestmark = pytest.mark.timeout(60)

FUTURES: dict[str, ScalerFuture] = {}  # what the tasks wait on, by name
RAN: list[str] = []  # the tasks that ran, in order
FUNCTION = 7  # the object id of the function


def task(name: str, wait_on: str | None, ends: str | None = None) -> str:
    """A task: it waits on FUTURES[wait_on] (a nested wait) if given, ends FUTURES[ends] if given, and returns its
    own name."""
    RAN.append(name)
    if wait_on is not None:
        FUTURES[wait_on].result()
    if ends is not None:
        end(ends)
    return name


class Agent:
    """The test's end of the link: sends what an agent would, and reads what the processor says."""

    def __init__(self, sock: socket.socket) -> None:
        self.link = BlockingLink(sock)
        self.next_id = 0
        self.sent_function = False

    def run(self, *specs: tuple[str, str | None] | tuple[str, str | None, str], help_epoch: int = 0) -> list[int]:
        ids: list[int] = []
        tasks: list[pm.ProcessorTask] = []
        objects: list[int] = []
        payloads: list[Payload] = []
        if not self.sent_function:
            objects, payloads = [FUNCTION], [pack_function(DefaultSerializer(), task)]
            self.sent_function = True
        for spec in specs:
            self.next_id += 1
            ids.append(self.next_id)
            tasks.append((self.next_id, FUNCTION, 0, (0,) * len(spec), None))
            payloads += [DefaultSerializer.serialize(arg) for arg in spec]
        self.link.send(pipe_codec.encode(pm.RunTasks(objects, tasks, payloads, help_epoch)))
        return ids

    def send(self, message: pm.ToProcessor) -> None:
        self.link.send(pipe_codec.encode(message))

    def expect(self, kind: type[Any]) -> Any:
        """The next message from the processor, which must be of this kind."""
        while True:
            frames = self.link.receive(10)
            assert frames is not None, f"no message within 10s, expected {kind.__name__}"
            message = pipe_codec.decode(frames)
            assert isinstance(message, kind), f"expected {kind.__name__}, got {message!r}"
            return message

    def results(self) -> list[str]:
        message = self.expect(pm.Results)
        return [DefaultSerializer.deserialize(bytes(p)) for p in message.payloads]

    def collect(self, count: int) -> list[str]:
        """The values of the next `count` results, however they were batched."""
        values: list[str] = []
        while len(values) < count:
            values += self.results()
        return values


def end(name: str) -> None:
    FUTURES[name].set_result(None)
    task_context.wake_blocked_waits()  # what a client's I/O thread does after delivering results


@pytest.fixture()
def agent() -> Iterator[Agent]:
    FUTURES.clear()
    RAN.clear()
    ours, theirs = socket.socketpair()
    processor = Processor(BlockingLink(theirs), mmap.mmap(-1, 8), 0, os.getppid())

    def serve() -> None:
        processor._runner = threading.current_thread()  # it runs tasks here, not in the main thread
        processor.run()

    thread = threading.Thread(target=serve)
    thread.start()
    a = Agent(ours)
    a.expect(pm.Ready)
    try:
        yield a
    finally:
        for future in FUTURES.values():
            if not future.done():
                future.set_result(None)
        task_context.wake_blocked_waits()
        a.send(pm.Exit("test over"))
        thread.join(10)
        ours.close()
        assert not thread.is_alive()


def test_help_runs_inside_the_wait_and_late_help_is_dropped(agent: Agent) -> None:
    for name in ("f1", "f3"):
        FUTURES[name] = ScalerFuture(0, name)
    [t1] = agent.run(("t1", "f1"))
    assert agent.expect(pm.Blocked) == pm.Blocked(1, [t1])
    # Help for wait 1: t2 runs inside t1's wait; its result comes at once
    agent.run(("t2", None), help_epoch=1)
    assert agent.results() == ["t2"]
    # t3 runs inside the wait too, and waits in turn: wait 2, with both tasks started
    [t3] = agent.run(("t3", "f3"), help_epoch=1)
    assert agent.expect(pm.Blocked) == pm.Blocked(2, [t1, t3])
    agent.run(("late", None), help_epoch=1)  # meant for wait 1, which is over: never runs
    agent.run(("t5", None), help_epoch=2)
    assert agent.results() == ["t5"]
    # t3's wait ends: it says so, finishes, and t1 (still waiting) blocks anew
    end("f3")
    agent.expect(pm.Unblocked)
    agent.send(pm.Resume())
    assert agent.results() == ["t3"]
    assert agent.expect(pm.Blocked) == pm.Blocked(3, [t1])
    end("f1")
    agent.expect(pm.Unblocked)
    agent.send(pm.Resume())
    assert agent.results() == ["t1"]
    assert RAN == ["t1", "t2", "t3", "t5"]


def test_help_that_comes_as_the_wait_ends_runs_after_the_waiting_task(agent: Agent) -> None:
    FUTURES["f1"] = ScalerFuture(0, "f1")
    agent.run(("t1", "f1"))
    agent.expect(pm.Blocked)
    end("f1")
    agent.run(("t2", None), ("t3", None), help_epoch=1)  # sent before the agent heard that the wait ended
    agent.expect(pm.Unblocked)
    assert agent.results() == ["t1"]  # nothing more runs before the agent's Resume
    agent.send(pm.Resume())
    assert agent.collect(2) == ["t2", "t3"]
    assert RAN == ["t1", "t2", "t3"]


def test_a_wait_inside_a_wait_gives_up_the_help_it_had_not_started(agent: Agent) -> None:
    FUTURES["f1"] = ScalerFuture(0, "f1")
    FUTURES["f2"] = ScalerFuture(0, "f2")
    agent.run(("t1", "f1"))
    agent.expect(pm.Blocked)
    [t2, t3, t4] = agent.run(("t2", "f2"), ("t3", None), ("t4", None), help_epoch=1)
    # t2 waits inside t1's wait: t3 and t4 never started; the agent takes them back on this Blocked
    assert agent.expect(pm.Blocked) == pm.Blocked(2, [1, t2])
    agent.send(pm.Discard([t3, t4], confirm=True))
    assert agent.expect(pm.Discarded) == pm.Discarded([], [t3, t4])  # already forgotten: nothing to remove
    end("f2")
    agent.expect(pm.Unblocked)
    agent.send(pm.Resume())
    assert agent.results() == ["t2"]
    assert agent.expect(pm.Blocked) == pm.Blocked(3, [1])  # back inside t1's wait
    end("f1")
    agent.expect(pm.Unblocked)
    assert agent.results() == ["t1"]
    assert RAN == ["t1", "t2"]


def test_help_not_started_when_the_wait_ends_runs_after_the_waiting_task(agent: Agent) -> None:
    FUTURES["f1"] = ScalerFuture(0, "f1")
    agent.run(("t1", "f1"))
    agent.expect(pm.Blocked)
    # t2 runs inside t1's wait and ends it: t3, handed over for the same wait, has not started by then
    agent.run(("t2", None, "f1"), ("t3", None), help_epoch=1)
    assert agent.results() == ["t2"]
    agent.expect(pm.Unblocked)
    assert agent.results() == ["t1"]  # t3 waits for the agent's Resume
    assert RAN == ["t1", "t2"]
    agent.send(pm.Resume())
    assert agent.results() == ["t3"]
