"""Encoding of agent <-> processor messages: a pickled header frame, then the raw payload frames."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

from scaler.core.worker import messages as pm
from scaler.protocol.messages import Payload


def encode(message: pm.ToProcessor | pm.FromProcessor) -> list[Payload]:
    if isinstance(message, pm.RunTasks):
        header: tuple[Any, ...] = ("run", message.object_ids, message.tasks)
        return [pickle.dumps(header, protocol=pickle.HIGHEST_PROTOCOL), *message.payloads]
    if isinstance(message, pm.Results):
        header = ("results", message.task_ids, message.statuses, message.durations_us, message.peak_memory)
        return [pickle.dumps(header, protocol=pickle.HIGHEST_PROTOCOL), *message.payloads]
    if isinstance(message, pm.DropObjects):
        header = ("drop", message.object_ids)
    elif isinstance(message, pm.Exit):
        header = ("exit", message.reason)
    elif isinstance(message, pm.Ready):
        header = ("ready", message.pid)
    elif isinstance(message, pm.Discard):
        header = ("discard", message.task_ids)
    elif isinstance(message, pm.Resume):
        header = ("resume",)
    elif isinstance(message, pm.Blocked):
        header = ("blocked",)
    else:
        header = ("unblocked",)
    return [pickle.dumps(header, protocol=pickle.HIGHEST_PROTOCOL)]


def decode(frames: Sequence[Payload]) -> pm.ToProcessor | pm.FromProcessor:
    header = pickle.loads(frames[0])  # type: ignore[arg-type]
    kind = header[0]
    payloads = list(frames[1:])
    if kind == "run":
        return pm.RunTasks(header[1], header[2], payloads)
    if kind == "results":
        return pm.Results(header[1], header[2], header[3], header[4], payloads)
    if kind == "drop":
        return pm.DropObjects(header[1])
    if kind == "exit":
        return pm.Exit(header[1])
    if kind == "ready":
        return pm.Ready(header[1])
    if kind == "discard":
        return pm.Discard(header[1])
    if kind == "resume":
        return pm.Resume()
    if kind == "blocked":
        return pm.Blocked()
    if kind == "unblocked":
        return pm.Unblocked()
    raise ValueError(f"unknown processor message {kind!r}")
