"""The Serializer interface users may implement, and the default one (cloudpickle)."""

from __future__ import annotations

import abc
import pickle
from typing import Any

from scaler import source_lines
from scaler.protocol.frames import Pieces


class Serializer(metaclass=abc.ABCMeta):
    """Turns functions, arguments and results into bytes and back.

    A client uses one serializer for the functions it submits, each of their arguments, each object it sends
    and each result. It travels with the functions to the workers, so everything it imports must be
    installed there. Implement both as static methods:

    >>> class Upper(Serializer):
    ...     @staticmethod
    ...     def serialize(obj): return cloudpickle.dumps(obj)
    ...     @staticmethod
    ...     def deserialize(payload): return cloudpickle.loads(payload)
    """

    @staticmethod
    @abc.abstractmethod
    def serialize(obj: Any) -> bytes:
        """The bytes of `obj` (a function, an argument, an object or a result)."""

    @staticmethod
    @abc.abstractmethod
    def deserialize(payload: bytes) -> Any:
        """The object whose serialize() gave `payload`."""


_PLAIN = frozenset({int, float, complex, str, bytes, bytearray, bool, type(None)})


def _is_plain(obj: Any, depth: int = 0) -> bool:
    """Builtin data that plain pickle encodes exactly as cloudpickle would, only eight times faster."""
    kind = type(obj)
    if kind in _PLAIN:
        return True
    if depth < 2 and (kind is tuple or kind is list) and len(obj) <= 16:
        return all(_is_plain(item, depth + 1) for item in obj)
    return False


class DefaultSerializer(Serializer):
    """cloudpickle with the highest pickle protocol: functions defined in __main__ travel by value. Its output is
    pickle's, read with pickle.loads (cloudpickle importable for what it pickled by value). Function objects do not
    name it: they say None for it (scaler.payloads.pack_function), so that a worker needs no scaler package.

    Code pickled by value keeps its file name, and its source lines follow the pickle (scaler.source_lines), for
    the workers' tracebacks; pickle.loads stops before them."""

    @staticmethod
    def serialize(obj: Any) -> bytes:
        if _is_plain(obj):
            return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        return source_lines.dumps(obj)

    @staticmethod
    def deserialize(payload: bytes) -> Any:
        return pickle.loads(payload)  # cloudpickle.loads is pickle.loads


DEFAULT_SERIALIZER = DefaultSerializer()


def serializer_input(serializer: Serializer, payload: Any) -> Any:
    """What to hand serializer.deserialize(): the frame's memory itself for the default serializer (pickle reads
    any buffer, no copy), real bytes for a custom one (it may slice or compare bytes)."""
    if isinstance(payload, bytes):
        return payload
    if type(payload) is Pieces:  # a payload that came in several frames: joined (one copy)
        return bytes(payload)
    if type(serializer) is DefaultSerializer:
        return memoryview(payload)
    return bytes(payload)
