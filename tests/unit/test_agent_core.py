"""AgentCore (the worker agent's state machine): state built only by feeding events, commands asserted exactly."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from scaler.core.common import InvariantError, Log
from scaler.core.scheduler import Command
from scaler.core.worker import messages as pm
from scaler.core.worker.agent import (
    QUEUED,
    AgentCommand,
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
from scaler.core.worker.states import ENDED, SESSION_TRANSITIONS, SessionState, SessionStep
from scaler.protocol.messages import (
    FLAG_PROFILING,
    FLAG_STREAM_OUTPUT,
    OUTPUT_ERROR,
    OUTPUT_STDERR,
    OUTPUT_STDOUT,
    BalanceRequest,
    BalanceResponse,
    CancelTasks,
    Disconnect,
    DispatchTasks,
    Error,
    ErrorCode,
    FreeObjects,
    Heartbeat,
    HeartbeatEcho,
    Hello,
    Message,
    PeerKind,
    PutObjects,
    Refused,
    Shutdown,
    TaskOutput,
    TaskResults,
    TasksStarted,
    TaskStatus,
    Welcome,
)
from tests.unit.scheduler_driver import Driver, dispatch, ok, sends, submit, tid

F = tid(1, 1)  # a function object
X = tid(1, 2)  # a data object


def t(n: int) -> int:
    return tid(1, 10 + n)


HELLO = Hello(PeerKind.WORKER, "w", "host", 42, 2000, 8, capabilities=["payload=python"])
CONFIG = AgentConfig(name="w", hostname="host", pid=42, queue_capacity=8)


class Agent:
    """An AgentCore and a clock; `sched`, `proc` and friends feed one event and return the commands."""

    def __init__(self, config: AgentConfig = CONFIG) -> None:
        self.core = AgentCore(config)
        self.now = 0.0
        self.unreported: set[int] = set()  # handed to processors, not yet in a tasksStarted
        self.told: list[TasksStarted] = []  # every tasksStarted sent

    def __call__(self, event: AgentEvent) -> list[AgentCommand]:
        commands = self.core.handle(event)
        check(self.core)
        self.unreported &= self.core.tasks.keys()  # a task that left needs no notice
        self.told.extend(
            c.message for c in commands if isinstance(c, ToScheduler) and isinstance(c.message, TasksStarted)
        )
        return without_started(commands, self.unreported)

    def sched(self, message: object) -> list[AgentCommand]:
        return self(FromScheduler(self.now, message))  # type: ignore[arg-type]

    def proc(self, processor: int, message: pm.FromProcessor) -> list[AgentCommand]:
        return self(FromProcessor(self.now, processor, message))

    def done(self, processor: int, *task_ids: int, status: int = TaskStatus.SUCCESS) -> list[AgentCommand]:
        n = len(task_ids)
        return self.proc(processor, pm.Results(list(task_ids), bytes([status] * n), [100] * n, [0] * n, [b"r"] * n))


def without_started(commands: list[AgentCommand], unreported: set[int]) -> list[AgentCommand]:
    """The commands without the tasksStarted messages, after checking them: each names tasks handed to processors
    (by these commands or earlier ones) and not yet named, and comes after this flush's hand-overs. `unreported`: the
    tasks handed and not yet named, kept up to date."""
    handed = [
        task[0]
        for c in commands
        if isinstance(c, ToProcessor) and isinstance(c.message, pm.RunTasks)
        for task in c.message.tasks
    ]
    unreported.update(handed)
    started = [c for c in commands if isinstance(c, ToScheduler) and isinstance(c.message, TasksStarted)]
    assert len(started) <= 1
    for told in started:
        ids = told.message.ids  # type: ignore[union-attr]
        assert set(ids) <= unreported and len(set(ids)) == len(ids), (ids, unreported)
        unreported.difference_update(ids)
        runs = [k for k, c in enumerate(commands) if isinstance(c, ToProcessor)]
        assert not runs or commands.index(told) > max(runs)
    return [c for c in commands if c not in started]


def check(core: AgentCore) -> None:
    """The agent's own invariants (AgentCore.validate), after every event."""
    core.validate()


def connected(config: AgentConfig = CONFIG) -> Agent:
    """An agent that said hello, was welcomed, and whose first processor (0) is ready."""
    a = Agent(config)
    assert a(Started(0.0)) == [ToScheduler(HELLO), StartProcessor(0)]
    assert a.sched(Welcome(7, "sched")) == [Log(logging.INFO, "connected to scheduler sched, offering payload=python")]
    assert a.proc(0, pm.Ready(1000)) == []
    assert a.core.connected
    return a


def with_tasks(n: int, config: AgentConfig = CONFIG) -> Agent:
    """A connected agent holding function F and tasks t(1)..t(n); t(1) went to processor 0 alone (run times are
    not known yet), the others wait in the queue."""
    a = connected(config)
    a.sched(PutObjects([F], [b"fn"]))
    a.sched(dispatch(*((t(i), F, [b"a%d" % i]) for i in range(1, n + 1))))
    return a


def warmed(n: int) -> Agent:
    """with_tasks(n), and t(1) done in 100 us: the window is wide now, t(2)..t(n) all went to processor 0."""
    a = with_tasks(n)
    assert a.done(0, t(1)) == [
        ToProcessor(0, run(*(t(i) for i in range(2, n + 1)))),
        ToScheduler(TaskResults([t(1)], bytes([0]), [b"r"])),
    ]
    return a


def run(*task_ids: int, objects: tuple[int, ...] = (), payloads: tuple[bytes, ...] = ()) -> pm.RunTasks:
    tasks: list[tuple[int, int, int, tuple[int, ...], tuple[str, ...] | None]] = [
        (i, F, 0, (0,), None) for i in task_ids
    ]
    return pm.RunTasks(list(objects), tasks, [*payloads, *(b"a%d" % (i - t(0)) for i in task_ids)])


# ----------------------------------------------------------------------------------------------- session
def test_start_says_hello_and_starts_a_processor() -> None:
    a = Agent()
    assert a(Started(0.0)) == [ToScheduler(HELLO), StartProcessor(0)]
    assert not a.core.connected


def test_tasks_wait_for_the_processor_then_the_first_goes_alone_objects_first() -> None:
    a = Agent()
    a(Started(0.0))
    a.sched(Welcome(7, "sched"))
    a.sched(PutObjects([F], [b"fn"]))
    assert a.sched(dispatch(*((t(i), F, [b"a%d" % i]) for i in range(1, 7)))) == []  # processor still starting
    # run times unknown: one task at a time, so the rest can still be balanced away
    assert a.proc(0, pm.Ready(1000)) == [ToProcessor(0, run(t(1), objects=(F,), payloads=(b"fn",)))]
    assert a.core.queued == 5


def test_short_tasks_widen_the_window_and_results_are_coalesced() -> None:
    a = warmed(6)  # t(1) took 100 us: t(2)..t(6) went at once
    a.core.feed(FromProcessor(0.0, 0, pm.Results([t(2)], bytes([0]), [100], [0], [b"r2"])))
    a.core.feed(FromProcessor(0.0, 0, pm.Results([t(3)], bytes([1]), [100], [0], [b"e3"])))
    assert a.core.flush() == [
        ToScheduler(TasksStarted([t(4), t(5), t(6)])),  # the window's late notice: those still running
        ToScheduler(TaskResults([t(2), t(3)], bytes([0, 1]), [b"r2", b"e3"])),
    ]
    assert a.core.completed == 3


