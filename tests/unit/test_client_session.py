"""ClientCore (a client's session state machine): opening, heartbeats, closing, id minting and batching; with a
journaled scheduler, what it keeps and sends again after the scheduler's restart (ADR 0023)."""

from __future__ import annotations

import pytest

from scaler.core.capabilities import requirement
from scaler.core.client.session import (
    MESSAGE_ITEMS_AT_MOST,
    CancelRequest,
    ClientCore,
    Closed,
    CloseKind,
    Completed,
    Connected,
    FreeRequest,
    NewObject,
    NewTask,
    Output,
    Rejected,
    Request,
    Resumed,
    Send,
    SessionState,
    Waiting,
)
from scaler.protocol.messages import (
    ID_COUNTER_MASK,
    ID_PREFIX_SHIFT,
    CancelTasks,
    Disconnect,
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
    ShutdownRequest,
    SubmitTasks,
    TaskOutput,
    TaskResults,
    Welcome,
)

PYTHON_ONLY = [["payload=python"]]  # what every task of a Python client requires, at the least


def connected(prefix: int = 3) -> ClientCore:
    core = ClientCore("me", heartbeat_interval_seconds=1.0, timeout_seconds=10.0)
    core.start(0.0)
    assert core.received(0.1, Welcome(prefix, "sched", protected=False)) == [Connected(prefix, "sched", False)]
    return core


# ----------------------------------------------------------------------------------------------- session
def test_start_says_hello_with_the_heartbeat_interval() -> None:
    core = ClientCore("me", heartbeat_interval_seconds=2.5, timeout_seconds=10.0)
    assert core.start(0.0, hostname="h", pid=7) == [Send(Hello(PeerKind.CLIENT, "me", "h", 7, 2500))]
    assert core.state == SessionState.CONNECTING


def test_welcome_connects_and_gives_the_prefix() -> None:
    core = connected(prefix=3)
    assert core.state == SessionState.CONNECTED
    assert core.id_prefix == 3


def test_heartbeats_every_interval_once_connected() -> None:
    core = ClientCore("me", heartbeat_interval_seconds=1.0, timeout_seconds=10.0)
    core.start(0.0)
    assert core.tick(1.5) == []  # not before the welcome
    core.received(1.6, Welcome(1))
    assert core.tick(1.9) == [Send(Heartbeat())]  # a whole interval since the start
    assert core.tick(2.5) == []
    assert core.tick(2.9) == [Send(Heartbeat())]
    assert core.received(3.0, HeartbeatEcho()) == []


def test_no_welcome_in_time_closes_as_unreachable() -> None:
    core = ClientCore("me", heartbeat_interval_seconds=1.0, timeout_seconds=5.0)
    core.start(10.0)
    assert core.tick(15.0) == []
    [closed] = core.tick(15.1)
    assert isinstance(closed, Closed) and closed.kind == CloseKind.UNREACHABLE
    assert "no scheduler answered within 5s" in closed.reason
    assert core.tick(100.0) == [] and core.received(100.0, Welcome(1)) == []


def test_scheduler_gone_silent_closes_as_unreachable() -> None:
    core = connected()
    core.received(4.0, HeartbeatEcho())
    [closed] = core.tick(14.5)
    assert closed == Closed(CloseKind.UNREACHABLE, "the scheduler has not answered for 10s (timeout_seconds=10)")
    assert core.state == SessionState.CLOSED


def test_a_connection_closed_for_longer_than_the_grace_closes_as_unreachable() -> None:
    core = ClientCore("me", heartbeat_interval_seconds=1.0, timeout_seconds=60.0, reconnect_grace_seconds=5.0)
    core.start(0.0)
    core.received(0.1, Welcome(1))
    assert core.link_down(2.0) == []
    core.received(2.5, HeartbeatEcho())  # read after the connection closed: it does not count as one made again
    assert core.link_down(3.0) == []  # (ZeroMQ reports every try that failed; the first one counts)
    assert core.tick(7.0) == [Send(Heartbeat())]  # within the grace, the session goes on (queued for the connection)
    [closed] = core.tick(7.1)
    assert closed == Closed(
        CloseKind.UNREACHABLE,
        "the connection to the scheduler closed and was not made again within 5s: the scheduler stopped, or cannot "
        "be reached",
    )
    assert core.state == SessionState.CLOSED
    assert core.link_up(8.0) == [] and core.tick(9.0) == []


