"""What the scheduler core says about its peers: log lines that name them (rate-limited per peer and kind, so that a
flood from one peer cannot flood the log: LogLimiter), and the errors that answer the requests it refuses (a bad
request, a payload over the limit), which always go out: their ids fail futures.

Functions of a SchedulerCore that add to its commands. Pure, like the core. Python 3.9 (the scheduler runs on PyPy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scaler.core.limiter import peer_label
from scaler.core.scheduler.events import Log
from scaler.protocol.records import Error, ErrorCode

if TYPE_CHECKING:
    from scaler.core.scheduler.core import SchedulerCore
    from scaler.core.scheduler.sessions import ClientSession, WorkerSession
    from scaler.core.scheduler.tasks import Task


def label(core: SchedulerCore, peer: bytes) -> str:
    """Who `peer` is, for a log line: its session, if it has one, and its routing id's kind|host|pid, never the
    id's secret part (scaler.core.limiter.peer_label)."""
    client = core.clients.get(peer)
    if client is not None:
        return peer_label(peer, f"client {client.name}")
    worker = core.workers.get(peer)
    if worker is not None:
        return peer_label(peer, f"worker {worker.name}")
    manager = core.managers.sessions.get(peer)
    return peer_label(peer, f"worker manager {manager.name}" if manager is not None else "")


def warn(core: SchedulerCore, kind: str, peer: bytes, text: str) -> None:
    """A warning about `peer`, rate-limited per peer and kind (LogLimiter)."""
    if core._limiter.allow(core.now, kind, peer):
        core._out.append(Log.warning(text))


def info(core: SchedulerCore, kind: str, peer: bytes, text: str) -> None:
    if core._limiter.allow(core.now, kind, peer):
        core._out.append(Log.info(text))


def bad_request(core: SchedulerCore, peer: bytes, text: str, ids: list[int] | None = None) -> None:
    core.dropped += 1
    core._send(peer, Error(ErrorCode.BAD_REQUEST, text, ids or []))  # its ids fail futures: always answered
    warn(core, "refused request", peer, f"refused a request from {label(core, peer)}: {text}")


def too_large(core: SchedulerCore, peer: bytes, what: str, ids: list[int]) -> None:
    core.dropped += 1
    limit = core.config.max_payload_bytes
    text = (
        f"{len(ids)} {what} carry a payload of more than {limit:,} bytes, this scheduler's limit per payload "
        "(scaler_scheduler --max-payload-bytes)"
    )
    core._send(peer, Error(ErrorCode.TOO_LARGE, text, ids))
    warn(core, "payload too large", peer, f"refused {what} from {label(core, peer)}: {text}")


def refuse_tasks(
    core: SchedulerCore,
    client: ClientSession,
    bad_ids: list[int],
    large: list[int],
    invalid: list[int],
    problems: set[str],
) -> None:
    """Tell `client` which tasks of its submitTasks were refused, and why."""
    if bad_ids:
        text = f"{len(bad_ids)} task ids are not this session's, have counter 0 or are already in use"
        bad_request(core, client.identity, text, bad_ids)
    if large:
        too_large(core, client.identity, "tasks", large)
    if invalid:
        text = f"{len(invalid)} tasks require capabilities that are not valid: " + "; ".join(sorted(problems))
        bad_request(core, client.identity, text, invalid)


def refuse_objects(core: SchedulerCore, client: ClientSession, bad_ids: list[int], large: list[int]) -> None:
    """Tell `client` which objects of its putObjects were refused (ObjectStore.put), and why."""
    if bad_ids:
        text = f"{len(bad_ids)} object ids are not this session's, have counter 0 or are already in use"
        bad_request(core, client.identity, text, bad_ids)
    if large:
        too_large(core, client.identity, "objects", large)


def result_too_large(core: SchedulerCore, task: Task, worker: WorkerSession, size: int) -> bytes:
    """The failure text of a task whose result is over the payload limit; the worker's sending it is warned of."""
    limit = core.config.max_payload_bytes
    text = (
        f"the result of task {task.task_id:#x} is {size:,} bytes, more than this scheduler's limit of {limit:,} "
        "bytes per payload (scaler_scheduler --max-payload-bytes)"
    )
    warn(core, "payload too large", worker.identity, f"worker {worker.name} sent a result too large: {text}")
    return text.encode()
