"""Agent <-> processor messages (scaler.worker.pipe_codec): every message decodes to what was encoded, in one form (a
pickled frame, big payloads out of band)."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest

from scaler.core.worker import messages as pm
from scaler.worker import pipe_codec
from tests.helpers import payload_bytes

MESSAGES: list[Any] = [
    pm.RunTasks([], [(5, 7, 1, (0, 0), None)], [b"a", b"bb"]),  # a lone task
    pm.RunTasks([], [(5, 7, 0, (), None)], []),  # lone, no arguments
    pm.RunTasks([9], [(5, 7, 0, (0,), None)], [b"obj", b"a"]),  # an object rides along
    pm.RunTasks([], [(5, 7, 0, (0, 9), None)], [b"a"]),  # a reference
    pm.RunTasks([], [(5, 7, 0, (0,), ("x",))], [b"a"]),  # a keyword
    pm.RunTasks([], [(5, 7, 0, (0,), None)], [b"a"], help_epoch=3),  # help
    pm.RunTasks([], [(5, 7, 0, (0,), None), (6, 7, 0, (0,), None)], [b"a", b"b"]),  # two tasks
    pm.Results([5], b"\x02", [12], [34], [b"xyz"]),  # a lone result
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
    pm.Output([5, 5, 6], b"\x01\x02\x03", ["out\n", "err", "Traceback ...\nValueError: bad\n"]),
]


@pytest.mark.parametrize("message", MESSAGES)
def test_every_message_decodes_to_what_was_encoded(message: Any) -> None:
    frames = [bytearray(payload_bytes(f)) for f in pipe_codec.encode(message)]  # as the link hands them out
    decoded = pipe_codec.decode(frames)
    assert type(decoded) is type(message)
    for field in (f.name for f in dataclasses.fields(message)):
        got, want = getattr(decoded, field), getattr(message, field)
        if field == "payloads":
            got, want = [bytes(p) for p in got], [bytes(p) for p in want]
        assert got == want, field


@pytest.mark.parametrize("message", [MESSAGES[8], MESSAGES[9]])
def test_big_payloads_travel_out_of_band_never_copied(message: Any) -> None:
    frames = pipe_codec.encode(message)
    assert len(frames) == 2
    assert isinstance(frames[1], memoryview) and frames[1].obj is message.payloads[-1]  # the very object, not a copy
    pickle.loads(payload_bytes(frames[0]), buffers=frames[1:])  # the first frame is a plain pickle


@pytest.mark.parametrize("message", [m for k, m in enumerate(MESSAGES) if k not in (8, 9)])
def test_a_message_without_big_payloads_is_one_frame(message: Any) -> None:
    assert len(pipe_codec.encode(message)) == 1


def test_what_is_not_a_processor_message_is_refused() -> None:
    with pytest.raises(TypeError, match="not a processor message"):
        pipe_codec.encode("run")  # type: ignore[arg-type]
