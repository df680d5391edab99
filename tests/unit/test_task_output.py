"""Task output, piece by piece: the processor's capture of what a task writes (scaler.worker.output), the error text
of a task that raised, a real Processor sending both before the task's result, and the client's printer
(scaler.client.output)."""

from __future__ import annotations

import io
import mmap
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from scaler.client.options import KEEP, Options, check_options, describe
from scaler.client.output import OutputPrinter
from scaler.core.worker import messages as pm
from scaler.payloads import pack_function
from scaler.protocol.messages import FLAG_STREAM_OUTPUT, OUTPUT_ERROR, OUTPUT_STDERR, OUTPUT_STDOUT, TaskOutput
from scaler.protocol.records import Payload, TaskOptions
from scaler.serializer import DefaultSerializer
from scaler.worker import output, pipe_codec
from scaler.worker.link import BlockingLink
from scaler.worker.output import MAX_PIECE, MAX_TASK_OUTPUT, TRUNCATED, Sender, TaskCapture, error_text
from scaler.worker.processor import Processor
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(60)

Sent = list[tuple[int, list[tuple[int, str]]]]


def capture(fallback: tuple[Any, Any] = (None, None)) -> tuple[TaskCapture, Sent]:
    sent: Sent = []
    return TaskCapture(5, lambda task_id, pieces: sent.append((task_id, pieces)), Sender(), fallback), sent


# ----------------------------------------------------------------------------------------------- the capture
def test_short_output_waits_for_the_end_of_the_task_in_runs_of_one_stream() -> None:
    c, sent = capture()
    print("one", file=c.stdout)
    print("two", file=c.stdout)
    c.stderr.write("warn")
    print("three", file=c.stdout)
    assert sent == []
    assert c.close() == [(OUTPUT_STDOUT, "one\ntwo\n"), (OUTPUT_STDERR, "warn"), (OUTPUT_STDOUT, "three\n")]


def test_16_kib_buffered_go_at_once() -> None:
    c, sent = capture()
    c.stdout.write("x" * 10_000)
    assert sent == []
    c.stdout.write("y" * 7_000)
    assert sent == [(5, [(OUTPUT_STDOUT, "x" * 10_000 + "y" * 7_000)])]
    assert c.close() == []


def test_text_buffered_for_a_while_is_sent_while_the_task_runs() -> None:
    c, sent = capture()
    print("half way", file=c.stdout)
    wait_until(lambda: sent, timeout=5, what="the sender thread")  # after SEND_AFTER_SECONDS
    assert sent == [(5, [(OUTPUT_STDOUT, "half way\n")])]
    assert c.close() == []


def test_output_over_1_mib_is_cut_with_a_note_and_the_rest_dropped() -> None:
    c, sent = capture()
    line = "z" * 1023 + "\n"
    for _ in range(10 * 1024):  # 10 MiB
        c.stdout.write(line)
    pieces = [piece for _, batch in sent for piece in batch] + c.close()
    texts = [text for _, text in pieces]
    assert all(len(text.encode()) <= MAX_PIECE for text in texts)
    forwarded = "".join(texts)
    assert forwarded == line * 1024 + TRUNCATED  # exactly 1 MiB, then the note on a line of its own
    assert len(forwarded) - len(TRUNCATED) == MAX_TASK_OUTPUT


