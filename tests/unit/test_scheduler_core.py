"""SchedulerCore, one behaviour per test: state is built only by feeding events; the commands are asserted exactly.

Every event goes through Driver, which runs validate() after it.
"""

from __future__ import annotations

import itertools
import logging
import random
from typing import Any

import pytest

from scaler.core.scheduler import Log, Malformed, Received, SchedulerConfig, SchedulerCore, Send, Stop
from scaler.core.scheduler.config import DEFAULT_MAX_PAYLOAD_BYTES as LIMIT
from scaler.core.scheduler.needs import Need, ready_queue
from scaler.core.scheduler.placement import FAIR_LINGER_SECONDS, lone_worker, water_fill
from scaler.core.scheduler.sessions import WorkerSession
from scaler.core.scheduler.tasks import (
    EVENT_NAMES,
    STATE_NAMES,
    TRANSITION_TABLE,
    TRANSITIONS,
    InvariantError,
    Task,
    TaskEvent,
    TaskState,
)
from scaler.protocol.messages import (
    FLAG_PROFILING,
    FLAG_REPORT_END,
    FLAG_SILENT,
    PROTOCOL_VERSION,
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
    PeerKind,
    PutObjects,
    Refused,
    Shutdown,
    ShutdownRequest,
    SubmitTasks,
    TaskResults,
    TasksStarted,
    TaskStatus,
    Welcome,
    WorkerStatus,
)
from tests.helpers import payload_bytes
from tests.unit.scheduler_driver import Driver, dispatch, logs, of_type, ok, results, sends, submit, tid

C, W1, W2, W3 = b"c1", b"w1", b"w2", b"w3"
P = 1  # the first session opened gets prefix 1: the client, in every test below
F = tid(P, 1)  # the client's function object
FN = b"<function>"


def t(n: int) -> int:
    return tid(P, n + 1)  # task n; ids after the function object's


ECHO_ONE_WORKER = HeartbeatEcho(workers=1, worker_capacity=4, workers_stated=True)  # W1 of capacity 4 (fleet_size.py)


def with_function(**settings: Any) -> Driver:
    """A driver with client C connected and its function object stored."""
    d = Driver(**settings)
    assert d.client(C) == P
    assert d.put(C, (F, FN)) == []
    return d


def with_tasks(n: int, capacity: int = 4, **settings: object) -> Driver:
    """Client C submitted tasks t(1)..t(n); worker W1 joined and got min(n, capacity) of them."""
    d = with_function(**settings)
    d.recv(C, submit(*((t(i), F, [b"a%d" % i]) for i in range(1, n + 1))))
    d.worker(W1, capacity)
    return d


# ----------------------------------------------------------------------------------------------- sessions
def test_client_hello_is_welcomed_with_a_fresh_prefix_and_the_client_timeout() -> None:
    d = Driver()
    commands = d.recv(C, Hello(PeerKind.CLIENT, "alice"))
    assert commands == [
        Log(logging.INFO, "client alice connected"),
        Send(C, Welcome(1, "scheduler", True, 60_000, max_payload_bytes=LIMIT, workers_stated=True)),  # no worker yet
    ]
    commands = d.recv(b"c2", Hello(PeerKind.CLIENT, ""))
    assert sends(commands) == [
        (b"c2", Welcome(2, "scheduler", True, 60_000, max_payload_bytes=LIMIT, workers_stated=True))
    ]
    # A nameless peer is named by its prefix: routing ids are never shown (knowing one lets a peer take its route).
    assert [c.name for c in d.core.clients.values()] == ["alice", "unnamed-client-2"]


def test_worker_hello_is_welcomed_with_the_worker_timeout() -> None:
    d = Driver(name="sched", protected=False, worker_timeout_seconds=2.5)
    commands = d.recv(W1, Hello(PeerKind.WORKER, "w", queue_capacity=3))
    assert commands == [
        Log(logging.INFO, "worker w joined (queue capacity 3)"),
        Send(W1, Welcome(1, "sched", False, 2500, max_payload_bytes=LIMIT)),
    ]
    assert d.core.workers[W1].capacity == 3


def test_worker_without_queue_capacity_is_refused() -> None:
    d = Driver()
    commands = d.recv(W1, Hello(PeerKind.WORKER, "w", queue_capacity=0))
    assert sends(commands) == [(W1, Refused("a worker must accept at least one task (queueCapacity >= 1)"))]
    assert d.core.workers == {}


def test_other_protocol_version_is_refused_with_ours() -> None:
    d = Driver()
    commands = d.recv(C, Hello(PeerKind.CLIENT, "old", protocol_version=PROTOCOL_VERSION + 1))
    [(peer, refused)] = sends(commands)
    assert peer == C and isinstance(refused, Refused)
    assert refused.scheduler_protocol_version == PROTOCOL_VERSION
    assert f"protocol version {PROTOCOL_VERSION + 1} is not supported" in refused.reason
    assert [log.level for log in logs(commands)] == [logging.WARNING]
    assert d.core.clients == {}


def test_message_from_unknown_peer_gets_not_connected_and_disconnect_is_ignored() -> None:
    d = Driver()
    assert sends(d.recv(b"x", Heartbeat())) == [(b"x", Error(ErrorCode.NOT_CONNECTED, "no session: send hello first"))]
    assert d.recv(b"x", Disconnect("bye")) == []
    assert d.core.dropped == 1


def test_client_may_not_send_worker_messages_and_worker_may_not_submit() -> None:
    d = with_function()
    d.worker(W1)
    [(peer, error)] = sends(d.recv(C, ok(t(1))))
    assert peer == C and error == Error(ErrorCode.BAD_REQUEST, "a client may not send taskResults", [])
    [(peer, error)] = sends(d.recv(W1, submit((t(1), F, []))))
    assert peer == W1 and error == Error(ErrorCode.BAD_REQUEST, "a worker may not send submitTasks", [])
    assert d.core.tasks == {} and d.core.dropped == 2


def test_malformed_message_is_answered_and_counted() -> None:
    d = Driver()
    commands = d.core.handle(Malformed(0.0, b"x", "bad header"))
    assert sends(commands) == [(b"x", Error(ErrorCode.MALFORMED, "bad header"))]
    assert logs(commands)[0].level == logging.WARNING
    assert d.core.dropped == 1


def test_heartbeats_are_echoed_and_the_worker_one_is_kept_for_status() -> None:
    d = with_function()
    d.worker(W1)
    assert sends(d.recv(C, Heartbeat())) == [(C, ECHO_ONE_WORKER)]  # a client's echo says how many workers there are
    beat = Heartbeat(cpu_percent=12.5, rss_bytes=1000, queued=3, running=1, processors=2)
    assert sends(d.recv(W1, beat)) == [(W1, HeartbeatEcho())]
    [worker] = d.core.status().workers
    assert (worker.agent_cpu_percent, worker.agent_rss_bytes, worker.queued, worker.processors) == (12.5, 1000, 3, 2)


def test_a_resumed_heartbeat_that_counts_what_came_is_answered_with_what_was_sent() -> None:
    """docs/protocol.md "Connection resets": after its connection was made again, a client says how many messages
    it sent (heartbeats excluded); all came, so the echo says how many the scheduler sent it (echoes excluded, the
    welcome and results included), for the client to check."""
    d = with_tasks(3, capacity=2)  # C sent a putObjects and a submitTasks
    d.recv(W1, results((t(1), TaskStatus.SUCCESS, b"one")))  # C was sent its welcome, then this result
    echo = HeartbeatEcho(workers=1, worker_capacity=2, workers_stated=True)
    assert sends(d.recv(C, Heartbeat())) == [(C, echo)]  # neither counted
    assert sends(d.recv(C, Heartbeat(resumed=True, sent=2))) == [(C, HeartbeatEcho(resumed=True, sent=2))]
    assert C in d.core.clients and len(d.core.tasks) == 2


