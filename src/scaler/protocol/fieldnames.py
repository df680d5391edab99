"""The Python record field -> Cap'n Proto field names of the status structs, shared by the codec (codec.py) and the
tests' pycapnp oracle (tests/protocol/capnp_codec.py): one table per struct, in the schema's order."""

from __future__ import annotations

WORKER_STATUS = {
    "name": "name",
    "agent_cpu_percent": "agentCpuPercent",
    "agent_rss_bytes": "agentRssBytes",
    "cpu_percent": "cpuPercent",
    "rss_bytes": "rssBytes",
    "free": "free",
    "sent": "sent",
    "queued": "queued",
    "lag_us": "lagUs",
    "processors": "processors",
    "blocked_processors": "blockedProcessors",
    "running": "running",
    "completed": "completed",
    "waiting": "waiting",
    "held_back_ms": "heldBackMs",
    "heartbeat_age_ms": "heartbeatAgeMs",
    "capabilities": "capabilities",
}

CLIENT_STATUS = {
    "name": "name",
    "tasks": "tasks",
    "objects": "objects",
    "completed": "completed",
    "assigned": "assigned",
}

FUNCTION_STATUS = {
    "name": "name",
    "submitted": "submitted",
    "running": "running",
    "success": "success",
    "error": "error",
    "canceled": "canceled",
    "failed": "failed",
    "duration_us": "durationUs",
    "timed_tasks": "timedTasks",
}  # and duration_buckets, a u64 column (durationBuckets), which the codecs pack

TASK_FAILURE = {
    "task_id": "taskId",
    "function": "function",
    "worker": "worker",
    "status": "status",
    "text": "text",
    "time_us": "timeUs",
}

OUTPUT_RECORD = {
    "task_id": "taskId",
    "function": "function",
    "worker": "worker",
    "stream": "stream",
    "text": "text",
    "time_us": "timeUs",
}

DEPARTED_WORKER = {"name": "name", "reason": "reason", "lost": "lost", "time_us": "timeUs"}

MANAGER_STATUS = {
    "name": "name",
    "tier": "tier",
    "capabilities": "capabilities",
    "min_units": "minUnits",
    "max_units": "maxUnits",
    "connected": "connected",
    "draining": "draining",
    "pending": "pending",
    "oldest_pending_ms": "oldestPendingMs",
    "failures": "failures",
    "last_failure": "lastFailure",
    "retry_in_ms": "retryInMs",
}

WAITING_TASKS = {"capabilities": "capabilities", "tasks": "tasks", "reason": "reason"}
