"""How Python peers encode the payload frames the scheduler carries without reading (docs/protocol.md,
"Python payloads"): function objects, arguments, results and errors. Shared by the client and the processor.
"""

from __future__ import annotations

import pickle
import struct
import traceback
from typing import Any

import cloudpickle
from tblib import pickling_support

from scaler.client import shipped
from scaler.errors import RemoteError as RemoteError
from scaler.serializer import DEFAULT_SERIALIZER, DefaultSerializer, Serializer

# The functions Python clients' tasks run for graphs, grouped blocks and dask nodes travel by value, so that a worker
# needs no scaler package (docs/protocol.md, "Python payloads"): every client packs its payloads through this module.
cloudpickle.register_pickle_by_value(shipped)

_TEXT_LENGTH = struct.Struct("<I")
PICKLED_FRAMES_AT_MOST = 100  # of a traceback too deep to pickle whole (the text keeps every frame)


def pack_function(serializer: Serializer | type[Serializer], function: Any) -> bytes:
    """A function object. With the default serializer: `pickle.dumps((None, cloudpickle.dumps(function)))`, None
    standing for "load the function bytes with pickle.loads", so that nothing in it names the `scaler` package.
    With any other: `cloudpickle.dumps((serializer, serializer.serialize(function)))`, the serializer itself first
    (everything it imports must be on the workers)."""
    if serializer is DefaultSerializer or type(serializer) is DefaultSerializer:
        return pickle.dumps((None, DefaultSerializer.serialize(function)), protocol=pickle.HIGHEST_PROTOCOL)
    payload: bytes = cloudpickle.dumps((serializer, serializer.serialize(function)), protocol=pickle.HIGHEST_PROTOCOL)
    return payload


def unpack_function(payload: bytes) -> tuple[Serializer, Any]:
    """The serializer (DEFAULT_SERIALIZER for the default's None) and the function of a function object."""
    serializer, function_bytes = pickle.loads(payload)
    if serializer is None:
        return DEFAULT_SERIALIZER, pickle.loads(function_bytes)
    return serializer, serializer.deserialize(function_bytes)


def pack_exception(exc: BaseException) -> bytes:
    """An error frame: the exception's text and traceback (always readable), then the exception pickled with
    its traceback, when it can be."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    encoded = text.encode(errors="replace")
    return _TEXT_LENGTH.pack(len(encoded)) + encoded + _pickle_exception(exc)


def _pickle_exception(exc: BaseException) -> bytes:
    """The exception pickled with the innermost PICKLED_FRAMES_AT_MOST frames of its traceback (an error raised
    through many levels of nested tasks gathers every level's frames, and a deep traceback cannot be unpickled
    within the recursion limit); b"" if it cannot be pickled."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    if len(frames) > PICKLED_FRAMES_AT_MOST:
        exc.__traceback__ = frames[-PICKLED_FRAMES_AT_MOST]
    try:
        pickling_support.install(exc)
        return bytes(cloudpickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:  # an exception holding something unpicklable: the text must do
        return b""


def unpack_exception(payload: bytes) -> BaseException:
    """The exception a task raised, or a RemoteError carrying its text if it cannot be rebuilt here."""
    view = memoryview(payload)
    if len(view) < _TEXT_LENGTH.size:
        return RemoteError("a task failed, but its error could not be read")
    (length,) = _TEXT_LENGTH.unpack_from(view)
    text = bytes(view[_TEXT_LENGTH.size : _TEXT_LENGTH.size + length]).decode(errors="replace")
    pickled = view[_TEXT_LENGTH.size + length :]
    if pickled:
        try:
            exc = cloudpickle.loads(pickled)
            if isinstance(exc, BaseException):
                return exc
        except Exception:
            pass
    return RemoteError(text)
