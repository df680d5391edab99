"""decode() of anything that is not a valid message raises ProtocolError, and nothing else.

The scheduler decodes every frame any peer sends (before it knows who the peer is), so decode() is its first
line of defence: garbage, truncated headers, columns of the wrong length, payload frames that do not match the
header, unknown enum values must all end in ProtocolError, which the shell turns into an `error malformed` reply.
"""

from __future__ import annotations

import struct
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.columns import pack_u16, pack_u64
from scaler.protocol.errors import ProtocolError
from tests.helpers import encoded
from tests.protocol import capnp_codec
from tests.protocol.make_golden import golden_messages

GOLDEN = {name: encoded(message) for name, message in golden_messages().items()}


def raw(name: str, **fields: Any) -> bytes:
    """A header with the union member `name` and its fields set as given, bypassing every check of encode()."""
    root = capnp_codec._schema.Message.new_message()
    body = root.init(name)
    for key, value in fields.items():
        setattr(body, key, value)
    header: bytes = root.to_bytes()
    return header


def rejects(frames: list[Any]) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        m.decode(frames)
    return info.value


def decode_or_protocol_error(frames: list[Any]) -> None:
    """What decode() may do with arbitrary input: give a message, or raise ProtocolError."""
    try:
        message = m.decode(frames)
    except ProtocolError:
        return
    assert type(message) in m.MESSAGE_NAMES


# ------------------------------------------------------------------------------------------------ garbage
GARBAGE = [
    b"",
    b"\x00",
    b"abc",
    b"\x00" * 7,
    b"\x00" * 8,  # one empty segment: no root pointer
    b"\x00" * 16,
    b"\xff" * 64,
    b"hello, scheduler",
    struct.pack("<II", 0xFFFFFFFF, 1) + b"\x00" * 8,  # absurd segment count
    struct.pack("<II", 0, 0xFFFFFFFF) + b"\x00" * 8,  # segment larger than the frame
    struct.pack("<II", 1, 1) + b"\x00" * 8,  # two segments declared, table truncated
    struct.pack("<II", 0, 1) + struct.pack("<II", 0x7FFFFFFC, 0x00010001),  # root pointer far out of bounds
    struct.pack("<II", 0, 2) + struct.pack("<II", 1, 0x00000008) + b"\x00" * 8,  # root is a list, not a struct
    struct.pack("<II", 0, 2) + struct.pack("<II", 2, 0) + b"\x00" * 8,  # root is a far pointer to nowhere
    struct.pack("<II", 0, 1) + struct.pack("<II", 3, 0),  # root is a capability pointer
    GOLDEN["hello"][0] + b"\x00",  # not a whole number of words
]


def test_no_frames() -> None:
    rejects([])


@pytest.mark.parametrize("header", GARBAGE, ids=range(len(GARBAGE)))
def test_garbage_header(header: bytes) -> None:
    rejects([header])
    rejects([header, b"payload"])


@pytest.mark.parametrize("name", list(GOLDEN))
def test_truncated_headers(name: str) -> None:
    header = GOLDEN[name][0]
    for cut in range(len(header)):
        rejects([header[:cut], *GOLDEN[name][1:]])


@pytest.mark.parametrize("discriminant", [18, 19, 255, 0x7FFF, 0xFFFF])
def test_unknown_message_kind(discriminant: int) -> None:
    header = bytearray(GOLDEN["hello"][0])
    # segment table (8 bytes), root pointer (8 bytes), then the Message struct's data word: the union tag.
    assert header[16:18] == b"\x00\x00"
    header[16:18] = discriminant.to_bytes(2, "little")
    rejects([bytes(header)])


@pytest.mark.parametrize("kind", [4, 7, 0xFFFF])
def test_unknown_peer_kind(kind: int) -> None:
    rejects([raw("hello", protocolVersion=1, kind=kind)])


@pytest.mark.parametrize("code", [5, 9, 0xFFFF])
def test_unknown_error_code(code: int) -> None:
    rejects([raw("error", code=code, message="x")])


@pytest.mark.parametrize("status", [7, 8, 127, 255])
def test_unknown_task_status(status: int) -> None:
    header = raw("taskResults", taskIds=pack_u64([1, 2]), statuses=bytes([0, status]), payloadSizes=pack_u64([1, 1]))
    error = rejects([header, b"ab"])
    assert "status" in str(error)


