"""Scaler's codec (scaler.protocol.codec, pure Python) against the oracle on pycapnp (tests/protocol/capnp_codec.py):
the golden bytes, the same headers for every example and random message, the same records back, and ProtocolError
(never another exception) for everything test_malformed.py feeds the codec; where pycapnp accepts a mutated header,
the codec reads the same message from it.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.errors import ProtocolError, UnexpectedMessage
from tests.helpers import payload_bytes
from tests.protocol import capnp_codec, make_layout
from tests.protocol.make_golden import golden_messages
from tests.protocol.test_golden import golden_frames
from tests.protocol.test_malformed import (
    BAD_COLUMNS,
    GARBAGE,
    PAYLOAD_MISMATCHES,
    _status_with_empty_struct_list,
    mutated_headers,
    raw,
)
from tests.protocol.test_roundtrip import CASES, any_message

GOLDEN = golden_messages()
fuzz = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def as_bytes(frames: list[Any]) -> list[bytes]:
    return [bytes(f) for f in frames]


def same_frames(message: Any) -> None:
    """The codec's frames are pycapnp's, byte for byte, where pycapnp writes one segment. pycapnp writes a header of
    more than 8 KiB in several segments; the codec always writes one: equally valid, and pycapnp reads it back to
    the same message."""
    pure, capnp = as_bytes(codec.encode(message)), as_bytes(capnp_codec.encode(message))
    assert pure[1:] == capnp[1:]
    if capnp[0][:4] == bytes(4):
        assert pure[0] == capnp[0]
    else:
        assert pure[0][:4] == bytes(4)
    assert capnp_codec.decode(pure) == codec.decode(capnp) == codec.decode(pure)


def same_outcome(frames: list[Any]) -> None:
    """Both codecs give the same message, or both raise ProtocolError."""
    try:
        expected = capnp_codec.decode(frames)
    except ProtocolError:
        with pytest.raises(ProtocolError):
            codec.decode(frames)
        return
    assert codec.decode(frames) == expected


def test_layout_is_current() -> None:
    assert make_layout.main(["--check"]) == 0


# ------------------------------------------------------------------------------------------------ golden
@pytest.mark.parametrize("name", list(GOLDEN))
def test_encode_gives_the_golden_bytes(name: str) -> None:
    assert as_bytes(codec.encode(GOLDEN[name])) == golden_frames(name)


@pytest.mark.parametrize("name", list(GOLDEN))
def test_decode_of_golden_bytes_gives_the_message(name: str) -> None:
    assert codec.decode(golden_frames(name)) == GOLDEN[name]


# ------------------------------------------------------------------------------------------------ round trips
@pytest.mark.parametrize("message", CASES)
def test_the_same_frames_as_pycapnp(message: Any) -> None:
    same_frames(message)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_message)
def test_the_same_frames_as_pycapnp_property(message: Any) -> None:
    same_frames(message)
    assert codec.decode(codec.encode(message)) == message


def test_multi_segment_headers_decode() -> None:
    """pycapnp writes big headers in several segments, with far pointers; the pure decoder reads them."""
    names = [f"object-{i}" for i in range(3000)]
    message = m.PutObjects(list(range(1, 3001)), [b"x"] * 3000, names)
    frames = capnp_codec.encode(message)
    assert int.from_bytes(payload_bytes(frames[0])[:4], "little") > 0
    assert codec.decode(frames) == message
    batch = m.SubmitTasks(list(range(1, 2001)), [7] * 2000, bytes(2000), [1] * 2000, [9] * 2000, ["k"] * 2000, [])
    assert codec.decode(capnp_codec.encode(batch)) == batch


def test_accept() -> None:
    frames = codec.encode(GOLDEN["dispatchTasks"])
    with pytest.raises(UnexpectedMessage):
        codec.decode(frames, m.ACCEPTED_BY_SCHEDULER)
    assert codec.decode(frames, m.ACCEPTED_BY_WORKER) == GOLDEN["dispatchTasks"]


# ------------------------------------------------------------------------------------------------ malformed
def rejects(frames: list[Any]) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        codec.decode(frames)
    return info.value


def test_no_frames() -> None:
    rejects([])


@pytest.mark.parametrize("header", GARBAGE, ids=range(len(GARBAGE)))
def test_garbage_header(header: bytes) -> None:
    rejects([header])
    rejects([header, b"payload"])


@pytest.mark.parametrize("name", list(GOLDEN))
def test_truncated_headers(name: str) -> None:
    header, *payloads = golden_frames(name)
    for cut in range(len(header)):
        rejects([header[:cut], *payloads])


@pytest.mark.parametrize(
    "header",
    [
        *(raw("hello", protocolVersion=1, kind=kind) for kind in (4, 7, 0xFFFF)),
        *(raw("error", code=code, message="x") for code in (5, 9, 0xFFFF)),
    ],
)
def test_unknown_enum_values(header: bytes) -> None:
    rejects([header])


@pytest.mark.parametrize("discriminant", [22, 255, 0xFFFF])
def test_unknown_message_kind(discriminant: int) -> None:
    header = bytearray(golden_frames("hello")[0])
    header[16:18] = discriminant.to_bytes(2, "little")
    rejects([bytes(header)])


@pytest.mark.parametrize("status", [7, 255])
def test_unknown_task_status(status: int) -> None:
    header = raw("taskResults", taskIds=bytes(16), statuses=bytes([0, status]), payloadSizes=bytes(16))
    assert "status" in str(rejects([header]))


@pytest.mark.parametrize("case", list(BAD_COLUMNS))
def test_wrong_column_lengths(case: str) -> None:
    name, fields, frames, word = BAD_COLUMNS[case]
    assert word in str(rejects([raw(name, **fields), *frames]))


@pytest.mark.parametrize("case", list(PAYLOAD_MISMATCHES))
def test_payload_mismatch(case: str) -> None:
    error = rejects(PAYLOAD_MISMATCHES[case])
    assert "payload" in str(error) or "frame" in str(error)


def test_lists_of_empty_structs() -> None:
    status = codec.decode([_status_with_empty_struct_list(3)])
    assert isinstance(status, m.Status) and status.workers == [m.WorkerStatus("")] * 3
    rejects([_status_with_empty_struct_list(1 << 13)])  # a tiny header claiming a huge list


@fuzz
@given(st.lists(st.binary(max_size=200), min_size=1, max_size=4))
@example([b"\x00" * 16])
def test_fuzz_random_frames(frames: list[bytes]) -> None:
    same_outcome(frames)


@fuzz
@given(st.binary(min_size=0, max_size=64))
def test_fuzz_random_single_segment_bodies(body: bytes) -> None:
    header = (0).to_bytes(4, "little") + (len(body) // 8).to_bytes(4, "little") + body
    same_outcome([header])
    same_outcome([header, b"x"])


@fuzz
@given(mutated_headers())
def test_fuzz_mutated_valid_headers(frames: list[bytes]) -> None:
    same_outcome(frames)


def test_an_empty_struct_may_point_past_its_segment_as_pycapnp_reads_it() -> None:
    """Found by test_fuzz_mutated_valid_headers: a zero-sized struct pointer whose offset lies past the segment is
    read by pycapnp (nothing is read from it); the pure reader refused it."""
    header = bytes.fromhex(
        "0000000007000000000100000000000000000000010001000b000000000000000000000000000100"
        "01000000c20000000c000000000300000d000000000300000e00000000030000"
    )
    same_outcome([header])


PURE_MODULES = [
    "codec.py",
    "fastpath.py",
    "wire.py",
    "layout.py",
    "fieldnames.py",
    "columns.py",
    "frames.py",
    "errors.py",
]


@pytest.mark.parametrize("module", PURE_MODULES)
def test_the_pure_codec_is_python_3_9_syntax(module: str) -> None:
    """Debian's pypy3 is Python 3.9: no match statements, no parenthesised context managers (what the parser
    checks; run-time features such as dataclass(slots=True) are checked by running it there)."""
    path = Path(codec.__file__).parent / module
    ast.parse(path.read_text(encoding="utf-8"), feature_version=(3, 9))
    assert "capnp" not in {n.split(".")[0] for n in _imports(path)}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    return names | {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}


@pytest.mark.parametrize("element_size", [0, 1, 2, 3, 4, 5, 6])
def test_a_list_of_primitives_where_structs_are_expected_reads_as_pycapnp_reads_it(element_size: int) -> None:
    """Cap'n Proto reads a List(T) where a list of structs is expected (a schema may upgrade one to the other): each
    element is a struct whose data section is the element (a pointer: its one pointer; bits: refused). Found by the
    fuzz test above: a status whose first struct list pointer (word 16, tasksByState) says 4 elements of another
    size."""
    header = bytearray(golden_frames("status")[0])
    assert header[140] == (4 << 3) | 7  # 4 words of Counter structs
    header[140] = (4 << 3) | element_size
    same_outcome([bytes(header)])


# ------------------------------------------------------------------------------------------------ found by the fuzz
REGRESSIONS = Path(__file__).resolve().parent / "regressions"


@pytest.mark.parametrize("name", sorted(p.name for p in REGRESSIONS.glob("*.bin")))
def test_headers_the_fuzz_found_decode_as_pycapnp_decodes_them(name: str) -> None:
    """status-fewer-pointers.bin: a mutated `status` whose struct holds fewer pointers than the schema's. The absent
    list fields are empty lists, as for any Cap'n Proto reader; the codec read them as None and refused the message."""
    same_outcome([(REGRESSIONS / name).read_bytes()])