def test_clients_take_turns_in_the_agents_queue() -> None:
    """Queued tasks go to the processor client by client in turns (the task id prefix says whose a task is)."""
    a = with_tasks(4)  # client 1's t(1) went to processor 0 alone; t(2)..t(4) wait
    g, u = tid(2, 1), tid(2, 2)  # client 2's function and task, dispatched after client 1's backlog
    a.sched(PutObjects([g], [b"g"]))
    a.sched(dispatch((u, g, [b"u"])))
    commands = a.proc(0, pm.Results([t(1)], bytes([0]), [1_000_000], [0], [b"r"]))  # long: one task at a time
    assert commands[0] == ToProcessor(0, pm.RunTasks([], [(t(2), F, 0, (0,), None)], [b"a2"]))
    commands = a.proc(0, pm.Results([t(2)], bytes([0]), [1_000_000], [0], [b"r"]))
    assert commands[0] == ToProcessor(0, pm.RunTasks([g], [(u, g, 0, (0,), None)], [b"g", b"u"]))
    commands = a.proc(0, pm.Results([u], bytes([0]), [1_000_000], [0], [b"r"]))
    assert commands[0] == ToProcessor(0, run(t(3)))


def test_long_tasks_keep_the_window_at_one() -> None:
    a = with_tasks(3)
    commands = a.proc(0, pm.Results([t(1)], bytes([0]), [1_000_000], [0], [b"r"]))
    assert commands[0] == ToProcessor(0, run(t(2)))


def test_profiled_tasks_report_duration_memory_and_cpu_time() -> None:
    a = connected()
    a.sched(PutObjects([F], [b"fn"]))
    a.sched(dispatch((t(1), F, []), flags=FLAG_PROFILING))
    commands = a.proc(0, pm.Results([t(1)], bytes([0]), [1234], [5678], [b"r"], [910]))
    assert commands == [ToScheduler(TaskResults([t(1)], bytes([0]), [b"r"], [1234], [5678], [910]))]


def test_duplicate_dispatch_is_ignored() -> None:
    a = with_tasks(1)
    assert a.sched(dispatch((t(1), F, [b"a1"]))) == []
    assert a.done(0, t(1)) == [ToScheduler(TaskResults([t(1)], bytes([0]), [b"r"]))]


def test_task_needing_an_object_the_worker_never_got_fails() -> None:
    a = connected()
    a.sched(PutObjects([F], [b"fn"]))
    commands = a.sched(dispatch((t(1), F, [X])))
    assert commands == [
        ToProcessor(0, pm.RunTasks([F], [], [b"fn"])),  # F was found before X was missed; sent anyway
        ToScheduler(
            TaskResults([t(1)], bytes([TaskStatus.FAILED]), [f"object {X:#x} was not sent to this worker".encode()])
        ),
    ]


def test_objects_are_sent_to_a_processor_once_and_dropped_where_held() -> None:
    a = connected()
    a.sched(PutObjects([F, X], [b"fn", b"x"]))
    assert a.sched(dispatch((t(1), F, [X]))) == [
        ToProcessor(0, pm.RunTasks([F, X], [(t(1), F, 0, (X,), None)], [b"fn", b"x"])),
    ]
    assert a.sched(dispatch((t(2), F, [X]))) == []  # the processor is busy with t(1)
    assert a.done(0, t(1))[0] == ToProcessor(0, pm.RunTasks([], [(t(2), F, 0, (X,), None)], []))
    assert a.sched(FreeObjects([X, tid(1, 99)])) == [ToProcessor(0, pm.DropObjects([X]))]
    assert a.core.objects.keys() == {F}


# ----------------------------------------------------------------------------------------------- scheduler requests
def test_cancel_ends_queued_tasks_at_once_and_asks_the_processor_about_its_own() -> None:
    a = with_tasks(5)  # t(1) is in processor 0, the others wait
    assert a.sched(CancelTasks([t(5), t(1), t(99)])) == [
        ToProcessor(0, pm.Discard([t(1)], confirm=True)),
        ToScheduler(TaskResults([t(5)], bytes([TaskStatus.CANCELED]), [b""])),
    ]
    assert a.core.queued == 3
    # t(1) had not started: the processor dropped it, so it ends cancelled, and the next task goes in
    assert a.proc(0, pm.Discarded([t(1)], [t(1)])) == [
        ToProcessor(0, run(t(2))),
        ToScheduler(TaskResults([t(1)], bytes([TaskStatus.CANCELED]), [b""])),
    ]


def test_cancel_of_a_running_task_kills_its_processor() -> None:
    a = with_tasks(2)
    a.sched(CancelTasks([t(1)]))
    assert a.proc(0, pm.Discarded([], [t(1)])) == [KillIfRunning(0, t(1))]  # it had started
    assert a(ProcessorExited(1.0, 0, -9, running_task=t(1))) == [
        StartProcessor(1),
        ToScheduler(TaskResults([t(1)], bytes([TaskStatus.CANCELED]), [b""])),  # not "crashed": we killed it
    ]
    assert a.proc(1, pm.Ready(1001)) == [ToProcessor(1, run(t(2), objects=(F,), payloads=(b"fn",)))]


def test_cancelled_task_that_finishes_first_reports_its_result() -> None:
    a = with_tasks(1)
    a.sched(CancelTasks([t(1)]))
    assert a.done(0, t(1)) == [ToScheduler(TaskResults([t(1)], bytes([0]), [b"r"]))]  # the scheduler says cancelled
    assert a.proc(0, pm.Discarded([], [t(1)])) == []  # nothing left to kill


def test_balance_request_gives_back_queued_tasks_now_and_unstarted_ones_once_the_processor_confirms() -> None:
    a = with_tasks(6)  # t(1) is in processor 0, the others wait
    assert a.sched(BalanceRequest([t(6), t(1), t(5), t(99)])) == [
        ToScheduler(BalanceResponse([t(6), t(5)])),
        ToProcessor(0, pm.Discard([t(1)], confirm=True)),
    ]
    assert a.core.queued == 3
    assert set(a.core.tasks) == {t(1), t(2), t(3), t(4)}
    assert a.proc(0, pm.Discarded([t(1)], [t(1)])) == [
        ToScheduler(BalanceResponse([t(1)])),
        ToProcessor(0, run(t(2))),
    ]
    assert set(a.core.tasks) == {t(2), t(3), t(4)}


def test_balance_request_for_a_started_task_gives_nothing_back() -> None:
    a = with_tasks(1)
    a.sched(BalanceRequest([t(1)]))
    assert a.proc(0, pm.Discarded([], [t(1)])) == []
    assert a.done(0, t(1)) == [ToScheduler(TaskResults([t(1)], bytes([0]), [b"r"]))]


def test_heartbeat_every_interval_with_queue_and_processor_figures() -> None:
    a = with_tasks(6)
    beat = Heartbeat(cpu_percent=5.0, rss_bytes=100, queued=5, running=1, processor_cpu_percent=90.0, processors=1)
    assert a(Tick(1.0, 5.0, 100, 90.0, 0)) == [ToScheduler(beat)]
    assert a(Tick(2.0)) == []
    a.now = 2.5
    a.sched(HeartbeatEcho())
    assert a.core.lag_us == 1_500_000
    a.now = 2.7
    a.sched(HeartbeatEcho())  # an echo nobody asked for (the scheduler probing the connection): no new lag
    assert a.core.lag_us == 1_500_000
    [command] = a(Tick(3.0))
    assert isinstance(command, ToScheduler) and command.message.lag_us == 1_500_000  # type: ignore[union-attr]