def test_wrong_pointer_kind_in_a_field() -> None:
    """A Data column whose pointer is a struct pointer instead of a byte list: not a message."""
    header = bytearray(raw("submitTasks", taskIds=pack_u64([1])))
    for offset in range(16, len(header) - 8, 8):
        word = int.from_bytes(header[offset : offset + 8], "little")
        if word & 3 == 1 and (word >> 32) & 7 == 2:  # a list pointer with byte-sized elements: taskIds
            header[offset : offset + 8] = (word & ~3).to_bytes(8, "little")  # the same bits as a struct pointer
            break
    else:
        pytest.fail("no byte-list pointer found")
    rejects([bytes(header)])


# ------------------------------------------------------------------------------------------------ columns
ONE = pack_u64([1])
TWO = pack_u64([1, 2])


def task_fields(n: int = 1, refs: list[int] | None = None, **overrides: Any) -> dict[str, Any]:
    """The fields of a well-formed batch of n tasks (one argument each, or `refs` for a single task), sizes
    for one-byte inline payloads; `overrides` then break one thing."""
    refs = [0] * n if refs is None else refs
    counts = [1] * n if n != 1 else [len(refs)]
    fields = {
        "taskIds": pack_u64(range(1, n + 1)),
        "functionIds": pack_u64([9] * n),
        "flags": bytes(n),
        "argCounts": pack_u16(counts),
        "argRefs": pack_u64(refs),
        "payloadSizes": pack_u64([1] * refs.count(0)),
    }
    fields.update(overrides)
    return fields