def test_a_connection_made_again_within_the_grace_keeps_the_session_and_heartbeats_at_once() -> None:
    core = ClientCore("me", heartbeat_interval_seconds=1.0, timeout_seconds=60.0, reconnect_grace_seconds=5.0)
    core.start(0.0)
    assert core.link_up(0.05) == []  # the first connection: nothing was closed
    core.received(0.1, Welcome(1))
    core.link_down(2.0)
    # a scheduler that restarted says at once it does not know us; one that kept the session checks the count
    assert core.link_up(6.5) == [Send(Heartbeat(resumed=True, sent=0))]
    assert core.tick(7.2) == []  # the heartbeat just went: the next one is due a whole interval later
    assert core.tick(7.6) == [Send(Heartbeat())]
    assert core.tick(30.0) == [Send(Heartbeat())]  # no grace runs any more
    assert core.state == SessionState.CONNECTED
    core.link_down(40.0)  # a later reset has a grace of its own
    assert core.tick(45.0) == [Send(Heartbeat())]
    assert isinstance(core.tick(45.1)[0], Closed)


def test_after_a_reset_the_echo_tells_whether_messages_from_the_scheduler_were_lost() -> None:
    """docs/protocol.md "Connection resets": the session counts the messages each way (not heartbeats, echoes or the
    hello; the welcome is the first one received); on a connection made again its heartbeat says how many it sent,
    and the scheduler's echo how many it sent: fewer came, so something was lost, and the session ends saying so."""
    core = connected()
    assert core.messages_received == 1  # the welcome
    sent: list[Message] = [Hello(PeerKind.CLIENT, "me"), Heartbeat(), PutObjects([1], [b"f"]), CancelTasks([7])]
    for message in sent:
        core.count_sent(message)
    assert core.messages_sent == 2
    core.received(0.5, TaskResults([7], b"\x00", [b"r"]))
    assert core.received(0.6, HeartbeatEcho()) == []  # an echo (or the scheduler's probe) is not counted
    assert core.messages_received == 2
    core.link_down(1.0)
    assert core.link_up(1.5) == [Send(Heartbeat(resumed=True, sent=2))]
    assert core.received(1.6, HeartbeatEcho(resumed=True, sent=2)) == []  # nothing lost: the session goes on
    assert core.state == SessionState.CONNECTED
    core.link_down(2.0)
    assert core.link_up(2.5) == [Send(Heartbeat(resumed=True, sent=2))]
    commands = core.received(2.6, HeartbeatEcho(resumed=True, sent=3))  # it sent one more than came
    assert commands[0] == Send(Disconnect("messages were lost in a connection reset"))
    assert isinstance(commands[1], Closed) and commands[1].kind == CloseKind.UNREACHABLE
    assert "messages from it were lost (it sent 3, 2 came): results may be missing" in commands[1].reason
    # mypy keeps core.state narrowed to CONNECTED by the assert above: it cannot know the calls since changed it
    assert core.state == SessionState.CLOSED  # type: ignore[comparison-overlap]


def test_a_scheduler_that_found_messages_lost_says_so_in_its_not_connected_error() -> None:
    core = connected()
    said = "session ended: its connection was reset and messages were lost (it sent 4, 3 came)"
    [closed] = core.received(1.0, Error(ErrorCode.NOT_CONNECTED, said))
    assert isinstance(closed, Closed) and closed.kind == CloseKind.UNREACHABLE
    assert closed.reason == (
        "the scheduler ended this client's session: its connection was reset and messages were lost (it sent 4, 3 came)"
    )
    [closed] = connected().received(1.0, Error(ErrorCode.NOT_CONNECTED, "no session: send hello first"))
    assert isinstance(closed, Closed) and "no longer knows this client" in closed.reason