def test_heartbeats_often_enough_for_a_strict_scheduler() -> None:
    a = Agent()
    a(Started(0.0))
    a.sched(Welcome(7, "sched", peer_timeout_ms=2000))  # workers silent for 2 s are declared lost
    assert [c for c in a(Tick(0.0)) if isinstance(c, ToScheduler)] != []
    assert a(Tick(0.4)) == []
    assert a(Tick(0.5)) == [ToScheduler(Heartbeat(processors=1))]  # every 0.5 s, not the configured 2 s


def test_scheduler_silent_too_long_stops_the_agent() -> None:
    a = connected(AgentConfig(name="w", hostname="host", pid=42, queue_capacity=8, scheduler_timeout_seconds=30))
    a(Tick(30.0))
    commands = a(Tick(30.5))
    assert commands[1:] == [KillProcessor(0), Stop("the scheduler has been silent for 30s", 1)]
    assert a(Tick(40.0)) == []


def test_shutdown_from_the_scheduler_stops_cleanly() -> None:
    a = connected()
    reason = "the scheduler is shutting down (bye)"
    assert a.sched(Shutdown("bye")) == [Log(logging.INFO, f"stopping: {reason}"), KillProcessor(0), Stop(reason, 0)]
    assert a.core.stopped and a.core.processors == {}


def test_a_scheduler_that_stops_alone_is_waited_for_its_worker_says_hello_until_one_answers() -> None:
    a = with_tasks(3)  # t(1) runs in processor 0
    commands = a.sched(Shutdown("the scheduler received SIGTERM", workers_stay=True))
    stays = (
        "the scheduler is stopping (the scheduler received SIGTERM): this worker stays and says hello until a "
        "scheduler answers at its address, for at most 300s (scaler_cluster --death-timeout-seconds; "
        "--exit-with-scheduler to stop with it)"
    )
    assert commands[0] == Log(logging.WARNING, stays)
    assert KillProcessor(0) in commands and commands[-1] == ToScheduler(HELLO)  # its work ran for the old session
    assert not any(isinstance(c, Stop) for c in commands) and not a.core.stopped
    assert a.core.tasks == {} and not a.core.connected
    a.now = 5.0
    assert a.sched(Welcome(9, "sched")) == [Log(logging.INFO, "connected to scheduler sched, offering payload=python")]
    assert a.core.connected  # a new session with the scheduler that came back
    a.now = 400.0
    assert a.sched(Shutdown("again", workers_stay=True))[-1] == ToScheduler(HELLO)
    commands = a(Tick(700.5))  # nobody answered for longer than its death timeout: it gives up
    assert commands[-1] == Stop("the scheduler has been silent for 300s", 1), commands


def test_a_worker_told_to_exit_with_the_scheduler_stops_when_it_stops() -> None:
    a = connected(dataclasses.replace(CONFIG, exit_with_scheduler=True))
    reason = "the scheduler is shutting down (SIGTERM)"
    assert a.sched(Shutdown("SIGTERM", workers_stay=True))[-1] == Stop(reason, 0)
    assert a.core.stopped


def test_a_shutdown_that_reaches_a_worker_still_greeting_leaves_it_greeting() -> None:
    a = Agent()
    a(Started(0.0))
    assert a.sched(Shutdown("SIGTERM", workers_stay=True)) == []
    assert not a.core.stopped


def test_refused_hello_stops_with_an_error_code() -> None:
    a = Agent()
    a(Started(0.0))
    commands = a.sched(Refused("too old"))
    assert commands[-1] == Stop("the scheduler refused this worker: too old", 1)
    # said at ERROR: a worker that fails says why even when only warnings are logged
    assert Log(logging.ERROR, "stopping: the scheduler refused this worker: too old") in commands


def test_a_result_over_the_schedulers_payload_limit_fails_its_task() -> None:
    a = with_tasks(1)
    a.core.max_payload_bytes = 8  # as a Welcome(max_payload_bytes=8) sets it
    commands = a.proc(0, pm.Results([t(1)], bytes([TaskStatus.SUCCESS]), [100], [0], [b"r" * 9]))
    [results] = [c.message for c in commands if isinstance(c, ToScheduler)]
    assert results.statuses == bytes([TaskStatus.FAILED])  # type: ignore[union-attr]
    assert b"is 9 bytes once serialized, more than the scheduler's limit of 8" in results.payloads[0]  # type: ignore[union-attr, operator]


def test_the_welcome_gives_the_payload_limit() -> None:
    a = Agent()
    a(Started(0.0))
    a.sched(Welcome(7, "sched", max_payload_bytes=1234))
    assert a.core.max_payload_bytes == 1234


def test_stop_request_says_goodbye_to_the_scheduler() -> None:
    a = connected()
    commands = a(StopRequested(1.0, "SIGTERM"))
    assert commands == [
        ToScheduler(Disconnect("SIGTERM")),
        Log(logging.INFO, "stopping: SIGTERM"),
        KillProcessor(0),
        Stop("SIGTERM", 0),
    ]


def test_session_lost_drops_queued_work_ignores_running_results_and_says_hello() -> None:
    a = with_tasks(6)  # t(1) runs in processor 0
    commands = a.sched(Error(ErrorCode.NOT_CONNECTED, "no session"))
    assert commands == [
        Log(logging.WARNING, "the scheduler lost this worker's session; saying hello again"),
        Log(logging.WARNING, "processor 0 is replaced: it held 1 task of the previous session, which runs again"),
        KillProcessor(0),
        StartProcessor(1),
        Log(logging.WARNING, "5 queued tasks of the previous session dropped"),
        ToScheduler(HELLO),
    ]
    assert a.core.tasks == {} and a.core.objects == {} and not a.core.connected
    assert a.done(0, t(1)) == []  # stale (from a processor killed meanwhile): the scheduler re-runs it
    a.sched(Welcome(8, "sched"))
    a.proc(1, pm.Ready(1001))
    # the new session sends the function again and gives t(1) again: it runs again
    a.sched(PutObjects([F], [b"fn"]))
    assert a.sched(dispatch((t(1), F, [b"a1"]))) == [ToProcessor(1, run(t(1), objects=(F,), payloads=(b"fn",)))]
    assert a.done(1, t(1)) == [ToScheduler(TaskResults([t(1)], bytes([0]), [b"r"]))]


def test_session_lost_sends_nothing_of_the_old_session_after_its_new_hello() -> None:
    """Results, output and start notices buffered for the old session are dropped with it: sent after the new hello,
    they would arrive in the new session (docs/protocol.md section 5, "Task ids come back in a new session")."""
    a = with_tasks(3)  # t(1) runs in processor 0, t(2) and t(3) wait
    core = a.core
    core.feed(FromScheduler(a.now, CancelTasks([t(3)])))  # a queued task: answered canceled, buffered
    core.feed(FromProcessor(a.now, 0, pm.Output([t(1)], bytes([1]), ["printed"])))
    core.feed(FromScheduler(a.now, Error(ErrorCode.NOT_CONNECTED, "no session")))  # in the same read batch
    commands = core.flush()
    sent = [c.message for c in commands if isinstance(c, ToScheduler)]
    assert sent == [HELLO], sent


def test_session_lost_keeps_an_idle_processor_and_drops_its_objects() -> None:
    a = with_tasks(1)
    a.done(0, t(1))
    assert a.sched(Error(ErrorCode.NOT_CONNECTED, "no session")) == [
        Log(logging.WARNING, "the scheduler lost this worker's session; saying hello again"),
        ToProcessor(0, pm.DropObjects([F])),  # the new session starts with nothing held
        ToScheduler(HELLO),
    ]
    assert set(a.core.processors) == {0}


