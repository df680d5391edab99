"""ClientCore and the scheduler's statements of its workers (Welcome, the echo of each heartbeat): the last one is
kept (ClientCore.workers, read by Client.cluster_resources) and announced (WorkersStated, which wakes whoever asked);
echoes that state nothing (probes, resumed answers, an older scheduler) leave it as it was."""

from __future__ import annotations

from scaler.core.client.session import ClientCore, Connected, Send, WorkersStated
from scaler.protocol.messages import Heartbeat, HeartbeatEcho, Welcome


def started() -> ClientCore:
    core = ClientCore("me", heartbeat_interval_seconds=1.0, timeout_seconds=10.0)
    core.start(0.0)
    return core


def test_the_welcome_states_the_workers_and_each_echo_states_them_again() -> None:
    core = started()
    welcome = Welcome(3, "sched", protected=False, workers=2, worker_capacity=6, workers_stated=True)
    assert core.received(0.1, welcome) == [Connected(3, "sched", False), WorkersStated(2, 6)]
    assert core.workers == WorkersStated(2, 6)
    assert core.received(1.1, HeartbeatEcho(workers=0, worker_capacity=0, workers_stated=True)) == [WorkersStated(0, 0)]
    assert core.workers == WorkersStated(0, 0)  # stated: no worker may take tasks now


def test_echoes_that_state_nothing_leave_the_last_statement() -> None:
    core = started()
    core.received(0.1, Welcome(3, workers=4, worker_capacity=4, workers_stated=True))
    assert core.received(0.5, HeartbeatEcho()) == []  # a probe of the scheduler's
    assert core.received(0.6, HeartbeatEcho(resumed=True, sent=1)) == []  # nothing was lost (the welcome came)
    assert core.workers == WorkersStated(4, 4)


def test_a_scheduler_that_states_nothing_leaves_it_unknown() -> None:
    core = started()
    assert core.received(0.1, Welcome(3, "old")) == [Connected(3, "old", True)]
    assert core.received(1.1, HeartbeatEcho()) == []
    assert core.workers is None


def test_asking_sends_a_heartbeat_at_once_once_connected() -> None:
    core = started()
    assert core.ask_workers(0.05) == []  # no session yet: the welcome will say
    core.received(0.1, Welcome(3, workers_stated=True))
    assert core.ask_workers(0.2) == [Send(Heartbeat())]
    assert core.tick(0.9) == []  # the next heartbeat is due a whole interval after that one
    assert core.tick(1.2) == [Send(Heartbeat())]
