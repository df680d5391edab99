"""map() pickles a task's one argument of a kind that is never big (an int, a float...) without calling the serializer
(Client._encode_items, ADR 0020): it must give what the general encoding (_encode_arguments, as submit uses) and the
serializer give, and go through them for everything else."""

from __future__ import annotations

import math
import pickle
import threading
from typing import Any

import pytest

from scaler import Client, Serializer
from scaler.client.object_reference import ObjectReference
from scaler.errors import PayloadTooLargeError
from scaler.serializer import DEFAULT_SERIALIZER

VALUES: list[Any] = [
    0,
    -1,
    7,
    2**64 + 3,
    -(2**200),
    True,
    False,
    None,
    0.0,
    -0.0,
    1.5,
    math.inf,
    -math.inf,
    1e-310,
    complex(1, -2),
    "text",
    b"bytes",
    bytearray(b"ba"),
    (1, 2),
    [3, "x"],
    {"k": 1},
    frozenset({1}),
]


def echo(*args: Any) -> tuple[Any, ...]:
    return args


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same type (1 == 1.0 == True would hide a wrong kind); -0.0 and 0.0 told apart."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return math.copysign(1.0, a) == math.copysign(1.0, b) and (a == b or (math.isnan(a) and math.isnan(b)))
    return bool(a == b)


def test_map_gives_each_kind_back_as_it_was_given(client: Client) -> None:
    items = [(value,) for value in VALUES] + [(value, value) for value in VALUES] + [(math.nan,)]
    results = client.map(echo, items)
    assert len(results) == len(items)
    for item, result in zip(items, results):
        assert len(result) == len(item)
        assert all(same(a, b) for a, b in zip(item, result)), (item, result)


def test_map_encodes_as_submit_does(client: Client) -> None:
    ref = client.send_object(41)
    items: list[tuple[Any, ...]] = [(value,) for value in VALUES] + [(1, 2.0), (ref,), (ref, 3), ()]
    encoded = list(client._encode_items(echo, items))
    general = [client._encode_arguments(echo, item, {}) for item in items]
    assert [refs for refs, _ in encoded] == [refs for refs, _, _ in general]
    assert [payloads for _, payloads in encoded] == [payloads for _, _, payloads in general]
    # and what the serializer itself gives
    expected = [
        tuple(DEFAULT_SERIALIZER.serialize(v) for v in item if not isinstance(v, ObjectReference)) for item in items
    ]
    assert [payloads for _, payloads in encoded] == expected
    submitted = [client._encode_arguments(echo, (value,), {"k": value}) for value in VALUES]
    assert [payloads for _, _, payloads in submitted] == [
        (DEFAULT_SERIALIZER.serialize(value),) * 2 for value in VALUES
    ]
    assert client.map(echo, [(ref, 1)]) == [(41, 1)]
    assert isinstance(ref, ObjectReference)


class CountingSerializer(Serializer):
    calls = 0
    lock = threading.Lock()

    @staticmethod
    def serialize(obj: Any) -> bytes:
        with CountingSerializer.lock:
            CountingSerializer.calls += 1
        return b"C" + pickle.dumps(obj)

    @staticmethod
    def deserialize(payload: bytes) -> Any:
        assert payload[:1] == b"C"
        return pickle.loads(payload[1:])


def test_a_custom_serializer_sees_every_argument(cluster: Any) -> None:
    with Client(address=cluster.address, serializer=CountingSerializer(), timeout_seconds=15) as client:
        before = CountingSerializer.calls
        assert client.map(abs, [(-1,), (-2.5,)]) == [1, 2.5]
        # the function once, each argument once (results are serialized in the processors, other processes)
        assert CountingSerializer.calls - before == 3


def test_a_small_kind_past_the_payload_limit_is_refused_by_name(client: Client) -> None:
    limit = client._max_payload
    client._max_payload = 300  # as a scheduler started with --max-payload-bytes 300 would tell it
    try:
        with pytest.raises(PayloadTooLargeError, match="argument 0 of echo"):
            client.map(echo, [(1,), (2**8000,)])
        assert client.map(echo, [(1,), (2,)]) == [(1,), (2,)]
    finally:
        client._max_payload = limit