def test_session_lost_replaces_a_processor_blocked_in_waits_of_the_old_session() -> None:
    # Found with an agent paused past its timeout (SIGSTOP) while one processor held a chain of 300 nested waits:
    # the scheduler ran the whole chain again, each re-run level inside the old waits on the same stack, so the old
    # waits ended only after ever deeper chains (depth 60: 16 s instead of 0.5 s; depth 300: over two minutes).
    # Whatever the old session's tasks still do is wasted (the scheduler runs them again): the processor goes.
    config = AgentConfig(name="w", hostname="host", pid=42, queue_capacity=8, max_processors=1)
    a = with_tasks(1, config)
    a.proc(0, pm.Blocked(1, [t(1)]))
    a.sched(dispatch((t(2), F, [b"a2"])))  # runs inside t(1)'s wait
    a.proc(0, pm.Blocked(2, [t(1), t(2)]))
    commands = a.sched(Error(ErrorCode.NOT_CONNECTED, "no session"))
    assert commands == [
        Log(logging.WARNING, "the scheduler lost this worker's session; saying hello again"),
        Log(logging.WARNING, "processor 0 is replaced: it held 2 tasks of the previous session, which run again"),
        KillProcessor(0),
        StartProcessor(1),
        ToScheduler(HELLO),
    ]
    assert a.core.tasks == {} and set(a.core.processors) == {1}
    a.sched(Welcome(8, "sched"))
    a.proc(1, pm.Ready(1001))
    a.sched(PutObjects([F], [b"fn"]))  # the new session gives t(1) again: it runs at once, on the new processor
    assert a.sched(dispatch((t(1), F, [b"a1"]))) == [ToProcessor(1, run(t(1), objects=(F,), payloads=(b"fn",)))]


def test_other_errors_are_logged() -> None:
    a = connected()
    assert a.sched(Error(ErrorCode.BAD_REQUEST, "nope")) == [
        Log(logging.WARNING, "the scheduler refused a message: nope")
    ]


# ----------------------------------------------------------------------------------------------- processors
def test_processor_death_crashes_its_running_task_and_reruns_the_rest_on_a_new_one() -> None:
    a = warmed(4)  # t(2)..t(4) are in processor 0; it dies running t(3) (t(2)'s result died with it)
    text = "the processor running this task died (exit code -9)"
    commands = a(ProcessorExited(1.0, 0, -9, running_task=t(3)))
    assert commands == [
        Log(logging.WARNING, f"task {t(3):#x}: {text}"),
        StartProcessor(1),
        ToScheduler(TaskResults([t(3)], bytes([TaskStatus.CRASHED]), [text.encode()])),
    ]
    assert a.proc(1, pm.Ready(1001)) == [ToProcessor(1, run(t(2), t(4), objects=(F,), payloads=(b"fn",)))]


def test_processor_killed_between_tasks_crashes_none_of_them() -> None:
    a = with_tasks(2)
    assert a(ProcessorExited(1.0, 0, -9, running_task=0)) == [StartProcessor(1)]
    assert a.proc(1, pm.Ready(1001)) == [ToProcessor(1, run(t(1), objects=(F,), payloads=(b"fn",)))]


def test_processors_dying_while_starting_stop_the_agent_after_three() -> None:
    a = Agent()
    a(Started(0.0))
    assert a(ProcessorExited(0.1, 0, 1))[-1] == StartProcessor(1)
    assert a(ProcessorExited(0.2, 1, 1))[-1] == StartProcessor(2)
    assert a(ProcessorExited(0.3, 2, 1))[-1] == Stop("processors keep dying while starting", 1)


def test_a_blocked_processor_gives_up_its_cancelled_and_its_asked_back_tasks_at_once() -> None:
    """Tasks of its window it had not started: one being cancelled ends cancelled, one the scheduler asked back goes
    back to it; neither returns to the queue (before, both ran after all)."""
    a = warmed(5)  # t(2)..t(5) in processor 0
    a.sched(CancelTasks([t(3)]))
    a.sched(BalanceRequest([t(4)]))
    commands = a.proc(0, pm.Blocked(1, [t(2)]))
    assert ToScheduler(BalanceResponse([t(4)])) in commands
    assert ToScheduler(TaskResults([t(3)], bytes([TaskStatus.CANCELED]), [b""])) in commands
    assert t(3) not in a.core.tasks and t(4) not in a.core.tasks
    assert [task.task_id for task in a.core.queue if task.state == QUEUED] == [t(5)]


def test_a_processor_message_out_of_turn_is_an_invariant_error() -> None:
    from scaler.core.common import InvariantError

    a = connected()
    with pytest.raises(InvariantError, match="cannot become unblocked while ready"):
        a.core.feed(FromProcessor(0.0, 0, pm.Unblocked()))


def test_a_stopped_agent_holds_nothing() -> None:
    a = warmed(5)
    a.sched(Shutdown("bye"))
    assert a.core.stopped and not a.core.tasks and not a.core.queued and not a.core.processors


def test_blocked_processor_hands_its_queue_to_a_new_one_and_resumes_later() -> None:
    a = warmed(5)  # t(2)..t(5) in processor 0
    # t(2) runs and waits on nested tasks: t(3)..t(5) must not wait behind it
    assert a.proc(0, pm.Blocked(1, [t(2)])) == [ToProcessor(0, pm.Discard([t(3), t(4), t(5)])), StartProcessor(1)]
    assert a.proc(1, pm.Ready(1001)) == [ToProcessor(1, run(t(3), t(4), t(5), objects=(F,), payloads=(b"fn",)))]
    [beat] = a(Tick(1.0))
    assert beat == ToScheduler(Heartbeat(queued=0, running=4, processors=2, blocked_processors=1, waiting_tasks=1))
    assert a.proc(0, pm.Unblocked()) == [ToProcessor(0, pm.Resume())]
    assert a.done(0, t(2)) == [ToScheduler(TaskResults([t(2)], bytes([0]), [b"r"]))]
    assert set(a.core.processors) == {0, 1}  # processor 0 stays as the one spare


def test_a_second_spare_processor_is_retired() -> None:
    a = with_tasks(1)
    assert a.proc(0, pm.Blocked(1, [t(1)])) == []  # nothing else to run: no new processor yet
    assert a.sched(dispatch((t(2), F, [b"a2"]))) == [StartProcessor(1)]
    assert a.proc(1, pm.Ready(1001)) == [ToProcessor(1, pm.RunTasks([F], [(t(2), F, 0, (0,), None)], [b"fn", b"a2"]))]
    a.proc(1, pm.Blocked(1, [t(2)]))  # t(2) blocks too
    assert a.sched(dispatch((t(3), F, [b"a3"]))) == [StartProcessor(2)]
    a.proc(2, pm.Ready(1002))
    a.proc(0, pm.Unblocked())
    a.proc(1, pm.Unblocked())
    assert a.done(0, t(1)) == [ToScheduler(TaskResults([t(1)], bytes([0]), [b"r"]))]  # 0 is kept as the spare
    assert a.done(1, t(2)) == [
        ToProcessor(1, pm.Exit("no longer needed")),  # one spare is enough
        ToScheduler(TaskResults([t(2)], bytes([0]), [b"r"])),
    ]
    assert set(a.core.processors) == {0, 2}
    assert a(ProcessorExited(1.0, 1, 0)) == []  # its exit is expected


