"""The scheduler's lone messages: read without decode() (lone_message), and answered in the frames they came in
(reused_frames) only when the answer says exactly what came.

lone_message gives None or exactly what decode() gives, whatever the frames; reused_frames gives frames that decode to
the very answer the core built, or None when any field differs (every field of the records is compared: one added to
them later is compared too) or a payload is not the object that came.
"""

from __future__ import annotations

import copy
import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from scaler.protocol.errors import ProtocolError
from scaler.protocol.lone import _BATCH_FIELDS, _RESULT_FIELDS
from scaler.protocol.messages import (
    DispatchTasks,
    LoneResult,
    LoneTask,
    Message,
    Payload,
    SubmitTasks,
    TaskBatch,
    TaskResults,
    decode,
    dispatch_header,
    lone_message,
    read_lone,
    reused_frames,
)
from tests.helpers import encoded, payload_bytes

IDS = st.integers(1, 2**64 - 1)
PAYLOAD = st.binary(max_size=80) | st.just(b"x" * 70_000)


def plain(message: Message) -> Message:
    """A copy with the payloads as bytes: what a socket delivers and what a record holds compare."""
    copied = copy.copy(message)
    if isinstance(copied, (TaskBatch, TaskResults)):
        copied.payloads = [payload_bytes(p) for p in copied.payloads]
    return copied


def frames_of(message: Message) -> list[Payload]:
    return list(encoded(message))


@st.composite
def submits(draw: st.DrawFn) -> SubmitTasks:
    """Mostly lone submits (one task, inline arguments), sometimes with what makes one not lone."""
    count = draw(st.integers(0, 3))
    submit = SubmitTasks(
        [draw(IDS)], [draw(IDS)], bytes([draw(st.integers(0, 255))]), [count], [0] * count, None,
        draw(st.lists(PAYLOAD, min_size=count, max_size=count)),
    )  # fmt: skip
    extra = draw(st.sampled_from(["none", "none", "none", "keywords", "timeout", "requirements", "ref"]))
    if extra == "keywords" and count:
        submit.keywords = ["a"] * count
    elif extra == "timeout":
        submit.timeouts_ms = [5]
    elif extra == "requirements":
        submit.requirements = [[]] if draw(st.booleans()) else [["gpu"]]
    elif extra == "ref" and count:
        submit.arg_refs = [7] * count
        submit.payloads = []
    return submit


@st.composite
def results(draw: st.DrawFn) -> TaskResults:
    profiled = draw(st.booleans()) and draw(st.booleans())
    count = draw(st.integers(1, 2)) if draw(st.booleans()) else 1
    return TaskResults(
        draw(st.lists(IDS, min_size=count, max_size=count)),
        bytes(draw(st.lists(st.integers(0, 4), min_size=count, max_size=count))),
        draw(st.lists(PAYLOAD, min_size=count, max_size=count)),
        [1] * count if profiled else None,
        [2] * count if profiled else None,
    )


@given(st.one_of(submits(), results()), st.sampled_from(["as sent", "extra frame", "drop frame", "cut payload"]))
def test_what_lone_message_reads_is_what_decode_gives(message: SubmitTasks | TaskResults, how: str) -> None:
    frames = frames_of(message)
    if how == "extra frame":
        frames.append(b"?")
    elif how == "drop frame" and len(frames) > 1:
        frames.pop()
    elif how == "cut payload" and len(frames) > 1:
        frames[-1] = payload_bytes(frames[-1])[:-1]
    lone = read_lone(payload_bytes(frames[0]))
    read = lone_message(lone, frames) if lone is not None else None
    if read is None:
        return
    try:
        decoded = decode(frames)
    except ProtocolError as exc:
        raise AssertionError(f"lone_message read {read!r:.200}, decode() refuses the frames: {exc}") from exc
    assert plain(read) == plain(decoded)


def test_a_lone_submit_without_options_or_keywords_is_read_and_others_are_not() -> None:
    lone = SubmitTasks([9], [3], b"\x00", [1], [0], None, [b"a"])
    header = read_lone(payload_bytes(frames_of(lone)[0]))
    assert header is not None and lone_message(header, frames_of(lone)) is not None
    for change, value in (("timeouts_ms", [1]), ("keywords", ["k"]), ("requirements", [["gpu"]])):
        other = copy.copy(lone)
        setattr(other, change, value)
        read = read_lone(payload_bytes(frames_of(other)[0]))
        assert (read is not None) == (change == "requirements"), change


