"""Manager mode: the kit binds an address as a fake scheduler (ROUTER), waits for one worker manager's hello and checks
it against docs/protocol.md section 8, "Worker managers": its hello and first managerReport, then one unit started
(scaleUnits.start: its workers must say hello on the same address, naming the unit) and stopped (scaleUnits.stop: the
manager's report must say the unit ended, and its workers must leave), then shutdown.

The unit's workers are served as the worker mode serves a worker, without tasks: welcome, heartbeat echoes. The kit
decides as a scheduler would, never the manager: a worker of a unit the kit did not ask for is a fault.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import zmq

from scaler.conformance.wire import (
    PROTOCOL_VERSION,
    CheckFailed,
    CheckSkipped,
    Deadline,
    Keys,
    Msg,
    Report,
    build,
    expect,
    parse,
)
from scaler.conformance.worker_checks import PEER_TIMEOUT_MS, WORKER_MAY_SEND, FakeScheduler, capability_problem

MANAGER_MAY_SEND = ("hello", "heartbeat", "managerReport", "disconnect")
MAX_UNITS = 100_000  # the most units a report may name as maxUnits (docs/protocol.md section 6, managerReport)
POLL_SECONDS = 0.2

CHECKS: list[tuple[str, str]] = [
    ("hello", "the manager's hello: version 1, kind manager, a name, valid capabilities (what its workers offer)"),
    (
        "first_report",
        "a managerReport right after welcome, in range: 0 <= minUnits <= maxUnits, 1 <= maxUnits <= 100,000, "
        "workersPerUnit >= 1, slotsPerWorker >= 1, startTimeoutMs > 0; unit names non-empty and listed once",
    ),
    (
        "start_unit",
        "scaleUnits(start [unit]) → workersPerUnit workers say hello on the same address within --connect-timeout, "
        "each kind worker, naming the unit (Hello.unit), queueCapacity >= 1, offering every capability of the "
        "manager's hello; no worker of a unit the kit did not ask for",
    ),
    (
        "stop_unit",
        "scaleUnits(stop [unit]) → a managerReport listing the unit in ended (not in units) within --timeout",
    ),
    ("unit_workers_leave", "after the stop, every worker of the unit says disconnect or closes its connection"),
    ("heartbeats", "the manager heartbeats at least every peerTimeoutMs / 2 (the kit waits that long)"),
    (
        "well_formed",
        "everything the manager and its workers sent decoded, was a message of their kind, no frame over 1 MiB",
    ),
    ("shutdown", "shutdown → the manager closes its connection (its units stopped)"),
]
NEEDS_THE_UNIT = ("start_unit", "stop_unit", "unit_workers_leave")


@dataclass
class UnitWorker:
    hello: dict[str, Any]
    said_disconnect: bool = False


@dataclass
class ManagerSeen:
    """What the manager and the workers of its units sent, recorded as it arrives."""

    hellos: list[dict[str, Any]] = field(default_factory=list)
    welcomed_at: float = 0.0
    heartbeats: list[float] = field(default_factory=list)
    reports: list[dict[str, Any]] = field(default_factory=list)
    disconnects: list[str] = field(default_factory=list)
    workers: dict[bytes, UnitWorker] = field(default_factory=dict)  # by routing id, in the order they said hello
    violations: list[str] = field(default_factory=list)


class ManagerFake(FakeScheduler):
    """The fake scheduler of manager mode: `worker` (the base class's peer) is the manager; workers that say hello on
    the same address are welcomed and served too."""

    def __init__(self, address: str, timeout: float, keys: Keys | None) -> None:
        super().__init__(address, timeout, keys)
        self.got = ManagerSeen()

    def wait_hello(self, timeout: float) -> Msg | None:
        """The manager's hello (any hello but a worker's); workers saying hello first are served as unit workers (a
        manager that starts units before it is asked is a fault the start_unit check reports)."""
        deadline = Deadline(timeout)
        while not deadline.passed():
            if not self.router.poll(deadline.ms() + 1):
                continue
            identity, *rest = self.router.recv_multipart()
            try:
                message = parse(rest)
            except CheckFailed:
                continue
            self.note_frames(message.name, rest)
            if message.name == "hello" and message.fields.get("kind") == "worker":
                self._worker_hello(identity, message)
            elif message.name == "hello":
                self.worker = identity
                return message
            elif identity in self.got.workers:
                self._from_worker(identity, message)
            elif message.name != "disconnect":
                self.send_to(identity, "error", code="notConnected", message="say hello first")
        return None

    def send_to(self, identity: bytes, member: str, **fields: Any) -> None:
        try:
            self.router.send_multipart([identity, build(member, **fields)])
        except zmq.ZMQError as exc:
            raise CheckFailed(f"could not send {member}: {exc}") from None

    def welcome_manager(self) -> None:
        self.send(
            "welcome",
            protocolVersion=PROTOCOL_VERSION,
            idPrefix=0,  # a manager mints no ids
            schedulerName="conformance-kit",
            protected=True,
            peerTimeoutMs=PEER_TIMEOUT_MS,
        )
        self.got.welcomed_at = time.monotonic()

    def receive(self, timeout: float) -> Msg | None:
        """One message from the manager or a worker within `timeout` (recorded and served), or None."""
        self._watch_monitor()
        if not self.router.poll(int(timeout * 1000) + 1):
            return None
        identity, *rest = self.router.recv_multipart()
        who = "the manager" if identity == self.worker else "a worker"
        try:
            message = parse(rest)
        except CheckFailed as exc:
            self.got.violations.append(f"{who} sent a malformed message: {exc}")
            self.note_frames(f"{who}'s malformed message", rest)
            return None
        self.note_frames(f"{who}'s {message.name}", rest)
        if identity == self.worker:
            self._from_manager(message)
        elif message.name == "hello":
            self._worker_hello(identity, message)
        elif identity in self.got.workers:
            self._from_worker(identity, message)
        elif message.name != "disconnect":
            self.send_to(identity, "error", code="notConnected", message="say hello first")
        return message

    def _from_manager(self, message: Msg) -> None:
        got = self.got
        if message.name not in MANAGER_MAY_SEND:
            got.violations.append(f"the manager sent {message.name}")
        elif message.name == "heartbeat":
            got.heartbeats.append(time.monotonic())
            self.send("heartbeatEcho", sentAtUs=0)
        elif message.name == "managerReport":
            got.reports.append(message.fields)
        elif message.name == "hello":
            got.hellos.append(message.fields)  # again (it judged its session lost): a new session
            self.welcome_manager()
        elif message.name == "disconnect":
            got.disconnects.append(str(message.fields.get("reason", "")))

    def _worker_hello(self, identity: bytes, message: Msg) -> None:
        got = self.got
        if message.fields.get("kind") != "worker":
            got.violations.append(f"a second peer said hello as {message.fields.get('kind')} (not a worker)")
            self.send_to(identity, "refused", reason="one manager at a time", schedulerProtocolVersion=1)
            return
        if identity in got.workers:
            got.violations.append(f"a worker of unit {message.fields.get('unit')!r} said hello twice")
        got.workers[identity] = UnitWorker(message.fields)
        self.send_to(
            identity,
            "welcome",
            protocolVersion=PROTOCOL_VERSION,
            idPrefix=len(got.workers),
            schedulerName="conformance-kit",
            protected=True,
            peerTimeoutMs=PEER_TIMEOUT_MS,
            maxPayloadBytes=8 << 30,
        )

    def _from_worker(self, identity: bytes, message: Msg) -> None:
        worker = self.got.workers[identity]
        if message.name not in WORKER_MAY_SEND:
            self.got.violations.append(f"a worker of unit {worker.hello.get('unit')!r} sent {message.name}")
        elif message.name == "heartbeat":
            self.send_to(identity, "heartbeatEcho", sentAtUs=0)
        elif message.name == "disconnect":
            worker.said_disconnect = True

    def pump_until(self, what: str, condition: Callable[[], bool], timeout: float) -> None:
        deadline = Deadline(timeout)
        while not condition():
            if deadline.passed():
                raise CheckFailed(f"{what} did not happen within {timeout:g}s")
            self.receive(min(deadline.left(), POLL_SECONDS))

    def of_unit(self, unit: str) -> list[UnitWorker]:
        return [w for w in self.got.workers.values() if w.hello.get("unit") == unit]


def report_problem(report: dict[str, Any]) -> str | None:
    """Why a managerReport is out of range (docs/protocol.md section 6, managerReport), or None."""
    low, high = report.get("minUnits", 0), report.get("maxUnits", 0)
    if not 1 <= high <= MAX_UNITS or low > high:
        return f"minUnits {low}, maxUnits {high}: need 0 <= minUnits <= maxUnits and 1 <= maxUnits <= {MAX_UNITS:,}"
    for name in ("workersPerUnit", "slotsPerWorker", "startTimeoutMs"):
        if report.get(name, 0) < 1:
            return f"{name} {report.get(name, 0)}: must be at least 1"
    units, ended = list(report.get("units", [])), list(report.get("ended", []))
    if "" in units or "" in ended:
        return "a unit named ''"
    if len(set(units)) != len(units) or len(set(ended)) != len(ended):
        return f"a unit listed twice (units {units[:10]}, ended {ended[:10]})"
    both = set(units) & set(ended)
    if both:
        return f"units both running and ended: {sorted(both)[:10]}"
    return None


class ManagerKit:
    def __init__(self, address: str, timeout: float, connect_timeout: float, keys: Keys | None) -> None:
        self.fake = ManagerFake(address, timeout, keys)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.unit = ""
        self.report: dict[str, Any] = {}
        self.start_failure = ""  # why the unit did not start, when start_unit is not reported
        self.stop_report: dict[str, Any] | None = None
        self.closed_before_stop = 0

    @staticmethod
    def describe() -> list[tuple[str, str]]:
        return list(CHECKS)

    def close(self) -> None:
        self.fake.close()

    def run(self, report: Report, only: Sequence[str]) -> bool:
        """Run the checks; False if no manager said hello."""
        names = [name for name, _ in CHECKS]
        hello = self.fake.first_hello("worker manager", names, only, report, self.connect_timeout)
        if hello is None:
            return False
        self.fake.got.hellos.append(hello.fields)
        self.fake.welcome_manager()
        selected = [n for n in names if not only or n in only]
        report.outcome("hello", lambda: self.check_hello(hello))
        wanted = [n for n in selected if n != "hello"]
        if "first_report" in wanted:
            report.outcome("first_report", self.check_first_report)
        else:
            self._first_report()
        if any(n in wanted for n in NEEDS_THE_UNIT):
            if "start_unit" in wanted:
                report.outcome("start_unit", self.check_start_unit)
            else:
                self._quietly(self.check_start_unit)
            self._stop_unit()
        for name in wanted:
            if name not in ("first_report", "start_unit"):
                report.outcome(name, getattr(self, "check_" + name))
        return True

    def _quietly(self, check: Callable[[], None]) -> None:
        try:
            check()
        except (CheckFailed, CheckSkipped) as exc:
            self.start_failure = str(exc)

    def _first_report(self) -> None:
        try:
            self.check_first_report()
        except (CheckFailed, CheckSkipped):
            pass

    # -------------------------------------------------------------------------------------------- checks
    def check_hello(self, hello: Msg) -> None:
        f = hello.fields
        expect(f.get("protocolVersion") == PROTOCOL_VERSION, f"protocolVersion {f.get('protocolVersion')}")
        expect(f.get("kind") == "manager", f"kind {f.get('kind')}, not manager")
        expect(bool(f.get("name")), "no name (a manager's units are named after it)")
        problem = capability_problem(list(f.get("capabilities", [])))
        expect(problem is None, f"invalid capabilities: {problem}")

    def check_first_report(self) -> None:
        fake = self.fake
        fake.pump_until("a managerReport after welcome", lambda: bool(fake.got.reports), self.timeout)
        self.report = fake.got.reports[0]
        problem = report_problem(self.report)
        expect(problem is None, f"the first managerReport is out of range: {problem}")

    def check_start_unit(self) -> None:
        fake, got = self.fake, self.fake.got
        running = set(self.report.get("units", []))
        name = str(got.hellos[0].get("name", "")) or "manager"
        self.unit = next(f"{name}-{k}" for k in range(1, len(running) + 2) if f"{name}-{k}" not in running)
        early = [w.hello.get("unit") for w in got.workers.values() if w.hello.get("unit") not in running]
        expect(not early, f"workers of units the kit did not ask for said hello, before it asked for any: {early}")
        count = max(1, int(self.report.get("workersPerUnit", 1)))
        fake.send("scaleUnits", start=[self.unit], stop=[], reason="conformance kit: start one unit")
        fake.pump_until(
            f"{count} worker hello(s) naming unit {self.unit!r}",
            lambda: len(fake.of_unit(self.unit)) >= count,
            self.connect_timeout,
        )
        self._pump(0.3)  # (more workers than workersPerUnit would come about now)
        workers = fake.of_unit(self.unit)
        expect(len(workers) == count, f"{len(workers)} workers said hello naming the unit; workersPerUnit is {count}")
        strangers = [
            w.hello.get("unit") for w in got.workers.values() if w.hello.get("unit") not in {self.unit, *running}
        ]
        expect(not strangers, f"workers of units the kit did not ask for said hello: {strangers}")
        promised = set(got.hellos[0].get("capabilities", []))
        for worker in workers:
            f = worker.hello
            expect(f.get("protocolVersion") == PROTOCOL_VERSION, f"a unit worker's protocolVersion {f}")
            expect(int(f.get("queueCapacity", 0)) >= 1, f"a unit worker's queueCapacity {f.get('queueCapacity')}")
            offered = list(f.get("capabilities", []))
            problem = capability_problem(offered)
            expect(problem is None, f"a unit worker's capabilities are invalid: {problem}")
            missing = sorted(promised - set(offered))
            expect(not missing, f"a unit worker does not offer {missing}, which the manager's hello promised")

    def _pump(self, seconds: float) -> None:
        deadline = Deadline(seconds)
        while not deadline.passed():
            self.fake.receive(deadline.left())

    def _stop_unit(self) -> None:
        """Send scaleUnits(stop [unit]); wait for the report saying it ended and for its workers to leave."""
        fake = self.fake
        if not self.unit:
            return
        reports = len(fake.got.reports)
        fake._watch_monitor()
        self.closed_before_stop = fake.disconnected
        fake.send("scaleUnits", start=[], stop=[self.unit], reason="conformance kit: stop the unit")

        def ended() -> bool:
            for report in fake.got.reports[reports:]:
                if self.unit in report.get("ended", []):
                    self.stop_report = report
            return self.stop_report is not None

        try:
            fake.pump_until("", lambda: ended() and self._workers_left(), self.timeout)
        except CheckFailed:
            pass

    def _workers_left(self) -> bool:
        workers = self.fake.of_unit(self.unit)
        silent = [w for w in workers if not w.said_disconnect]
        self.fake._watch_monitor()
        return len(silent) <= self.fake.disconnected - self.closed_before_stop

    def _need_unit(self) -> None:
        if not self.unit:
            raise CheckSkipped("no unit was started (first_report)")
        if self.start_failure:
            raise CheckSkipped(f"the unit did not start: {self.start_failure}")

    def check_stop_unit(self) -> None:
        self._need_unit()
        report = self.stop_report
        expect(report is not None, f"no managerReport listed unit {self.unit!r} in ended within {self.timeout:g}s")
        assert report is not None
        expect(self.unit not in report.get("units", []), f"the report lists {self.unit!r} both in units and ended")
        problem = report_problem(report)
        expect(problem is None, f"the report is out of range: {problem}")

    def check_unit_workers_leave(self) -> None:
        self._need_unit()
        workers = self.fake.of_unit(self.unit)
        if not workers:
            raise CheckSkipped("no worker of the unit said hello")
        expect(
            self._workers_left(),
            f"{len([w for w in workers if not w.said_disconnect])} of the unit's {len(workers)} workers neither said "
            f"disconnect nor closed their connection within {self.timeout:g}s of the stop",
        )

    def check_heartbeats(self) -> None:
        got = self.fake.got
        limit = PEER_TIMEOUT_MS / 2000
        self._pump(max(0.0, got.welcomed_at + limit + 0.5 - time.monotonic()))
        times = [got.welcomed_at, *got.heartbeats, time.monotonic()]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        expect(max(gaps) <= limit + 0.5, f"{max(gaps):.1f}s without a heartbeat; peerTimeoutMs is {PEER_TIMEOUT_MS}")

    def check_well_formed(self) -> None:
        self._pump(0.2)
        problems = [*self.fake.got.violations, *(f"a frame over 1 MiB: {o}" for o in self.fake.seen.oversized)]
        expect(not problems, f"{len(problems)} problem(s): " + "; ".join(problems[:5]))

    def check_shutdown(self) -> None:
        fake = self.fake
        fake._watch_monitor()
        before = fake.disconnected
        fake.send("shutdown", reason="conformance kit: shutdown check")
        deadline = Deadline(self.timeout)
        while fake.disconnected == before and not deadline.passed():
            fake.receive(min(POLL_SECONDS, deadline.left()))
        expect(fake.disconnected > before, f"the manager did not close its connection within {self.timeout:g}s")