HELPING = Log(
    logging.INFO,
    "all 1 processors are taken, 1 of them blocked in nested waits: 1 tasks now run inside those waits (a waiting "
    "task resumes once the task running inside its wait ends)",
)


def helped(*task_ids: int, epoch: int) -> pm.RunTasks:
    message = run(*task_ids)
    message.help_epoch = epoch
    return message


def test_at_the_limit_a_blocked_processor_runs_tasks_inside_its_wait() -> None:
    config = AgentConfig(name="w", hostname="host", pid=42, queue_capacity=8, max_processors=1)
    a = with_tasks(1, config)
    assert a.proc(0, pm.Blocked(1, [t(1)])) == []  # nothing else to run
    # No processor may start: t(2), most likely a child of t(1), runs inside t(1)'s wait instead of waiting forever.
    assert a.sched(dispatch((t(2), F, [b"a2"]))) == [HELPING, ToProcessor(0, helped(t(2), epoch=1))]
    assert a.sched(dispatch((t(3), F, [b"a3"]))) == []  # one help at a time (run times unknown); said once
    assert a.core.queued == 1
    # t(2) ended inside the wait: t(3) goes in next (the window has grown: t(2) took 100 us)
    assert a.done(0, t(2)) == [
        ToProcessor(0, helped(t(3), epoch=1)),
        ToScheduler(TaskResults([t(2)], bytes([0]), [b"r"])),
    ]
    # t(3) waits in turn, inside t(1)'s wait: both stay, and new tasks help with the newer wait
    assert a.proc(0, pm.Blocked(2, [t(1), t(3)])) == []
    assert a.sched(dispatch((t(4), F, [b"a4"]))) == [ToProcessor(0, helped(t(4), epoch=2))]
    [beat] = a(Tick(1.0))
    assert beat == ToScheduler(Heartbeat(queued=0, running=3, processors=1, blocked_processors=1, waiting_tasks=2))
    assert a.done(0, t(4)) == [ToScheduler(TaskResults([t(4)], bytes([0]), [b"r"]))]
    assert a.proc(0, pm.Unblocked()) == [ToProcessor(0, pm.Resume())]  # t(3) runs again
    assert a.done(0, t(3)) == [ToScheduler(TaskResults([t(3)], bytes([0]), [b"r"]))]
    # back inside t(1)'s wait: the processor says so with a new Blocked, and helps again
    assert a.proc(0, pm.Blocked(3, [t(1)])) == []
    assert a.sched(dispatch((t(5), F, [b"a5"])))[-1] == ToProcessor(0, helped(t(5), epoch=3))


def test_a_wait_inside_a_wait_gives_back_the_help_not_started() -> None:
    config = AgentConfig(name="w", hostname="host", pid=42, queue_capacity=8, max_processors=1)
    a = with_tasks(1, config)
    a.done(0, t(1))  # run times known: windows of several tasks
    a.sched(dispatch((t(2), F, [b"a2"])))
    assert a.proc(0, pm.Blocked(1, [t(2)])) == []
    assert a.sched(dispatch((t(3), F, [b"a3"]), (t(4), F, [b"a4"]), (t(5), F, [b"a5"])))[-1] == ToProcessor(
        0, helped(t(3), t(4), t(5), epoch=1)
    )
    # t(3) started inside t(2)'s wait and waits too: t(4) and t(5) were never started; they are discarded and,
    # no processor being free, handed over again for the new wait
    assert a.proc(0, pm.Blocked(2, [t(2), t(3)])) == [
        ToProcessor(0, pm.Discard([t(4), t(5)])),
        ToProcessor(0, helped(t(4), t(5), epoch=2)),
    ]
    assert set(a.core.processors[0].window) == {t(2), t(3), t(4), t(5)}


def test_below_the_limit_a_blocked_processor_is_not_given_help() -> None:
    a = with_tasks(1)
    a.proc(0, pm.Blocked(1, [t(1)]))
    assert a.sched(dispatch((t(2), F, [b"a2"]))) == [StartProcessor(1)]  # a new processor, not help


def test_events_after_stopping_are_ignored() -> None:
    a = connected()
    a.sched(Shutdown())
    assert a.sched(dispatch((t(1), F, []))) == []
    assert a(Tick(100.0)) == []


# ----------------------------------------------------------------------------------------------- known bugs
def test_no_second_hello_while_the_first_awaits_its_welcome() -> None:
    a = Agent()
    a(Started(0.0))
    # the shell ticks every 0.1 s; the scheduler answers a second hello by dropping the first session
    assert a(Tick(0.1)) == []


def test_session_lost_forgets_objects_the_new_session_does_not_know_about() -> None:
    a = connected()
    a.sched(PutObjects([F, X], [b"fn", b"x"]))
    a.sched(dispatch((t(1), F, [X])))
    a.done(0, t(1))
    a.sched(Error(ErrorCode.NOT_CONNECTED, "no session"))
    # the scheduler discarded this worker as a holder of F and X, so it will never send FreeObjects for them
    assert a.core.objects == {}


def test_slow_welcome_does_not_make_a_healthy_worker_run_a_task_twice() -> None:
    scheduler = Driver()
    prefix = scheduler.client(b"c")
    function = tid(prefix, 1)
    scheduler.put(b"c", (function, b"fn"))
    task = tid(prefix, 2)
    scheduler.recv(b"c", submit((task, function, [b"x"])))

    agent = Agent(AgentConfig(name="w", queue_capacity=4))
    [hello, _] = agent(Started(0.0))
    assert agent(Tick(0.1)) == []  # the scheduler is slow: no welcome yet, and no second hello either
    agent.proc(0, pm.Ready(1))
    started: list[int] = []

    def to_agent(message: object) -> list[AgentCommand]:
        commands = agent.sched(message)
        started.extend(t[0] for c in commands if isinstance(c, ToProcessor) for t in getattr(c.message, "tasks", []))
        return commands

    scheduler.now = 0.2
    # an agent's message to the scheduler: its type is the agent's (a wider union than the scheduler driver's)
    for _, message in sends(scheduler.recv(b"w", hello.message)):  # type: ignore[union-attr,arg-type]
        to_agent(message)  # welcome, the function, the task: it runs
    [result] = agent.done(0, task)
    scheduler.recv(b"w", result.message)  # type: ignore[union-attr,arg-type]  # ends the task, once
    assert started == [task]
    assert task not in scheduler.core.tasks


def test_a_processor_that_keeps_dying_outside_any_task_is_given_up_on() -> None:
    a = with_tasks(1)
    reported = []
    for n in range(20):  # e.g. killed for memory every time it receives t(1)'s huge argument
        reported += [c for c in a(ProcessorExited(float(n), n, -9, running_task=0)) if isinstance(c, ToScheduler)]
        a.proc(n + 1, pm.Ready(1000 + n))
    assert reported, "t(1) is never reported: the scheduler's retry budget never applies"


