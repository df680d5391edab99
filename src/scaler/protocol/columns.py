"""Packed little-endian number columns, the way batch messages carry per-item numbers.

Pure functions over bytes; no I/O. A malformed column raises ProtocolError, never anything else.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable

from scaler.protocol.errors import ProtocolError

_LITTLE = sys.byteorder == "little"
_U64_MAX = (1 << 64) - 1


def pack_u64(values: Iterable[int]) -> bytes:
    column = array("Q", values)
    if not _LITTLE:
        column.byteswap()
    return column.tobytes()


def pack_u16(values: Iterable[int]) -> bytes:
    column = array("H", values)
    if not _LITTLE:
        column.byteswap()
    return column.tobytes()


def unpack_u64(data: bytes, count: int | None = None, what: str = "column") -> list[int]:
    return _unpack("Q", 8, data, count, what)


def unpack_u16(data: bytes, count: int | None = None, what: str = "column") -> list[int]:
    return _unpack("H", 2, data, count, what)


def check_u8(data: bytes, count: int, what: str) -> bytes:
    if len(data) != count:
        raise ProtocolError(f"{what}: {len(data)} bytes for {count} items")
    return data


def _unpack(code: str, size: int, data: bytes, count: int | None, what: str) -> list[int]:
    if len(data) % size:
        raise ProtocolError(f"{what}: {len(data)} bytes is not a whole number of {size}-byte values")
    if count is not None and len(data) != count * size:
        raise ProtocolError(f"{what}: {len(data) // size} values for {count} items")
    column = array(code)
    column.frombytes(data)
    if not _LITTLE:
        column.byteswap()
    return column.tolist()