# case -> (message kind, fields, frames after the header, a word the error must mention)
BAD_COLUMNS: dict[str, tuple[str, dict[str, Any], list[bytes], str]] = {
    "u64 column not a whole number of values": ("submitTasks", task_fields(taskIds=b"\1" * 7), [b"p"], "taskIds"),
    "functionIds shorter than taskIds": ("submitTasks", task_fields(2, functionIds=ONE), [b"pp"], "functionIds"),
    "functionIds longer than taskIds": ("dispatchTasks", task_fields(1, functionIds=TWO), [b"p"], "functionIds"),
    "flags shorter than taskIds": ("submitTasks", task_fields(2, flags=b"\0"), [b"pp"], "flags"),
    "flags longer than taskIds": ("dispatchTasks", task_fields(1, flags=b"\0\0"), [b"p"], "flags"),
    "argCounts missing": ("submitTasks", task_fields(1, argCounts=b""), [b"p"], "argCounts"),
    "argCounts odd length": ("submitTasks", task_fields(1, argCounts=b"\1\0\0"), [b"p"], "argCounts"),
    "argRefs fewer than argCounts say": (
        "submitTasks",
        task_fields(1, refs=[0], argCounts=pack_u16([2])),
        [b"p"],
        "argRefs",
    ),
    "argRefs more than argCounts say": (
        "dispatchTasks",
        task_fields(1, refs=[0, 0], argCounts=pack_u16([1])),
        [b"pp"],
        "argRefs",
    ),
    "argRefs not whole values": ("submitTasks", task_fields(1, refs=[], argRefs=b"\0" * 4), [], "argRefs"),
    "argRefs with no task": ("submitTasks", task_fields(0, argRefs=ONE), [], "argRefs"),
    "keywords fewer than arguments": ("submitTasks", task_fields(1, refs=[0, 0], keywords=["a"]), [b"pp"], "keywords"),
    "keywords with no argument": ("submitTasks", task_fields(1, refs=[], keywords=["a"]), [], "keywords"),
    "requirementIndex shorter than taskIds": (
        "submitTasks",
        task_fields(2, requirements=[{"capabilities": ["a"]}], requirementIndex=pack_u16([0])),
        [b"pp"],
        "requirementIndex",
    ),
    "requirementIndex odd length": (
        "submitTasks",
        task_fields(1, requirements=[{"capabilities": ["a"]}], requirementIndex=b"\0\0\0"),
        [b"p"],
        "requirementIndex",
    ),
    "requirementIndex past the requirements": (
        "submitTasks",
        task_fields(2, requirements=[{"capabilities": ["a"]}], requirementIndex=pack_u16([0, 1])),
        [b"pp"],
        "requirementIndex",
    ),
    "requirementIndex without requirements": (
        "dispatchTasks",
        task_fields(1, requirementIndex=pack_u16([0])),
        [b"p"],
        "requirementIndex",
    ),
    "idempotencyKeys fewer than tasks": (
        "submitTasks",
        task_fields(2, idempotencyKeys=["k"]),
        [b"pp"],
        "idempotencyKeys",
    ),
    "idempotencyKeys more than tasks": (
        "submitTasks",
        task_fields(1, idempotencyKeys=["a", "b"]),
        [b"p"],
        "idempotencyKeys",
    ),
    "statuses shorter than taskIds": (
        "taskResults",
        {"taskIds": TWO, "statuses": b"\0", "payloadSizes": pack_u64([0, 0])},
        [],
        "statuses",
    ),
    "statuses longer than taskIds": (
        "taskResults",
        {"taskIds": ONE, "statuses": b"\0\0", "payloadSizes": pack_u64([0])},
        [],
        "statuses",
    ),
    "durationsUs shorter than taskIds": (
        "taskResults",
        {"taskIds": TWO, "statuses": b"\0\0", "durationsUs": ONE, "payloadSizes": pack_u64([0, 0])},
        [],
        "durationsUs",
    ),
    "cpuTimesUs shorter than taskIds": (
        "taskResults",
        {"taskIds": TWO, "statuses": b"\0\0", "cpuTimesUs": ONE, "payloadSizes": pack_u64([0, 0])},
        [],
        "cpuTimesUs",
    ),
    "peakMemory longer than taskIds": (
        "taskResults",
        {"taskIds": ONE, "statuses": b"\0", "peakMemory": TWO, "payloadSizes": pack_u64([0])},
        [],
        "peakMemory",
    ),
    "durationsUs not whole values": (
        "taskResults",
        {"taskIds": ONE, "statuses": b"\0", "durationsUs": b"\1", "payloadSizes": pack_u64([0])},
        [],
        "durationsUs",
    ),
    "object names fewer than objects": (
        "putObjects",
        {"objectIds": TWO, "names": ["a"], "payloadSizes": pack_u64([1, 1])},
        [b"pp"],
        "names",
    ),
    "object names more than objects": (
        "putObjects",
        {"objectIds": ONE, "names": ["a", "b"], "payloadSizes": pack_u64([1])},
        [b"p"],
        "names",
    ),
    "objectIds not whole values": ("putObjects", {"objectIds": b"\1\2\3"}, [], "objectIds"),
    "payloadSizes not whole values": ("putObjects", {"objectIds": ONE, "payloadSizes": b"\1"}, [b"p"], "payloadSizes"),
    "cancel ids not whole values": ("cancelTasks", {"ids": b"\1" * 9}, [], "ids"),
    "free ids not whole values": ("freeObjects", {"ids": b"\1"}, [], "ids"),
    "balance request ids not whole values": ("balanceRequest", {"ids": b"\1" * 15}, [], "ids"),
    "balance response ids not whole values": ("balanceResponse", {"ids": b"\1" * 4}, [], "ids"),
    "error ids not whole values": ("error", {"code": "badRequest", "ids": b"\1" * 12}, [], "ids"),
}


@pytest.mark.parametrize("case", list(BAD_COLUMNS))
def test_wrong_column_lengths(case: str) -> None:
    name, fields, frames, word = BAD_COLUMNS[case]
    error = rejects([raw(name, **fields), *frames])
    assert word in str(error)


# ------------------------------------------------------------------------------------------------ payloads
def results_header(sizes: list[int]) -> bytes:
    n = len(sizes)
    return raw("taskResults", taskIds=pack_u64(range(1, n + 1)), statuses=bytes(n), payloadSizes=pack_u64(sizes))