def test_a_client_still_connecting_waits_timeout_seconds_whatever_its_connections_do() -> None:
    core = ClientCore("me", heartbeat_interval_seconds=1.0, timeout_seconds=20.0, reconnect_grace_seconds=5.0)
    core.start(0.0)
    core.link_up(0.1)
    core.link_down(0.2)  # a scheduler that accepted the connection and died before its welcome
    assert core.tick(10.0) == []
    [closed] = core.tick(20.1)
    assert isinstance(closed, Closed) and "no scheduler answered within 20s" in closed.reason


def test_refusal_shutdown_and_lost_session_close_the_session() -> None:
    core = ClientCore("me", 1.0, 10.0)
    core.start(0.0)
    assert core.received(0.1, Refused("old")) == [Closed(CloseKind.REFUSED, "the scheduler refused this client: old")]
    core = connected()
    assert core.received(1.0, Shutdown("maintenance")) == [
        Closed(CloseKind.SHUTDOWN, "the scheduler shut down (maintenance)")
    ]
    core = connected()
    [closed] = core.received(1.0, Error(ErrorCode.NOT_CONNECTED, "no session"))
    assert isinstance(closed, Closed) and closed.kind == CloseKind.UNREACHABLE


def test_other_errors_are_rejections_with_their_ids() -> None:
    core = connected()
    assert core.received(1.0, Error(ErrorCode.BAD_REQUEST, "bad ids", [5, 6])) == [
        Rejected(ErrorCode.BAD_REQUEST, "bad ids", [5, 6])
    ]
    assert core.state == SessionState.CONNECTED


def test_results_are_handed_over_as_they_came() -> None:
    core = connected()
    results = TaskResults([1, 2], bytes([0, 1]), [b"a", b"b"])
    assert core.received(1.0, results) == [Completed(results)]


def test_disconnect_says_goodbye_only_when_connected() -> None:
    core = connected()
    assert core.disconnect("done") == [Send(Disconnect("done")), Closed(CloseKind.LOCAL, "done")]
    assert core.disconnect() == []
    core = ClientCore("me", 1.0, 10.0)
    core.start(0.0)
    assert core.disconnect() == [Closed(CloseKind.LOCAL, "the client disconnected")]


def test_shutdown_request_only_when_connected() -> None:
    core = ClientCore("me", 1.0, 10.0)
    core.start(0.0)
    assert core.request_shutdown("now") == []
    core.received(0.1, Welcome(1))
    assert core.request_shutdown("now") == [Send(ShutdownRequest("now"))]


# ----------------------------------------------------------------------------------------------- ids
def test_ids_carry_the_prefix_and_are_never_reused() -> None:
    core = connected(prefix=3)
    base = 3 << ID_PREFIX_SHIFT
    assert list(core.mint(2)) == [base | 1, base | 2]
    assert list(core.mint(1)) == [base | 3]
    assert list(core.mint(0)) == []
    assert list(core.mint(1)) == [base | 4]


def test_ids_are_minted_only_in_a_connected_session() -> None:
    core = ClientCore("me", 1.0, 10.0)
    core.start(0.0)
    with pytest.raises(RuntimeError, match="connected session"):
        core.mint()


def test_ids_never_spill_into_another_prefix() -> None:
    core = connected(prefix=3)
    core.mint(ID_COUNTER_MASK)  # every id of the session; cheap, a range
    with pytest.raises(RuntimeError):
        core.mint(1)  # today: (4 << 40) | 0, an id of the session with prefix 4


