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
    pm.RunTasks([], [(5, 7, 0, (0, 0), None)], [b"a", b"b" * 70_000]),  # lone, a big argument: frames of its own
    pm.Results([5], b"\x00", [12], [0], [b"r" * 70_000]),  # lone, a big result: a frame of its own
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
def test_a_lone_task_and_its_small_result_travel_as_one_frame_not_pickled(message: Any) -> None:
    frames = pipe.encode(message)
    assert len(frames) == 1  # the link's short path
    assert bytes(frames[0][:1]) in (b"\x01", b"\x02")
    with pytest.raises(pickle.UnpicklingError):
        pickle.loads(frames[0])


@pytest.mark.parametrize("message", [MESSAGES[8], MESSAGES[9]])
def test_big_payloads_of_the_short_forms_are_frames_of_their_own(message: Any) -> None:
    frames = pipe.encode(message)
    assert bytes(frames[0][:1]) in (b"\x03", b"\x04")
    assert frames[1:] == message.payloads  # the very objects: never copied


def test_a_short_run_message_whose_arguments_do_not_add_up_is_refused() -> None:
    (frame,) = pipe.encode(MESSAGES[0])
    with pytest.raises(ValueError, match="do not add up"):
        pipe.decode([bytearray(frame[:-1])])
    frames = pipe.encode(MESSAGES[8])
    with pytest.raises(ValueError, match="2 arguments came with 1"):
        pipe.decode(frames[:2])
