"""The scheduler core's read-only views: the monitor's status snapshot, why a task is where it is, and the invariant
check (validate) that tests, simulations and SCALER_DEBUG run after every flush.

Pure, like the core: functions of a SchedulerCore that read it and change nothing, except status(), which takes the
status period's records (SchedulerCore.end_period). Python 3.9 (the scheduler runs on PyPy).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from scaler.core.common import InvariantError
from scaler.core.scheduler import notices
from scaler.core.scheduler.monitoring import ENDED_NAMES, FunctionStats
from scaler.core.scheduler.tasks import STATE_NAMES, Task, TaskState
from scaler.protocol.capabilities import missing_text
from scaler.protocol.records import (
    FLAG_SILENT,
    ID_PREFIX_SHIFT,
    MAX_EXPLAINED,
    ClientStatus,
    ManagerStatus,
    Status,
    TaskExplanations,
    WaitingTasks,
    WorkerStatus,
)

if TYPE_CHECKING:
    from scaler.core.scheduler.core import SchedulerCore
    from scaler.core.scheduler.needs import Need
    from scaler.core.scheduler.sessions import ClientSession

_MAX_U32 = 2**32 - 1
WAITING_GROUPS = 16  # Status.waiting: at most this many requirement groups, most tasks first


def status(core: SchedulerCore) -> Status:
    """A snapshot for the monitor socket (the shell adds the process's own cpu and memory). It takes the status
    period's records (events, failures, output, departed workers) and starts the next period (end_period): once
    per status period."""
    now = core.now
    counts = core.state_counts
    by_state = {
        "waiting": counts[TaskState.WAITING],
        "queued": counts[TaskState.QUEUED],
        "assigned": counts[TaskState.ASSIGNED],
        "canceling": counts[TaskState.CANCELING],
        **dict(zip(ENDED_NAMES, core.functions.ended())),
    }
    workers = [
        WorkerStatus(
            name=w.name,
            agent_cpu_percent=w.heartbeat.cpu_percent,
            agent_rss_bytes=w.heartbeat.rss_bytes,
            cpu_percent=w.heartbeat.processor_cpu_percent,
            rss_bytes=w.heartbeat.processor_rss_bytes,
            free=max(0, w.limit - len(w.assigned)),
            sent=w.heartbeat_sent,
            queued=w.heartbeat.queued,
            lag_us=w.heartbeat.lag_us,
            processors=w.heartbeat.processors,
            blocked_processors=w.heartbeat.blocked_processors,
            running=w.heartbeat.running,
            completed=w.completed,
            waiting=w.heartbeat.waiting_tasks,
            held_back_ms=min(_MAX_U32, max(0, int(min(w.held_until - now, _MAX_U32) * 1000))),  # draining: inf
            heartbeat_age_ms=min(_MAX_U32, max(0, int((now - w.heartbeat_at) * 1000))),
            capabilities=sorted(w.capabilities),
        )
        for w in core.workers.values()
    ]
    at_workers = Counter(task.client.identity for w in core.workers.values() for task in w.assigned.values())
    clients = [
        ClientStatus(c.name, c.task_count, len(c.objects), c.completed, at_workers[c.identity])
        for c in core.clients.values()
    ]
    running = running_by_function(core)
    policy = core.managers.policy
    events, failures, outputs, departed = core.end_period()
    return Status(
        scheduler_name=core.config.name,
        time_us=int(core.now * 1e6),
        tasks_by_state=by_state,
        sent=dict(core.sent),
        received=dict(core.received),
        workers=workers,
        clients=clients,
        protected=core.config.protected,
        dropped_messages=core.dropped,
        refused_peers=core.refused,
        clock_us=int(now * 1e6),
        functions=core.functions.report(running),
        events=events,
        failures=failures,
        outputs=outputs,
        departed=departed,
        managers=manager_rows(core),
        waiting=waiting_groups(core),
        units_started=policy.started,
        units_stopped=policy.stopped,
        units_failed=policy.given_up,
    )


def manager_rows(core: SchedulerCore) -> list[ManagerStatus]:
    """The worker managers as the scaling policy sees them (Status.managers)."""
    rows = []
    for row in core.managers.policy.status(core.now):
        age = row["oldest_pending_seconds"]
        retry = row["retry_in_seconds"]
        rows.append(
            ManagerStatus(
                name=str(row["manager"]),
                tier=_int(row["tier"]),
                capabilities=list(cast("list[str]", row["capabilities"])),
                min_units=_int(row["min_units"]),
                max_units=_int(row["max_units"]),
                connected=_int(row["connected"]),
                draining=_int(row["draining"]),
                pending=_int(row["pending"]),
                oldest_pending_ms=int(age * 1000) if isinstance(age, float) else 0,
                failures=_int(row["failures"]),
                last_failure=str(row["last_failure"]),
                retry_in_ms=int(retry * 1000) if isinstance(retry, float) else 0,
            )
        )
    return rows


def _int(value: object) -> int:
    assert isinstance(value, int)
    return min(value, _MAX_U32)


def waiting_groups(core: SchedulerCore) -> list[WaitingTasks]:
    """Queued tasks no worker holds, per requirement, with why (Status.waiting): the WAITING_GROUPS largest."""
    needs = sorted((n for n in core.needs.by_caps.values() if n.queued), key=lambda n: -n.queued)
    return [
        WaitingTasks(sorted(need.caps), need.queued, _why_queued(core, need) + _managers_text(core, need.caps))
        for need in needs[:WAITING_GROUPS]
    ]


def running_by_function(core: SchedulerCore) -> dict[FunctionStats, int]:
    running: dict[FunctionStats, int] = {}  # tasks assigned to workers now, by function
    for worker in core.workers.values():
        for task in worker.assigned.values():
            stats = core.function_stats(task.function_id)
            running[stats] = running.get(stats, 0) + 1
    return running


def answer_explain(core: SchedulerCore, client: ClientSession, task_ids: list[int]) -> None:
    """A client asks why its tasks are where they are (explainTasks): one text each, in order; another client's
    task reads as one the scheduler does not have."""
    if len(task_ids) > MAX_EXPLAINED:
        text = f"explainTasks names {len(task_ids)} tasks; at most {MAX_EXPLAINED} at once"
        notices.bad_request(core, client.identity, text)
        return
    texts = [explain(core, task_id, client) for task_id in task_ids]
    core._send(client.identity, TaskExplanations(list(task_ids), texts))


def explain(core: SchedulerCore, task_id: int, client: ClientSession | None = None) -> str:
    """Why a task is where it is, in words (only if it is `client`'s, when given)."""
    task = core.tasks.get(task_id)
    if task is None or (client is not None and task.client is not client):
        return f"task {task_id:#x} is not in the scheduler (never submitted, or already ended)"
    if task.state == TaskState.WAITING:
        waiting = [f"{r:#x}" for r in task.arg_refs if r in core.tasks]
        return f"task {task_id:#x} waits for the results of {', '.join(waiting)}"
    if task.state == TaskState.QUEUED:
        return f"task {task_id:#x} is queued: {_why_queued(core, task.need)}{_managers_text(core, task.need.caps)}"
    assert task.worker is not None
    verb = "is being cancelled on" if task.state == TaskState.CANCELING else "was sent to"
    return f"task {task_id:#x} {verb} worker {task.worker.name} (attempt {task.attempts + 1})"


def _why_queued(core: SchedulerCore, need: Need) -> str:
    if not core.workers:
        return "no worker is connected"
    core.needs.offers.check(need)
    if not need.offered:
        return missing_text(need.caps, core.needs.offers.counts)
    draining = core.managers.draining
    if all(w.held_until > core.now for w in core.workers.values()):
        if draining and all(w.identity in draining for w in core.workers.values()):
            return "every worker is draining (its unit retires: scaling)"
        return "every worker is held back (lost repeatedly, or draining)"
    return f"every worker's queue is full ({len(core.workers)} workers)"


def _managers_text(core: SchedulerCore, caps: frozenset[str]) -> str:
    """What the worker managers do about it: '; worker manager slurm requested 2 units 12s ago, 0 connected'."""
    parts = []
    for row in core.managers.policy.status(core.now, caps):
        name, pending, connected = row["manager"], row["pending"], row["connected"]
        age = row["oldest_pending_seconds"]
        if isinstance(age, float):
            parts.append(f"worker manager {name} requested {pending} units {age:.0f}s ago, {connected} connected")
        elif connected == row["max_units"]:
            parts.append(f"worker manager {name} runs its {connected} units (max_units)")
        else:
            parts.append(f"worker manager {name} runs {connected} units ({row['draining']} draining)")
        if row["failures"]:
            parts[-1] += f" (its last unit failed to start: {row['last_failure']}"
            retry = row["retry_in_seconds"]
            parts[-1] += f"; asked again in {retry:.0f}s)" if isinstance(retry, float) and retry > 0 else ")"
    return "; " + "; ".join(parts) if parts else ""


def validate(core: SchedulerCore, skip: tuple[Callable[[SchedulerCore], None], ...] = ()) -> None:
    """Check every invariant; raise InvariantError on the first broken one. For tests, simulations and
    SCALER_DEBUG (after every flush): one cheap pass, and the words only for what is broken. `skip`: checks left out
    (a test's deliberately broken core shows that the simulation catches what they would)."""
    counts = [0] * len(STATE_NAMES)
    in_ready = {id(t) for t in core.needs.ready if t.state == TaskState.QUEUED and t.need.ready is core.needs.ready}
    for need in core.needs.split:
        in_ready.update(id(t) for t in need.queue if t.state == TaskState.QUEUED and t.need is need)
    if validate_needs not in skip:
        validate_needs(core)
    workers = core.workers
    assigned, queued, waiting = (TaskState.ASSIGNED, TaskState.CANCELING), TaskState.QUEUED, TaskState.WAITING
    for task_id, task in core.tasks.items():
        state = task.state
        counts[state] += 1
        worker = task.worker
        if state in assigned:
            ok = worker is not None and workers.get(worker.identity) is worker and worker.assigned.get(task_id) is task
        else:
            ok = worker is None and state != TaskState.ENDED and not task.started
            ok = ok and (state != queued or id(task) in in_ready) and (state != waiting or task.waiting_on > 0)
        if not ok or task.task_id != task_id:
            task_invariant(core, task_id, task, in_ready)
    _check(counts == core.state_counts, "state counts {} but tasks say {}", core.state_counts, counts)
    stray = [task_id for task_id in core.keyed_tasks if task_id not in core.tasks]
    _check(not stray, "keyed tasks {} are not held", [f"{task_id:#x}" for task_id in stray[:5]])
    _check(core.keyed.bytes <= core.keyed.max_bytes or len(core.keyed) <= 1, "{!r} is over its bound", core.keyed)
    _check(sum(core.keyed.weights.values()) == core.keyed.bytes, "{!r} miscounts its namespaces", core.keyed)
    for worker in workers.values():
        limit = worker.capacity + worker.allowance_peak
        _check(len(worker.assigned) <= limit, "{!r} is over capacity", worker)
        for task_id, task in worker.assigned.items():
            _check(core.tasks.get(task_id) is task, "{!r} holds unknown task {:#x}", worker, task_id)
        _check(worker.last_seen >= core.oldest_seen[0], "{!r} was seen before the oldest seen", worker)
    per_client = Counter(id(task.client) for task in core.tasks.values())
    busy = len(per_client)
    _check(core.busy_clients == busy, "{} busy clients, {} with tasks", core.busy_clients, busy)
    waiting = sum(w.heartbeat.waiting_tasks for w in workers.values())
    _check(
        core.waiting_total == waiting,
        "{} tasks wait on nested ones, the workers say {}",
        core.waiting_total,
        waiting,
    )
    for client in core.clients.values():
        _check(client.task_count == per_client[id(client)], "{!r} task count is off", client)
        _check(client.last_seen >= core.oldest_seen[1], "{!r} was seen before the oldest seen", client)
        _check(not client.held or client.awaiting, "{!r} holds results, but its client is back", client)
    _check(core.objects is core.object_store.objects, "the core reads other objects than its store holds")
    reruns = core.reruns  # (after a restart: run again only for the tasks waiting on them)
    _check(all(i in core.tasks and core.tasks[i].flags & FLAG_SILENT for i in reruns), "a rerun not held or silent")
    for obj in core.objects.values():
        _check(obj.refs >= 0 and not obj.droppable, "{!r} has negative references, or should be dropped", obj)
    for check in (validate_prefixes, validate_functions, validate_names):
        if check not in skip:
            check(core)


def validate_needs(core: SchedulerCore) -> None:
    """Each need counts its tasks and its queued ones; its tasks wait in its own queue; a task held by a worker
    can run there; the offers are the connected workers' capability sets, each one object."""
    needs = core.needs.by_caps
    _check(needs.get(core.needs.no_need.caps) is core.needs.no_need, "the empty need is not filed")
    tasks: Counter[int] = Counter()
    queued: Counter[int] = Counter()
    for task in core.tasks.values():
        need = task.need
        _check(needs.get(need.caps) is need, "{!r} has a need that is not filed: {!r}", task, need)
        tasks[id(need)] += 1
        if task.state == TaskState.QUEUED:
            queued[id(need)] += 1
        worker = task.worker
        if worker is not None:
            _check(need.caps <= worker.capabilities, "{!r} is on a worker that cannot run it: {!r}", task, need)
    for need in needs.values():
        _check(need.tasks == tasks[id(need)], "{!r} counts {} tasks, {} have it", need, need.tasks, tasks[id(need)])
        _check(need.queued == queued[id(need)], "{!r}: {} queued by its tasks", need, queued[id(need)])
        core.needs.offers.check(need)
        split = need in core.needs.split
        _check(split != need.everywhere, "{!r} is split but offered everywhere, or the reverse", need)
        _check(need.ready is (need.queue if split else core.needs.ready), "{!r} queues its tasks elsewhere", need)
        _check(split or not need.queue, "{!r} is not split but its own queue holds tasks", need)
        _check(need.ready.cost is not None, "{!r}: its ready queue takes clients by task count, not time", need)
    offered: Counter[frozenset[str]] = Counter(w.capabilities for w in core.workers.values())
    _check(
        offered == Counter(core.needs.offers.counts),
        "offers {} but the workers offer {}",
        core.needs.offers.counts,
        offered,
    )
    for worker in core.workers.values():
        _check(core.needs.offers._keys[worker.capabilities] is worker.capabilities, "{!r}: not interned", worker)


def validate_names(core: SchedulerCore) -> None:
    """A name record counts the sessions that point to it, each of its key and name; it is kept only for them or
    for a remembered loss or hold (those, and only those, are in names.lost)."""
    sessions: Counter[int] = Counter()
    for worker in core.workers.values():
        record = worker.record
        if record is not None:
            sessions[id(record)] += 1
            _check(core.names.records.get(worker.name) is record, "{!r} counted under another name", worker)
            _check(record.key == worker.key, "{!r} counted in a name of another key", worker)
    for name, record in core.names.records.items():
        _check(record.sessions == sessions[id(record)], "{!r} of {!r}: sessions miscounted", record, name)
        lost = core.names.lost.get(name)
        _check(lost is record or (lost is None and not record.losses), "{!r} of {!r}: losses unfiled", record, name)
        _check(record.sessions > 0 or lost is record, "{!r} of {!r} is kept for nothing", record, name)
    for name, record in core.names.lost.items():
        _check(core.names.records.get(name) is record, "{!r} of {!r} is lost but not remembered", record, name)


def validate_functions(core: SchedulerCore) -> None:
    """Each function's tasks submitted = ended + in flight; its cache by id follows the objects."""
    functions, objects = core.functions, core.objects
    in_flight: Counter[int] = Counter()
    for task in core.tasks.values():
        stats = functions.peek(task.function_id, objects.get(task.function_id))
        if stats is None:
            raise InvariantError(f"{task!r}'s function {task.function_id:#x} has no counters")
        in_flight[id(stats)] += 1
    for name, stats in functions.by_name.items():
        _check(stats.name == name, "{!r} filed under {!r}", stats, name)
        _check(
            stats.in_flight == in_flight[id(stats)],
            "{!r}: {} in flight by its counters, {} tasks",
            stats,
            stats.in_flight,
            in_flight[id(stats)],
        )
    for function_id, stats in functions.by_id.items():
        _check(function_id in objects, "counters cached for {:#x}, not an object", function_id)
        _check(functions.by_name.get(stats.name) is stats, "{!r} cached but not filed", stats)


def task_invariant(core: SchedulerCore, task_id: int, task: Task, in_ready: set[int]) -> None:
    """Which invariant `task` breaks, in words (validate found one)."""
    worker = task.worker
    _check(task.task_id == task_id, "{!r} filed under {:#x}", task, task_id)
    _check(task.state != TaskState.ENDED, "{!r} ended but is still filed", task)
    if task.state in (TaskState.ASSIGNED, TaskState.CANCELING):
        _check(worker is not None and core.workers.get(worker.identity) is worker, "{!r} has no worker", task)
        _check(worker is not None and worker.assigned.get(task_id) is task, "{!r} not on its worker", task)
    _check(task.state in (TaskState.ASSIGNED, TaskState.CANCELING) or worker is None, "{!r} has a worker", task)
    _check(task.state in (TaskState.ASSIGNED, TaskState.CANCELING) or not task.started, "{!r} started", task)
    _check(task.state != TaskState.QUEUED or id(task) in in_ready, "{!r} is not in the ready queue", task)
    _check(task.state != TaskState.WAITING or task.waiting_on > 0, "{!r} waits for nothing", task)
    raise InvariantError(f"{task!r} breaks an invariant")


def validate_prefixes(core: SchedulerCore) -> None:
    """A free prefix belongs to no session and to no task or object still here; sessions' prefixes differ."""
    free = set(core.prefixes.free)
    _check(len(free) == len(core.prefixes.free), "a prefix is free twice")
    live = [c.prefix for c in core.clients.values()] + [w.prefix for w in core.workers.values()]
    _check(len(set(live)) == len(live), "two sessions share a prefix")
    _check(all(p and p not in free for p in live), "a session's prefix is free (or 0)")
    if free:
        for record_id in (*core.tasks, *core.objects):
            if record_id >> ID_PREFIX_SHIFT in free:
                raise InvariantError(f"{record_id:#x} remains under a free prefix")
    for task in core.tasks.values():
        if task.client.prefix != task.task_id >> ID_PREFIX_SHIFT:
            raise InvariantError(f"{task!r}'s client lost its prefix early")


def _check(condition: bool, text: str, *values: object) -> None:
    """Raise InvariantError(text.format(*values)) unless `condition`: the text is built only then."""
    if not condition:
        raise InvariantError(text.format(*values))