# ----------------------------------------------------------------------------------------------- batching
def test_consecutive_requests_of_one_kind_share_a_message_in_order() -> None:
    requests: list[Request] = [
        NewObject(1, b"fn", "f"),
        NewObject(2, b"x"),
        NewTask(3, 1, 0, (0, 2), None, (b"a",)),
        NewTask(4, 1, 2, (), None, ()),
        CancelRequest(3),
        FreeRequest(2),
        FreeRequest(1),
        NewTask(5, 1, 0, (0,), None, (b"b",)),
    ]
    assert ClientCore.batch(requests) == [
        PutObjects([1, 2], [b"fn", b"x"], ["f", ""]),
        SubmitTasks([3, 4], [1, 1], bytes([0, 2]), [2, 0], [0, 2], None, [b"a"], requirements=PYTHON_ONLY),
        CancelTasks([3]),
        FreeObjects([2, 1]),
        SubmitTasks([5], [1], bytes([0]), [1], [0], None, [b"b"], requirements=PYTHON_ONLY),
    ]


def test_long_runs_are_cut_into_messages_of_at_most_the_limit_in_order() -> None:
    n = 2 * MESSAGE_ITEMS_AT_MOST + 3
    tasks = [NewTask(i, 1, 0, (0,), None, (bytes([i % 256]),)) for i in range(n)]
    messages = ClientCore.batch([*tasks, FreeRequest(7)])
    assert [type(m) for m in messages] == [SubmitTasks, SubmitTasks, SubmitTasks, FreeObjects]
    submits = [m for m in messages if isinstance(m, SubmitTasks)]
    assert [len(m.task_ids) for m in submits] == [MESSAGE_ITEMS_AT_MOST, MESSAGE_ITEMS_AT_MOST, 3]
    assert [i for m in submits for i in m.task_ids] == list(range(n))
    assert [p for m in submits for p in m.payloads] == [bytes([i % 256]) for i in range(n)]
    objects = ClientCore.batch([NewObject(i, b"x") for i in range(MESSAGE_ITEMS_AT_MOST + 1)])
    assert [len(m.object_ids) for m in objects if isinstance(m, PutObjects)] == [MESSAGE_ITEMS_AT_MOST, 1]
    assert len(objects) == 2


def test_keywords_are_padded_for_tasks_without_them_and_names_left_out_when_none() -> None:
    requests = [NewTask(3, 1, 0, (0,), None, (b"a",)), NewTask(4, 1, 0, (0, 0), ("", "k"), (b"b", b"c"))]
    [message] = ClientCore.batch(requests)
    assert isinstance(message, SubmitTasks)
    assert message.keywords == ["", "", "k"]
    assert message.payloads == [b"a", b"b", b"c"]
    assert ClientCore.batch([NewObject(1, b"x")]) == [PutObjects([1], [b"x"], None)]
    assert ClientCore.batch([]) == []


def test_a_batch_names_each_distinct_requirement_once_and_indexes_it_only_when_they_differ() -> None:
    gpu = requirement({"gpu": True})
    licence = requirement(["licence=matlab", "gpu"])
    same = [NewTask(i, 1, 0, (), None, (), requirement=gpu) for i in range(3)]
    [message] = ClientCore.batch(same)
    assert isinstance(message, SubmitTasks)
    assert message.requirements == [["gpu", "payload=python"]] and message.requirement_index is None
    mixed = [
        NewTask(1, 1, 0, (), None, ()),
        NewTask(2, 1, 0, (), None, (), requirement=gpu),
        NewTask(3, 1, 0, (), None, (), requirement=("gpu", "payload=python")),  # equal, not the same tuple
        NewTask(4, 1, 0, (), None, (), requirement=licence),
        NewTask(5, 1, 0, (), None, ()),
    ]
    [message] = ClientCore.batch(mixed)
    assert isinstance(message, SubmitTasks)
    assert message.requirements == [
        ["payload=python"],
        ["gpu", "payload=python"],
        ["gpu", "licence=matlab", "payload=python"],
    ]
    assert message.requirement_index == [0, 1, 1, 2, 0]
    # Equal requirements that are not the same tuple still share one entry, and no index when all are equal.
    equal = [
        NewTask(1, 1, 0, (), None, (), requirement=gpu),
        NewTask(2, 1, 0, (), None, (), requirement=("gpu", "payload=python")),
    ]
    [message] = ClientCore.batch(equal)
    assert isinstance(message, SubmitTasks)
    assert message.requirements == [["gpu", "payload=python"]] and message.requirement_index is None