# case -> frames (header first) whose payloads do not match the header
PAYLOAD_MISMATCHES: dict[str, list[bytes]] = {
    "submit: an inline argument without its payload": [
        raw("submitTasks", **task_fields(1, refs=[0, 0], payloadSizes=ONE)),
        b"p",
    ],
    "submit: a payload without an inline argument": [
        raw("submitTasks", **task_fields(1, refs=[5], payloadSizes=ONE)),
        b"p",
    ],
    "submit: no payloadSizes at all": [raw("submitTasks", **task_fields(1, payloadSizes=b"")), b"p"],
    "submit: frames without payloadSizes": [raw("submitTasks", **task_fields(1, refs=[5])), b"p"],
    "dispatch: an inline argument without a frame": [raw("dispatchTasks", **task_fields(1))],
    "dispatch: a frame too many": [raw("dispatchTasks", **task_fields(1)), b"p", b"q"],
    "results: fewer sizes than results": [
        raw("taskResults", taskIds=TWO, statuses=b"\0\0", payloadSizes=pack_u64([1])),
        b"p",
    ],
    "results: more sizes than results": [
        raw("taskResults", taskIds=ONE, statuses=b"\0", payloadSizes=pack_u64([1, 1])),
        b"pq",
    ],
    "results: sizes add up to more than the frames": [results_header([3, 3]), b"abcde"],
    "results: sizes add up to less than the frames": [results_header([3, 3]), b"abcdefg"],
    "results: a payload spanning two frames": [results_header([2, 2]), b"abc", b"d"],
    "results: a frame left over": [results_header([3]), b"abc", b"d"],
    "results: a payload bigger than any frame": [results_header([2**64 - 1]), b"abc"],
    "results: frames with an empty batch": [raw("taskResults"), b"p"],
    "results: frames for empty payloads": [results_header([0, 0]), b"p"],
    "putObjects: an object without its payload": [raw("putObjects", objectIds=TWO, payloadSizes=ONE), b"p"],
    "putObjects: a frame too many": [raw("putObjects", objectIds=ONE, payloadSizes=ONE), b"p", b"q"],
    "hello with a frame": [raw("hello", protocolVersion=1), b"p"],
    "welcome with a frame": [raw("welcome", protocolVersion=1, idPrefix=1), b"p"],
    "heartbeat with a frame": [raw("heartbeat"), b"p"],
    "cancelTasks with a frame": [raw("cancelTasks", ids=ONE), b"p"],
    "freeObjects with a frame": [raw("freeObjects", ids=ONE), b"p"],
    "balanceRequest with a frame": [raw("balanceRequest", ids=ONE), b"p"],
    "balanceResponse with frames": [raw("balanceResponse", ids=ONE), b"p", b"q"],
}


@pytest.mark.parametrize("case", list(PAYLOAD_MISMATCHES))
def test_payload_mismatch(case: str) -> None:
    error = rejects(PAYLOAD_MISMATCHES[case])
    assert "payload" in str(error) or "frame" in str(error)


def test_the_same_headers_decode_with_the_right_frames() -> None:
    """The faults above are in the frames, not in these headers."""
    m.decode([raw("submitTasks", **task_fields(1, refs=[0, 0])), b"pq"])
    m.decode([raw("dispatchTasks", **task_fields(1)), b"p"])
    m.decode([results_header([3, 3]), b"abc", b"def"])
    m.decode([results_header([3, 3]), b"abcdef"])
    m.decode([results_header([0, 0])])
    m.decode([results_header([0, 0]), b""])  # an empty frame carries nothing, harmlessly
    m.decode([raw("putObjects", objectIds=TWO, payloadSizes=pack_u64([1, 1])), b"p", b"q"])


PAYLOADLESS_LENIENT = ["refused", "heartbeatEcho", "disconnect", "shutdownRequest", "shutdown", "error", "status"]


@pytest.mark.parametrize("name", PAYLOADLESS_LENIENT)
def test_payloadless_messages_reject_payload_frames(name: str) -> None:
    rejects([GOLDEN[name][0], b"unexpected"])


def test_golden_messages_decode() -> None:
    for frames in GOLDEN.values():
        m.decode(frames)