def test_a_resumed_heartbeat_counting_more_than_came_ends_the_session_saying_why() -> None:
    d = with_tasks(3, capacity=2)
    commands = d.recv(C, Heartbeat(resumed=True, sent=3))  # one of its messages was lost in the reset
    reason = "its connection was reset and messages were lost (it sent 3, 2 came)"
    assert (C, Error(ErrorCode.NOT_CONNECTED, f"session ended: {reason}")) in sends(commands)
    assert (W1, CancelTasks([t(1), t(2)])) in sends(commands)  # its running tasks are stopped
    assert C not in d.core.clients and d.core.tasks.keys() <= {t(1), t(2)}  # (until the worker confirms)
    assert any(f"client c1 left ({reason})" in log.text for log in logs(commands))


def test_a_workers_resumed_heartbeat_is_always_answered_or_ends_its_session_if_something_was_lost() -> None:
    """As for clients: the counts of a worker's session are checked on its resumed heartbeat (answered even within
    the echo's rate limit); a count over what came means a result or an answer was lost: the worker is lost (its
    tasks go back to the queue, an attempt counted) and told so."""
    d = with_tasks(3, capacity=2)  # W1 was sent putObjects and dispatchTasks (after its welcome)
    assert sends(d.recv(W1, Heartbeat())) == [(W1, HeartbeatEcho())]
    assert sends(d.recv(W1, Heartbeat())) == []  # within a quarter of the worker timeout: not echoed
    assert sends(d.recv(W1, Heartbeat(resumed=True, sent=0))) == [(W1, HeartbeatEcho(resumed=True, sent=3))]
    commands = d.recv(W1, Heartbeat(resumed=True, sent=1))  # a taskResults it sent never came
    reason = "its connection was reset and messages were lost (it sent 1, 0 came)"
    assert (W1, Error(ErrorCode.NOT_CONNECTED, f"session ended: {reason}")) in sends(commands)
    assert W1 not in d.core.workers and len(d.core.tasks) == 3  # the tasks wait for another worker


def test_a_worker_heartbeat_is_echoed_at_most_once_per_quarter_of_the_worker_timeout() -> None:
    """The echo is most of an idle fleet's cost; a worker beats every quarter of the timeout at most (Welcome), so it
    still hears from the scheduler at least every half of it. Clients' heartbeats are all answered."""
    d = with_function(worker_timeout_seconds=10.0)
    d.worker(W1)
    echoed = []
    for beat in range(12):  # every 2 s, a little late now and then
        d.now = 2.0 * beat + (0.3 if beat % 3 == 1 else 0.0)
        if sends(d.recv(W1, Heartbeat())) == [(W1, HeartbeatEcho())]:
            echoed.append(d.now)
        assert sends(d.recv(C, Heartbeat())) == [(C, ECHO_ONE_WORKER)]
    assert echoed == [0.0, 4.0, 8.3, 12.0, 16.0, 20.3]
    assert max(b - a for a, b in itertools.pairwise(echoed)) <= 5.0
    assert W1 in d.core.workers


# ----------------------------------------------------------------------------------------------- submit and place
def test_task_waits_in_the_queue_until_a_worker_joins() -> None:
    d = with_function()
    assert d.recv(C, submit((t(1), F, [b"x"]))) == []
    assert d.core.explain(t(1)) == f"task {t(1):#x} is queued: no worker is connected"
    assert d.core.state_counts[TaskState.QUEUED] == 1
    assert sends(d.worker(W1)) == [
        (W1, Welcome(2, "scheduler", True, 10_000, max_payload_bytes=LIMIT)),
        (W1, PutObjects([F], [FN])),
        (W1, dispatch((t(1), F, [b"x"]))),
    ]
    assert d.core.explain(t(1)) == f"task {t(1):#x} was sent to worker w1 (attempt 1)"


def test_submitted_task_goes_to_a_connected_worker_with_its_function_once() -> None:
    d = with_function()
    d.worker(W1)
    assert sends(d.recv(C, submit((t(1), F, [b"x", F])))) == [
        (W1, PutObjects([F], [FN])),
        (W1, dispatch((t(1), F, [b"x", F]))),
    ]
    assert sends(d.recv(C, submit((t(2), F, [b"y"])))) == [(W1, dispatch((t(2), F, [b"y"])))]


def test_result_goes_to_the_client_and_releases_the_worker_slot() -> None:
    d = with_tasks(3, capacity=2)
    assert sends(d.recv(W1, results((t(1), TaskStatus.SUCCESS, b"one")))) == [
        (W1, dispatch((t(3), F, [b"a3"]))),
        (C, TaskResults([t(1)], bytes([TaskStatus.SUCCESS]), [b"one"])),
    ]
    assert sends(d.recv(W1, results((t(2), TaskStatus.ERROR, b"boom"), (t(3), TaskStatus.SUCCESS, b"three")))) == [
        (C, TaskResults([t(2), t(3)], bytes([TaskStatus.ERROR, TaskStatus.SUCCESS]), [b"boom", b"three"])),
    ]
    assert d.core.tasks == {}
    assert dict(d.core.ended) == {"success": 2, "error": 1}
    assert d.core.status().clients[0].completed == 3


def test_profiling_columns_reach_the_client() -> None:
    d = with_function()
    d.worker(W1)
    d.recv(C, submit((t(1), F, []), flags=FLAG_PROFILING))
    message = TaskResults([t(1)], bytes([TaskStatus.SUCCESS]), [b"r"], [1500], [4096], [1200])
    assert sends(d.recv(W1, message)) == [(C, TaskResults([t(1)], bytes([0]), [b"r"], [1500], [4096], [1200]))]


def test_silent_task_result_is_not_sent() -> None:
    d = with_function()
    d.worker(W1)
    d.recv(C, submit((t(1), F, []), flags=FLAG_SILENT))
    assert d.recv(W1, ok(t(1))) == []
    assert d.core.tasks == {}


def test_a_silent_task_flagged_report_end_is_said_to_have_ended_without_its_result() -> None:
    """(A graph watched for progress: get(progress=True), Dask's ProgressBar.) Its status, no payload."""
    d = with_function()
    d.worker(W1)
    d.recv(C, submit((t(1), F, []), flags=FLAG_SILENT | FLAG_REPORT_END))
    assert sends(d.recv(W1, ok(t(1), payload=b"big"))) == [(C, TaskResults([t(1)], bytes([TaskStatus.SUCCESS]), [b""]))]


def test_keywords_travel_with_their_tasks_and_are_padded_for_tasks_without() -> None:
    d = with_function()
    d.recv(C, submit((t(1), F, [b"1", b"2"]), (t(2), F, [b"3"]), keywords=["", "k", ""]))
    d.recv(C, submit((t(3), F, [b"4"])))
    [(_, message)] = of_type(d.worker(W1), DispatchTasks)
    assert message.task_ids == [t(1), t(2), t(3)]
    assert message.keywords == ["", "k", "", ""]