def test_a_batch_cut_in_two_gives_each_message_its_own_requirements() -> None:
    gpu = requirement(["gpu"])
    tasks = [
        NewTask(i, 1, 0, (), None, (), requirement=gpu if i >= MESSAGE_ITEMS_AT_MOST else requirement(None))
        for i in range(MESSAGE_ITEMS_AT_MOST + 2)
    ]
    first, second = ClientCore.batch(tasks)
    assert isinstance(first, SubmitTasks) and isinstance(second, SubmitTasks)
    assert (first.requirements, first.requirement_index) == (PYTHON_ONLY, None)
    assert (second.requirements, second.requirement_index) == ([["gpu", "payload=python"]], None)


def test_heartbeats_often_enough_for_a_strict_scheduler() -> None:

    core = ClientCore("me", heartbeat_interval_seconds=5.0, timeout_seconds=30.0)
    core.start(0.0)
    core.received(0.0, Welcome(1, peer_timeout_ms=2000))  # the scheduler drops clients silent for 2 s
    assert core.tick(0.4) == []
    assert core.tick(0.5) == [Send(Heartbeat())]  # a quarter of its timeout, not our 5 s


def test_output_of_tasks_is_handed_to_the_shell_while_the_session_lasts() -> None:
    core = connected()
    output = TaskOutput([7, 7], bytes([1, 2]), ["hello\n", "oops\n"])
    assert core.received(1.0, output) == [Output(output)]
    core.disconnect()
    assert core.received(2.0, output) == []


# ----------------------------------------------------------------------------------------------- a journaled scheduler
def journaled(prefix: int = 3, restart_grace: float = 60.0) -> ClientCore:
    """A session with a scheduler that keeps a journal (ADR 0023): it comes back after a restart with this session."""
    core = ClientCore("me", heartbeat_interval_seconds=1.0, timeout_seconds=10.0, restart_grace_seconds=restart_grace)
    core.start(0.0)
    core.received(0.1, Welcome(prefix, "sched", protected=False, journaled=True))
    return core


def task(task_id: int, payload: bytes = b"a") -> NewTask:
    return NewTask(task_id, 1, 0, (0,), None, (payload,))


def test_without_a_journal_nothing_is_kept() -> None:
    core = connected()
    assert not core.journaled
    requests: list[Request] = [NewObject(1, b"fn"), task(2), CancelRequest(2)]
    assert core.sending(requests) == ClientCore.batch(requests)
    assert (core.kept_tasks, core.kept_objects, core.kept_cancels) == ({}, {}, {})


def test_a_journaled_session_keeps_unfinished_tasks_and_objects_not_freed_until_done_with() -> None:
    core = journaled()
    assert core.journaled
    payload = memoryview(b"big argument")
    requests: list[Request] = [NewObject(1, b"fn", "f"), NewObject(2, b"x"), task(3, b"a"), task(4, b"b")]
    assert core.sending(requests) == ClientCore.batch(requests)
    assert core.sending([task(5), NewTask(6, 1, 0, (0,), None, (payload,))]) != []  # a map's batch: tasks only
    assert list(core.kept_tasks) == [3, 4, 5, 6] and list(core.kept_objects) == [1, 2]
    assert core.kept_tasks[6].payloads[0] is payload  # kept as handed over, not copied
    core.sending([FreeRequest(2), CancelRequest(4), CancelRequest(99)])  # 99: no such task kept
    assert list(core.kept_objects) == [1] and list(core.kept_cancels) == [4]
    core.received(1.0, TaskResults([3, 4], bytes([0, 2]), [b"r", b""]))  # 4: the answer to its cancel
    assert list(core.kept_tasks) == [5, 6] and core.kept_cancels == {}
    core.received(1.1, Error(ErrorCode.BAD_REQUEST, "refused", [5, 1]))  # never results, never an object
    assert list(core.kept_tasks) == [6] and core.kept_objects == {}
    core.received(1.2, TaskResults([3], bytes([0]), [b"r"]))  # a result that came twice: nothing to forget
    assert list(core.kept_tasks) == [6]
    core.disconnect()
    assert (core.kept_tasks, core.kept_objects, core.kept_cancels) == ({}, {}, {})


