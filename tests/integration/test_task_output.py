"""Task output with real processes: what tasks print reaches a client made with stream_output (or a call through
client.options(stream_output=True)), each line prefixed with its task, before the task's result; the error text of a
task that raised reaches monitors (Status.failures).

The first tests speak to a stand-in scheduler on real sockets (the client's side alone); the others run a whole
cluster. The client writes from its I/O thread to sys.stdout and sys.stderr as they are then: capsys sees it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from scaler import Client, SchedulerClusterCombo
from scaler.client.output import prefix
from scaler.io.sockets import connect_subscriber
from scaler.monitor.top import next_status
from scaler.protocol.messages import (
    FLAG_STREAM_OUTPUT,
    OUTPUT_STDERR,
    OUTPUT_STDOUT,
    Heartbeat,
    HeartbeatEcho,
    Hello,
    SubmitTasks,
    TaskOutput,
    TaskResults,
    TaskStatus,
    Welcome,
    decode,
)
from scaler.serializer import DEFAULT_SERIALIZER
from scaler.worker.output import TRUNCATED
from tests.helpers import encoded, free_address, wait_until

pytestmark = pytest.mark.timeout(120)
TIMEOUT = 30


# ----------------------------------------------------------------------------------------------- a stand-in
class StandIn:
    """A scheduler stand-in in a thread of this process: it welcomes the client, echoes heartbeats, and answers each
    task submitted with the output pieces given for it (if its flags ask for output) and then its result."""

    def __init__(self, address: str, pieces: list[tuple[int, str]]) -> None:
        self.address = address
        self.pieces = pieces
        self.flags: dict[int, int] = {}  # task id -> the flags it was submitted with
        self._ctx = zmq.Context()
        self._sock: zmq.Socket[Any] = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.bind(address)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stand-in-scheduler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._sock.poll(20):
                peer, *parts = self._sock.recv_multipart()
                self._on_message(peer, decode(parts))
        self._sock.close(linger=0)
        self._ctx.term()

    def _on_message(self, peer: bytes, message: object) -> None:
        if isinstance(message, Hello):
            self._send(peer, Welcome(1, "stand-in", protected=True, peer_timeout_ms=600_000))
        elif isinstance(message, Heartbeat):
            self._send(peer, HeartbeatEcho())
        elif isinstance(message, SubmitTasks):
            for task_id, flags in zip(message.task_ids, message.flags, strict=True):
                self.flags[task_id] = flags
                if flags & FLAG_STREAM_OUTPUT:
                    for stream, text in self.pieces:
                        self._send(peer, TaskOutput([task_id], bytes([stream]), [text]))
                self._send(peer, TaskOutput([task_id + 1000], bytes([OUTPUT_STDOUT]), ["not this client's\n"]))
                payload = DEFAULT_SERIALIZER.serialize(task_id)
                self._send(peer, TaskResults([task_id], bytes([TaskStatus.SUCCESS]), [payload]))

    def _send(self, peer: bytes, message: Any) -> None:
        self._sock.send_multipart([peer, *encoded(message)])

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


PIECES = [(OUTPUT_STDOUT, "line one\nline t"), (OUTPUT_STDERR, "a warning\n"), (OUTPUT_STDOUT, "wo\nno newline")]


@pytest.fixture()
def stand_in() -> Iterator[StandIn]:
    scheduler = StandIn(free_address(), PIECES)
    try:
        yield scheduler
    finally:
        scheduler.close()


def test_the_client_prints_forwarded_output_with_its_task_before_the_result(
    stand_in: StandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    with Client(stand_in.address, stream_output=True) as client:
        capsys.readouterr()
        future = client.submit(pow, 2, 3)
        task_id = future.result(timeout=TIMEOUT)  # the stand-in answers with the task's id
        out, err = capsys.readouterr()  # all of it printed by now
    head = prefix("pow", task_id)
    assert out == f"{head}line one\n{head}line two\n{head}no newline\n"
    assert err == f"{head}a warning\n"
    assert stand_in.flags[task_id] & FLAG_STREAM_OUTPUT


def test_without_stream_output_tasks_are_not_flagged(stand_in: StandIn, capsys: pytest.CaptureFixture[str]) -> None:
    with Client(stand_in.address) as client:
        plain = client.submit(pow, 2, 3).result(timeout=TIMEOUT)
        streamed = client.options(stream_output=True).map(pow, [(2, 3)], timeout=TIMEOUT)[0]
        again = client.submit(pow, 2, 3).result(timeout=TIMEOUT)
        out, err = capsys.readouterr()
    assert not stand_in.flags[plain] & FLAG_STREAM_OUTPUT and not stand_in.flags[again] & FLAG_STREAM_OUTPUT
    assert stand_in.flags[streamed] & FLAG_STREAM_OUTPUT
    assert out.count("line one") == 1 and "not this client's" not in out and err.count("a warning") == 1


# ----------------------------------------------------------------------------------------------- a cluster
@pytest.fixture(scope="module")
def combo() -> Iterator[SchedulerClusterCombo]:
    cluster = SchedulerClusterCombo(
        address=free_address(), n_workers=1, per_worker_queue_size=4, heartbeat_interval_seconds=0.5,
        logging_level="WARNING",
    )  # fmt: skip
    try:
        yield cluster
    finally:
        cluster.shutdown()


def chatty(x: int) -> int:
    print(f"squaring {x}")
    print(f"careful with {x}", file=sys.stderr)
    return x * x


def wait_for_file(path: str) -> int:
    print("started, waiting", flush=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)
    print("done")
    return os.getpid()


def flood() -> int:
    line = "z" * 1023
    for _ in range(10 * 1024):  # 10 MiB
        print(line)
    return os.getpid()


def pid() -> int:
    return os.getpid()


def fails(text: str) -> None:
    raise ValueError(text)


def outer(client: Client) -> int:
    print("outer starts")
    return int(client.submit(chatty, 3).result())


def test_what_tasks_print_reaches_the_client_before_their_results(
    combo: SchedulerClusterCombo, capsys: pytest.CaptureFixture[str]
) -> None:
    with Client(combo.address, stream_output=True) as client:
        future = client.submit(chatty, 7)
        assert future.result(timeout=TIMEOUT) == 49
        out, err = capsys.readouterr()
        head = prefix("chatty", future.task_id)
        assert out == f"{head}squaring 7\n"
        assert err == f"{head}careful with 7\n"
        assert client.map(chatty, [(1,), (2,)], timeout=TIMEOUT) == [1, 4]
        assert client.get({"a": 3, "b": (chatty, "a")}, keys=["b"], timeout=TIMEOUT) == {"b": 9}
        out, _ = capsys.readouterr()
        assert sorted(line.split(") ", 1)[1] for line in out.splitlines()) == ["squaring 1", "squaring 2", "squaring 3"]


def test_without_stream_output_nothing_is_printed(
    combo: SchedulerClusterCombo, capsys: pytest.CaptureFixture[str]
) -> None:
    with Client(combo.address) as client:
        assert client.submit(chatty, 7).result(timeout=TIMEOUT) == 49
        assert client.map(chatty, [(1,)], timeout=TIMEOUT) == [1]
    assert capsys.readouterr() == ("", "")


def test_client_options_stream_output_is_for_the_calls_through_it_only(
    combo: SchedulerClusterCombo, capsys: pytest.CaptureFixture[str]
) -> None:
    with Client(combo.address) as client:
        loud = client.options(stream_output=True)
        assert repr(loud).endswith("stream_output=True>")
        future = loud.submit(chatty, 5)
        assert future.result(timeout=TIMEOUT) == 25
        assert client.submit(chatty, 6).result(timeout=TIMEOUT) == 36
        assert loud.options(stream_output=False).submit(chatty, 8).result(timeout=TIMEOUT) == 64
        out, err = capsys.readouterr()
    head = prefix("chatty", future.task_id)
    assert (out, err) == (f"{head}squaring 5\n", f"{head}careful with 5\n")


def test_a_long_task_prints_while_it_runs(
    combo: SchedulerClusterCombo, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    flag = str(tmp_path / "go")
    seen: list[str] = []

    def printed(text: str) -> bool:
        seen.append(capsys.readouterr().out)
        return text in "".join(seen)

    with Client(combo.address, stream_output=True) as client:
        future = client.submit(wait_for_file, flag)
        wait_until(lambda: printed("started, waiting"), timeout=TIMEOUT, what="the task's first line")
        assert not future.done()
        Path(flag).touch()
        future.result(timeout=TIMEOUT)
        assert printed(f"{prefix('wait_for_file', future.task_id)}done\n")


def test_output_past_1_mib_is_cut_and_the_worker_carries_on(
    combo: SchedulerClusterCombo, capsys: pytest.CaptureFixture[str]
) -> None:
    with Client(combo.address, stream_output=True) as client:
        future = client.submit(flood)
        worker = future.result(timeout=TIMEOUT)
        out, _ = capsys.readouterr()
        assert client.submit(pid).result(timeout=TIMEOUT) == worker  # the same processor runs the next task
    head = prefix("flood", future.task_id)
    lines = out.splitlines()
    assert lines[:-1] == [head + "z" * 1023] * 1024  # 1 MiB forwarded
    assert lines[-1] == head + TRUNCATED.rstrip("\n")


def test_a_nested_client_prints_into_its_task_which_forwards_it(
    combo: SchedulerClusterCombo, capsys: pytest.CaptureFixture[str]
) -> None:
    with Client(combo.address, stream_output=True) as client:
        future = client.submit(outer, client)
        assert future.result(timeout=TIMEOUT) == 9
        out, err = capsys.readouterr()
    head = prefix("outer", future.task_id)
    assert out.startswith(f"{head}outer starts\n{head}(chatty task 0x")
    assert out.endswith(") squaring 3\n") and err.endswith(") careful with 3\n") and err.startswith(head)


def test_the_error_text_of_a_failed_task_reaches_monitors(combo: SchedulerClusterCombo) -> None:
    sock = connect_subscriber(combo.monitor_address)
    try:
        wait_until(lambda: next_status(sock, 500) is not None, timeout=TIMEOUT, what="a first status")
        with Client(combo.address) as client:
            future = client.submit(fails, "no good")
            with pytest.raises(ValueError, match="no good"):
                future.result(timeout=TIMEOUT)
        texts: list[str] = []
        deadline = time.monotonic() + TIMEOUT
        while not texts and time.monotonic() < deadline:
            status = next_status(sock, 500)
            if status is not None:
                texts += [f.text for f in status.failures if f.task_id == future.task_id]
    finally:
        sock.close(linger=0)
    assert texts, "no failure entry for the task"
    assert texts[0].startswith("Traceback (most recent call last):\n")
    assert "in fails\n" in texts[0] and texts[0].endswith("ValueError: no good\n")
