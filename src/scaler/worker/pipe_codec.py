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
    """The frames of `message`: its pickled header, then its big payloads (none, most often: then one frame, and no
    pass over the payloads but a max of their lengths)."""
    kind = type(message)
    header: tuple[Any, ...]
    payloads: Sequence[Payload] = ()
    if kind is pm.RunTasks:  # (type checks first: these two go once per batch of tasks each way)
        run: pm.RunTasks = message  # type: ignore[assignment]
        payloads = run.payloads
        header = ("run", run.object_ids, run.tasks, payloads, run.help_epoch)
    elif kind is pm.Results:
        results: pm.Results = message  # type: ignore[assignment]
        payloads = results.payloads
        header = (
            "results",
            results.task_ids,
            results.statuses,
            results.durations_us,
            results.peak_memory,
            payloads,
            results.cpu_times_us,
        )
    else:
        header = _header(message)
    if not payloads or max(map(len, payloads)) < _OUT_OF_BAND_FROM:
        return [pickle.dumps(header, protocol=5)]
    header = (*header[:-2], _wrap(payloads), header[-1])  # (payloads come last but one in both)
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(header, protocol=5, buffer_callback=buffers.append)
    return [data, *[b.raw() for b in buffers]]


def _header(message: pm.ToProcessor | pm.FromProcessor) -> tuple[Any, ...]:
    """The header of a message that carries no payloads."""
    if isinstance(message, pm.DropObjects):
        return ("drop", message.object_ids)
    if isinstance(message, pm.Discard):
        return ("discard", message.task_ids, message.confirm)
    if isinstance(message, pm.Discarded):
        return ("discarded", message.removed, message.requested)
    if isinstance(message, pm.Resume):
        return ("resume",)
    if isinstance(message, pm.Exit):
        return ("exit", message.reason)
    if isinstance(message, pm.Ready):
        return ("ready", message.pid)
    if isinstance(message, pm.Blocked):
        return ("blocked", message.epoch, message.waiting)
    if isinstance(message, pm.Output):
        return ("output", message.task_ids, message.streams, message.texts)
    if isinstance(message, pm.Unblocked):
        return ("unblocked",)
    raise TypeError(f"not a processor message: {message!r}")


def decode(frames: Sequence[Payload]) -> pm.ToProcessor | pm.FromProcessor:
    first: Any = frames[0]  # bytes-like (the link hands out bytearrays)
    header = pickle.loads(first, buffers=frames[1:]) if len(frames) > 1 else pickle.loads(first)
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