# ------------------------------------------------------------------------------------------------ amplification
def _status_with_empty_struct_list(count: int, pointer_index: int = 4) -> bytes:
    """A ~120-byte status header whose `workers` list claims `count` zero-sized elements (a Cap'n Proto list of
    structs may declare elements with no data and no pointers: they cost no bytes on the wire)."""
    node = capnp_codec._schema.Status.schema.node.struct
    data_words, pointer_count = node.dataWordCount, node.pointerCount
    words = [
        struct.pack("<IHH", 0, 1, 1),  # root: Message struct right after, 1 data word, 1 pointer
        struct.pack("<HHI", 17, 0, 0),  # union tag 17 = status
        struct.pack("<IHH", 0, data_words, pointer_count),  # -> Status right after
        *([b"\0" * 8] * data_words),
    ]
    pointers = [b"\0" * 8] * pointer_count
    here = len(words) + pointer_index
    tag = len(words) + pointer_count
    pointers[pointer_index] = struct.pack("<II", ((tag - here - 1) << 2) | 1, 7)  # inline-composite list, 0 words
    words += pointers
    words.append(struct.pack("<IHH", count << 2, 0, 0))  # list tag: `count` elements of 0 data, 0 pointers
    segment = b"".join(words)
    return struct.pack("<II", 0, len(segment) // 8) + segment


def test_empty_struct_list_header_is_well_formed() -> None:
    status = m.decode([_status_with_empty_struct_list(3)])
    assert isinstance(status, m.Status)
    assert status.workers == [m.WorkerStatus(""), m.WorkerStatus(""), m.WorkerStatus("")]


def test_tiny_header_cannot_claim_huge_lists() -> None:
    header = _status_with_empty_struct_list(1 << 13)
    started = time.perf_counter()
    with pytest.raises(ProtocolError):
        m.decode([header])
    # the point: refused before any work per claimed element (that is well under 1 ms; 1 s is a generous bound)
    assert time.perf_counter() - started < 1.0


# ------------------------------------------------------------------------------------------------ fuzzing
fuzz = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@fuzz
@given(st.lists(st.binary(max_size=200), min_size=1, max_size=4))
@example([b"\x00" * 8 + b"\x00" * 8])
def test_fuzz_random_frames(frames: list[bytes]) -> None:
    decode_or_protocol_error(frames)


@fuzz
@given(st.binary(min_size=0, max_size=64).map(lambda body: struct.pack("<II", 0, len(body) // 8) + body))
def test_fuzz_random_single_segment_bodies(header: bytes) -> None:
    """Random words behind a plausible segment table: reaches the pointer-following code, not just the framing."""
    decode_or_protocol_error([header])
    decode_or_protocol_error([header, b"x"])


@st.composite
def mutated_headers(draw: Any) -> list[bytes]:
    name = draw(st.sampled_from(sorted(GOLDEN)))
    frames = [bytes(f) for f in GOLDEN[name]]
    header = bytearray(frames[0])
    for _ in range(draw(st.integers(1, 6))):
        action = draw(st.sampled_from(["flip", "set", "word", "truncate", "insert", "delete"]))
        if not header:
            break
        at = draw(st.integers(0, len(header) - 1))
        if action == "flip":
            header[at] ^= 1 << draw(st.integers(0, 7))
        elif action == "set":
            header[at] = draw(st.integers(0, 255))
        elif action == "word":
            start = at - at % 8
            header[start : start + 8] = draw(st.binary(min_size=8, max_size=8))
        elif action == "truncate":
            del header[at:]
        elif action == "insert":
            header[at:at] = draw(st.binary(min_size=1, max_size=16))
        else:
            del header[at : at + draw(st.integers(1, 16))]
    payloads = frames[1:]
    change = draw(st.integers(-1, 1))
    if change < 0 and payloads:
        payloads = payloads[:-1]
    elif change > 0:
        payloads = [*payloads, b"extra"]
    return [bytes(header), *payloads]


@fuzz
@given(mutated_headers())
def test_fuzz_mutated_valid_headers(frames: list[bytes]) -> None:
    assume(frames[0] not in {bytes(f[0]) for f in GOLDEN.values()})
    decode_or_protocol_error(frames)


@pytest.mark.parametrize("name", ["submitTasks", "dispatchTasks", "taskResults"])
def test_a_known_shape_cut_short_is_refused(name: str) -> None:
    """The fast reader remembers where the fields of each shape lie; a shorter header of the same shape, even
    with a segment size that agrees with its length, must not be read past its end."""
    header, *payloads = GOLDEN[name]
    m.decode([header, *payloads])  # remember this shape
    for words in range(3, len(header) // 8 - 1):
        short = struct.pack("<II", 0, words) + bytes(header)[8 : 8 + 8 * words]
        rejects([short, *payloads])


def test_the_fast_reader_forgets_shapes_beyond_its_bound() -> None:
    """Hostile peers sending many shapes cost a bounded memory."""
    fast = codec._fast
    for count in range(1, 5000):
        message = m.TaskResults(
            list(range(1, count % 300 + 2)), bytes(count % 300 + 1), [b"x" * (count % 7)] * (count % 300 + 1)
        )
        assert m.decode(m.encode(message)) == message
    assert len(fast._spans) <= 4096
