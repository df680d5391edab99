"""Payloads <-> frames at the 1 MiB frame limit (protocol/frames.py, docs/protocol.md section 2): no frame over
MAX_FRAME, big payloads cut into views of themselves, spanning payloads read back as Pieces, malformed spans refused."""

from __future__ import annotations

import os
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.core.client.session import HEADER_BUDGET, ClientCore, NewObject, NewTask
from scaler.core.worker import messages as pm
from scaler.protocol import messages as m
from scaler.protocol.errors import ProtocolError
from scaler.protocol.frames import ALONE_FROM, MAX_FRAME, Pieces, cut, pack, unpack, whole
from scaler.serializer import DEFAULT_SERIALIZER, serializer_input
from scaler.worker import pipe_codec
from tests.helpers import encoded, payload_bytes

MiB = MAX_FRAME


def test_a_payload_of_exactly_the_limit_travels_alone_and_one_byte_more_spans_two_frames() -> None:
    exact, over = os.urandom(MiB), os.urandom(MiB + 1)
    assert pack([exact]) == ([MiB], [exact])
    sizes, frames = pack([over])
    assert sizes == [MiB + 1] and [len(f) for f in frames] == [MiB, 1]
    assert all(isinstance(f, memoryview) and f.obj is over for f in frames)  # views: nothing copied
    [got] = unpack(sizes, [bytes(f) for f in frames])
    assert isinstance(got, Pieces) and len(got) == MiB + 1 and bytes(got) == over


def test_packs_of_small_payloads_never_pass_the_limit() -> None:
    small = [os.urandom(ALONE_FROM - 1) for _ in range(40)]  # 40 x 64 KiB: more than 2 MiB together
    sizes, frames = pack(small)
    assert max(map(len, frames)) <= MiB and len(frames) == 3
    assert [bytes(p) for p in unpack(sizes, frames)] == small


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([0, 1, 1000, ALONE_FROM - 1, ALONE_FROM, MiB - 1, MiB, MiB + 1, 2 * MiB + 7])))
def test_no_frame_is_ever_over_the_limit_and_everything_comes_back(sizes_wanted: list[int]) -> None:
    payloads = [bytes([n % 251]) * n for n in sizes_wanted]
    sizes, frames = pack(payloads)
    assert sizes == sizes_wanted
    assert all(0 < len(f) <= MiB for f in frames)
    assert [bytes(p) for p in unpack(sizes, [bytes(f) for f in frames])] == payloads


def test_the_scheduler_forwards_a_spanning_payload_in_the_frames_it_came_in() -> None:
    frames = [os.urandom(MiB), os.urandom(MiB), os.urandom(5)]
    [pieces] = unpack([2 * MiB + 5], frames)
    assert isinstance(pieces, Pieces) and pieces.frames == frames
    again_sizes, again = pack([b"small", pieces])
    assert again_sizes == [5, 2 * MiB + 5] and again[1:] == frames and cut(pieces) is pieces.frames


def test_a_span_must_start_a_frame_and_fill_whole_frames() -> None:
    with pytest.raises(ProtocolError, match="does not fit"):
        unpack([3, MiB + 2], [b"abc" + bytes(MiB - 3), bytes(5)])  # starts inside a frame and does not fit
    with pytest.raises(ProtocolError, match="must fill them whole"):
        unpack([MiB + 2], [bytes(MiB), bytes(5)])  # the last frame holds more than the payload's rest
    with pytest.raises(ProtocolError):
        unpack([MiB + 2], [bytes(MiB)])  # missing bytes


def test_a_message_with_spanning_payloads_round_trips_through_the_codec() -> None:
    big = os.urandom(3 * MiB + 5)
    message = m.TaskResults([1, 2], bytes(2), [b"x", big])
    frames = m.encode(message)
    assert all(len(f) <= MiB for f in frames)
    decoded = m.decode([payload_bytes(f) for f in frames])
    assert isinstance(decoded, m.TaskResults) and decoded.payloads[0] == b"x"
    assert isinstance(decoded.payloads[1], Pieces) and bytes(decoded.payloads[1]) == big
    assert m.decode(encoded(decoded)) == message  # forwarded as it came


def test_who_needs_a_whole_payload_gets_one() -> None:
    value = {"numbers": list(range(300_000))}
    data = pickle.dumps(value)
    assert len(data) > MiB
    pieces = Pieces([bytes(f) for f in cut(data)])
    assert pickle.loads(serializer_input(DEFAULT_SERIALIZER, pieces)) == value
    assert whole(pieces) == data and whole(data) is data
    run = pipe_codec.decode(pipe_codec.encode(pm.RunTasks([], [], [pieces], 0)))
    assert isinstance(run, pm.RunTasks) and payload_bytes(run.payloads[0]) == data


def test_the_client_cuts_batches_whose_header_would_not_fit_in_a_frame() -> None:
    keywords = tuple(f"keyword_number_{i}" for i in range(10))
    tasks = [NewTask(i, 1, 0, (0,) * 10, keywords, (b"v",) * 10) for i in range(1, 4097)]
    messages = ClientCore.batch(tasks)
    assert len(messages) > 1 and sum(len(x.task_ids) for x in messages if isinstance(x, m.SubmitTasks)) == 4096
    for message in messages:
        assert len(m.encode(message)[0]) <= HEADER_BUDGET <= MiB
    positional = [NewTask(i, 1, 0, (0,) * 20, None, (b"v",) * 20) for i in range(1, 4097)]
    cut_positional = ClientCore.batch(positional)
    assert len(cut_positional) > 1 and all(len(m.encode(x)[0]) <= HEADER_BUDGET for x in cut_positional)
    small = ClientCore.batch([NewTask(i, 1, 0, (0,), None, (b"v",)) for i in range(1, 4097)])
    assert len(small) == 1  # within the quick bound: one message, as before
    names = [NewObject(i, b"o", "n" * 5000) for i in range(1, 600)]
    for message in ClientCore.batch(names):
        assert len(m.encode(message)[0]) <= MiB