def test_tasks_are_spread_evenly_and_never_beyond_capacity() -> None:
    d = with_function()
    d.recv(C, submit(*((t(i), F, []) for i in range(1, 8))))
    d.worker(W1, capacity=2)
    assert d.core.state_counts[TaskState.QUEUED] == 5
    commands = d.worker(W2, capacity=10)
    assert [m.task_ids for _, m in of_type(commands, DispatchTasks)] == [[t(3), t(4), t(5), t(6), t(7)]]
    d2 = with_function()
    d2.worker(W1, capacity=10)
    d2.worker(W2, capacity=10)
    commands = d2.recv(C, submit(*((t(i), F, []) for i in range(1, 6))))
    assert [(peer, m.task_ids) for peer, m in of_type(commands, DispatchTasks)] == [
        (W1, [t(1), t(2), t(3)]),
        (W2, [t(4), t(5)]),
    ]


def test_clients_take_turns_in_the_ready_queue() -> None:
    """A client's one task does not wait behind another client's backlog: ready tasks are placed client by client
    in turns, each client's in its own order."""
    d = with_function()
    d.recv(C, submit(*((t(i), F, [b"a%d" % i]) for i in range(1, 11))))  # client 1: a backlog of 10
    other = d.client(b"c2")
    g = tid(other, 1)
    d.put(b"c2", (g, b"<g>"))
    d.recv(b"c2", submit((tid(other, 2), g, [b"b"])))  # client 2: one task, submitted last
    [(_, first)] = of_type(d.worker(W1, capacity=3), DispatchTasks)
    assert first.task_ids == [t(1), tid(other, 2), t(2)]
    [(_, more)] = of_type(d.recv(W1, ok(t(1), tid(other, 2), t(2))), DispatchTasks)
    assert more.task_ids == [t(3), t(4), t(5)]  # client 2 has nothing left: client 1 in its order


def test_bad_task_ids_are_refused_and_the_good_ones_kept() -> None:
    d = with_function()
    d.recv(C, submit((t(1), F, [b"x"])))
    foreign, zero = tid(P + 5, 1), tid(P, 0)
    commands = d.recv(C, submit((foreign, F, [b"a"]), (t(1), F, [b"b"]), (zero, F, []), (t(2), F, [b"c"])))
    [(peer, error)] = sends(commands)
    assert peer == C and isinstance(error, Error)
    assert (error.code, error.ids) == (ErrorCode.BAD_REQUEST, [foreign, t(1), zero])
    assert sorted(d.core.tasks) == [t(1), t(2)]
    # payload frames of refused tasks are skipped, so the kept task has its own argument
    [(_, message)] = of_type(d.worker(W1), DispatchTasks)
    assert message.payloads == [b"x", b"c"]


def test_task_referring_to_an_unknown_object_fails_at_once() -> None:
    d = with_function()
    d.worker(W1)
    missing = tid(P, 99)
    [(peer, message)] = sends(d.recv(C, submit((t(1), F, [missing]))))
    assert peer == C and isinstance(message, TaskResults)
    assert (message.task_ids, message.statuses) == ([t(1)], bytes([TaskStatus.FAILED]))
    text = f"the task's argument refers to object or task {missing:#x}, which this client does not have"
    assert message.payloads[0] == text.encode()
    [(_, message)] = sends(d.recv(C, submit((t(2), tid(P, 98), []))))
    assert isinstance(message, TaskResults) and b"the task's function refers to" in payload_bytes(message.payloads[0])
    assert d.core.tasks == {}
    assert d.core.objects[F].refs == 0


def test_task_may_not_use_another_clients_object() -> None:
    d = with_function()
    d.client(b"c2")  # prefix 2
    [(peer, message)] = sends(d.recv(b"c2", submit((tid(2, 1), F, []))))
    assert isinstance(message, TaskResults) and peer == b"c2" and message.statuses == bytes([TaskStatus.FAILED])
    assert d.core.objects[F].refs == 0


# ----------------------------------------------------------------------------------------------- objects
def test_put_objects_refuses_ids_of_other_sessions_and_ids_in_use() -> None:
    d = with_function()
    d.recv(C, submit((t(1), F, [])))
    commands = d.recv(C, PutObjects([tid(9, 1), F, t(1), t(5)], [b"a", b"b", b"c", b"d"]))
    [(peer, error)] = sends(commands)
    assert peer == C and error == Error(
        ErrorCode.BAD_REQUEST,
        "3 object ids are not this session's, have counter 0 or are already in use",
        [tid(9, 1), F, t(1)],
    )
    assert d.core.objects[F].payload == FN
    assert d.core.objects[t(5)].payload == b"d"


def test_freed_object_is_kept_while_a_task_needs_it_then_freed_on_its_holders() -> None:
    d = with_function()
    data = tid(P, 50)
    d.put(C, (data, b"data"))
    d.worker(W1)
    d.recv(C, submit((t(1), F, [data])))
    assert d.recv(C, FreeObjects([data, F])) == []  # both still needed by t(1)
    assert d.core.objects[data].released
    [(peer, free), result] = sends(d.recv(W1, ok(t(1))))
    assert peer == W1 and isinstance(free, FreeObjects) and sorted(free.ids) == [F, data]
    assert result == (C, TaskResults([t(1)], bytes([0]), [b"r"]))
    assert d.core.objects == {}


def test_freeing_an_unused_object_drops_it_at_once_and_other_clients_cannot_free_it() -> None:
    d = with_function()
    d.client(b"c2")
    assert d.recv(b"c2", FreeObjects([F])) == []
    assert F in d.core.objects
    assert d.recv(C, FreeObjects([F])) == []  # no worker holds it: nothing to tell
    assert d.core.objects == {}
    assert d.core.clients[C].objects == set()


# ----------------------------------------------------------------------------------------------- dependencies
def test_dependent_task_waits_then_gets_the_result_as_an_object() -> None:
    d = with_function()
    d.recv(C, submit((t(1), F, [b"x"]), (t(2), F, [t(1), b"y"])))
    assert d.core.explain(t(2)) == f"task {t(2):#x} waits for the results of {t(1):#x}"
    assert [m.task_ids for _, m in of_type(d.worker(W1), DispatchTasks)] == [[t(1)]]
    assert sends(d.recv(W1, ok(t(1), payload=b"R1"))) == [
        (W1, PutObjects([t(1)], [b"R1"])),
        (W1, dispatch((t(2), F, [t(1), b"y"]))),
        (C, TaskResults([t(1)], bytes([0]), [b"R1"])),
    ]
    assert sends(d.recv(W1, ok(t(2)))) == [
        (W1, FreeObjects([t(1)])),  # nobody needs t(1)'s result any longer
        (C, TaskResults([t(2)], bytes([0]), [b"r"])),
    ]
    assert list(d.core.objects) == [F]


def test_failed_task_fails_its_dependents_with_the_same_error_and_spares_the_others() -> None:
    d = with_function()
    d.recv(C, submit((t(1), F, []), (t(2), F, [t(1)]), (t(3), F, [t(2)]), (t(4), F, [])))
    d.worker(W1, capacity=1)
    [(peer, message)] = of_type(d.recv(W1, results((t(1), TaskStatus.ERROR, b"E"))), TaskResults)
    assert peer == C
    assert sorted(zip(message.task_ids, message.statuses, message.payloads, strict=True)) == [
        (t(1), TaskStatus.ERROR, b"E"),
        (t(2), TaskStatus.ERROR, b"E"),
        (t(3), TaskStatus.ERROR, b"E"),
    ]
    assert list(d.core.tasks) == [t(4)]


def test_task_waiting_on_two_tasks_runs_after_both() -> None:
    d = with_function()
    d.recv(C, submit((t(1), F, []), (t(2), F, []), (t(3), F, [t(1), t(2)])))
    d.worker(W1)
    assert of_type(d.recv(W1, ok(t(1))), DispatchTasks) == []
    assert [m.task_ids for _, m in of_type(d.recv(W1, ok(t(2))), DispatchTasks)] == [[t(3)]]


