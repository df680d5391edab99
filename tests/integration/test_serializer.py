"""A custom serializer end to end: the documents' CustomSerializer (with its one fix) moving pandas DataFrames."""

from __future__ import annotations

import enum
import pickle
import struct
import threading
from io import BytesIO
from typing import Any

import pytest

from scaler import Client, SchedulerClusterCombo, Serializer
from tests.helpers import Graph

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")
from cloudpickle import cloudpickle  # noqa: E402  (the documents import it this way)

TIMEOUT = 20


class ObjType(enum.Enum):
    General = b"G"
    Integer = b"I"
    DataFrame = b"D"


class CustomSerializer(Serializer):
    """Seeds 000/001 "Custom Serializer", verbatim but for ObjType(payload[0:1]) (the documents have
    ObjType(payload[0]), an int, which is never an ObjType value: every deserialize() raised ValueError)."""

    calls: dict[str, int] = {"serialize": 0, "deserialize": 0}
    lock = threading.Lock()

    @staticmethod
    def serialize(obj: Any) -> bytes:
        with CustomSerializer.lock:
            CustomSerializer.calls["serialize"] += 1
        if isinstance(obj, pd.DataFrame):
            buf = BytesIO()
            obj.to_parquet(buf)
            return ObjType.DataFrame.value + buf.getvalue()

        if isinstance(obj, int):
            return ObjType.Integer.value + struct.pack("I", obj)

        pickled: bytes = cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        return ObjType.General.value + pickled

    @staticmethod
    def deserialize(payload: bytes) -> Any:
        with CustomSerializer.lock:
            CustomSerializer.calls["deserialize"] += 1
        obj_type = ObjType(payload[0:1])
        payload = payload[1:]

        if obj_type == ObjType.DataFrame:
            buf = BytesIO(payload)
            return pd.read_parquet(buf)

        if obj_type == ObjType.Integer:
            return struct.unpack("I", payload)[0]

        return cloudpickle.loads(payload)


def add(a: int, b: int) -> int:
    return a + b


def describe(obj: Any) -> str:
    return type(obj).__name__


def double(df: Any) -> Any:
    return df * 2


def concat(a: Any, b: Any) -> Any:
    return pd.concat([a, b], ignore_index=True)


def tag_of(payload: bytes) -> bytes:
    return payload[0:1]


@pytest.fixture()
def custom(cluster: SchedulerClusterCombo) -> Any:
    with Client(address=cluster.address, serializer=CustomSerializer, timeout_seconds=TIMEOUT) as c:
        yield c


def frame(n: int) -> Any:
    return pd.DataFrame({"x": list(range(n)), "y": [i / 2 for i in range(n)], "name": [f"r{i}" for i in range(n)]})


def test_the_documents_deserialize_is_broken_and_the_fix_works() -> None:
    payload = CustomSerializer.serialize(5)
    with pytest.raises(ValueError):
        ObjType(payload[0])  # what the documents do
    assert CustomSerializer.deserialize(payload) == 5


def test_integers_travel_as_four_bytes(custom: Client) -> None:
    before = dict(CustomSerializer.calls)
    assert custom.submit(add, 1, 2).result(timeout=TIMEOUT) == 3
    # in this process: once for add (the function), once for 1, once for 2; then the result is deserialized
    assert CustomSerializer.calls["serialize"] - before["serialize"] >= 2
    assert CustomSerializer.calls["deserialize"] - before["deserialize"] >= 1
    assert tag_of(CustomSerializer.serialize(3)) == b"I"


def test_a_dataframe_goes_to_the_worker_and_back(custom: Client) -> None:
    df = frame(100)
    result = custom.submit(double, df[["x", "y"]]).result(timeout=TIMEOUT)
    assert isinstance(result, pd.DataFrame)
    pd.testing.assert_frame_equal(result, df[["x", "y"]] * 2)


def test_the_worker_deserializes_with_the_custom_serializer(custom: Client) -> None:
    assert custom.submit(describe, frame(3)).result(timeout=TIMEOUT) == "DataFrame"
    assert custom.submit(describe, 7).result(timeout=TIMEOUT) == "int"
    assert custom.submit(describe, "text").result(timeout=TIMEOUT) == "str"