def test_a_cut_in_the_middle_of_a_line_puts_the_note_on_the_next_one() -> None:
    c, sent = capture()
    c.stderr.write("é" * MAX_TASK_OUTPUT)  # 2 MiB of UTF-8
    pieces = [piece for _, batch in sent for piece in batch] + c.close()
    data = "".join(text for _, text in pieces).encode()
    assert data == ("é" * (MAX_TASK_OUTPUT // 2)).encode() + b"\n" + TRUNCATED.encode()
    assert {stream for stream, _ in pieces} == {OUTPUT_STDERR}
    assert all(len(text.encode()) <= MAX_PIECE for _, text in pieces)


def test_pieces_are_valid_utf_8() -> None:
    c, _ = capture()
    c.stdout.write("bad \udcff byte; ok ✓\n")  # a lone surrogate (os.fsdecode of a bad file name, say)
    assert c.close() == [(OUTPUT_STDOUT, "bad ? byte; ok ✓\n")]


def test_after_the_task_or_in_a_forked_child_text_goes_to_the_processors_own_streams(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out, err = io.StringIO(), io.StringIO()
    c, sent = capture((out, err))
    print("before", file=c.stdout)
    monkeypatch.setattr(output, "current_pid", lambda: -1)  # a process forked from the processor
    print("in a child", file=c.stdout)
    monkeypatch.undo()
    assert c.close() == [(OUTPUT_STDOUT, "before\n")]
    print("a thread left behind", file=c.stderr)
    assert (out.getvalue(), err.getvalue(), sent) == ("in a child\n", "a thread left behind\n", [])


def test_a_capture_stream_takes_text_only() -> None:
    c, _ = capture()
    with pytest.raises(TypeError, match="must be str, not bytes"):
        # a call mypy refuses, made anyway: the run-time check is what is tested
        c.stdout.write(b"bytes")  # type: ignore[arg-type]
    assert not c.stdout.isatty() and c.stdout.encoding == "utf-8" and c.stdout.name == "<stdout>"
    with pytest.raises(io.UnsupportedOperation):
        c.stdout.fileno()


# ----------------------------------------------------------------------------------------------- error text
def fails(depth: int) -> None:
    if depth:
        fails(depth - 1)
    raise ValueError("bad input")


def raised(depth: int) -> BaseException:
    try:
        fails(depth)
    except ValueError as exc:
        return exc
    raise AssertionError("fails() did not raise")


def test_the_error_text_is_the_traceback() -> None:
    text = error_text(raised(0))
    assert text.startswith("Traceback (most recent call last):\n")
    assert "in fails\n" in text and text.endswith("ValueError: bad input\n")


def test_a_long_traceback_keeps_its_last_8_kib() -> None:
    exc = raised(3)
    exc.__cause__ = KeyError("k" * 20_000)  # printed first, and cut
    text = error_text(exc)
    assert len(text.encode()) <= 8 * 1024
    assert text.startswith(output.ERROR_TRUNCATED) and text.endswith("ValueError: bad input\n")


# ----------------------------------------------------------------------------------------------- the processor
FUNCTION = 7


def shout(text: str) -> str:
    print(text)
    print("to stderr", file=sys.stderr)
    return text


def raise_value_error(text: str) -> None:
    raise ValueError(text)


def print_and_wait(event_name: str) -> str:
    print("started")
    EVENTS[event_name].wait(20)
    return "done"


EVENTS: dict[str, threading.Event] = {}


class Agent:
    """The test's end of a real Processor's link (the processor runs in a thread of this process)."""

    def __init__(self, sock: socket.socket) -> None:
        self.link = BlockingLink(sock)
        self.functions: dict[Callable[..., Any], int] = {}
        self.next_id = 100

    def run(self, fn: Callable[..., Any], arg: Any, flags: int = 0) -> int:
        objects: list[int] = []
        payloads: list[Payload] = []
        if fn not in self.functions:
            self.functions[fn] = FUNCTION + len(self.functions)
            objects, payloads = [self.functions[fn]], [pack_function(DefaultSerializer(), fn)]
        self.next_id += 1
        task = (self.next_id, self.functions[fn], flags, (0,), None)
        payloads.append(DefaultSerializer.serialize(arg))
        self.link.send(pipe_codec.encode(pm.RunTasks(objects, [task], payloads)))
        return self.next_id

    def next(self) -> Any:
        frames = self.link.receive(10)
        assert frames is not None, "no message from the processor within 10s"
        return pipe_codec.decode(frames)


@pytest.fixture()
def agent() -> Iterator[Agent]:
    ours, theirs = socket.socketpair()
    processor = Processor(BlockingLink(theirs), mmap.mmap(-1, 8), 0, os.getppid())

    def serve() -> None:
        processor._runner = threading.current_thread()
        processor.run()

    thread = threading.Thread(target=serve)
    thread.start()
    a = Agent(ours)
    assert isinstance(a.next(), pm.Ready)
    try:
        yield a
    finally:
        for event in EVENTS.values():
            event.set()
        a.link.send(pipe_codec.encode(pm.Exit("test over")))
        thread.join(10)
        ours.close()


def test_a_flagged_task_sends_what_it_printed_before_its_result(agent: Agent) -> None:
    stdout = sys.stdout
    task = agent.run(shout, "hello", FLAG_STREAM_OUTPUT)
    assert agent.next() == pm.Output([task, task], bytes([OUTPUT_STDOUT, OUTPUT_STDERR]), ["hello\n", "to stderr\n"])
    assert isinstance(agent.next(), pm.Results)
    assert sys.stdout is stdout  # put back


def test_a_task_not_flagged_sends_no_output(agent: Agent, capsys: pytest.CaptureFixture[str]) -> None:
    agent.run(shout, "quiet")
    assert isinstance(agent.next(), pm.Results)
    assert capsys.readouterr().out == "quiet\n"  # the processor's own stdout, as before


def test_a_task_that_raised_sends_its_traceback_before_its_result(agent: Agent) -> None:
    task = agent.run(raise_value_error, "bad input")
    message = agent.next()
    assert isinstance(message, pm.Output) and message.task_ids == [task]
    assert message.streams == bytes([OUTPUT_ERROR])
    assert message.texts[0].startswith("Traceback (most recent call last):\n")
    assert "in raise_value_error\n" in message.texts[0] and "processor.py" not in message.texts[0]
    assert message.texts[0].endswith("ValueError: bad input\n")
    assert agent.next().statuses == bytes([1])  # the result, status error


def test_a_long_task_sends_its_output_while_it_runs(agent: Agent) -> None:
    EVENTS["long"] = threading.Event()
    task = agent.run(print_and_wait, "long", FLAG_STREAM_OUTPUT)
    assert agent.next() == pm.Output([task], bytes([OUTPUT_STDOUT]), ["started\n"])  # the task still waits
    EVENTS["long"].set()
    assert isinstance(agent.next(), pm.Results)


# ----------------------------------------------------------------------------------------------- the client
def test_the_client_prints_each_line_once_whole_with_its_task(capsys: pytest.CaptureFixture[str]) -> None:
    printer = OutputPrinter()
    printer.expect([0x10000000002], "square")
    printer.write(TaskOutput([0x10000000002] * 3, bytes([1, 1, 2]), ["one\ntw", "o\nthr", "oops\n"]))
    assert capsys.readouterr() == ("(square task 0x10000000002) one\n(square task 0x10000000002) two\n",
                                   "(square task 0x10000000002) oops\n")  # fmt: skip
    printer.end([0x10000000002])  # the last line had no newline: printed at the task's end
    assert capsys.readouterr().out == "(square task 0x10000000002) thr\n"
    printer.write(TaskOutput([0x10000000002], bytes([1]), ["late\n"]))
    assert capsys.readouterr() == ("", "")
    assert printer.labels == {}


def test_the_client_ignores_tasks_it_does_not_expect_and_error_text(capsys: pytest.CaptureFixture[str]) -> None:
    printer = OutputPrinter()
    printer.expect([3], "f")
    printer.write(TaskOutput([4, 3], bytes([1, OUTPUT_ERROR]), ["not ours\n", "Traceback ...\n"]))
    assert capsys.readouterr() == ("", "")


def test_stream_output_is_a_flag_of_the_options_on_and_off() -> None:
    on = check_options(Options(), KEEP, KEEP, KEEP, True)
    assert on == Options(TaskOptions(), FLAG_STREAM_OUTPUT)
    assert describe(on) == "timeout=None retries=0 priority=0 stream_output=True"
    assert check_options(on, 2, KEEP, KEEP) == Options(TaskOptions(timeout_ms=2000), FLAG_STREAM_OUTPUT)  # kept
    assert check_options(on, KEEP, KEEP, KEEP, False) == Options()
    with pytest.raises(ValueError, match="stream_output must be True or False, not 1"):
        check_options(on, KEEP, KEEP, KEEP, 1)


def test_a_failing_send_does_not_stop_the_sender_for_later_tasks(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def send_due(self) -> None:
            raise RuntimeError("boom")

    sender = Sender()
    # Broken has only the method Sender calls
    sender.arm(Broken())  # type: ignore[arg-type]
    sent: Sent = []
    later = TaskCapture(5, lambda task_id, pieces: sent.append((task_id, pieces)), sender, (None, None))
    print("later", file=later.stdout)  # buffered: armed on the same sender, sent after its delay
    wait_until(lambda: bool(sent), timeout=10, what="the later task's output")
    assert "sending a task's printed output failed" in caplog.text