def test_cancelling_a_task_cancels_its_waiting_dependents() -> None:
    d = with_function()
    d.recv(C, submit((t(1), F, []), (t(2), F, [t(1)])))
    [(_, message)] = sends(d.recv(C, CancelTasks([t(1)])))
    assert isinstance(message, TaskResults) and sorted(message.task_ids) == [t(1), t(2)]
    assert message.statuses == bytes([TaskStatus.CANCELED] * 2)


def test_result_of_a_finished_task_can_still_be_used_while_kept() -> None:
    d = with_function()
    d.worker(W1)
    d.recv(C, submit((t(1), F, []), (t(2), F, [t(1)])))
    d.recv(W1, ok(t(1), payload=b"R1"))
    d.recv(C, submit((t(3), F, [t(1)])))  # t(1)'s result is kept for t(2), so t(3) may use it too
    assert d.core.objects[t(1)].refs == 2
    d.recv(W1, ok(t(2)))
    assert t(1) in d.core.objects
    d.recv(W1, ok(t(3)))
    assert t(1) not in d.core.objects


# ----------------------------------------------------------------------------------------------- cancel
def test_cancel_of_a_queued_task_ends_it_at_once() -> None:
    d = with_function()
    d.recv(C, submit((t(1), F, [])))
    assert sends(d.recv(C, CancelTasks([t(1)]))) == [(C, TaskResults([t(1)], bytes([TaskStatus.CANCELED]), [b""]))]
    assert of_type(d.worker(W1), DispatchTasks) == []


def test_cancel_of_an_assigned_task_asks_the_worker_and_ends_on_its_answer() -> None:
    d = with_tasks(1)
    assert sends(d.recv(C, CancelTasks([t(1)]))) == [(W1, CancelTasks([t(1)]))]
    assert d.core.explain(t(1)) == f"task {t(1):#x} is being cancelled on worker w1 (attempt 1)"
    assert d.recv(C, CancelTasks([t(1)])) == []  # asked once only
    # whatever the worker answers (it may have finished the task), the client hears "cancelled"
    assert sends(d.recv(W1, ok(t(1)))) == [(C, TaskResults([t(1)], bytes([TaskStatus.CANCELED]), [b""]))]


def test_cancel_of_unknown_or_foreign_tasks_is_ignored() -> None:
    d = with_function()
    d.client(b"c2")
    d.recv(C, submit((t(1), F, [])))
    assert d.recv(b"c2", CancelTasks([t(1), tid(2, 7)])) == []
    assert list(d.core.tasks) == [t(1)]


def test_result_for_a_task_the_worker_does_not_hold_is_counted_stale() -> None:
    d = with_tasks(1)
    d.worker(W2)
    assert d.recv(W2, ok(t(1))) == []
    assert d.core.stale_results == 1
    assert list(d.core.tasks) == [t(1)]


# ----------------------------------------------------------------------------------------------- worker loss
def test_silent_worker_is_declared_lost_and_its_tasks_run_elsewhere() -> None:
    d = with_tasks(2, worker_timeout_seconds=10.0)
    d.recv(W1, TasksStarted([t(1)]))  # its agent handed t(1) to a processor; t(2) waits in its queue
    d.worker(W2)
    d.now = 5.0
    d.recv(W2, Heartbeat())
    assert of_type(d.tick(10.0), DispatchTasks) == []  # not yet: silent for exactly the timeout
    commands = d.tick(10.5)
    [(peer, message)] = of_type(commands, DispatchTasks)
    assert peer == W2 and sorted(message.task_ids) == [t(1), t(2)]
    assert "no heartbeat for 10.5s" in logs(commands)[0].text
    assert list(d.core.workers) == [W2]
    assert d.core.tasks[t(1)].attempts == 1  # it may have started: charged
    assert d.core.tasks[t(2)].attempts == 0  # it never left the worker's queue: not charged


def test_ticks_end_exactly_the_sessions_silent_past_their_timeout_though_few_ticks_scan() -> None:
    """A tick walks the sessions only once one may have timed out (the earliest last_seen + timeout of the last
    walk): every tick must still end exactly the sessions silent longer than their timeout, at the first tick past it,
    as a walk at every tick would. validate() (after each event) checks that no session can time out before the
    next walk."""
    rng = random.Random(17)
    d = Driver(worker_timeout_seconds=3.0, client_timeout_seconds=5.0)
    peers = [f"w{n}".encode() for n in range(8)] + [f"c{n}".encode() for n in range(4)]
    heard: dict[bytes, float] = {}
    now = 0.0
    for _ in range(400):
        now = round(now + rng.choice([0.05, 0.05, 0.05, 0.4, 1.3]), 2)
        d.now = now
        for peer in rng.sample(peers, 2):
            if peer not in heard:  # (re)join
                d.client(peer) if peer.startswith(b"c") else d.worker(peer)
            else:
                d.recv(peer, Heartbeat())
            heard[peer] = now
        d.tick(now)
        for peer, at in list(heard.items()):
            timeout = 5.0 if peer.startswith(b"c") else 3.0
            if now - at > timeout:
                del heard[peer]
        assert sorted(heard) == sorted([*d.core.workers, *d.core.clients]), now
    assert min(d.core.oldest_seen) < now - 0.05  # the last walk was before the last tick: walks were skipped


def test_worker_lost_too_often_fails_the_task_with_a_clear_error() -> None:
    d = with_tasks(1, max_task_retries=1)
    d.recv(W1, TasksStarted([t(1)]))
    d.gone(W1)  # first loss: retried
    assert d.core.tasks[t(1)].attempts == 1
    assert [m.task_ids for _, m in of_type(d.worker(W2), DispatchTasks)] == [[t(1)]]
    d.recv(W2, TasksStarted([t(1)]))
    commands = d.gone(W2)  # second loss: beyond one retry
    [(peer, message)] = sends(commands)
    assert isinstance(message, TaskResults) and peer == C and message.statuses == bytes([TaskStatus.FAILED])
    text = payload_bytes(message.payloads[0]).decode()
    assert "was not completed: worker w2 was lost (its connection closed)" in text and "tried 2 times" in text
    assert any(log.level == logging.WARNING for log in logs(commands))


def test_a_worker_lost_again_and_again_charges_nothing_to_tasks_it_never_started() -> None:
    """The false retry exhaustion: a crash-looping worker took its first tasks again and again, and each loss
    charged them an attempt although none had started. Only tasksStarted makes a task chargeable."""
    d = with_tasks(3, max_task_retries=1, losses_before_hold_back=100)
    for _ in range(5):
        d.gone(W1)
        assert [m.task_ids for _, m in of_type(d.worker(W1), DispatchTasks)] == [[t(1), t(2), t(3)]]
    assert [d.core.tasks[t(i)].attempts for i in (1, 2, 3)] == [0, 0, 0]
    d.recv(W1, TasksStarted([t(2), tid(9, 9)]))  # an id it does not hold is ignored
    d.gone(W1)
    assert [d.core.tasks[t(i)].attempts for i in (1, 2, 3)] == [0, 1, 0]
    d.worker(W1)
    assert d.core.tasks[t(2)].started is False  # a new run starts unstarted


