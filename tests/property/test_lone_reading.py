"""The scheduler's lone reader (read_lone) never accepts a header decode() refuses, and what it reads agrees with
decode(), whatever frames arrive (a lone result as sent or damaged, a lone submit). (The client reads every message
with decode(): in its lone round trip the waiting thread reads in the I/O thread's place, with its code, ADR 0008.)
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scaler.protocol.errors import ProtocolError
from scaler.protocol.messages import (
    LoneResult,
    LoneTask,
    Payload,
    SubmitTasks,
    TaskResults,
    decode,
    read_lone,
)
from tests.helpers import encoded

IDS = st.integers(0, 2**64 - 1)
PAYLOAD = st.binary(max_size=80) | st.just(b"x" * 70_000)


@st.composite
def results(draw: st.DrawFn) -> TaskResults:
    count = draw(st.integers(1, 3))
    profiled = draw(st.booleans())
    return TaskResults(
        draw(st.lists(IDS, min_size=count, max_size=count)),
        bytes(draw(st.lists(st.integers(0, 4) | st.integers(5, 255), min_size=count, max_size=count))),
        draw(st.lists(PAYLOAD, min_size=count, max_size=count)),
        draw(st.lists(IDS, min_size=count, max_size=count)) if profiled else None,
        draw(st.lists(IDS, min_size=count, max_size=count)) if profiled else None,
    )


@st.composite
def damaged(draw: st.DrawFn, message: TaskResults) -> list[bytes]:
    """The message's frames as sent, or changed: a byte of the header, frames added or dropped."""
    frames = encoded(message)
    how = draw(st.sampled_from(["as sent", "byte", "extra frame", "drop frame", "cut payload"]))
    if how == "byte":
        header = bytearray(frames[0])
        header[draw(st.integers(0, len(header) - 1))] = draw(st.integers(0, 255))
        frames[0] = bytes(header)
    elif how == "extra frame":
        frames.append(draw(st.binary(max_size=8)))
    elif how == "drop frame" and len(frames) > 1:
        frames.pop()
    elif how == "cut payload" and len(frames) > 1 and frames[1]:
        frames[1] = frames[1][:-1]
    return frames


def decoded(frames: list[bytes]) -> object:
    try:
        return decode(frames)
    except ProtocolError:
        return "malformed"


@given(st.data())
def test_the_schedulers_lone_reader_agrees_with_decode(data: st.DataObject) -> None:
    if data.draw(st.booleans()):
        message: SubmitTasks | TaskResults = data.draw(results())
    else:
        args: list[Payload] = data.draw(st.lists(PAYLOAD, max_size=3))
        message = SubmitTasks(
            [data.draw(IDS)],
            [data.draw(IDS)],
            bytes([data.draw(st.integers(0, 3))]),
            [len(args)],
            [0] * len(args),
            None,
            args,
        )
        requirements = data.draw(st.lists(st.lists(st.sampled_from(["payload=python", "gpu", "", "é=1"])), max_size=3))
        if requirements:  # capability requirements, each task's by index or not
            message.requirements = requirements
            if data.draw(st.booleans()):
                message.requirement_index = [data.draw(st.integers(0, len(requirements) - 1))]
    if isinstance(message, TaskResults):
        frames = data.draw(damaged(message))
    else:
        frames = encoded(message)
    lone = read_lone(frames[0])
    if lone is None:
        return
    full = decoded(frames)
    if isinstance(lone, LoneResult):
        assert isinstance(full, TaskResults) or full == "malformed"  # the payload frames are the shell's to check
        if isinstance(full, TaskResults):
            assert (full.task_ids, full.statuses[0], len(full.payloads[0])) == ([lone.task_id], lone.status, lone.size)
    else:
        assert isinstance(lone, LoneTask) and isinstance(full, SubmitTasks)
        assert (full.task_ids, full.function_ids, full.flags[0]) == ([lone.task_id], [lone.function_id], lone.flags)
        assert [len(p) for p in full.payloads] == lone.sizes and not any(full.arg_refs)
        assert (lone.requirements, lone.requirement_index) == (full.requirements, full.requirement_index)