def test_two_lost_session_errors_do_not_leave_the_worker_holding_requeued_tasks() -> None:
    # Found by the simulation, with workers that follow docs/protocol.md's checklist to the letter (see
    # SimConfig.worker_forgets_on_welcome): a worker silent past its timeout has a heartbeat and a result in flight;
    # both are answered notConnected, so it says hello twice. The scheduler dispatches to the first new session;
    # the second hello closes that session and re-queues its task, which goes elsewhere.
    scheduler = Driver()
    prefix = scheduler.client(b"c")
    function = tid(prefix, 1)
    scheduler.put(b"c", (function, b"fn"))
    scheduler.worker(b"other", capacity=1)
    agent = with_tasks(1)  # an agent that had a session, now lost
    error = Error(ErrorCode.NOT_CONNECTED, "no session")
    hellos = [c.message for _ in range(2) for c in agent.sched(error) if isinstance(c, ToScheduler)]
    assert len(hellos) == 1  # one hello per lost session, however many errors say so
    scheduler.recv(b"c", submit((tid(prefix, 2), function, [b"x"]), (tid(prefix, 3), function, [b"y"])))
    for _, message in sends(scheduler.recv(b"w", hellos[0])):  # session 1 gets t3 ("other" is busy with t2)
        agent.sched(message)
    scheduler.recv(b"other", ok(tid(prefix, 2)))  # "other" has room again
    # the agent holds only what the scheduler gave its live session
    assert agent.core.tasks.keys() <= scheduler.core.workers[b"w"].assigned.keys()


def test_an_agent_awaiting_its_welcome_drops_what_the_scheduler_sent_its_previous_session() -> None:
    """Between a hello and its welcome, work messages belong to the session the hello ends (SESSION_WORK): no result
    (a failure for a forgotten object), no balanceResponse, nothing held; the new session starts from nothing."""
    a = with_tasks(1)
    a.done(0, t(1))
    a.sched(Error(ErrorCode.NOT_CONNECTED, "no session"))  # objects dropped, hello sent
    for message in (
        PutObjects([X], [b"x"]),
        dispatch((t(2), F, [b"a2"]), (t(3), F, [X])),  # F was forgotten: it would fail "was not sent"
        CancelTasks([t(2)]),
        BalanceRequest([t(3)]),
        FreeObjects([F]),
    ):
        assert a.sched(message) == [], message
    assert a.core.tasks == {} and a.core.objects == {} and a.core.queued == 0
    a.sched(Welcome(8, "sched"))
    a.sched(PutObjects([F], [b"fn"]))
    assert a.sched(dispatch((t(2), F, [b"a2"]))) == [ToProcessor(0, run(t(2), objects=(F,), payloads=(b"fn",)))]


def test_a_dispatch_to_the_old_session_after_a_scheduler_stall_does_not_fail_for_a_missing_object() -> None:
    # Issue 25: a 20,000-task map failed once with "object ... was not sent to this worker" after the scheduler had
    # stalled for 10 s on a loaded host. Hearing nothing past the worker timeout, the agent ended its session (its
    # objects forgotten) and said hello again. The scheduler, catching up, read the agent's heartbeats before its hello
    # and dispatched a task to the old session, which it believed held the function (so no putObjects). The agent,
    # awaiting its welcome, failed the task for the missing function; by the time that failure came, the hello had
    # re-queued the task and it had gone to the new session: the stale failure ended it there.
    scheduler = Driver()  # worker timeout 10 s
    prefix = scheduler.client(b"c")
    function, first, second = tid(prefix, 1), tid(prefix, 2), tid(prefix, 3)
    scheduler.put(b"c", (function, b"fn"))
    agent = Agent(AgentConfig(name="w", queue_capacity=4))
    hello = Hello(PeerKind.WORKER, "w", queue_capacity=4, capabilities=["payload=python"])
    assert agent(Started(0.0)) == [ToScheduler(hello), StartProcessor(0)]
    agent.proc(0, pm.Ready(1))
    to_client: list[TaskResults] = []

    def route(commands: list[Command]) -> list[AgentCommand]:
        """Deliver the scheduler's messages: the client's results kept, the agent's fed to it; the agent's out."""
        out: list[AgentCommand] = []
        for peer, message in sends(commands):
            if peer == b"c" and isinstance(message, TaskResults):
                to_client.append(message)
            elif peer == b"w":
                out += agent.sched(message)
        return out

    def run_all(commands: list[AgentCommand]) -> list[Message]:
        """What the agent sends the scheduler, once its processors have run every task it gave them."""
        sent = [c.message for c in commands if isinstance(c, ToScheduler)]
        for c in commands:
            if isinstance(c, ToProcessor) and isinstance(c.message, pm.RunTasks):
                done = agent.done(c.processor, *(task[0] for task in c.message.tasks))
                sent += [d.message for d in done if isinstance(d, ToScheduler)]
        return sent

    route(scheduler.recv(b"w", hello))
    for message in run_all(route(scheduler.recv(b"c", submit((first, function, [b"1"]))))):  # putObjects first
        route(scheduler.recv(b"w", message))
    assert [r.task_ids for r in to_client] == [[first]]
    # The scheduler stalls; the client submits meanwhile; the agent beats, then gives its session up.
    in_flight: list[Message] = []
    for k in range(1, 22):
        agent.now = k * 0.5
        in_flight += [c.message for c in agent(Tick(agent.now)) if isinstance(c, ToScheduler)]
    assert not agent.core.connected and in_flight[-1] == hello
    # Catching up, the scheduler reads the client's submit and the agent's heartbeats, flushes, then reads the hello.
    scheduler.now = 11.0
    to_agent = scheduler.recv(b"c", submit((second, function, [b"2"])))
    for message in in_flight[:-1]:
        to_agent += scheduler.recv(b"w", message)
    dispatched = [m.task_ids for _, m in sends(to_agent) if isinstance(m, DispatchTasks)]
    assert dispatched == [[second]]  # to the old session
    to_agent += scheduler.recv(b"w", in_flight[-1])  # ends it: the task goes to the new one
    for message in run_all(route(to_agent)):
        route(scheduler.recv(b"w", message))
    assert [(r.task_ids, r.statuses, r.payloads) for r in to_client[1:]] == [([second], bytes([0]), [b"r"])]


def test_waiting_tasks_are_reported_at_the_next_tick() -> None:
    # a change in the number of waiting tasks goes out at the next tick (the scheduler gives them room, and does not
    # count them as work held in fair placement), not at the next regular heartbeat
    a = with_tasks(1)
    [first] = a(Tick(0.0))
    assert isinstance(first, ToScheduler) and isinstance(first.message, Heartbeat)
    a.proc(0, pm.Blocked(1, [t(1)]))
    [beat] = [c for c in a(Tick(0.1)) if isinstance(c, ToScheduler)]
    assert isinstance(beat.message, Heartbeat) and beat.message.waiting_tasks == 1
    a.sched(dispatch(*((t(i), F, [b"a%d" % i]) for i in range(2, 5))))
    assert [c for c in a(Tick(0.2)) if isinstance(c, ToScheduler)] == []  # no change since


# ----------------------------------------------------------------------------------------------- timeouts, memory
def beatless(a: Agent, tick: Tick) -> list[AgentCommand]:
    """The commands of a tick, without its heartbeat."""
    return [c for c in a(tick) if not (isinstance(c, ToScheduler) and isinstance(c.message, Heartbeat))]


def timed_dispatch(*specs: tuple[int, int]) -> DispatchTasks:
    """A dispatch of (task, timeout in ms) pairs, one inline argument each."""
    message = dispatch(*((task_id, F, [b"a%d" % (task_id - t(0))]) for task_id, _ in specs))
    message.timeouts_ms = [timeout for _, timeout in specs]
    return message