def test_a_worker_lost_repeatedly_is_held_back_longer_each_time_and_shows_it() -> None:
    d = with_tasks(2, losses_before_hold_back=2, hold_back_seconds=5.0, max_hold_back_seconds=12.0)
    d.gone(W1)  # one loss: nothing special
    assert of_type(d.worker(W1), DispatchTasks) != []
    d.now = 1.0
    commands = d.gone(W1)  # the second loss within the window: 5 s without new tasks
    assert "worker w1 was lost 2 times in 10 min: no new tasks for it for 5s" in logs(commands)[-1].text
    commands = d.worker(W1)
    assert of_type(commands, DispatchTasks) == []
    assert "held back for 5s" in logs(commands)[0].text
    assert d.core.status().workers == [WorkerStatus("w1", free=4, held_back_ms=5000)]
    assert "every worker is held back" in d.core.explain(t(1))
    d.worker(W2)  # another worker takes the work meanwhile
    assert d.core.workers[W2].assigned.keys() == {t(1), t(2)}
    d.recv(W2, Disconnect("bye"))  # a goodbye is not a loss
    assert of_type(d.tick(5.9), DispatchTasks) == []
    [(peer, message)] = of_type(d.tick(6.0), DispatchTasks)  # the hold is over
    assert peer == W1 and message.task_ids == [t(1), t(2)]
    d.gone(W1)  # the third loss: 10 s; the fourth: 20 s, capped at 12
    assert d.core.workers == {} and d.core.names.records["w1"].held_until == 16.0
    d.worker(W1)
    d.gone(W1)
    assert d.core.names.records["w1"].held_until == 18.0
    d.tick(700.0)  # everything forgotten once out of the window
    assert d.core.names.records == {} and d.core.names.lost == {}


def test_a_failed_task_with_retries_runs_again_and_ends_with_its_own_last_error() -> None:
    d = with_function()
    d.recv(C, SubmitTasks([t(1)], [F], b"\x00", [0], [], None, [], None, b"\x02", None))
    d.worker(W1)
    for attempt in (1, 2):
        commands = d.recv(W1, results((t(1), TaskStatus.ERROR, b"boom %d" % attempt)))
        assert [m.task_ids for _, m in of_type(commands, DispatchTasks)] == [[t(1)]]  # run again
        assert f"retry {attempt} of 2" in logs(commands)[0].text
    commands = d.recv(W1, results((t(1), TaskStatus.TIMED_OUT, b"took too long")))
    assert sends(commands) == [(C, results((t(1), TaskStatus.TIMED_OUT, b"took too long")))]
    assert d.core.ended["failed"] == 1


def test_a_task_without_retries_ends_at_its_first_error_and_crashes_do_not_use_retries() -> None:
    d = with_function(max_task_retries=5)
    d.recv(C, SubmitTasks([t(1), t(2)], [F, F], b"\x00\x00", [0, 0], [], None, [], None, b"\x00\x01", None))
    d.worker(W1)
    assert sends(d.recv(W1, results((t(1), TaskStatus.ERROR, b"e")))) == [(C, results((t(1), TaskStatus.ERROR, b"e")))]
    d.recv(W1, results((t(2), TaskStatus.CRASHED, b"died")))
    assert d.core.tasks[t(2)].attempts == 1 and d.core.tasks[t(2)].failures == 0


def test_timeouts_travel_to_the_worker_in_the_dispatch() -> None:
    d = with_function()
    d.recv(C, SubmitTasks([t(1), t(2)], [F, F], b"\x00\x00", [0, 0], [], None, [], [0, 2500], None, None))
    [(_, message)] = of_type(d.worker(W1), DispatchTasks)
    assert message.task_ids == [t(1), t(2)] and message.timeouts_ms == [0, 2500]
    [(_, message)] = of_type(d.recv(C, submit((t(3), F, []))), DispatchTasks)
    assert message.timeouts_ms is None


def test_higher_priority_first_within_a_client_and_clients_still_take_turns() -> None:
    d = with_function()
    c2 = d.client(b"c2")
    d.put(b"c2", (tid(c2, 1), FN))
    priorities = [0, 5, -1, 5, 9]
    ids = [t(i) for i in range(1, 6)]
    d.recv(C, SubmitTasks(ids, [F] * 5, bytes(5), [0] * 5, [], None, [], None, None, priorities))
    d.recv(b"c2", submit((tid(c2, 2), tid(c2, 1), []), (tid(c2, 3), tid(c2, 1), [])))
    order = []
    d.worker(W1, capacity=1)
    for _ in range(7):
        [task_id] = list(d.core.workers[W1].assigned)
        order.append(task_id)
        d.recv(W1, ok(task_id))
    assert order == [t(5), tid(c2, 2), t(2), tid(c2, 3), t(4), t(1), t(3)]


def test_crashed_task_is_retried_then_failed() -> None:
    d = with_tasks(1, max_task_retries=1)
    commands = d.recv(W1, results((t(1), TaskStatus.CRASHED, b"processor died")))
    assert sends(commands) == [(W1, dispatch((t(1), F, [b"a1"])))]
    [(_, message)] = sends(d.recv(W1, results((t(1), TaskStatus.CRASHED, b"processor died"))))
    assert isinstance(message, TaskResults) and message.statuses == bytes([TaskStatus.FAILED])
    assert b"processor died" in payload_bytes(message.payloads[0])


def test_worker_that_disconnects_gives_its_tasks_back_without_using_a_retry() -> None:
    d = with_tasks(2, max_task_retries=0)
    commands = d.recv(W1, Disconnect("bye"))
    assert "worker w1 left (disconnected: bye); 2 of its tasks go back to the queue" in logs(commands)[0].text
    assert d.core.state_counts[TaskState.QUEUED] == 2
    assert [m.task_ids for _, m in of_type(d.worker(W2), DispatchTasks)] == [[t(1), t(2)]]
    assert d.core.tasks[t(1)].attempts == 0


def test_worker_saying_hello_again_starts_a_new_session_and_gets_its_tasks_again() -> None:
    d = with_tasks(2)
    commands = d.worker(W1)
    assert [m.task_ids for _, m in of_type(commands, DispatchTasks)] == [[t(1), t(2)]]
    assert of_type(commands, PutObjects) == [(W1, PutObjects([F], [FN]))]  # the new session holds nothing yet
    assert d.core.tasks[t(1)].attempts == 0


def test_cancelling_task_on_a_lost_worker_ends_cancelled() -> None:
    d = with_tasks(1)
    d.recv(C, CancelTasks([t(1)]))
    assert sends(d.gone(W1)) == [(C, TaskResults([t(1)], bytes([TaskStatus.CANCELED]), [b""]))]


def test_lost_worker_no_longer_holds_objects_and_late_messages_are_refused() -> None:
    d = with_tasks(1)
    d.gone(W1)
    assert d.core.objects[F].holders == set()
    assert sends(d.recv(W1, ok(t(1)))) == [(W1, Error(ErrorCode.NOT_CONNECTED, "no session: send hello first"))]
    assert t(1) in d.core.tasks


# ----------------------------------------------------------------------------------------------- clients leaving
def test_client_that_disconnects_has_its_tasks_cancelled_and_objects_freed() -> None:
    d = with_function()
    d.recv(C, submit((t(1), F, []), (t(2), F, []), (t(3), F, [t(1)])))
    d.worker(W1, capacity=1)
    commands = d.recv(C, Disconnect())
    assert sends(commands) == [(W1, CancelTasks([t(1)]))]
    assert "client c1 left (disconnected); 3 unfinished tasks cancelled" in logs(commands)[0].text
    assert list(d.core.tasks) == [t(1)]
    assert F in d.core.objects  # still needed by t(1) until the worker answers
    assert sends(d.recv(W1, ok(t(1)))) == [(W1, FreeObjects([F]))]
    assert d.core.tasks == {} and d.core.objects == {}