def test_dataframes_through_map_objects_and_graphs(custom: Client) -> None:
    frames = [frame(i + 1) for i in range(5)]
    results = custom.map(concat, [(f, f) for f in frames])
    for f, r in zip(frames, results, strict=True):
        pd.testing.assert_frame_equal(r, pd.concat([f, f], ignore_index=True))

    ref = custom.send_object(frame(10), name="table")
    pd.testing.assert_frame_equal(
        custom.submit(concat, ref, frame(2)).result(timeout=TIMEOUT), concat(frame(10), frame(2))
    )

    graph: Graph = {"a": frame(4), "b": (double, "a"), "c": (concat, "a", "b")}
    got = custom.get(graph, keys=["c"])["c"]
    pd.testing.assert_frame_equal(got, concat(frame(4), double(frame(4))))


class PlusOneOnLoad(Serializer):
    """cloudpickle, except that every int gains 1 when loaded: shows which side deserialized what."""

    @staticmethod
    def serialize(obj: Any) -> bytes:
        pickled: bytes = cloudpickle.dumps(obj)
        return pickled

    @staticmethod
    def deserialize(payload: bytes) -> Any:
        obj = cloudpickle.loads(payload)
        return obj + 1 if type(obj) is int else obj


def identity(x: Any) -> Any:
    return x


def test_both_ends_use_the_clients_serializer(cluster: SchedulerClusterCombo) -> None:
    with Client(address=cluster.address, serializer=PlusOneOnLoad, timeout_seconds=TIMEOUT) as c:
        # 1 is loaded on the worker (2), identity returns 2, the result is loaded here (3)
        assert c.submit(identity, 1).result(timeout=TIMEOUT) == 3
        assert c.map(identity, [(10,), (20,)]) == [12, 22]
        ref = c.send_object(100, name="hundred")
        assert c.submit(identity, ref).result(timeout=TIMEOUT) == 102


def test_a_large_dataframe(custom: Client) -> None:
    big = pd.DataFrame({"v": range(500_000)})
    result = custom.submit(double, big).result(timeout=TIMEOUT)
    assert int(result["v"].iloc[-1]) == 2 * 499_999


def test_a_serializer_that_fails_raises_type_error_at_submit(custom: Client) -> None:
    # struct.pack("I", -1): the documents' serializer cannot do negatives
    with pytest.raises(TypeError, match=r"^argument 0 of add could not be serialized \(int\): ") as caught:
        custom.submit(add, -1, 2)
    assert isinstance(caught.value.__cause__, struct.error)  # the serializer's own error, kept as the cause
    assert custom.submit(add, 1, 2).result(timeout=TIMEOUT) == 3


class ReturnsText(Serializer):
    """A broken serializer: returns str, not bytes."""

    @staticmethod
    def serialize(obj: Any) -> bytes:
        # wrong on purpose: a broken serializer
        return repr(obj)  # type: ignore[return-value]

    @staticmethod
    def deserialize(payload: bytes) -> Any:
        raise AssertionError("never reached")


def test_a_serializer_that_returns_no_bytes_is_named_at_submit(cluster: SchedulerClusterCombo) -> None:
    with Client(address=cluster.address, serializer=ReturnsText, timeout_seconds=TIMEOUT) as c:
        with pytest.raises(TypeError, match=r"^the serializer returned str for the object; it must return bytes$"):
            c.send_object(5)


def test_a_serializer_instance_works_too(cluster: SchedulerClusterCombo) -> None:
    with Client(address=cluster.address, serializer=CustomSerializer(), timeout_seconds=TIMEOUT) as c:
        assert c.submit(add, 20, 22).result(timeout=TIMEOUT) == 42


def test_an_object_without_serialize_is_refused() -> None:
    with pytest.raises(TypeError):
        # a call mypy refuses, made anyway: the run-time check is what is tested
        Client(address="tcp://127.0.0.1:1", serializer=object(), timeout_seconds=1)  # type: ignore[arg-type]