def test_a_timed_task_runs_alone_and_its_processor_is_stopped_at_its_deadline() -> None:
    a = warmed(2)  # the window is wide; t(2) runs in processor 0
    a.now = 1.0
    assert a.sched(timed_dispatch((t(3), 2000), (t(4), 0))) == []  # t(3) waits for a window of its own
    a.now = 1.5
    assert a.done(0, t(2)) == [
        ToProcessor(0, run(t(3))),  # alone: t(4) waits behind it
        ToScheduler(TaskResults([t(2)], bytes([0]), [b"r"])),
    ]
    assert a.core.processors[0].timed == t(3) and a.core.tasks[t(3)].deadline == 3.5
    assert beatless(a, Tick(3.4)) == []
    text = f"task {t(3):#x} ran longer than its timeout of 2s; its processor was stopped"
    commands = beatless(a, Tick(3.5))
    assert commands == [
        KillProcessor(0),
        Log(logging.WARNING, text),
        StartProcessor(1),
        ToScheduler(TaskResults([t(3)], bytes([TaskStatus.TIMED_OUT]), [text.encode()])),
    ]
    assert a.proc(1, pm.Ready(1001)) == [ToProcessor(1, run(t(4), objects=(F,), payloads=(b"fn",)))]
    assert a(ProcessorExited(3.6, 0, -9, running_task=t(3))) == []  # the stopped one is forgotten already


def test_a_timed_task_that_ends_in_time_frees_its_processor_for_the_next() -> None:
    a = connected()
    a.sched(PutObjects([F], [b"fn"]))
    [run_first] = a.sched(timed_dispatch((t(1), 500), (t(2), 500)))
    assert run_first == ToProcessor(0, run(t(1), objects=(F,), payloads=(b"fn",)))
    commands = a.done(0, t(1))
    assert commands[0] == ToProcessor(0, run(t(2)))
    assert beatless(a, Tick(10.0))[0] == KillProcessor(0)  # t(2) was handed at time 0: long past its deadline


def test_a_processor_over_the_memory_limit_is_stopped_and_its_task_ends_over_memory() -> None:
    a = with_tasks(2, AgentConfig(name="w", hostname="host", pid=42, queue_capacity=8, memory_limit_bytes=1 << 30))
    assert beatless(a, Tick(1.0, processor_rss=((0, 1 << 29),))) == []  # under the limit
    text = (
        f"the processor running task {t(1):#x} used 1.5 GiB, over the worker's memory limit of 1 GiB "
        "(scaler_cluster --memory-limit); it was stopped"
    )
    commands = beatless(a, Tick(1.1, processor_rss=((0, 3 << 29),)))
    assert commands == [
        KillProcessor(0),
        Log(logging.WARNING, text),
        StartProcessor(1),
        ToScheduler(TaskResults([t(1)], bytes([TaskStatus.OVER_MEMORY]), [text.encode()])),
    ]
    assert a.proc(1, pm.Ready(1001)) == [ToProcessor(1, run(t(2), objects=(F,), payloads=(b"fn",)))]


def test_an_idle_processor_over_the_memory_limit_is_replaced_and_no_task_fails() -> None:
    a = connected(AgentConfig(name="w", hostname="host", pid=42, queue_capacity=8, memory_limit_bytes=1000))
    commands = beatless(a, Tick(1.0, processor_rss=((0, 2048), (7, 1 << 40))))  # processor 7 is not ours (any more)
    assert commands == [
        Log(
            logging.WARNING,
            "processor 0 used 2 KiB, over the worker's memory limit of 1000 bytes "
            "(scaler_cluster --memory-limit) between tasks; replacing it",
        ),
        KillProcessor(0),
        StartProcessor(1),
    ]


# ----------------------------------------------------------------------------------------------- a lost scheduler
def test_no_queued_task_starts_while_the_connection_to_the_scheduler_is_closed() -> None:
    """Its result could not be delivered, and a scheduler that died takes the session with it: the task would run
    again after the restart (issue 28's bar counts tasks run twice). The running one finishes."""
    a = with_tasks(3)  # t(1) runs in processor 0; t(2), t(3) wait
    a(SchedulerLink(1.0, up=False))
    commands = a.done(0, t(1))
    assert not any(isinstance(c, ToProcessor) for c in commands)  # t(2) waits for the connection
    assert a.core.queued == 2
    commands = a(SchedulerLink(1.5, up=True))  # back within the grace (a reset): work goes on
    [handed] = [c.message for c in commands if isinstance(c, ToProcessor)]
    assert isinstance(handed, pm.RunTasks) and [task[0] for task in handed.tasks] == [t(2), t(3)]


def test_a_connection_closed_past_the_grace_ends_the_session_stops_its_work_and_says_hello() -> None:
    a = warmed(3)  # t(2), t(3) in processor 0
    assert beatless(a, Tick(0.5)) == []
    a(SchedulerLink(1.0, up=False))
    assert beatless(a, Tick(2.9)) == []  # within the grace: ZeroMQ may reconnect to the same scheduler
    a(SchedulerLink(3.0, up=True))
    a(SchedulerLink(4.0, up=False))  # closed again: the grace starts over
    assert beatless(a, Tick(5.9)) == []
    commands = beatless(a, Tick(6.1))
    text = "the connection to the scheduler closed 2s ago: its session is gone; stopping its work and saying hello"
    assert commands[0] == Log(logging.WARNING, text + " until one answers")
    assert KillProcessor(0) in commands and StartProcessor(1) in commands  # its tasks can no longer be delivered
    assert commands[-1] == ToScheduler(HELLO) and not a.core.connected and not a.core.tasks
    assert beatless(a, Tick(7.0)) == []  # one hello, then one every 10 s (HELLO_RETRY_SECONDS)


def test_after_a_reset_the_heartbeat_says_what_was_sent_and_the_echo_what_came() -> None:
    """docs/protocol.md "Connection resets": the agent counts its session's messages (not heartbeats, echoes or the
    hello; the welcome is the first received). A connection made again within the grace: the next tick's heartbeat
    is resumed with its count; the echo carries the scheduler's. Equal: the session goes on. The scheduler sent more
    than came (a dispatch lost, say): the session cannot be trusted, so the agent starts a new one."""
    a = warmed(3)  # received: welcome, putObjects, dispatchTasks; sent: taskResults (and tasksStarted)
    a(Tick(0.9))  # what is due goes now (a heartbeat, the late tasksStarted)
    sent, came = a.core.messages_sent, a.core.messages_received
    assert came == 3 and sent >= 1
    a(SchedulerLink(1.0, up=False))
    a(SchedulerLink(1.5, up=True))
    [beat] = [c.message for c in a(Tick(1.6)) if isinstance(c, ToScheduler) and isinstance(c.message, Heartbeat)]
    assert beat.resumed and beat.sent == sent
    a.now = 1.7
    assert a.sched(HeartbeatEcho(resumed=True, sent=came)) == []
    assert a.core.connected
    [beat] = [c.message for c in a(Tick(3.7)) if isinstance(c, ToScheduler) and isinstance(c.message, Heartbeat)]
    assert not beat.resumed  # only the first heartbeat after the reset
    a(SchedulerLink(4.0, up=False))
    a(SchedulerLink(4.5, up=True))
    a(Tick(4.6))
    a.now = 4.7
    commands = a.sched(HeartbeatEcho(resumed=True, sent=came + 1))
    warning = "messages from the scheduler were lost in a connection reset (it sent 4, 3 came); saying hello again"
    assert Log(logging.WARNING, warning) in commands
    assert commands[-1] == ToScheduler(HELLO) and not a.core.connected and not a.core.tasks
    assert a.core.messages_sent == 0  # the new session counts from its hello