def test_silent_client_times_out() -> None:
    d = with_function(client_timeout_seconds=5.0)
    d.recv(C, submit((t(1), F, [])))
    d.tick(5.0)
    assert C in d.core.clients
    commands = d.tick(5.1)
    assert d.core.clients == {} and d.core.tasks == {} and d.core.objects == {}
    assert "no heartbeat for 5.1s" in logs(commands)[0].text


def test_undeliverable_client_is_dropped() -> None:
    d = with_function()
    d.recv(C, submit((t(1), F, [])))
    d.gone(C)
    assert d.core.clients == {} and d.core.tasks == {}
    assert d.gone(b"nobody") == []


def test_other_clients_are_unaffected_by_one_leaving() -> None:
    d = with_function()
    d.client(b"c2")
    g = tid(2, 1)
    d.put(b"c2", (g, b"g"))
    d.recv(b"c2", submit((tid(2, 2), g, [])))
    d.recv(C, submit((t(1), F, [])))
    d.recv(C, Disconnect())
    [(_, message)] = of_type(d.worker(W1), DispatchTasks)
    assert message.task_ids == [tid(2, 2)]


# ----------------------------------------------------------------------------------------------- balancing
def test_idle_worker_gets_queued_tasks_of_a_busy_one_by_a_confirmed_move() -> None:
    d = with_tasks(6, capacity=10)
    d.now = 0.1  # W1's join ran a balancing pass at 0 (nobody idle then): at most one pass per interval
    commands = d.worker(W2, capacity=10)
    assert sends(commands)[1:] == [(W1, BalanceRequest([t(4), t(5), t(6)]))]  # the last ones are likeliest queued
    assert d.recv(W2, Heartbeat()) == [Send(W2, HeartbeatEcho())]  # one request at a time
    # the worker had started t(4) already: it gives back only two; they move, t(4) stays
    assert sends(d.recv(W1, BalanceResponse([t(6), t(5)]))) == [
        (W2, PutObjects([F], [FN])),
        (W2, dispatch((t(6), F, [b"a6"]), (t(5), F, [b"a5"]))),
    ]
    assert d.core.tasks[t(4)].worker is d.core.workers[W1]
    assert d.core.tasks[t(5)].worker is d.core.workers[W2]


def test_balance_response_for_a_cancelling_task_ends_it_cancelled() -> None:
    d = with_tasks(4, capacity=10)
    d.now = 0.1  # a balancing interval after W1's join
    [(_, request)] = of_type(d.worker(W2), BalanceRequest)
    assert request.ids == [t(3), t(4)]
    d.recv(C, CancelTasks([t(4)]))
    assert sends(d.recv(W1, BalanceResponse([t(4), t(3), t(9)]))) == [
        (W2, PutObjects([F], [FN])),
        (W2, dispatch((t(3), F, [b"a3"]))),
        (C, TaskResults([t(4)], bytes([TaskStatus.CANCELED]), [b""])),
    ]


def test_no_balancing_without_an_idle_worker_or_while_tasks_are_queued() -> None:
    d = with_tasks(4, capacity=2)
    assert of_type(d.worker(W2, capacity=1), BalanceRequest) == []  # W2 got a queued task instead
    assert of_type(d.tick(1.0), BalanceRequest) == []  # nobody idle


def test_balancing_is_retried_on_ticks_no_more_often_than_the_interval() -> None:
    d = with_tasks(4, capacity=10, balance_interval_seconds=1.0)
    d.worker(W2)
    d.recv(W1, BalanceResponse([]))  # nothing could be moved
    assert of_type(d.tick(0.5), BalanceRequest) == []
    assert of_type(d.tick(1.0), BalanceRequest) == [(W1, BalanceRequest([t(3), t(4)]))]


def test_balancing_runs_at_most_once_per_interval_however_many_workers_drain() -> None:
    d = with_function(balance_interval_seconds=1.0)
    for w in (W1, W2, W3):
        d.worker(w, capacity=10)
    d.recv(C, submit(*((t(i), F, []) for i in range(1, 7))))  # 2 each
    d.tick(1.0)  # a pass: nobody idle
    assert of_type(d.recv(W1, ok(t(1), t(2))), BalanceRequest) == []  # W1 is idle, but a pass ran at 1.0
    assert of_type(d.recv(W2, ok(t(3))), BalanceRequest) == []
    assert of_type(d.tick(1.5), BalanceRequest) == []
    # the next interval: one pass asks W3 (the most loaded) for its surplus over the mean
    assert of_type(d.tick(2.0), BalanceRequest) == [(W3, BalanceRequest([t(6)]))]
    assert of_type(d.recv(W2, ok(t(4))), BalanceRequest) == []  # W2 drains too: no second pass before 3.0


def test_balancing_asks_back_only_what_the_idle_workers_can_hold_most_loaded_first() -> None:
    d = with_function()
    d.worker(W1, capacity=10)
    d.worker(W2, capacity=10)
    d.recv(C, submit(*((t(i), F, []) for i in range(1, 21))))  # 10 each, both full
    d.worker(W3, capacity=2)
    d.recv(W1, ok(t(1)))  # W1 holds 9, W2 10: mean 19 / 3, keep 6
    assert of_type(d.tick(1.0), BalanceRequest) == [(W2, BalanceRequest([t(19), t(20)]))]  # W3 holds only two


def test_a_big_batch_goes_to_the_least_loaded_workers_a_grain_each_not_to_all() -> None:
    d = with_function(placement_grain=2)
    workers = [b"w%d" % i for i in range(1, 7)]
    for w in workers:
        d.worker(w, capacity=100)
    d.recv(C, submit((t(1), F, [])))  # w1 holds one
    # 7 tasks: max(grain, ceil(7 / grain)) = 4 workers, the least loaded (w2..w5), levelled
    commands = d.recv(C, submit(*((t(i), F, []) for i in range(2, 9))))
    assert [(peer, m.task_ids) for peer, m in of_type(commands, DispatchTasks)] == [
        (b"w2", [t(2), t(3)]),
        (b"w3", [t(4), t(5)]),
        (b"w4", [t(6), t(7)]),
        (b"w5", [t(8)]),
    ]
    # the next batch goes to those left out: w6, then w1 (levelled; dispatched in worker order)
    commands = d.recv(C, submit(*((t(i), F, []) for i in range(9, 12))))
    assert [(peer, m.task_ids) for peer, m in of_type(commands, DispatchTasks)] == [
        (b"w1", [t(9)]),
        (b"w6", [t(10), t(11)]),
    ]


def test_a_lone_task_goes_where_water_fill_would_put_one_task() -> None:
    """The lone task's worker (placement.lone_worker, one pass that stops at the first idle worker) is
    water_fill's Q = 1 choice over the open workers: the least loaded with room, the first of ties; none if all
    are full. Random loads, built by submitting and answering."""
    rng = random.Random(11)
    for _ in range(40):
        d = with_function(worker_timeout_seconds=1e6, client_timeout_seconds=1e6)
        workers = [b"w%d" % i for i in range(rng.randrange(1, 9))]
        for w in workers:
            d.worker(w, capacity=rng.randrange(1, 4))
        next_id = 1
        for _ in range(rng.randrange(1, 6)):
            n = rng.randrange(1, 12)
            d.recv(C, submit(*((t(next_id + i), F, []) for i in range(n))))
            next_id += n
            for w in rng.sample(workers, rng.randrange(len(workers) + 1)):
                held = list(d.core.workers[w].assigned)
                if held:
                    d.recv(w, ok(*rng.sample(held, rng.randrange(1, len(held) + 1))))
        open_workers = [w for w in d.core.workers.values() if len(w.assigned) < w.limit]
        shares = water_fill([len(w.assigned) for w in open_workers], [w.limit for w in open_workers], 1, grain=64)
        expected: list[WorkerSession | None] = [w for w, share in zip(open_workers, shares) if share]
        assert [lone_worker(d.core.workers.values(), None, d.core.now)] == (expected or [None])