def answer_to(came: SubmitTasks) -> DispatchTasks:
    """The dispatch a core builds for that one task: the same columns, the same payload objects."""
    return DispatchTasks(
        list(came.task_ids), list(came.function_ids), bytes(came.flags), list(came.arg_counts), list(came.arg_refs),
        None, list(came.payloads),
    )  # fmt: skip


def read_submit(message: SubmitTasks) -> tuple[LoneTask, SubmitTasks, list[Payload]]:
    """A lone submit as the scheduler's shell reads it: its header (read_lone), the record, the frames."""
    frames = frames_of(message)
    lone = read_lone(payload_bytes(frames[0]))
    came = lone_message(lone, frames) if lone is not None else None
    assert isinstance(lone, LoneTask) and isinstance(came, SubmitTasks)
    return lone, came, frames


def read_result(message: TaskResults) -> tuple[LoneResult, TaskResults, list[Payload]]:
    frames = frames_of(message)
    lone = read_lone(payload_bytes(frames[0]))
    came = lone_message(lone, frames) if lone is not None else None
    assert isinstance(lone, LoneResult) and isinstance(came, TaskResults)
    return lone, came, frames


@given(st.integers(0, 3), st.integers(0, 255))
def test_a_dispatch_that_says_what_the_submit_said_goes_in_its_frames(count: int, flags: int) -> None:
    lone, came, frames = read_submit(SubmitTasks([5], [3], bytes([flags]), [count], [0] * count, None, [b"p"] * count))
    out = answer_to(came)
    reused = reused_frames(out, came, lone, frames)
    assert reused is not None and reused[0] == dispatch_header(lone) and reused[1:] == frames[1:]
    assert plain(decode(reused)) == plain(out)


@given(st.sampled_from([[[]], [["gpu"]], [["payload=python", "a"], ["b"]]]), st.booleans())
def test_a_dispatch_of_a_task_with_requirements_goes_in_its_frames_without_them(
    requirements: list[list[str]], indexed: bool
) -> None:
    submit = SubmitTasks([5], [3], b"\x00", [1], [0], None, [b"p"])
    submit.requirements = requirements
    submit.requirement_index = [len(requirements) - 1] if indexed else None
    lone, came, frames = read_submit(submit)
    assert plain(came) == plain(decode(frames))
    out = answer_to(came)  # the core's dispatch: no requirements
    reused = reused_frames(out, came, lone, frames)
    assert reused is not None
    assert plain(decode(reused)) == plain(out)


def test_a_result_that_says_what_the_worker_said_goes_in_its_frames() -> None:
    lone, came, frames = read_result(TaskResults([5], b"\x01", [b"boom"]))
    out = TaskResults([5], b"\x01", list(came.payloads))
    assert reused_frames(out, came, lone, frames) == frames
    out.durations_us = [0]
    assert reused_frames(out, came, lone, frames) is None


def test_any_field_that_differs_or_a_payload_that_is_not_the_one_that_came_means_encoding() -> None:
    lone, came, frames = read_submit(SubmitTasks([5], [3], b"\x00", [1], [0], None, [b"pp"]))
    changed = {
        "task_ids": [6], "function_ids": [4], "flags": b"\x01", "arg_counts": [2], "arg_refs": [1],
        "keywords": ["k"], "timeouts_ms": [1], "retries": b"\x01", "priorities": [1], "requirements": [["gpu"]],
        "requirement_index": [0],
    }  # fmt: skip
    assert set(changed) == set(_BATCH_FIELDS), "a field of TaskBatch is not covered here"
    for name, value in changed.items():
        out = answer_to(came)
        setattr(out, name, value)
        assert reused_frames(out, came, lone, frames) is None, name
    out = answer_to(came)
    out.payloads = [bytes(bytearray(b"pp"))]  # equal, but not the object that came
    assert reused_frames(out, came, lone, frames) is None
    result_lone, result_came, result_frames = read_result(TaskResults([5], b"\x00", [b"r"]))
    assert reused_frames(out, result_came, result_lone, result_frames) is None  # a dispatch never reuses a result


def test_every_field_of_the_records_but_the_payloads_is_compared() -> None:
    assert set(_BATCH_FIELDS) | {"payloads"} == {f.name for f in dataclasses.fields(TaskBatch)}
    assert set(_RESULT_FIELDS) | {"payloads"} == {f.name for f in dataclasses.fields(TaskResults)}
