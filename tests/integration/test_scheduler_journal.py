"""scaler_scheduler --journal (ADR 0023): a session a client opened survives the scheduler's kill -9 (the same command
started again restores it, and the client's resumed heartbeat is answered `recovered`), and so does its work, without
being sent again (replayed from the journal's frames); a journal in use, of another scheduler, or with a torn tail.
Real processes, real sockets; the client is a raw DEALER speaking scaler.protocol.messages (to see what the scheduler
holds, not what a client sends again). Each process is killed by its pid."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from scaler.protocol.messages import (
    ACCEPTED_BY_CLIENT,
    CancelTasks,
    ExplainTasks,
    Heartbeat,
    HeartbeatEcho,
    Hello,
    Message,
    PeerKind,
    PutObjects,
    SubmitTasks,
    TaskExplanations,
    Welcome,
    decode,
)
from tests.helpers import encoded, free_address, wait_until

pytestmark = pytest.mark.timeout(60)
TIMEOUT = 15.0


class Scheduler:
    def __init__(self, address: str, journal: Path, log: Path, *options: str) -> None:
        self.log_path = log
        monitor = f"ipc://{tempfile.gettempdir()}/scaler-journal-{os.getpid()}-{address.rsplit(':', 1)[1]}"
        self.command = [sys.executable, "-m", "scaler.entry_points.scheduler", address, "--journal", str(journal)]
        self.command += ["--monitor-address", monitor, "--logging-paths", str(log), *options]
        self.process = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_for_log(self, pattern: str) -> re.Match[str]:
        found: list[re.Match[str]] = []

        def seen() -> bool:
            found.extend(m for m in [re.search(pattern, self.log())] if m is not None)
            return bool(found) or self.process.poll() is not None

        wait_until(seen, timeout=TIMEOUT, what=f"{pattern!r} in the scheduler's log")
        assert found, f"the scheduler exited ({self.process.returncode}) without logging {pattern!r}:\n{self.log()}"
        return found[0]


@pytest.fixture()
def start(tmp_path: Path) -> Iterator[Callable[..., Scheduler]]:
    started: list[Scheduler] = []

    def start_one(address: str, journal: Path, *options: str) -> Scheduler:
        scheduler = Scheduler(address, journal, tmp_path / f"scheduler-{len(started)}.log", *options)
        started.append(scheduler)
        return scheduler

    yield start_one
    for scheduler in started:
        if scheduler.process.poll() is None:
            os.kill(scheduler.process.pid, signal.SIGKILL)
        scheduler.process.wait(10)


@pytest.fixture()
def dealer() -> Iterator[zmq.Socket[Any]]:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.ROUTING_ID, b"C|journal-test|%d|%s" % (os.getpid(), os.urandom(8).hex().encode()))
    sock.setsockopt(zmq.LINGER, 0)
    try:
        yield sock
    finally:
        sock.close(0)
        ctx.term()


def receive(sock: zmq.Socket[Any], kind: type[Message]) -> Any:
    """The next message of `kind` (others, as the scheduler's probes, are skipped); fails after TIMEOUT."""
    while sock.poll(int(TIMEOUT * 1000)):
        message = decode(sock.recv_multipart(), ACCEPTED_BY_CLIENT)
        if isinstance(message, kind):
            return message
    raise AssertionError(f"no {kind.__name__} within {TIMEOUT}s")


def send(sock: zmq.Socket[Any], message: Message) -> None:
    sock.send_multipart(encoded(message))


def open_session(sock: zmq.Socket[Any], address: str) -> Welcome:
    sock.connect(address)
    send(sock, Hello(PeerKind.CLIENT, "journal-test"))
    welcome: Welcome = receive(sock, Welcome)
    return welcome


def test_a_client_session_survives_kill_9_and_resumes_recovered(
    start: Callable[..., Scheduler], dealer: zmq.Socket[Any], tmp_path: Path
) -> None:
    address, journal = free_address(), tmp_path / "scheduler.journal"
    first = start(address, journal)
    first.wait_for_log("0 client sessions restored")
    welcome = open_session(dealer, address)
    assert welcome.journaled  # the client is told: its session survives the scheduler's restart
    os.kill(first.process.pid, signal.SIGKILL)
    assert first.process.wait(10) == -signal.SIGKILL
    again = start(address, journal)  # the same command
    again.wait_for_log(r"1 client session restored")
    send(dealer, Heartbeat(resumed=True, sent=0))  # its connection was made again by ZeroMQ
    echo: HeartbeatEcho = receive(dealer, HeartbeatEcho)
    while not echo.resumed:  # (a probe's echo)
        echo = receive(dealer, HeartbeatEcho)
    assert echo.recovered
    again.wait_for_log("client journal-test resumed its session")
    assert "Traceback" not in again.log()


def resume(sock: zmq.Socket[Any]) -> HeartbeatEcho:
    send(sock, Heartbeat(resumed=True, sent=0))  # its connection was made again by ZeroMQ
    echo: HeartbeatEcho = receive(sock, HeartbeatEcho)
    while not echo.resumed:  # (a probe's echo)
        echo = receive(sock, HeartbeatEcho)
    return echo


def test_a_clients_work_survives_kill_9_twice_without_being_sent_again(
    start: Callable[..., Scheduler], dealer: zmq.Socket[Any], tmp_path: Path
) -> None:
    address, journal = free_address(), tmp_path / "scheduler.journal"
    first = start(address, journal)
    first.wait_for_log("0 client sessions restored")
    prefix = open_session(dealer, address).id_prefix << 40
    function, data = prefix | 1, prefix | 2
    send(dealer, PutObjects([function, data], [b"a function", b"x" * 100_000]))
    ids = [prefix | (10 + n) for n in range(50)]  # no worker: they stay queued
    refs = [data] * len(ids)
    send(dealer, SubmitTasks(ids, [function] * len(ids), bytes(len(ids)), [1] * len(ids), refs, None, []))
    send(dealer, CancelTasks(ids[:5]))
    send(dealer, ExplainTasks(ids[:6]))  # (answered after the rest: all of it was taken, and journaled)
    texts = receive(dealer, TaskExplanations).texts
    assert all("not in the scheduler" in text or "cancel" in text for text in texts[:5]), texts
    assert "queued" in texts[5], texts
    for _ in range(2):  # and a crash during the first recovery's service: recovered from the compacted journal
        os.kill(first.process.pid, signal.SIGKILL)
        first.process.wait(10)
        first = start(address, journal)  # the same command
        first.wait_for_log(r"1 client session restored, with 45 tasks")
    assert resume(dealer).recovered
    send(dealer, ExplainTasks(ids[4:7]))  # nothing was sent again: the scheduler has them from its journal
    texts = receive(dealer, TaskExplanations).texts
    assert "not in the scheduler" in texts[0] and "queued" in texts[1] and "queued" in texts[2], texts
    assert "Traceback" not in first.log()


def test_a_journal_in_use_by_a_running_scheduler_is_refused(start: Callable[..., Scheduler], tmp_path: Path) -> None:
    address, journal = free_address(), tmp_path / "scheduler.journal"
    first = start(address, journal)
    first.wait_for_log("client sessions restored")
    second = start(address, journal)  # the journal is checked before the address is bound
    assert second.process.wait(TIMEOUT) == 1
    assert f"the journal {journal} is in use by another scheduler" in second.log()
    assert first.process.poll() is None


def test_a_journal_of_another_scheduler_is_refused(start: Callable[..., Scheduler], tmp_path: Path) -> None:
    address, journal = free_address(), tmp_path / "scheduler.journal"
    first = start(address, journal)
    first.wait_for_log("client sessions restored")
    os.kill(first.process.pid, signal.SIGTERM)
    assert first.process.wait(TIMEOUT) == 0
    other = free_address()
    refused = start(other, journal)
    assert refused.process.wait(TIMEOUT) == 1
    assert f"the journal {journal} belongs to the scheduler at {address}, not {other}" in refused.log()


def test_a_torn_tail_is_cut_with_a_warning(
    start: Callable[..., Scheduler], dealer: zmq.Socket[Any], tmp_path: Path
) -> None:
    address, journal = free_address(), tmp_path / "scheduler.journal"
    first = start(address, journal)
    first.wait_for_log("client sessions restored")
    assert open_session(dealer, address).journaled
    os.kill(first.process.pid, signal.SIGKILL)
    first.process.wait(10)
    size = journal.stat().st_size
    os.truncate(journal, size - 5)  # the session's group, cut in its COMMIT record: as a crash mid-write leaves it
    again = start(address, journal)
    match = again.wait_for_log(r"torn write \(a crash cut it\): cut (\d+) bytes at byte (\d+)")
    cut, at = int(match.group(1)), int(match.group(2))
    assert at + cut == size - 5 and cut > 0
    again.wait_for_log("0 client sessions restored")  # its group is gone, as if the crash came before its welcome
    assert again.process.poll() is None