def test_a_grain_never_overfills_a_worker_it_takes_more_workers_instead() -> None:
    d = with_function(placement_grain=4)
    for w in (W1, W2, W3):
        d.worker(w, capacity=2)
    commands = d.recv(C, submit(*((t(i), F, []) for i in range(1, 6))))  # 5 tasks, 2 per worker at most
    assert [(peer, len(m.task_ids)) for peer, m in of_type(commands, DispatchTasks)] == [
        (W1, 2),
        (W2, 2),
        (W3, 1),
    ]


# ----------------------------------------------------------------------------------------------- shutdown
def test_protected_scheduler_refuses_shutdown() -> None:
    d = with_function()
    [(peer, error)] = sends(d.recv(C, ShutdownRequest("please")))
    assert peer == C and isinstance(error, Error) and error.code == ErrorCode.PROTECTED


def test_unprotected_scheduler_tells_everyone_then_stops_and_ignores_later_events() -> None:
    d = with_function(protected=False)
    d.worker(W1)
    d.recv(C, submit((t(1), F, [])))
    commands = d.recv(C, ShutdownRequest())
    reason = "shutdown requested by client c1"
    assert [c for c in commands if not isinstance(c, Log)] == [
        Send(W1, Shutdown(reason)),
        Send(C, Shutdown(reason)),
        Stop(reason),
    ]
    assert d.recv(W1, ok(t(1))) == []
    assert d.core.handle(Received(9.0, b"new", Hello(PeerKind.CLIENT, "late"))) == []


def test_stop_flushes_pending_results_first() -> None:
    d = with_tasks(1)
    d.core.feed(Received(0.0, W1, ok(t(1))))
    d.core.stop("bye")
    assert d.core.flush() == [
        Send(C, TaskResults([t(1)], bytes([0]), [b"r"])),
        Send(W1, Shutdown("bye")),
        Send(C, Shutdown("bye")),
        Stop("bye"),
    ]


# ----------------------------------------------------------------------------------------------- queries
def test_status_counts_tasks_messages_and_peers() -> None:
    d = with_tasks(3, capacity=2)
    d.recv(W1, results((t(1), TaskStatus.ERROR, b"e")))
    d.recv(W1, Heartbeat())
    status = d.core.status()
    assert status.tasks_by_state == {
        "waiting": 0,
        "queued": 0,
        "assigned": 2,
        "canceling": 0,
        "success": 0,
        "error": 1,
        "canceled": 0,
        "failed": 0,
    }
    assert status.received == {"hello": 2, "putObjects": 1, "submitTasks": 1, "taskResults": 1, "heartbeat": 1}
    assert status.sent == {"welcome": 2, "putObjects": 1, "dispatchTasks": 2, "taskResults": 1, "heartbeatEcho": 1}
    [worker] = status.workers
    assert (worker.name, worker.free, worker.sent, worker.completed) == ("w1", 0, 2, 1)
    assert [(c.name, c.tasks, c.objects, c.completed) for c in status.clients] == [("c1", 2, 1, 1)]


def test_feeding_many_events_then_flushing_once_batches_results_per_client() -> None:
    d = with_tasks(3)
    for n in (1, 2, 3):
        d.core.feed(Received(1.0, W1, ok(t(n))))
    assert sends(d.core.flush()) == [(C, TaskResults([t(1), t(2), t(3)], bytes(3), [b"r"] * 3))]
    d.core.validate()


def test_validate_catches_a_corrupted_state() -> None:
    d = with_tasks(1)
    d.core.state_counts[TaskState.ASSIGNED] += 1
    with pytest.raises(InvariantError, match="state counts"):
        d.core.validate()


def test_the_core_is_usable_without_a_config() -> None:
    core = SchedulerCore()
    assert core.config == SchedulerConfig()
    assert core.handle(Received(0.0, C, SubmitTasks([], [], b"", [], [], None, []))) == [
        Send(C, Error(ErrorCode.NOT_CONNECTED, "no session: send hello first"))
    ]


# ----------------------------------------------------------------------------------------------- regressions
def test_task_failing_on_a_missing_reference_leaves_object_references_balanced() -> None:
    d = with_function()
    data = tid(P, 4)
    d.put(C, (data, b"data"))
    # references F, data, missing: every one is checked before any is pinned, so a task refused while being
    # linked must not unpin what it never pinned (it once drove refs below zero)
    missing = tid(P, 2)
    d.recv(C, submit((t(8), F, [data, missing])))
    assert d.core.objects[F].refs == 0
    assert d.core.objects[data].refs == 0


def test_object_in_use_survives_a_failed_task_and_its_owner_freeing_it() -> None:
    core = SchedulerCore()
    core.handle(Received(0.0, C, Hello(PeerKind.CLIENT, "c")))
    data = tid(P, 4)
    core.handle(Received(0.0, C, PutObjects([F, data], [FN, b"data"])))
    core.handle(Received(0.0, C, submit((t(8), F, [data]))))  # queued, no worker yet: holds data
    core.handle(Received(0.0, C, submit((t(9), F, [data, tid(P, 2)]))))  # refused: must leave data pinned
    core.handle(Received(0.0, C, FreeObjects([data])))  # the client lets go; t(8) still needs it
    commands = core.handle(Received(0.0, W1, Hello(PeerKind.WORKER, "w", queue_capacity=1)))  # was a KeyError
    [(_, message)] = of_type(commands, DispatchTasks)
    assert message.task_ids == [t(8)]
    core.validate()


def test_task_ids_may_not_reuse_object_ids() -> None:
    d = with_function()
    [(_, error)] = sends(d.recv(C, submit((F, F, []))))
    assert isinstance(error, Error) and error.ids == [F]
    assert d.core.tasks == {}


# ----------------------------------------------------------------------------------------------- known bugs
def test_client_saying_hello_again_keeps_the_core_valid() -> None:
    d = with_tasks(1)  # t(1) is assigned to W1
    d.recv(C, Hello(PeerKind.CLIENT, "c1"))  # old session's t(1) is cancelling; the new session has no task
    assert d.core.clients[C].task_count == 0


def test_tasks_of_a_lost_worker_keep_their_order_in_the_queue() -> None:
    d = with_tasks(3)
    d.gone(W1)  # counted loss; a Disconnect (uncounted) keeps the order, see above
    [(_, message)] = of_type(d.worker(W2), DispatchTasks)
    assert message.task_ids == [t(1), t(2), t(3)]


def test_tasks_that_end_while_queued_leave_the_ready_queue_with_their_arguments() -> None:
    """Cancelled queued tasks were skipped lazily, only when placement took from the queue: with no worker, a gone
    client's 4,000 tasks kept their 100 KB arguments in the ready queue (384 MiB) until something else was queued."""
    d = with_function()
    d.recv(C, submit(*((t(i), F, [b"x" * 1000]) for i in range(1, 51))))
    assert len(d.core.needs.ready) == 50
    d.recv(C, CancelTasks([t(i) for i in range(1, 51)]))
    assert len(d.core.needs.ready) == 0
    d.recv(C, submit((t(60), F, [b"y"])))
    d.recv(C, Disconnect("bye"))
    assert len(d.core.needs.ready) == 0 and d.core.tasks == {}


