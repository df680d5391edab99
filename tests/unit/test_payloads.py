"""Python payloads (docs/protocol.md, "Python payloads"): function objects, and error payloads (an exception comes back
as itself, however deep the traceback it gathered; a text-only one as RemoteError)."""

from __future__ import annotations

import pickle
import struct
from typing import Any

import cloudpickle
import pytest

from scaler.client.connection import FutureSink
from scaler.client.future import ScalerFuture
from scaler.payloads import (
    PICKLED_FRAMES_AT_MOST,
    RemoteError,
    pack_exception,
    pack_function,
    unpack_exception,
    unpack_function,
)
from scaler.protocol.messages import TaskStatus
from scaler.serializer import DEFAULT_SERIALIZER, DefaultSerializer, Serializer
from tests.helpers import modules_named


def _raise(exc: BaseException) -> None:
    raise exc


def _three_frames(exc: BaseException) -> None:
    _raise(exc)


def test_an_exception_raised_through_hundreds_of_levels_keeps_its_type() -> None:
    # Like a nested task re-raising its child's error at each level: the traceback grows by every level's frames.
    try:
        raise ValueError("the bottom")
    except ValueError as exc:
        payload = pack_exception(exc)
    for _ in range(150):  # unpickling failed past about 80 levels when the whole traceback was pickled
        error = unpack_exception(payload)
        assert type(error) is ValueError
        try:
            _three_frames(error)
        except ValueError as exc:
            payload = pack_exception(exc)
    error = unpack_exception(payload)
    assert type(error) is ValueError and str(error) == "the bottom"
    depth = 0
    tb = error.__traceback__
    while tb is not None:
        depth, tb = depth + 1, tb.tb_next
    assert depth == PICKLED_FRAMES_AT_MOST  # the innermost frames: where it was raised
    assert "the bottom" in pack_exception(error).decode(errors="replace")


def test_an_unpicklable_exception_comes_back_as_remote_error_with_its_text() -> None:
    class Local(Exception):  # it holds a lock, which cannot be pickled: only its text travels
        def __init__(self) -> None:
            super().__init__("held a lock")
            import threading

            self.lock = threading.Lock()

    try:
        raise Local()
    except Local as exc:
        error = unpack_exception(pack_exception(exc))
    assert isinstance(error, RemoteError)
    assert "held a lock" in str(error)


# ------------------------------------------------------------------------------------------- function objects
class _Doubling(Serializer):
    """A user's serializer: it travels inside the function object, by reference (its module must be on workers)."""

    @staticmethod
    def serialize(obj: Any) -> bytes:
        pickled: bytes = cloudpickle.dumps(obj)
        return b"2" + pickled

    @staticmethod
    def deserialize(payload: bytes) -> Any:
        assert payload[:1] == b"2"
        return cloudpickle.loads(payload[1:])


@pytest.mark.parametrize("serializer", [DEFAULT_SERIALIZER, DefaultSerializer(), DefaultSerializer])
def test_a_default_function_object_is_none_and_the_pickled_function(serializer: Any) -> None:
    scale = lambda x, factor=2: x * factor  # noqa: E731 (by value, as functions of __main__ are)
    payload = pack_function(serializer, scale)
    marker, data = pickle.loads(payload)
    assert marker is None and pickle.loads(data)(3, factor=5) == 15
    assert "scaler" not in {m.split(".")[0] for m in modules_named(payload)}
    unpacked_serializer, function = unpack_function(payload)
    assert unpacked_serializer is DEFAULT_SERIALIZER and function(4) == 8


def test_a_custom_serializer_travels_in_the_function_object_as_before() -> None:
    payload = pack_function(_Doubling(), len)
    serializer, data = pickle.loads(payload)
    assert type(serializer) is _Doubling and data[:1] == b"2"
    serializer, function = unpack_function(payload)
    assert type(serializer) is _Doubling and function is len


def test_a_function_object_of_an_older_client_still_unpacks() -> None:
    # Before issue 18 a default function object named scaler.serializer.DefaultSerializer: workers still read it.
    old = cloudpickle.dumps((DefaultSerializer(), DefaultSerializer.serialize(abs)), protocol=pickle.HIGHEST_PROTOCOL)
    serializer, function = unpack_function(old)
    assert type(serializer) is DefaultSerializer and function is abs


# ------------------------------------------------------------------------------------------- errors
def test_an_error_payload_is_the_length_the_text_and_the_pickled_exception() -> None:
    try:
        _raise(KeyError("missing"))
    except KeyError as exc:
        payload = pack_exception(exc)
    (length,) = struct.unpack_from("<I", payload)
    text = payload[4 : 4 + length].decode()
    assert text.startswith("Traceback (most recent call last):\n") and text.endswith("KeyError: 'missing'\n")
    assert "in _raise" in text
    error = pickle.loads(payload[4 + length :])  # tblib rebuilds the traceback
    assert type(error) is KeyError and error.args == ("missing",)
    names = []
    tb = error.__traceback__
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert names[-1] == "_raise" and len(names) == 2


@pytest.mark.parametrize("text", ["Error: boom\n    at fail (worker.ts:3:9)", "", "é ünïcode"])
def test_a_text_only_error_payload_is_a_remote_error_with_that_text(text: str) -> None:
    # What a non-Python worker writes (the JSON convention): the length-prefixed text and nothing after.
    encoded = text.encode()
    error = unpack_exception(struct.pack("<I", len(encoded)) + encoded)
    assert type(error) is RemoteError and str(error) == text


def test_an_error_payload_whose_pickled_part_cannot_load_is_a_remote_error_with_the_text() -> None:
    encoded = b"ValueError: from elsewhere"
    unloadable = pickle.dumps(ValueError("x")).replace(b"builtins", b"nomodule")
    error = unpack_exception(struct.pack("<I", len(encoded)) + encoded + unloadable)
    assert type(error) is RemoteError and str(error) == "ValueError: from elsewhere"


def test_the_client_raises_remote_error_for_a_text_only_error_result() -> None:
    # The path a task's `error` result takes in the client: the connection's sink, then the future.
    text = "Error: boom\n    at fail (worker.ts:3:9)"
    future = ScalerFuture(1, "task 1")
    future.set_running_or_notify_cancel()
    payload = struct.pack("<I", len(text.encode())) + text.encode()
    FutureSink(future, DEFAULT_SERIALIZER, False).deliver(TaskStatus.ERROR, payload, None)
    with pytest.raises(RemoteError) as raised:
        future.result(0)
    assert str(raised.value) == text
