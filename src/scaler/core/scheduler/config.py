"""Settings of the scheduler core, with the defaults the CLI shows."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_PAYLOAD_BYTES = 8 << 30  # 8 GiB
DEFAULT_KEYED_RESULTS_BYTES = 256 << 20  # 256 MiB


@dataclass(frozen=True)
class SchedulerConfig:
    name: str = "scheduler"
    protected: bool = True
    # A worker silent this long is declared dead and its tasks are re-queued.
    worker_timeout_seconds: float = 10.0
    # A client silent this long is disconnected: its tasks are cancelled and its objects freed.
    client_timeout_seconds: float = 60.0
    # How many times a task may be re-run after the worker running it died, before it fails.
    max_task_retries: int = 3
    # A worker lost this often (by name: scaler_cluster keeps a worker's name when it restarts it) within
    # loss_window_seconds is held back: no new tasks for hold_back_seconds, doubling with each further loss up to
    # max_hold_back_seconds.
    losses_before_hold_back: int = 2
    loss_window_seconds: float = 600.0
    hold_back_seconds: float = 5.0
    max_hold_back_seconds: float = 120.0
    # Least time between two balancing passes.
    balance_interval_seconds: float = 0.1
    # A placement pass of Q ready tasks levels them over the max(grain, ceil(Q / grain)) least-loaded workers with
    # room (more if those lack room), not over every worker: with thousands of workers a big batch goes out about
    # `grain` tasks per dispatch, not a few; up to `grain` workers are all used as before. Workers left out get the
    # next pass's tasks, or tasks moved to them by balancing.
    placement_grain: int = 64
    # The most bytes one payload (a function, an argument, an object, a result) may have. Bigger ones are refused
    # with error tooLarge (a result: the task fails); clients check it before sending.
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    # While workers are connected but none offers every capability a queued task requires, the task waits this long
    # for one to join, then fails ("missing capabilities: ..."). With no worker connected at all, tasks just wait.
    capability_grace_seconds: float = 0.0
    # The shell keeps a journal (scaler_scheduler --journal): clients are told so in their welcome (they keep what they
    # would send again), and their sessions opening and ending go to SchedulerCore.journal (ADR 0023).
    journaled: bool = False
    # The results of idempotent-keyed tasks kept by key (Client.options(idempotency_key=...)) weigh at most this many
    # bytes: past it the oldest of the namespace (credentials) that weighs the most are let go (a task sent later with
    # such a key runs again).
    keyed_results_bytes: int = DEFAULT_KEYED_RESULTS_BYTES
