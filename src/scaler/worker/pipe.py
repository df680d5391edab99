"""Encoding of agent <-> processor messages: one pickled frame, with big payloads riding along as extra frames
(pickle protocol 5 out-of-band buffers, so they are never copied into the pickle).

One form for every message: a lone task's messages once had a shorter struct form, which saved about 2 % of a round
trip, under the 5 % a second path must save to stay (ADR 0008).
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

from scaler.core.worker import messages as pm
from scaler.protocol.frames import whole
from scaler.protocol.messages import Payload

_OUT_OF_BAND_FROM = 64 * 1024


def _wrap(payloads: Sequence[Payload]) -> list[Any]:
    """Big payloads out of band; one that came in several frames (Pieces) is joined first (one copy)."""
    return [pickle.PickleBuffer(whole(p)) if len(p) >= _OUT_OF_BAND_FROM else p for p in payloads]


def encode(message: pm.ToProcessor | pm.FromProcessor) -> list[Payload]:
    header: tuple[Any, ...]
    if isinstance(message, pm.RunTasks):
        header = ("run", message.object_ids, message.tasks, _wrap(message.payloads), message.help_epoch)
    elif isinstance(message, pm.Results):
        header = (
            "results",
            message.task_ids,
            message.statuses,
            message.durations_us,
            message.peak_memory,
            _wrap(message.payloads),
            message.cpu_times_us,
        )
    elif isinstance(message, pm.DropObjects):
        header = ("drop", message.object_ids)
    elif isinstance(message, pm.Discard):
        header = ("discard", message.task_ids, message.confirm)
    elif isinstance(message, pm.Discarded):
        header = ("discarded", message.removed, message.requested)
    elif isinstance(message, pm.Resume):
        header = ("resume",)
    elif isinstance(message, pm.Exit):
        header = ("exit", message.reason)
    elif isinstance(message, pm.Ready):
        header = ("ready", message.pid)
    elif isinstance(message, pm.Blocked):
        header = ("blocked", message.epoch, message.waiting)
    elif isinstance(message, pm.Output):
        header = ("output", message.task_ids, message.streams, message.texts)
    else:
        header = ("unblocked",)
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(header, protocol=5, buffer_callback=buffers.append)
    return [data, *(b.raw() for b in buffers)]


def decode(frames: Sequence[Payload]) -> pm.ToProcessor | pm.FromProcessor:
    first: Any = frames[0]  # bytes-like (the link hands out bytearrays)
    header = pickle.loads(first, buffers=frames[1:])
    kind = header[0]
    if kind == "run":
        return pm.RunTasks(header[1], header[2], header[3], header[4])
    if kind == "results":
        return pm.Results(header[1], header[2], header[3], header[4], header[5], header[6])
    if kind == "drop":
        return pm.DropObjects(header[1])
    if kind == "discard":
        return pm.Discard(header[1], header[2])
    if kind == "discarded":
        return pm.Discarded(header[1], header[2])
    if kind == "resume":
        return pm.Resume()
    if kind == "exit":
        return pm.Exit(header[1])
    if kind == "ready":
        return pm.Ready(header[1])
    if kind == "blocked":
        return pm.Blocked(header[1], header[2])
    if kind == "unblocked":
        return pm.Unblocked()
    if kind == "output":
        return pm.Output(header[1], header[2], header[3])
    raise ValueError(f"unknown processor message {kind!r}")