def test_a_journaled_session_waits_the_restart_grace_without_silence_or_heartbeats() -> None:
    core = journaled(restart_grace=60.0)
    core.sending([task(7)])
    assert core.link_down(2.0) == [Waiting(60.0, 1)]
    assert core.resuming
    assert core.link_down(2.5) == []  # (every try that failed is reported: one warning)
    assert core.tick(30.0) == []  # 28 s of silence past timeout_seconds=10: suspended; no heartbeats pile up
    assert core.tick(62.0) == [] and core.state == SessionState.CONNECTED
    [closed] = core.tick(62.1)
    assert closed == Closed(
        CloseKind.UNREACHABLE,
        "the connection to the scheduler closed and was not made again within 60s: the scheduler stopped, or cannot "
        "be reached",
    )
    assert core.kept_tasks == {} and not core.resuming


def test_a_journaled_scheduler_stopped_by_a_signal_is_waited_for_and_a_cluster_shutdown_is_not() -> None:
    core = journaled()
    core.sending([task(7)])
    assert core.received(2.0, Shutdown("the scheduler received SIGTERM", workers_stay=True)) == [Waiting(60.0, 1)]
    assert core.state == SessionState.CONNECTED and core.resuming  # its session stays in the scheduler's journal
    assert core.link_down(2.1) == []  # (then its connection closes: already waiting)
    assert core.link_up(9.0) == [Send(Heartbeat(resumed=True, sent=0))]  # (sending() is not count_sent())
    core = journaled()
    [closed] = core.received(2.0, Shutdown("a client asked", workers_stay=False))  # the cluster ends
    assert isinstance(closed, Closed) and closed.kind == CloseKind.SHUTDOWN
    core = connected()  # without a journal, a stop is a stop
    [closed] = core.received(2.0, Shutdown("the scheduler received SIGTERM", workers_stay=True))
    assert isinstance(closed, Closed) and closed.kind == CloseKind.SHUTDOWN


def test_the_silence_counts_again_from_the_connection_made_again() -> None:
    core = journaled()
    core.link_down(1.0)
    assert core.link_up(40.0) == [Send(Heartbeat(resumed=True, sent=0))]
    assert core.tick(49.9) != [] and core.state == SessionState.CONNECTED  # heartbeats again; 9.9 s of silence
    [closed] = core.tick(50.1)
    assert isinstance(closed, Closed) and "has not answered for 10s" in closed.reason


def test_a_recovered_echo_sends_objects_then_tasks_then_their_cancels_again_without_comparing_counts() -> None:
    core = journaled()
    sent = core.sending([NewObject(1, b"fn", "f"), task(2, b"a"), NewObject(3, b"x"), task(4, b"b"), task(5)])
    sent += core.sending([CancelRequest(5), FreeRequest(3)])
    for message in sent:
        core.count_sent(message)
    core.received(0.5, TaskResults([2], bytes([0]), [b"r"]))
    assert (core.messages_sent, core.messages_received) == (6, 2)
    core.link_down(1.0)
    assert core.link_up(20.0) == [Send(Heartbeat(resumed=True, sent=6))]
    assert core.resuming  # requests wait in the shell until the echo
    # The scheduler restarted from its journal: its counts started again (it sent 0), ours are not compared.
    commands = core.received(20.1, HeartbeatEcho(resumed=True, sent=0, recovered=True))
    assert commands == [
        Send(PutObjects([1], [b"fn"], ["f"])),
        Send(SubmitTasks([4, 5], [1, 1], bytes(2), [1, 1], [0, 0], None, [b"b", b"a"], requirements=PYTHON_ONLY)),
        Send(CancelTasks([5])),
        Send(FreeObjects([3])),  # no echo said the scheduler read it before the restart
        Resumed(recovered=True, objects=1, tasks=2),
    ]
    assert not core.resuming and core.state == SessionState.CONNECTED
    for command in commands:
        if isinstance(command, Send):
            core.count_sent(command.message)
    assert (core.messages_sent, core.messages_received) == (4, 0)  # counted from the restart on
    assert list(core.kept_tasks) == [4, 5]  # still unfinished: kept
    core.received(20.5, TaskResults([4, 4], bytes([0, 0]), [b"r", b"r"]))  # a re-run's result twice: handed over
    core.link_down(30.0)  # a later reset of the recovered session: counts compared again
    core.link_up(30.5)
    assert core.received(30.6, HeartbeatEcho(resumed=True, sent=1)) == [Resumed(recovered=False)]
    assert list(core.kept_tasks) == [5]


