"""The fast writer and reader of the hot batch messages agree with pycapnp, byte for byte, whatever the shape."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from scaler.protocol import codec
from scaler.protocol import messages as m
from tests.helpers import encoded, payload_bytes
from tests.protocol import capnp_codec

BATCHES: list[Any] = [
    m.TaskResults([1], b"\x00", [b"r"]),
    m.TaskResults([1, 2, 3], b"\x00\x01\x00", [b"a", b"", b"c" * 70_000]),
    m.TaskResults([5], b"\x00", [b"x"], durations_us=[7], peak_memory=None),
    m.TaskResults([5], b"\x00", [b"x"], durations_us=None, peak_memory=[9]),
    m.TaskResults([5, 6], b"\x00\x00", [b"x", b"y"], durations_us=[1, 2], peak_memory=[3, 4]),
    m.TaskResults([5, 6], b"\x00\x00", [b"x", b"y"], durations_us=[1, 2], peak_memory=[3, 4], cpu_times_us=[5, 6]),
    m.TaskResults([5], b"\x00", [b"x"], cpu_times_us=[8]),
    m.TaskResults([], b"", []),
    m.SubmitTasks([1], [9], b"\x00", [1], [0], None, [b"arg"]),
    m.SubmitTasks([1, 2], [9, 9], b"\x01\x02", [2, 0], [0, 44], None, [b"abcdefghi"]),
    m.SubmitTasks([1, 2, 3], [9, 8, 7], b"\x00\x00\x00", [1, 1, 1], [0, 0, 0], None, [b"a", b"bb", b"ccc"]),
    m.DispatchTasks([1], [9], b"\x00", [3], [0, 0, 0], None, [b"1", b"22", b"333"]),
    m.DispatchTasks([], [], b"", [], [], None, []),
    # capability requirements: one for every task, one per task by index, an empty one, with options
    m.SubmitTasks([1], [9], b"\x00", [1], [0], None, [b"arg"], requirements=[["payload=python"]]),
    m.SubmitTasks(
        [1, 2, 3],
        [9, 9, 9],
        b"\x00\x00\x00",
        [0, 0, 0],
        [],
        None,
        [],
        requirements=[["payload=python", "gpu", "é" * 40], [], ["x"]],
        requirement_index=[0, 2, 1],
    ),
    m.SubmitTasks(
        [1, 2], [9, 9], b"\x00\x00", [0, 0], [], None, [], requirements=[[""], ["a"]], requirement_index=[1, 0]
    ),
]

REQUIRING = [batch for batch in BATCHES if getattr(batch, "requirements", None)]


@pytest.mark.parametrize("message", REQUIRING)
def test_batches_with_requirements_take_the_fast_reader(message: Any) -> None:
    header = encoded(message)[0]
    assert codec._fast.read(header) is not None
    assert m.decode([header, *m.encode(message)[1:]]) == message
    assert capnp_codec.decode([header, *m.encode(message)[1:]]) == message


def _pycapnp_frames(message: Any) -> list[bytes]:
    return [payload_bytes(frame) for frame in capnp_codec.encode(message)]


@pytest.mark.parametrize("pypy", [False, True], ids=["template", "joined"])
@pytest.mark.parametrize("message", BATCHES)
def test_the_fast_writer_writes_what_pycapnp_writes(message: Any, pypy: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways of writing: a %-template (CPython), head and pads joined around the fields (PyPy)."""
    monkeypatch.setattr(codec, "_PYPY", pypy)
    expected = _pycapnp_frames(message)
    for _ in range(2):  # the second time from the remembered template
        assert encoded(message) == expected


@pytest.mark.parametrize("message", BATCHES)
def test_the_fast_reader_reads_what_pycapnp_writes(message: Any) -> None:
    frames = _pycapnp_frames(message)
    assert codec._fast.read(frames[0]) is not None, "not read by the fast reader"
    for _ in range(2):  # the second time from the remembered shape
        assert m.decode(frames) == message


def test_fields_laid_out_out_of_slot_order_are_read_too() -> None:
    """Cap'n Proto lets a writer place fields anywhere: here the last field's bytes come first."""
    fast = codec._fast
    kind = fast.kinds["taskResults"]
    count = fast.result_pointers
    slots = fast.result_slots
    values = {slots["taskIds"]: struct.pack("<2Q", 11, 12), slots["statuses"]: b"\x00\x01"}
    values[slots["payloadSizes"]] = struct.pack("<2Q", 1, 2)
    order = sorted(values, reverse=True)  # bytes of the highest slot first
    position = 3 + count  # in words, from the start of the segment
    places: dict[int, tuple[int, int]] = {}
    body = b""
    for slot in order:
        data = values[slot]
        places[slot] = (position, len(data))
        padded = data + bytes(-len(data) & 7)
        body += padded
        position += len(padded) // 8
    pointers = []
    for slot in range(count):
        if slot in places:
            at, size = places[slot]
            pointers.append((((at - (4 + slot)) << 2) | 1) | (((size << 3) | 2) << 32))
        else:
            pointers.append(0)
    head = struct.pack(f"<IIQQQ{count}Q", 0, position, (1 << 32) | (1 << 48), kind, count << 48, *pointers)
    header = head + body
    for _ in range(2):
        assert m.decode([header, b"abb"]) == m.TaskResults([11, 12], b"\x00\x01", [b"a", b"bb"])
