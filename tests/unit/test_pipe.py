"""Agent <-> processor messages (scaler.worker.pipe): every message decodes to what was encoded, and the two messages
of a lone round trip take their short struct form (no pickle)."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from scaler.core.worker import messages as pm
from scaler.worker import pipe

MESSAGES: list[Any] = [
    pm.RunTasks([], [(5, 7, 1, (0, 0), None)], [b"a", b"bb"]),  # lone: short form
    pm.RunTasks([], [(5, 7, 0, (), None)], []),  # lone, no arguments
    pm.RunTasks([9], [(5, 7, 0, (0,), None)], [b"obj", b"a"]),  # an object rides along
    pm.RunTasks([], [(5, 7, 0, (0, 9), None)], [b"a"]),  # a reference
    pm.RunTasks([], [(5, 7, 0, (0,), ("x",))], [b"a"]),  # a keyword
    pm.RunTasks([], [(5, 7, 0, (0,), None)], [b"a"], help_epoch=3),  # help
    pm.RunTasks([], [(5, 7, 0, (0,), None), (6, 7, 0, (0,), None)], [b"a", b"b"]),  # two tasks
    pm.Results([5], b"\x02", [12], [34], [b"xyz"]),  # lone: short form
    pm.Results([5, 6], b"\x00\x00", [1, 2], [0, 0], [b"x", b"y"]),
    pm.Ready(123),
    pm.Blocked(2, [5, 6]),
    pm.Unblocked(),
    pm.Discard([5], confirm=True),
    pm.Discarded([5], [5, 6]),
    pm.Resume(),
    pm.DropObjects([9]),
    pm.Exit("bye"),
]


@pytest.mark.parametrize("message", MESSAGES)
def test_every_message_decodes_to_what_was_encoded(message: Any) -> None:
    frames = [bytearray(f) for f in pipe.encode(message)]  # as the link hands them out
    decoded = pipe.decode(frames)  # type: ignore[arg-type]
    assert type(decoded) is type(message)
    for field in message.__slots__:
        got, want = getattr(decoded, field), getattr(message, field)
        if field == "payloads":
            got, want = [bytes(p) for p in got], [bytes(p) for p in want]
        assert got == want, field


@pytest.mark.parametrize("message", [MESSAGES[0], MESSAGES[1], MESSAGES[7]])
def test_the_lone_round_trip_messages_are_not_pickled(message: Any) -> None:
    frames = pipe.encode(message)
    assert bytes(frames[0][:1]) in (b"\x01", b"\x02")
    assert len(frames) == 1 + len(message.payloads)
    with pytest.raises(pickle.UnpicklingError):
        pickle.loads(frames[0])


def test_a_short_run_message_with_missing_arguments_is_refused() -> None:
    frames = pipe.encode(MESSAGES[0])
    with pytest.raises(ValueError, match="2 arguments came with 1"):
        pipe.decode(frames[:2])