def test_a_scheduler_silent_past_its_worker_timeout_ends_the_session() -> None:
    a = Agent()
    a(Started(0.0))
    a.sched(Welcome(7, "sched", peer_timeout_ms=3000))
    assert a.core.connected
    assert not any(isinstance(c, Log) for c in a(Tick(2.9)))
    commands = a(Tick(3.1))
    assert "the scheduler has been silent for 3s, past its 3s worker timeout" in commands[0].text  # type: ignore[union-attr]
    assert commands[-1] == ToScheduler(HELLO) and not a.core.connected


# ----------------------------------------------------------------------------------------------- tasksStarted
def test_a_new_agent_says_at_once_which_tasks_it_handed_to_a_processor() -> None:
    a = with_tasks(2)  # run times unknown: t(1) went alone to processor 0
    assert a.told == [TasksStarted([t(1)])]


def test_an_agent_of_fast_tasks_says_it_one_flush_late_and_only_of_tasks_still_running() -> None:
    a = warmed(4)  # t(1) ran in 100 us; t(2)..t(4) went to processor 0 in one window
    assert a.told == [TasksStarted([t(1)])]  # t(1), at once; the window's notice waits for the next flush
    a.done(0, t(2), t(3))  # their results say more: only t(4) is still running
    assert a.told[-1] == TasksStarted([t(4)])
    assert a.unreported == set()


def test_a_late_notice_goes_out_at_the_next_tick_if_nothing_else_happens() -> None:
    a = warmed(3)
    assert a.unreported == {t(2), t(3)}
    a(Tick(0.1))
    assert a.told[-1] == TasksStarted([t(2), t(3)]) and a.unreported == set()


def test_slow_tasks_are_told_at_once() -> None:
    a = with_tasks(3)
    slow = pm.Results([t(1)], bytes([0]), [5000], [0], [b"r"])  # 5 ms: above EAGER_NOTICE_ABOVE_US
    a.proc(0, slow)
    assert a.told[-1] == TasksStarted([t(2), t(3)]) and a.unreported == set()  # a window of 2 ms: 2 tasks


# ----------------------------------------------------------------------------------------------- task output
def test_what_a_task_printed_goes_to_the_scheduler_before_its_result() -> None:
    a = connected()
    a.sched(PutObjects([F], [b"fn"]))
    a.sched(dispatch((t(1), F, []), flags=FLAG_STREAM_OUTPUT))
    a.core.feed(FromProcessor(0.0, 0, pm.Output([t(1), t(1)], bytes([OUTPUT_STDOUT, OUTPUT_STDERR]), ["a\n", "b"])))
    a.core.feed(FromProcessor(0.0, 0, pm.Results([t(1)], bytes([0]), [100], [0], [b"r"])))
    assert without_started(a.core.flush(), a.unreported) == [
        ToScheduler(TaskOutput([t(1), t(1)], bytes([OUTPUT_STDOUT, OUTPUT_STDERR]), ["a\n", "b"])),
        ToScheduler(TaskResults([t(1)], bytes([0]), [b"r"])),
    ]


def test_output_of_a_task_still_running_goes_at_once() -> None:
    a = with_tasks(1)
    assert a.proc(0, pm.Output([t(1)], bytes([OUTPUT_STDOUT]), ["half way\n"])) == [
        ToScheduler(TaskOutput([t(1)], bytes([OUTPUT_STDOUT]), ["half way\n"]))
    ]


def test_the_error_text_of_a_task_that_raised_goes_before_its_result() -> None:
    a = with_tasks(1)
    text = 'Traceback (most recent call last):\n  File "job.py", line 3, in f\nValueError: bad\n'
    a.core.feed(FromProcessor(0.0, 0, pm.Output([t(1)], bytes([OUTPUT_ERROR]), [text])))
    a.core.feed(FromProcessor(0.0, 0, pm.Results([t(1)], bytes([TaskStatus.ERROR]), [100], [0], [b"exc"])))
    assert a.core.flush() == [
        ToScheduler(TaskOutput([t(1)], bytes([OUTPUT_ERROR]), [text])),
        ToScheduler(TaskResults([t(1)], bytes([TaskStatus.ERROR]), [b"exc"])),
    ]


def test_output_of_tasks_this_agent_does_not_hold_is_dropped() -> None:
    a = with_tasks(1)
    assert a.proc(0, pm.Output([t(7)], bytes([OUTPUT_STDOUT]), ["not mine"])) == []  # never given to this processor
    a.sched(Error(ErrorCode.NOT_CONNECTED, "no session"))  # t(1) is of the lost session now
    assert a.core.tasks == {}
    assert a.proc(0, pm.Output([t(1)], bytes([OUTPUT_ERROR]), ["stale"])) == []  # from the processor replaced


# ----------------------------------------------------------------------------------------------- the session
def test_the_session_table_reaches_every_state_and_ends() -> None:
    """SESSION_TRANSITIONS, read as data: every state is reached from NEW, an ended agent changes no more, and every
    state that has not ended can stop."""
    reached, frontier = {SessionState.NEW}, [SessionState.NEW]
    while frontier:
        state = frontier.pop()
        for (before, _), after in SESSION_TRANSITIONS.items():
            if before == state and after not in reached:
                reached.add(after)
                frontier.append(after)
    assert reached == set(SessionState)
    assert not [key for key in SESSION_TRANSITIONS if key[0] in ENDED]
    for state in set(SessionState) - ENDED:
        assert SESSION_TRANSITIONS[state, SessionStep.STOP] in ENDED
        assert SESSION_TRANSITIONS[state, SessionStep.BYE] == SessionState.STOPPED


def session_of(agent: Agent) -> SessionState:
    """The agent's session state (read through a call: each step changes it, which mypy's narrowing would not see)."""
    return agent.core.session


def test_the_session_goes_from_hello_to_welcome_to_resuming_and_back() -> None:
    a = Agent()
    assert session_of(a) == SessionState.NEW
    a(Started(0.0))
    assert session_of(a) == SessionState.GREETING and not a.core.connected and not a.core.reachable()
    a.sched(Welcome(7, "sched"))
    assert session_of(a) == SessionState.CONNECTED and a.core.reachable()
    a(SchedulerLink(1.0, up=False))
    assert session_of(a) == SessionState.CONNECTED and not a.core.reachable()  # within the grace
    a(SchedulerLink(1.5, up=True))
    assert session_of(a) == SessionState.RESUMING and a.core.reachable()
    [beat] = [c.message for c in a(Tick(1.6)) if isinstance(c, ToScheduler) and isinstance(c.message, Heartbeat)]
    assert beat.resumed and session_of(a) == SessionState.CONNECTED


def test_an_agent_stopped_in_a_session_leaves_and_one_told_bye_just_stops() -> None:
    """reachable() after the stop tells the shell whether the last messages are worth a wait."""
    a = connected()
    a(StopRequested(1.0, "SIGTERM"))
    assert a.core.session == SessionState.LEAVING and a.core.stopped and a.core.reachable()
    b = connected()
    b.sched(Shutdown("bye"))
    assert b.core.session == SessionState.STOPPED and b.core.stopped and not b.core.reachable()
    c = Agent()
    c(Started(0.0))
    c.sched(Refused("too old"))
    assert c.core.session == SessionState.STOPPED and not c.core.reachable()


def test_a_session_change_the_table_does_not_have_is_a_bug() -> None:
    core = AgentCore(CONFIG)  # not started: it said no hello, so no welcome can answer one
    with pytest.raises(InvariantError, match="the session cannot take welcome while new"):
        core.handle(FromScheduler(0.0, Welcome(7, "sched")))
