"""Packed little-endian number columns, the way batch messages carry per-item numbers.

Pure functions over bytes; no I/O. A malformed column raises ProtocolError, never anything else.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING

from scaler.protocol.errors import ProtocolError

if TYPE_CHECKING:
    from scaler.protocol.records import TaskBatch

_LITTLE = sys.byteorder == "little"
_U64_MAX = (1 << 64) - 1
_U64 = struct.Struct("<Q")
_U16 = struct.Struct("<H")


def pack_u64(values: Sequence[int]) -> bytes:
    if len(values) == 1:  # the common single-task message
        return _U64.pack(values[0])
    column = array("Q", values)
    if not _LITTLE:
        column.byteswap()
    return column.tobytes()


def pack_u16(values: Sequence[int]) -> bytes:
    if len(values) == 1:
        return _U16.pack(values[0])
    column = array("H", values)
    if not _LITTLE:
        column.byteswap()
    return column.tobytes()


def pack_u32(values: Sequence[int]) -> bytes:
    return _pack("I", values)


def pack_i32(values: Sequence[int]) -> bytes:
    return _pack("i", values)


def _pack(code: str, values: Sequence[int]) -> bytes:
    column = array(code, values)
    if not _LITTLE:
        column.byteswap()
    return column.tobytes()


def unpack_u32(data: bytes, count: int | None = None, what: str = "column") -> list[int]:
    return _unpack("I", 4, data, count, what)


def unpack_i32(data: bytes, count: int | None = None, what: str = "column") -> list[int]:
    return _unpack("i", 4, data, count, what)


def unpack_u64(data: bytes, count: int | None = None, what: str = "column") -> list[int]:
    return _unpack("Q", 8, data, count, what)


def unpack_u16(data: bytes, count: int | None = None, what: str = "column") -> list[int]:
    return _unpack("H", 2, data, count, what)


def check_u8(data: bytes, count: int, what: str) -> bytes:
    if len(data) != count:
        raise ProtocolError(f"{what}: {len(data)} bytes for {count} items")
    return data


def _unpack(code: str, size: int, data: bytes, count: int | None, what: str) -> list[int]:
    length = len(data)
    if length % size:
        raise ProtocolError(f"{what}: {length} bytes is not a whole number of {size}-byte values")
    if count is not None and length != count * size:
        raise ProtocolError(f"{what}: {length // size} values for {count} items")
    if _LITTLE:
        return memoryview(data).cast(code).tolist()  # type: ignore[call-overload,no-any-return]
    column = array(code)
    column.frombytes(data)
    column.byteswap()
    return column.tolist()


def set_requirements(batch: TaskBatch, requirements: list[list[str]], index_column: bytes) -> None:
    """Give a decoded task batch its requirements and requirementIndex column (both codecs), checked: the column has
    one u16 per task or is empty, every index names a requirement; an empty `requirements` list means none, and then
    the column must be empty."""
    n = len(batch.task_ids)
    index = unpack_u16(index_column, n, "requirementIndex") if len(index_column) else None
    if index is not None and n and max(index) >= len(requirements):
        raise ProtocolError(f"requirementIndex: index {max(index)} past the {len(requirements)} requirements")
    batch.requirements = requirements or None
    batch.requirement_index = index
