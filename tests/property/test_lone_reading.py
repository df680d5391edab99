"""The client's lone round trip reads a lone result without pycapnp (read_lone_result): a way of reading, not a second
path. Whatever frames arrive, read_lone_result gives None (the I/O thread decodes them as usual) or exactly the
message decode() gives, so the ClientCore ends in the same whole state either way (tests/core_dump.py).

Also: the scheduler's read_lone never accepts a header decode() refuses, and what it reads agrees with decode().
"""

from __future__ import annotations

import copy

from hypothesis import given
from hypothesis import strategies as st

from scaler.core.client.session import ClientCore
from scaler.protocol.errors import ProtocolError
from scaler.protocol.messages import (
    LoneResult,
    LoneTask,
    SubmitTasks,
    TaskResults,
    TaskStatus,
    Welcome,
    decode,
    encode,
    read_lone,
    read_lone_result,
)
from tests.core_dump import canonical

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
    frames = [bytes(frame) for frame in encode(message)]
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
def test_a_lone_result_read_without_pycapnp_is_what_decode_gives(data: st.DataObject) -> None:
    frames = data.draw(damaged(data.draw(results())))
    fast = read_lone_result(frames)
    if fast is not None:
        assert fast == decoded(frames)


@given(results())
def test_every_lone_result_as_sent_is_read_the_fast_way(message: TaskResults) -> None:
    frames = [bytes(frame) for frame in encode(message)]
    lone = len(message.task_ids) == 1 and message.durations_us is None and message.statuses[0] <= max(TaskStatus)
    assert (read_lone_result(frames) is not None) == lone


@given(st.data())
def test_the_client_core_ends_in_the_same_whole_state_either_way(data: st.DataObject) -> None:
    core = ClientCore("c", 2.0, 60.0)
    core.start(0.0)
    core.received(0.0, Welcome(1))
    message = data.draw(results())
    frames = [bytes(frame) for frame in encode(message)]
    fast = read_lone_result(frames)
    if fast is None:
        return
    slow_core = copy.deepcopy(core)
    fast_commands = core.received(1.0, fast)
    slow_commands = slow_core.received(1.0, decode(frames))
    assert fast_commands == slow_commands
    assert canonical(core) == canonical(slow_core)


@given(st.data())
def test_the_schedulers_lone_reader_agrees_with_decode(data: st.DataObject) -> None:
    if data.draw(st.booleans()):
        message: SubmitTasks | TaskResults = data.draw(results())
    else:
        args = data.draw(st.lists(PAYLOAD, max_size=3))
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
        frames = [bytes(f) for f in encode(message)]
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
        assert lone.requirement == frozenset(full.requirement_of(0) or ())
