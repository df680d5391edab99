"""encode() then decode() gives back an equal message, for every message kind of the protocol and its edge cases.

Normalisations the encoding makes on purpose (and that these tests pin down):
- `keywords=[]` / `names=[]` travel as an empty list and come back as None (None and [] mean the same thing);
- profiling columns of an empty batch are empty, and empty columns come back as None.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.columns import check_u8, pack_u16, pack_u64, unpack_u16, unpack_u64
from scaler.protocol.errors import ProtocolError
from scaler.protocol.frames import ALONE_FROM
from tests.helpers import payload_bytes
from tests.protocol import capnp_codec

U64_MAX = 2**64 - 1
U32_MAX = 2**32 - 1
BIG = [U64_MAX, U64_MAX - 1, 2**63, (m.MAX_ID_PREFIX << m.ID_PREFIX_SHIFT) | m.ID_COUNTER_MASK]
UNICODE = "naïve façade — 日本語 🚀 \u200b\U0010fffd"

# Every message class with the examples that must survive a round trip. Keys are the classes of MESSAGE_NAMES.
EXAMPLES: dict[type, list[Any]] = {
    m.Hello: [
        m.Hello(m.PeerKind.CLIENT, "client-1"),
        m.Hello(m.PeerKind.WORKER, UNICODE, "host.example", 4242, 500, 1000),
        m.Hello(m.PeerKind.WORKER, "", "", U32_MAX, U32_MAX, U32_MAX, protocol_version=U32_MAX),
        m.Hello(m.PeerKind.CLIENT, "old", protocol_version=0),
        m.Hello(m.PeerKind.WORKER, "w", queue_capacity=1, capabilities=["payload=python", UNICODE, "gpu=a100"]),
        m.Hello(m.PeerKind.WORKER, "w", queue_capacity=1, unit=UNICODE),
        m.Hello(m.PeerKind.MANAGER, "slurm", capabilities=["gpu"]),
    ],
    m.Welcome: [
        m.Welcome(1),
        m.Welcome(m.MAX_ID_PREFIX, UNICODE, protected=False, peer_timeout_ms=U32_MAX),
        m.Welcome(7, "s", True, 0, protocol_version=2),
        m.Welcome(8, "s", workers=3, worker_capacity=U64_MAX, workers_stated=True),
        m.Welcome(9, "s", workers=U32_MAX, worker_capacity=5),  # not stated: the numbers travel as they are
        m.Welcome(10, "s", journaled=True),
    ],
    m.Refused: [m.Refused("protocol version 9 is not supported"), m.Refused(UNICODE, U32_MAX), m.Refused("")],
    m.Heartbeat: [
        m.Heartbeat(),
        m.Heartbeat(12.5, U64_MAX, U64_MAX, U32_MAX, U32_MAX, 99.75, U64_MAX, U32_MAX, U32_MAX, U32_MAX),
        m.Heartbeat(cpu_percent=-0.0, processor_cpu_percent=math.inf),
    ],
    m.HeartbeatEcho: [
        m.HeartbeatEcho(),
        m.HeartbeatEcho(U64_MAX),
        m.HeartbeatEcho(workers=0, worker_capacity=0, workers_stated=True),  # stated: no worker may take tasks
        m.HeartbeatEcho(resumed=True, sent=3, recovered=True),
        m.HeartbeatEcho(resumed=True, sent=4, workers=U32_MAX, worker_capacity=U64_MAX, workers_stated=True),
    ],
    m.SubmitTasks: [
        m.SubmitTasks([], [], b"", [], [], None, []),
        m.SubmitTasks([(1 << 40) | 1], [(1 << 40) | 2], b"\x00", [0], [], None, []),
        m.SubmitTasks([5, 6], [9, 9], b"\x01\x02", [2, 1], [0, 77, 0], None, [b"arg0", b"arg2"]),
        m.SubmitTasks([5, 6], [9, 9], b"\x03\x00", [2, 1], [0, 77, 0], ["", "key", UNICODE], [b"a", b""]),
        m.SubmitTasks([5], [9], b"\x00", [2], [0, 0], ["", ""], [b"x", b"y"]),  # keywords present but all positional
        m.SubmitTasks(BIG, BIG, b"\xff" * 4, [0, 0, 1, 0], [U64_MAX], None, []),
        m.SubmitTasks([1], [2], b"\x00", [65535], [0] * 65535, None, [b""] * 65535),
        m.SubmitTasks(
            [5, 6], [9, 9], b"\x00\x00", [1, 0], [0], None, [b"a"], [0, U32_MAX], b"\x00\xff", [-(2**31), 2**31 - 1]
        ),
        m.SubmitTasks([5], [9], b"\x00", [1], [0], ["k"], [b"a"], None, b"\x02", None),  # one option, with keywords
        m.SubmitTasks([5], [9], b"\x00", [0], [], None, [], None, None, [3]),
        # requirements: one for all; one per task by index; an empty requirement; with keywords and options
        m.SubmitTasks([5], [9], b"\x00", [1], [0], None, [b"a"], requirements=[["payload=python"]]),
        m.SubmitTasks(
            [5, 6, 7],
            [9, 9, 9],
            b"\x00\x00\x00",
            [0, 0, 0],
            [],
            None,
            [],
            requirements=[["payload=python"], [], ["payload=python", "gpu", UNICODE]],
            requirement_index=[2, 0, 1],
        ),
        m.SubmitTasks([5], [9], b"\x00", [1], [0], ["k"], [b"a"], [100], None, None, [["gpu"]], [0]),
        m.SubmitTasks([], [], b"", [], [], None, [], requirements=[["x"]]),
        # idempotency keys: alone (no keywords: its general writer all the same), with keywords, options, requirements
        m.SubmitTasks([5, 6], [9, 9], b"\x00\x00", [0, 0], [], None, [], idempotency_keys=["job-7/0", ""]),
        m.SubmitTasks(
            [5], [9], b"\x00", [1], [0], ["k"], [b"a"], [100], None, None, [["gpu"]], None, idempotency_keys=[UNICODE]
        ),
    ],
    m.DispatchTasks: [
        m.DispatchTasks([], [], b"", [], [], None, []),
        m.DispatchTasks([5, 6], [9, 10], b"\x00\x01", [1, 1], [0, 5], ["a", ""], [bytes(range(256))]),
        m.DispatchTasks(BIG, BIG, b"\x00" * 4, [1, 1, 1, 1], BIG, None, []),
        m.DispatchTasks([5, 6], [9, 10], b"\x00\x01", [0, 0], [], None, [], [2000, 0]),
    ],
    m.TaskResults: [
        m.TaskResults([], b"", []),
        m.TaskResults([1, 2, 3, 4, 5], bytes(range(5)), [b"ok", b"err", b"", b"crash", b"failed"]),
        m.TaskResults([6, 7], bytes([5, 6]), [b"timed out", b"over memory"]),
        m.TaskResults([1, 2], b"\x00\x01", [b"r", b"e"], [10, U64_MAX], [0, U64_MAX]),
        m.TaskResults([1], b"\x00", [b"r"], [7], None),
        m.TaskResults([1], b"\x00", [b"r"], None, [7]),
        m.TaskResults(BIG, b"\x00" * 4, [b"\x00" * 100_000, b"", b"x", b"y"]),
    ],
    m.CancelTasks: [m.CancelTasks([]), m.CancelTasks([1]), m.CancelTasks(BIG)],
    m.PutObjects: [
        m.PutObjects([], []),
        m.PutObjects([3], [b"fn"]),
        m.PutObjects([3, 4], [b"fn", b""], ["square", UNICODE]),
        m.PutObjects([3, 4], [b"a", b"b"], ["", ""]),
        m.PutObjects(BIG, [b"1", b"2", b"3", b"4"]),
    ],
    m.FreeObjects: [m.FreeObjects([]), m.FreeObjects(BIG), m.FreeObjects(list(range(1, 10_001)))],
    m.BalanceRequest: [m.BalanceRequest([]), m.BalanceRequest([1, 2, 3]), m.BalanceRequest(BIG)],
    m.BalanceResponse: [m.BalanceResponse([]), m.BalanceResponse([2]), m.BalanceResponse(BIG)],
    m.TasksStarted: [m.TasksStarted([]), m.TasksStarted([2]), m.TasksStarted(BIG)],
    m.TaskOutput: [
        m.TaskOutput([], b"", []),
        m.TaskOutput([2, 3, 4], bytes([m.OUTPUT_STDOUT, m.OUTPUT_STDERR, m.OUTPUT_ERROR]), ["a\n", UNICODE, ""]),
    ],
    m.ManagerReport: [
        m.ManagerReport(),
        m.ManagerReport(
            U32_MAX, U32_MAX, U32_MAX, U32_MAX, U32_MAX, U64_MAX, U64_MAX, [UNICODE, ""], [UNICODE], UNICODE
        ),
    ],
    m.ScaleUnits: [m.ScaleUnits(), m.ScaleUnits(["a-1", UNICODE], ["a-0"], UNICODE), m.ScaleUnits([], ["x"] * 1000)],
    m.Disconnect: [m.Disconnect(), m.Disconnect("bye"), m.Disconnect(UNICODE)],
    m.ShutdownRequest: [m.ShutdownRequest(), m.ShutdownRequest("client.shutdown()"), m.ShutdownRequest(UNICODE)],
    m.Shutdown: [
        m.Shutdown(),
        m.Shutdown("the scheduler received SIGTERM", workers_stay=True),
        m.Shutdown(UNICODE),
    ],
    m.Error: [
        m.Error(m.ErrorCode.MALFORMED, "bad header"),
        m.Error(m.ErrorCode.NOT_CONNECTED, "no session: send hello first", []),
        m.Error(m.ErrorCode.BAD_REQUEST, UNICODE, BIG),
        m.Error(m.ErrorCode.PROTECTED, "protected"),
        m.Error(m.ErrorCode.TOO_LARGE, ""),
    ],
    m.Status: [
        m.Status(),
        m.Status(
            scheduler_name=UNICODE,
            time_us=U64_MAX,
            cpu_percent=3.5,
            rss_bytes=U64_MAX,
            tasks_by_state={"queued": 3, "success": U64_MAX},
            sent={"welcome": 1, "dispatchTasks": 2},
            received={"hello": 2},
            workers=[
                m.WorkerStatus("w1"),
                m.WorkerStatus("w2", capabilities=["payload=json", "lang=ts"]),
                m.WorkerStatus(UNICODE, 1.5, 2, 3.25, 4, 5, 6, 7, U64_MAX, 9, 10, 11, U64_MAX, U32_MAX, U32_MAX),
            ],
            clients=[m.ClientStatus("c1", 1, 2, 3), m.ClientStatus("", U32_MAX, U32_MAX, U64_MAX)],
            protected=False,
            dropped_messages=U64_MAX,
        ),
        m.Status(
            managers=[
                m.ManagerStatus("slurm"),
                m.ManagerStatus(UNICODE, U32_MAX, ["gpu", UNICODE], 1, U32_MAX, 2, 3, 4, U64_MAX, 5, UNICODE, U64_MAX),
            ],
            waiting=[m.WaitingTasks([], 0, ""), m.WaitingTasks(["gpu"], U64_MAX, UNICODE)],
            units_started=U64_MAX,
            units_stopped=1,
            units_failed=2,
            started_us=1_764_000_000_000_000,
            recovered="1 client session, 2,400 tasks, 0 held results",
        ),
    ],
    m.ExplainTasks: [m.ExplainTasks([]), m.ExplainTasks([1, U64_MAX]), m.ExplainTasks(BIG)],
    m.TaskExplanations: [
        m.TaskExplanations([], []),
        m.TaskExplanations([1, U64_MAX], ["", UNICODE]),
    ],
}

CASES = [
    pytest.param(message, id=f"{m.MESSAGE_NAMES[cls]}-{i}")
    for cls, ms in EXAMPLES.items()
    for i, message in enumerate(ms)
]


def roundtrip(message: Any) -> Any:
    frames = m.encode(message)
    assert isinstance(frames[0], bytes)
    return m.decode(frames)


def test_every_message_kind_has_examples() -> None:
    assert set(EXAMPLES) == set(m.MESSAGE_NAMES)
    assert len(set(m.MESSAGE_NAMES.values())) == len(m.MESSAGE_NAMES)


def test_message_names_are_the_capnp_union_members() -> None:
    members = [field.name for field in capnp_codec._schema.Message.schema.node.struct.fields]
    assert sorted(members) == sorted(m.MESSAGE_NAMES.values())
    assert set(codec._ENCODERS) | {"taskResults"} == set(codec._DECODERS) == set(members)  # results: always direct
    assert set(capnp_codec._ENCODERS) == set(capnp_codec._DECODERS) == set(members)


def test_enums_match_the_schema() -> None:
    schema_enums = {
        m.PeerKind: capnp_codec._schema.PeerKind.schema.enumerants,
        m.TaskStatus: capnp_codec._schema.TaskStatus.schema.enumerants,
        m.ErrorCode: capnp_codec._schema.ErrorCode.schema.enumerants,
    }
    for cls, enumerants in schema_enums.items():
        assert len(cls) == len(enumerants), cls
        for name, value in enumerants.items():
            python = {
                "notConnected": "NOT_CONNECTED",
                "badRequest": "BAD_REQUEST",
                "tooLarge": "TOO_LARGE",
                "timedOut": "TIMED_OUT",
                "overMemory": "OVER_MEMORY",
            }
            assert cls[python.get(name, name.upper())] == value, (cls, name)


@pytest.mark.parametrize("message", CASES)
def test_roundtrip(message: Any) -> None:
    decoded = roundtrip(message)
    assert type(decoded) is type(message)
    assert decoded == message


@pytest.mark.parametrize("message", CASES)
def test_payload_frames_layout(message: Any) -> None:
    """Frames after the header carry the payloads back to back, no padding; big payloads travel alone, as the
    very objects given (zero-copy both ways); small ones share frames; empty ones take no frame."""
    frames = m.encode(message)
    payloads = getattr(message, "payloads", [])
    assert b"".join(payload_bytes(f) for f in frames[1:]) == b"".join(bytes(p) for p in payloads)
    assert all(len(f) for f in frames[1:])
    big = [p for p in payloads if len(p) >= ALONE_FROM]
    assert [f for f in frames[1:] if any(f is p for p in big)] == big
    decoded = m.decode(frames)
    for original, got in zip(payloads, getattr(decoded, "payloads", []), strict=True):
        assert bytes(got) == bytes(original)
        if len(original) >= ALONE_FROM:
            assert got is original


def test_payloads_may_be_framed_any_valid_way() -> None:
    """A receiver walks payloadSizes over whatever frames came: one payload per frame, all in one frame, and empty
    frames are all the same to it."""
    message = m.TaskResults([1, 2, 3, 4], b"\0\0\0\0", [b"abc", b"", b"de", b"f"])
    header = m.encode(message)[0]
    for frames in (
        [b"abc", b"de", b"f"],
        [b"abcdef"],
        [b"abcde", b"f"],
        [b"", b"abc", b"", b"def", b""],
        [b"abc", b"", b"", b"de", b"f"],
    ):
        assert m.decode([header, *frames]) == message, frames
    for frames in ([b"ab", b"cdef"], [b"abcdefg"], [b"abcdef", b"g"], [b"abc"], []):
        with pytest.raises(ProtocolError):
            m.decode([header, *frames])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=6), max_size=12), st.data())
def test_payloads_survive_any_grouping_into_frames(payloads: list[bytes], data: Any) -> None:
    message = m.PutObjects(list(range(1, len(payloads) + 1)), list[m.Payload](payloads))
    header = m.encode(message)[0]
    frames: list[bytes] = []
    for payload in payloads:
        if frames and data.draw(st.booleans()):
            frames[-1] += payload
        else:
            frames.append(payload)
    assert m.decode([header, *frames]) == message


def test_subclasses_of_one_struct_stay_apart() -> None:
    """cancelTasks, freeObjects, balanceRequest and balanceResponse share IdList but are different messages."""
    ids = [1, 2, 3]
    decoded = [roundtrip(cls(ids)) for cls in (m.CancelTasks, m.FreeObjects, m.BalanceRequest, m.BalanceResponse)]
    assert [type(d) for d in decoded] == [m.CancelTasks, m.FreeObjects, m.BalanceRequest, m.BalanceResponse]
    assert type(roundtrip(m.SubmitTasks([], [], b"", [], [], None, []))) is m.SubmitTasks
    assert type(roundtrip(m.DispatchTasks([], [], b"", [], [], None, []))) is m.DispatchTasks
    reasons = [roundtrip(cls("r")) for cls in (m.Disconnect, m.ShutdownRequest, m.Shutdown)]
    assert [type(r) for r in reasons] == [m.Disconnect, m.ShutdownRequest, m.Shutdown]


def test_empty_keyword_and_name_lists_mean_none() -> None:
    tasks = roundtrip(m.SubmitTasks([1], [2], b"\x00", [1], [0], [], [b"a"]))
    assert tasks.keywords is None
    objects = roundtrip(m.PutObjects([1], [b"a"], []))
    assert objects.names is None


def test_empty_profiling_columns_mean_none() -> None:
    results = roundtrip(m.TaskResults([], b"", [], [], []))
    assert results.durations_us is None and results.peak_memory is None


def test_memoryview_and_bytearray_payloads_travel() -> None:
    big = bytearray(b"z" * 1_000_000)
    decoded = roundtrip(m.PutObjects([1, 2], [memoryview(big), bytearray(b"b")]))
    assert bytes(decoded.payloads[0]) == bytes(big)
    assert bytes(decoded.payloads[1]) == b"b"


def test_header_is_small_for_big_batches() -> None:
    """Per-task numbers travel as packed columns: the header grows by a few bytes per task, not a struct."""
    n = 10_000
    ids = list(range(1, n + 1))
    frames = m.encode(m.SubmitTasks(ids, ids, bytes(n), [1] * n, [0] * n, None, [b""] * n))
    assert len(frames[0]) < n * (8 + 8 + 1 + 2 + 8 + 8) + 256  # ids, functions, flags, counts, refs, sizes


def test_decode_accepts_memoryviews_as_header() -> None:
    frames = m.encode(m.Hello(m.PeerKind.CLIENT, "c"))
    assert m.decode([memoryview(payload_bytes(frames[0]))]) == m.Hello(m.PeerKind.CLIENT, "c")


# ------------------------------------------------------------------------------------------------ columns
def test_columns_are_little_endian() -> None:
    assert pack_u64([1, U64_MAX]) == b"\x01" + b"\x00" * 7 + b"\xff" * 8
    assert pack_u16([1, 0x0203]) == b"\x01\x00\x03\x02"
    assert unpack_u64(b"\x02" + b"\x00" * 7) == [2]
    assert unpack_u16(b"\x03\x02") == [0x0203]
    assert check_u8(b"\x01\x02", 2, "x") == b"\x01\x02"


def test_column_length_checks() -> None:
    with pytest.raises(ProtocolError):
        unpack_u64(b"\x00" * 7)
    with pytest.raises(ProtocolError):
        unpack_u64(b"\x00" * 16, 1)
    with pytest.raises(ProtocolError):
        unpack_u16(b"\x00" * 3)
    with pytest.raises(ProtocolError):
        check_u8(b"\x00", 2, "flags")


# ------------------------------------------------------------------------------------------------ properties
u64 = st.integers(0, U64_MAX)
u32 = st.integers(0, U32_MAX)
f32 = st.floats(width=32, allow_nan=False)
text = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)
payload = st.binary(max_size=40)
settings_ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def task_batches(draw: Any, cls: type) -> Any:
    n = draw(st.integers(0, 8))
    arg_counts = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    arg_refs = draw(st.lists(st.one_of(st.just(0), u64), min_size=sum(arg_counts), max_size=sum(arg_counts)))
    keywords = draw(st.one_of(st.none(), st.lists(text, min_size=len(arg_refs), max_size=len(arg_refs))))
    if keywords == []:
        keywords = None
    payloads = draw(st.lists(payload, min_size=arg_refs.count(0), max_size=arg_refs.count(0)))
    batch = cls(
        draw(st.lists(u64, min_size=n, max_size=n)),
        draw(st.lists(u64, min_size=n, max_size=n)),
        draw(st.binary(min_size=n, max_size=n)),
        arg_counts,
        arg_refs,
        keywords,
        payloads,
    )
    requirements = draw(st.lists(st.lists(text, max_size=3), max_size=3))
    if requirements:  # empty: none (the codec gives None)
        batch.requirements = requirements
        if n and draw(st.booleans()):  # an empty column reads as None
            batch.requirement_index = draw(st.lists(st.integers(0, len(requirements) - 1), min_size=n, max_size=n))
    if cls is m.SubmitTasks and n and draw(st.booleans()):
        batch.idempotency_keys = draw(st.lists(text, min_size=n, max_size=n))
    return batch


@st.composite
def task_results(draw: Any) -> m.TaskResults:
    n = draw(st.integers(1, 8))
    column = st.lists(u64, min_size=n, max_size=n)
    return m.TaskResults(
        draw(column),
        bytes(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))),
        draw(st.lists(payload, min_size=n, max_size=n)),
        draw(st.one_of(st.none(), column)),
        draw(st.one_of(st.none(), column)),
    )


@st.composite
def put_objects(draw: Any) -> m.PutObjects:
    n = draw(st.integers(0, 8))
    names = draw(st.one_of(st.none(), st.lists(text, min_size=n, max_size=n)))
    return m.PutObjects(
        draw(st.lists(u64, min_size=n, max_size=n)),
        draw(st.lists(payload, min_size=n, max_size=n)),
        names or None,
    )


heartbeats = st.builds(m.Heartbeat, f32, u64, u64, u32, u32, f32, u64, u32, u32)
hellos = st.builds(m.Hello, st.sampled_from(m.PeerKind), text, text, u32, u32, u32, u32)
welcomes = st.builds(m.Welcome, u32, text, st.booleans(), u32, u32, u64, u32, u64, st.booleans(), st.booleans())
errors = st.builds(m.Error, st.sampled_from(m.ErrorCode), text, st.lists(u64, max_size=5))
id_messages = st.builds(
    lambda cls, ids: cls(ids),
    st.sampled_from([m.CancelTasks, m.FreeObjects, m.BalanceRequest, m.BalanceResponse, m.ExplainTasks]),
    st.lists(u64, max_size=20),
)
reasons = st.builds(lambda cls, r: cls(r), st.sampled_from([m.Disconnect, m.ShutdownRequest, m.Shutdown]), text)
counters = st.dictionaries(text, u64, max_size=4)
statuses = st.builds(
    m.Status,
    text,
    u64,
    f32,
    u64,
    counters,
    counters,
    counters,
    st.lists(st.builds(m.WorkerStatus, text, f32, u64, f32, u64, u32, u32, u32, u64, u32, u32, u32, u64), max_size=3),
    st.lists(st.builds(m.ClientStatus, text, u32, u32, u64, u32), max_size=3),
    st.booleans(),
    u64,
)

any_message = st.one_of(
    hellos,
    welcomes,
    st.builds(m.Refused, text, u32),
    heartbeats,
    st.builds(m.HeartbeatEcho, u64, workers=u32, worker_capacity=u64, workers_stated=st.booleans()),
    task_batches(m.SubmitTasks),
    task_batches(m.DispatchTasks),
    task_results(),
    id_messages,
    put_objects(),
    reasons,
    errors,
    statuses,
)


@settings_
@given(any_message)
def test_roundtrip_property(message: Any) -> None:
    assert roundtrip(message) == message


@settings_
@given(any_message)
def test_encoding_is_deterministic(message: Any) -> None:
    a, b = m.encode(message), m.encode(dataclasses.replace(message))
    assert a[0] == b[0]
