"""Scheduler mode, worker managers (docs/protocol.md section 8, "Worker managers"): the kit plays a raw manager, the raw
workers of its units and a raw client against a running scheduler.

Every manager the kit opens offers a capability of its own (`conformance-unit-<tag>`), so the scheduler asks it only
for the kit's tasks that require it (a manager offering capabilities is asked only for tasks that require one of
them), never for the other checks' tasks. The checks read the scheduler's decisions (`scaleUnits`) within `--timeout`;
the scheduler ticks its scaling every 0.25 s, so each takes about a second. Peers are ended by the kit's cleanup.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from scaler.conformance.scheduler_checks import WORKER_NOISE, Peer, RawClient, RawWorker, first_of, status_name
from scaler.conformance.wire import (
    FAILED,
    PROTOCOL_VERSION,
    SUCCESS,
    Check,
    CheckFailed,
    CheckSkipped,
    Deadline,
    Msg,
    Task,
    expect,
    u64,
)

if TYPE_CHECKING:
    from scaler.conformance.scheduler_checks import SchedulerKit

IDLE_MS = 300  # the idleMs of the kit's managers that are to see a unit retire: small, so that it retires at once
HOLD_SECONDS = 1.0  # how long a unit's worker holds its tasks, well past IDLE_MS: no stop may come meanwhile
TICKS = 0.6  # a bit over two scaling ticks of 0.25 s: what the scheduler decides comes within it


class RawManager(Peer):
    """A worker manager over a raw DEALER: hello (kind manager), reports, and the scheduler's scaleUnits."""

    rank = 2  # ended after the clients and the workers

    def __init__(
        self, kit: SchedulerKit, name: str, capabilities: Sequence[str], role: str = "manager", welcome: bool = True
    ) -> None:
        if kit.keys is not None and not os.path.exists(os.path.join(kit.keys.directory, f"{role}.key_secret")):
            raise CheckSkipped(f"--keys {kit.keys.directory} has no {role}.key_secret (scaler_keygen DIR adds it)")
        super().__init__(kit, "M", role)
        self.name = name
        self.capabilities = list(capabilities)
        self.send(
            "hello",
            protocolVersion=PROTOCOL_VERSION,
            kind="manager",
            name=name,
            hostname="conformance",
            pid=os.getpid(),
            heartbeatIntervalMs=1000,
            capabilities=self.capabilities,
        )
        self.welcome: dict[str, Any] = self.expect("welcome", ignore=()).fields if welcome else {}

    def report(
        self,
        *,
        min_units: int = 0,
        max_units: int = 2,
        workers_per_unit: int = 1,
        slots_per_worker: int = 2,
        tier: int = 0,
        idle_ms: int = 60_000,
        start_timeout_ms: int = 60_000,
        units: Sequence[str] = (),
        ended: Sequence[str] = (),
        reason: str = "",
    ) -> None:
        self.send(
            "managerReport",
            minUnits=min_units,
            maxUnits=max_units,
            workersPerUnit=workers_per_unit,
            slotsPerWorker=slots_per_worker,
            tier=tier,
            idleMs=idle_ms,
            startTimeoutMs=start_timeout_ms,
            units=list(units),
            ended=list(ended),
            reason=reason,
        )

    def accepted(self) -> None:
        """What it sent so far was taken without an answer: a heartbeat is answered by an echo, nothing before it."""
        self.heartbeat()
        message = self.expect("heartbeatEcho", ignore=("scaleUnits",))
        expect(message.name == "heartbeatEcho", f"{message}")

    def scale(self, timeout: float | None = None) -> Msg:
        """The next scaleUnits (echoes skipped)."""
        return self.expect("scaleUnits", timeout)


def started(message: Msg) -> list[str]:
    return list(message.fields.get("start", []))


def stopped(message: Msg) -> list[str]:
    return list(message.fields.get("stop", []))