def test_a_free_is_sent_again_after_a_restart_until_an_echo_says_the_scheduler_read_it() -> None:
    core = journaled()
    core.sending([NewObject(1, b"a"), NewObject(2, b"b"), NewObject(3, b"c")])
    core.sending([FreeRequest(1)])
    assert core.ask_workers(1.0) == [Send(Heartbeat())]  # a heartbeat after the free of 1
    core.sending([FreeRequest(2)])  # and a free after it
    core.received(1.1, HeartbeatEcho())  # the scheduler's probe: states nothing, confirms nothing
    assert [object_id for _, object_id in core.kept_frees] == [1, 2]
    core.received(1.2, HeartbeatEcho(workers=2, workers_stated=True))  # the heartbeat's answer
    assert [object_id for _, object_id in core.kept_frees] == [2]  # 1 was read before it, and journaled
    core.link_down(2.0)
    core.link_up(5.0)
    commands = core.received(5.1, HeartbeatEcho(resumed=True, sent=0, recovered=True))
    assert [c.message for c in commands if isinstance(c, Send)] == [PutObjects([3], [b"c"]), FreeObjects([2])]
    assert core.ask_workers(6.0) == [Send(Heartbeat())]  # the next echo confirms the free sent again
    core.received(6.1, HeartbeatEcho(workers=2, workers_stated=True))
    assert not core.kept_frees


def test_a_recovered_session_sends_again_in_batches_as_usual() -> None:
    core = journaled()
    n = MESSAGE_ITEMS_AT_MOST + 2
    core.sending([NewObject(i, b"x") for i in range(1, 4)])
    core.sending([task(i) for i in range(10, 10 + n)])
    core.link_down(1.0)
    core.link_up(2.0)
    *sends, resumed = core.received(2.1, HeartbeatEcho(resumed=True, recovered=True))
    messages = [s.message for s in sends if isinstance(s, Send)]
    assert [type(m) for m in messages] == [PutObjects, SubmitTasks, SubmitTasks]
    submits = [m for m in messages if isinstance(m, SubmitTasks)]
    assert [len(m.task_ids) for m in submits] == [MESSAGE_ITEMS_AT_MOST, 2]
    assert [i for m in submits for i in m.task_ids] == list(range(10, 10 + n))
    assert resumed == Resumed(recovered=True, objects=3, tasks=n)


def test_a_journaled_session_reset_without_a_restart_compares_counts_as_usual() -> None:
    core = journaled()
    core.link_down(1.0)
    core.link_up(1.5)
    commands = core.received(1.6, HeartbeatEcho(resumed=True, sent=5))  # it sent 5, 1 came (the welcome)
    assert commands[0] == Send(Disconnect("messages were lost in a connection reset"))
    assert isinstance(commands[1], Closed) and "it sent 5, 1 came" in commands[1].reason


def test_a_scheduler_that_lost_the_session_fails_it_clearly() -> None:
    core = journaled()
    core.sending([task(2)])
    core.link_down(1.0)
    core.link_up(3.0)
    [closed] = core.received(3.1, Error(ErrorCode.NOT_CONNECTED, "no session: send hello first"))
    assert closed == Closed(
        CloseKind.UNREACHABLE,
        "the scheduler no longer knows this client (it restarted without the journal that held this session, or "
        "timed the client out)",
    )
    assert core.kept_tasks == {}