# ----------------------------------------------------------------------------------------------- hot paths
@pytest.mark.parametrize(
    "arg_refs",
    [(), (0,), (7,), (F,), (7, 8), (7, 7), (7, 0), (0, 8), (F, 8), (7, F), (0, 0), (7, 8, 9), (7, 8, 7, 0, F, 9)],
)
def test_task_references_are_the_function_then_the_arguments_each_once(arg_refs: tuple[int, ...]) -> None:
    # _FakeClient stands in for a ClientSession (only what Task reads of it)
    task = Task(t(1), _FakeClient(), F, 0, arg_refs, None, (), Need(frozenset(), ready_queue()))  # type: ignore[arg-type]
    expected: list[int] = [F]
    for ref in arg_refs:
        if ref and ref not in expected:
            expected.append(ref)
    assert task.references() == tuple(expected)


class _FakeClient:
    pass


def test_object_named_twice_by_a_task_is_pinned_once_and_freed_when_it_ends() -> None:
    d = with_function()
    data = tid(P, 50)
    d.put(C, (data, b"data"))
    d.recv(C, submit((t(1), F, [data, data])))
    assert d.core.objects[data].refs == 1 and d.core.objects[F].refs == 1
    d.recv(C, FreeObjects([data]))  # the client lets go; the task still needs it
    [(_, message)] = of_type(d.worker(W1), DispatchTasks)
    assert message.arg_refs == [data, data]
    commands = d.recv(W1, ok(t(1)))
    assert of_type(commands, FreeObjects) == [(W1, FreeObjects([data]))]
    assert data not in d.core.objects and d.core.objects[F].refs == 0


def test_a_move_the_table_forbids_raises_and_leaves_the_counts_alone() -> None:
    d = with_tasks(1)  # t(1) assigned to W1
    task = d.core.tasks[t(1)]
    counts = list(d.core.state_counts)
    with pytest.raises(InvariantError, match=r"no transition from ASSIGNED on READY"):
        d.core._move(task, TaskEvent.READY)
    assert task.state == TaskState.ASSIGNED and d.core.state_counts == counts
    d.core._move(task, TaskEvent.REQUEUE)
    assert task.state == TaskState.QUEUED and not task.started
    assert d.core.state_counts[TaskState.QUEUED] == counts[TaskState.QUEUED] + 1


def test_the_indexed_transition_table_is_the_table() -> None:
    indexed = {
        (state, event): TRANSITION_TABLE[state][event]
        for state in STATE_NAMES
        for event in EVENT_NAMES
        if TRANSITION_TABLE[state][event] is not None
    }
    assert indexed == TRANSITIONS


def test_a_result_is_kept_only_for_the_dependents_still_waiting() -> None:
    d = with_function()
    d.worker(W1, 4)
    d.recv(C, submit((t(1), F, [b"a"])))
    d.recv(C, submit((t(2), F, [t(1)]), (t(3), F, [t(1)])))
    d.recv(C, CancelTasks([t(2)]))
    d.recv(W1, ok(t(1)))
    assert d.core.objects[t(1)].refs == 1 and d.core.tasks[t(3)].state == TaskState.ASSIGNED
    d.recv(C, submit((t(6), F, [b"c"])))
    d.recv(C, submit((t(7), F, [t(6)])))
    d.recv(C, CancelTasks([t(7)]))  # its only dependent gone: t(6)'s result is not kept
    d.recv(W1, ok(t(6)))
    assert t(6) not in d.core.objects and t(6) not in d.core.tasks


def test_a_client_that_comes_is_not_queued_behind_another_clients_long_tasks() -> None:
    """Issue 25: while two clients have work, a worker holding a long task gets nothing more; its tasks not started
    are asked back, and the worker, once free, runs the newcomer's short tasks before the next long one."""
    d = with_function()
    d.worker(W1, capacity=100)
    d.recv(C, submit(*((t(i), F, [b"a"]) for i in range(1, 11))))  # alone: all ten go to W1
    assert len(d.core.workers[W1].assigned) == 10
    d.now = 1.0
    d.recv(W1, ok(t(1)))  # a task of C takes 1 s
    d.recv(W1, TasksStarted([t(2)]))
    other = d.client(b"c2")
    g = tid(other, 1)
    d.put(b"c2", (g, b"<g>"))
    commands = d.recv(b"c2", submit(*((tid(other, k), g, [b"b"]) for k in range(2, 5))))
    assert of_type(commands, DispatchTasks) == []  # not behind t(2)'s second
    [(peer, ask)] = of_type(commands, BalanceRequest)
    assert peer == W1 and ask.ids == [t(i) for i in range(3, 11)]
    d.recv(W1, BalanceResponse(ask.ids))
    d.now = 2.0
    [(_, out)] = of_type(d.recv(W1, ok(t(2))), DispatchTasks)
    assert out.task_ids == [tid(other, k) for k in range(2, 5)]  # and not C's next one, of 1 s
    d.now = 2.001
    [(_, out)] = of_type(d.recv(W1, ok(*out.task_ids)), DispatchTasks)
    # c2 is done, but was busy a moment ago: placement stays fair a while (a client sending a task at a time has
    # nothing unfinished between its tasks), so C's tasks of 1 s go one at a time
    assert out.task_ids == [t(3)]
    [(_, out)] = of_type(d.tick(2.001 + FAIR_LINGER_SECONDS), DispatchTasks)
    assert out.task_ids == [t(i) for i in range(4, 11)]  # then C is alone again: its queue fills as before


def test_before_any_task_of_a_client_ended_its_running_one_tells_how_long_its_tasks_take_at_least() -> None:
    """Issue 25's measured case: the other client comes before any long task ended. The long task reported started
    half a second ago says that the client's tasks take that long at least: the others queued are asked back."""
    d = with_function()
    d.worker(W1, capacity=100)
    d.recv(C, submit(*((t(i), F, [b"a"]) for i in range(1, 11))))
    d.recv(W1, TasksStarted([t(1)]))
    d.now = 0.5
    other = d.client(b"c2")
    g = tid(other, 1)
    d.put(b"c2", (g, b"<g>"))
    commands = d.recv(b"c2", submit((tid(other, 2), g, [b"b"])))
    assert of_type(commands, DispatchTasks) == []
    [(_, ask)] = of_type(commands, BalanceRequest)
    assert ask.ids == [t(i) for i in range(2, 11)]
    d.recv(W1, BalanceResponse(ask.ids))
    d.now = 0.6
    [(_, out)] = of_type(d.recv(W1, ok(t(1))), DispatchTasks)
    assert out.task_ids == [tid(other, 2)]  # the newcomer's task first


def test_tasks_waiting_on_nested_ones_do_not_keep_a_worker_from_the_tasks_they_wait_for() -> None:
    """Fair placement keeps a worker's queue short; while tasks wait on nested tasks (the workers' heartbeats say how
    many), placement is by turns only, so the nested tasks reach a worker although the waiting task has run long: a
    recursion must never wait for room."""
    d = with_function()
    d.worker(W1, capacity=100)
    d.recv(C, submit((t(1), F, [b"outer"])))
    d.recv(W1, TasksStarted([t(1)]))
    d.now = 5.0  # t(1) has run 5 s: C's tasks take that long at least
    nested = d.client(b"nested")
    g = tid(nested, 1)
    d.put(b"nested", (g, b"<g>"))
    assert of_type(d.recv(b"nested", submit((tid(nested, 2), g, [b"inner"]))), DispatchTasks) == []
    [(peer, out)] = of_type(d.recv(W1, Heartbeat(waiting_tasks=1)), DispatchTasks)  # t(1) waits on the nested task
    assert peer == W1 and out.task_ids == [tid(nested, 2)]