class ManagerChecks:
    """The manager checks of scheduler mode, each a method run by the SchedulerKit (which cleans up after it)."""

    NAMES = (
        "manager_hello_welcome",
        "manager_refused_bad_hello",
        "manager_report_accepted",
        "manager_report_out_of_range",
        "bad_request_manager_messages",
        "manager_scale_up",
        "manager_unit_worker_joins",
        "manager_scale_down",
        "manager_unit_ended",
        "manager_failed_start_backs_off",
        "manager_start_timeout",
        "manager_stopped_unit_gets_no_task",
        "manager_comes_back",
        "manager_gone_tasks_fail",
        "manager_key_role",
    )

    def __init__(self, kit: SchedulerKit) -> None:
        self.kit = kit
        self.made = 0

    def checks(self) -> list[Check]:
        methods = [getattr(self, "check_" + n) for n in self.NAMES]
        return [Check(n, m, (m.__doc__ or "").strip()) for n, m in zip(self.NAMES, methods, strict=True)]

    # -------------------------------------------------------------------------------------------- helpers
    def capability(self) -> str:
        return f"conformance-unit-{self.kit.tag}"

    def manager(self, **report: Any) -> RawManager:
        """A new manager (a fresh name) offering the kit's capability; with `report` fields, it reports them."""
        self.made += 1
        manager = RawManager(self.kit, f"conformance-manager-{self.kit.tag}-{self.made}", [self.capability()])
        if report:
            manager.report(**report)
        return manager

    def unit_worker(self, unit: str, capacity: int = 2) -> RawWorker:
        return self.kit.worker(capacity=capacity, capabilities=[self.capability()], unit=unit)

    def needing(self, client: RawClient, count: int) -> list[Task]:
        """`count` tasks requiring the kit's capability, submitted."""
        fn = client.function()
        tasks = [client.task(fn, bytes([k])) for k in range(count)]
        client.submit(tasks, requirements=[[self.capability()]])
        return tasks

    def one_start(self, manager: RawManager, timeout: float | None = None) -> str:
        """The scheduler's next scaleUnits starts exactly one unit and stops none: its name."""
        message = manager.scale(timeout)
        names = started(message)
        expect(len(names) == 1 and not stopped(message), f"expected scaleUnits starting one unit, got {message}")
        expect(bool(names[0]), "scaleUnits.start names a unit ''")
        return names[0]

    def scaled_up(self, idle_ms: int) -> tuple[RawManager, RawClient, RawWorker, str, list[Task]]:
        """A manager, 2 tasks requiring its capability, the unit started for them and its worker holding them."""
        manager = self.manager(max_units=2, slots_per_worker=2, idle_ms=idle_ms)
        client = self.kit.client()
        tasks = self.needing(client, 2)
        unit = self.one_start(manager)
        worker = self.unit_worker(unit)
        held: set[int] = set()
        deadline = Deadline(self.kit.timeout)
        while len(held) < len(tasks):
            held.update(t.task_id for t in worker.work(deadline.left()))
        expect(held == {t.task_id for t in tasks}, f"the unit's worker got {sorted(held)}")
        return manager, client, worker, unit, tasks

    # -------------------------------------------------------------------------------------------- sessions
    def check_manager_hello_welcome(self) -> None:
        """hello(kind manager, a name, capabilities its workers offer) → welcome (version 1, peerTimeoutMs > 0); its
        heartbeat → heartbeatEcho."""
        manager = self.manager()
        w = manager.welcome
        expect(w.get("protocolVersion") == PROTOCOL_VERSION, f"welcome protocolVersion {w}")
        expect(w.get("peerTimeoutMs", 0) > 0, f"welcome peerTimeoutMs is 0: {w}")
        manager.heartbeat()
        manager.expect("heartbeatEcho", ignore=())

    def check_manager_refused_bad_hello(self) -> None:
        """a manager's hello without a name, with an invalid capability, or with the name of a connected manager →
        refused (with a reason); the connected one is unaffected."""
        for name, capabilities, what in (
            ("", [self.capability()], "without a name"),
            (f"bad-caps-{self.kit.tag}", [" padded"], "with the capability ' padded'"),
        ):
            peer = RawManager(self.kit, name, capabilities, welcome=False)
            message = peer.recv()
            expect(message.name == "refused", f"a manager's hello {what}: expected refused, got {message}")
            expect(bool(message.fields.get("reason")), f"refused without a reason ({what})")
        first = self.manager()
        twin = RawManager(self.kit, first.name, first.capabilities, welcome=False)
        message = twin.recv()
        expect(message.name == "refused", f"a second manager named {first.name!r}: expected refused, got {message}")
        first.accepted()

    def check_manager_report_accepted(self) -> None:
        """a managerReport in range is taken without an answer; with no work and minUnits 0, no unit is asked for."""
        manager = self.manager(min_units=0, max_units=3, workers_per_unit=2, slots_per_worker=4, tier=1, idle_ms=5000)
        manager.accepted()
        manager.quiet(TICKS)

    def check_manager_report_out_of_range(self) -> None:
        """a managerReport out of range (minUnits > maxUnits, maxUnits 0, workersPerUnit 0, slotsPerWorker 0,
        startTimeoutMs 0, maxUnits 2^32-1) → error badRequest, and it changes nothing (no unit started for its
        minUnits); the session keeps serving and a good report is still taken."""
        manager = self.manager(min_units=0, max_units=2)
        manager.accepted()
        bad: list[tuple[str, dict[str, Any]]] = [
            ("minUnits 3 > maxUnits 2", {"min_units": 3, "max_units": 2}),
            ("maxUnits 0", {"min_units": 0, "max_units": 0}),
            ("workersPerUnit 0", {"min_units": 1, "workers_per_unit": 0}),
            ("slotsPerWorker 0", {"min_units": 1, "slots_per_worker": 0}),
            ("startTimeoutMs 0", {"min_units": 1, "start_timeout_ms": 0}),
            ("maxUnits 2^32-1", {"min_units": 1, "max_units": 2**32 - 1}),
        ]
        for what, fields in bad:
            manager.report(**fields)
            try:
                manager.error("badRequest")
            except CheckFailed as exc:
                raise CheckFailed(f"a report with {what}: {exc}") from None
        manager.quiet(TICKS)  # a refused report's minUnits started nothing
        manager.report(min_units=0, max_units=2)
        manager.accepted()

    def check_bad_request_manager_messages(self) -> None:
        """a manager sending submitTasks / taskResults / putObjects → error badRequest; a client or a worker sending
        managerReport → error badRequest; the sessions keep serving."""
        manager = self.manager()
        manager.send("submitTasks", taskIds=u64([]))
        manager.error("badRequest")
        manager.send("taskResults", [], taskIds=u64([]), statuses=b"")
        manager.error("badRequest")
        manager.send("putObjects", [], objectIds=u64([]))
        manager.error("badRequest")
        client, worker = self.kit.client(), self.kit.worker()
        for peer in (client, worker):
            peer.send("managerReport", minUnits=0, maxUnits=1, workersPerUnit=1, slotsPerWorker=1, startTimeoutMs=1000)
            peer.error("badRequest")
        manager.accepted()
        for peer in (client, worker):
            peer.heartbeat()
            peer.expect("heartbeatEcho", ignore=())

    # -------------------------------------------------------------------------------------------- scaling
    def check_manager_scale_up(self) -> None:
        """tasks requiring a capability only the manager's workers offer wait (not failed, though a worker without it
        is connected) and make the scheduler send that manager scaleUnits(start) of one unit (2 tasks, 2 slots per
        unit), within --timeout; no second unit while the first is on its way."""
        manager = self.manager(max_units=3, slots_per_worker=2)
        plain = self.kit.worker(capacity=4)
        client = self.kit.client()
        self.needing(client, 2)
        self.one_start(manager)
        manager.quiet(TICKS)
        client.quiet(0.1)
        plain.quiet(0.1, ignore=(*WORKER_NOISE, "balanceRequest"))

    def check_manager_unit_worker_joins(self) -> None:
        """a worker whose hello names the started unit (Hello.unit) and offers the capability joins and gets the
        waiting tasks; their results reach the client; no other unit is asked for."""
        manager, client, worker, _, tasks = self.scaled_up(idle_ms=60_000)
        worker.answer([(t.task_id, SUCCESS, b"done by the unit") for t in tasks])
        results = client.results([t.task_id for t in tasks])
        expect(all(r == (SUCCESS, b"done by the unit") for r in results.values()), f"{results}")
        manager.quiet(TICKS)

    def check_manager_scale_down(self) -> None:
        """a unit whose worker holds tasks past idleMs is not stopped; once its tasks are done and it has been idle for
        idleMs (300 ms here) it is drained (no new task) and stopped (scaleUnits.stop); the manager's report that the
        unit ended is taken; the retired worker gets no new task: new work asks for a new unit."""
        manager, client, worker, unit, tasks = self.scaled_up(idle_ms=IDLE_MS)
        manager.quiet(HOLD_SECONDS)  # holding tasks: never stopped, whatever its idle time
        worker.answer([(t.task_id, SUCCESS, b"") for t in tasks])
        client.results([t.task_id for t in tasks])
        peer, message = first_of([manager, worker], self.kit.timeout)
        expect(peer is manager, f"while the unit drained its worker got {message}")
        expect(
            message.name == "scaleUnits" and stopped(message) == [unit], f"expected scaleUnits(stop {unit}): {message}"
        )
        expect(not started(message), f"a unit started with the stop: {message}")
        manager.report(max_units=2, slots_per_worker=2, idle_ms=IDLE_MS, ended=[unit], reason=f"{unit}: stopped")
        manager.accepted()
        [late] = self.needing(client, 1)
        fresh = self.one_start(manager)
        expect(fresh != unit, f"the scheduler started a unit under the name of the stopped unit {unit!r}")
        worker.quiet(TICKS, ignore=(*WORKER_NOISE, "putObjects"))
        client.send("cancelTasks", ids=u64([late.task_id]))

    def check_manager_unit_ended(self) -> None:
        """minUnits 1 → scaleUnits(start) with no work; its worker joins and leaves, and a report listing the unit in
        ended (not in units) is taken: the scheduler starts another unit to keep minUnits (an ended name it never
        heard of is ignored)."""
        manager = self.manager(min_units=1, max_units=2)
        first = self.one_start(manager)
        worker = self.unit_worker(first)
        worker.leave()
        manager.report(min_units=1, max_units=2, ended=[first, f"never-heard-of-{self.kit.tag}"], reason="exited")
        second = self.one_start(manager)
        expect(second != first, f"the new unit has the ended unit's name {first!r}")

    def check_manager_failed_start_backs_off(self) -> None:
        """a unit the manager reports ended before any of its workers connected failed to start: the scheduler does
        not ask that manager for another one at once (a back-off of 5 s), though the tasks still wait."""
        manager = self.manager(max_units=3, slots_per_worker=2)
        client = self.kit.client()
        self.needing(client, 2)
        unit = self.one_start(manager)
        manager.report(max_units=3, slots_per_worker=2, ended=[unit], reason=f"{unit}: could not start (conformance)")
        manager.quiet(TICKS)
        client.quiet(0.1)

    def check_manager_start_timeout(self) -> None:
        """a unit whose workers do not connect within startTimeoutMs (500 ms here) is given up: scaleUnits(stop) names
        it; no other unit is asked for at once (the back-off)."""
        manager = self.manager(max_units=3, slots_per_worker=2, start_timeout_ms=500)
        client = self.kit.client()
        self.needing(client, 2)
        unit = self.one_start(manager)
        message = manager.scale()
        expect(stopped(message) == [unit] and not started(message), f"expected scaleUnits(stop {unit}): {message}")
        manager.quiet(TICKS)

    def check_manager_stopped_unit_gets_no_task(self) -> None:
        """a worker whose hello names a unit the scheduler has stopped gets no task (its manager is stopping it: a task
        started there would be lost or run twice): a unit given up (startTimeoutMs 500 ms here) whose worker connects
        after all; a unit drained and stopped whose worker says hello again (new work asks for a new unit instead)."""
        manager = self.manager(max_units=3, slots_per_worker=2, start_timeout_ms=500)
        client = self.kit.client()
        self.needing(client, 2)
        unit = self.one_start(manager)
        message = manager.scale()
        expect(stopped(message) == [unit], f"expected scaleUnits(stop {unit}): {message}")
        late = self.unit_worker(unit)
        late.quiet(TICKS)
        client.quiet(0.1)
        self.kit.cleanup()
        manager, client, worker, unit, tasks = self.scaled_up(idle_ms=IDLE_MS)
        worker.answer([(t.task_id, SUCCESS, b"") for t in tasks])
        client.results([t.task_id for t in tasks])
        message = manager.scale()
        expect(stopped(message) == [unit], f"expected scaleUnits(stop {unit}): {message}")
        worker.send(
            "hello",
            protocolVersion=PROTOCOL_VERSION,
            kind="worker",
            name=worker.name,
            queueCapacity=2,
            capabilities=[self.capability()],
            unit=unit,
        )
        worker.expect("welcome")
        self.needing(client, 1)
        fresh = self.one_start(manager)
        expect(fresh != unit, f"the scheduler started a unit under the name of the stopped unit {unit!r}")
        worker.quiet(TICKS, ignore=(*WORKER_NOISE, "putObjects"))

    def check_manager_comes_back(self) -> None:
        """a manager whose session ended comes back under the same name and reports the unit it runs: the unit is its
        own again, with its connected worker: once that worker is idle past idleMs, the unit is stopped through the new
        session."""
        manager, client, worker, unit, tasks = self.scaled_up(idle_ms=60_000)
        worker.answer([(t.task_id, SUCCESS, b"") for t in tasks])
        client.results([t.task_id for t in tasks])
        manager.leave()
        back = RawManager(self.kit, manager.name, manager.capabilities)
        back.report(max_units=2, slots_per_worker=2, idle_ms=IDLE_MS, units=[unit])
        message = back.scale()
        expect(stopped(message) == [unit] and not started(message), f"expected scaleUnits(stop {unit}): {message}")

    def check_manager_gone_tasks_fail(self) -> None:
        """tasks wait for a unit only while a manager could bring a worker for them: once the manager leaves (a worker
        without the capability connected), they end failed, text "missing capabilities: ..."."""
        manager = self.manager(max_units=2, slots_per_worker=2)
        self.kit.worker(capacity=4)
        client = self.kit.client()
        [task] = self.needing(client, 1)
        self.one_start(manager)
        client.quiet(0.1)
        manager.leave()
        [(status, payload)] = client.results([task.task_id]).values()
        expect(status == FAILED, f"the task ended {status_name(status)}, not failed")
        text = payload.decode("utf-8", errors="replace")
        expect(text.startswith("missing capabilities:"), f"text {text[:200]!r}")

    def check_manager_key_role(self) -> None:
        """with --keys: a manager's hello over the manager key → welcome; over a client key → refused with keyProblem;
        a client's hello over the manager key → refused with keyProblem."""
        if self.kit.keys is None:
            raise CheckSkipped("needs --keys (a scheduler started with keys)")
        self.manager().accepted()
        wrong = RawManager(self.kit, f"client-keyed-{self.kit.tag}", [self.capability()], role="client", welcome=False)
        refused = wrong.expect("refused", ignore=())
        expect(refused.fields.get("keyProblem") is True, f"refused without keyProblem: {refused}")
        peer = Peer(self.kit, "C", "manager")
        peer.send("hello", protocolVersion=PROTOCOL_VERSION, kind="client", name="manager-keyed client")
        refused = peer.expect("refused", ignore=())
        expect(refused.fields.get("keyProblem") is True, f"refused without keyProblem: {refused}")
