"""Cap'n Proto's standard encoding, read and written in pure Python for scaler.capnp's structs (field positions from
scaler.protocol.layout): a builder that allocates one segment in the order fields are set, and a reader that checks
every bound (segments, far pointers, a traversal budget) and raises ProtocolError for anything malformed. What the
fields mean is scaler.protocol.codec's business. Pure; no I/O. Written for Python 3.9 syntax.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from scaler.protocol.errors import ProtocolError
from scaler.protocol.layout import MESSAGE_UNION, STRUCTS

_Fields = dict[str, tuple[str, int]]
LAYOUT: dict[str, tuple[int, int, _Fields]] = {
    name: (data, pointers, {field: (kind, offset) for field, kind, offset in fields})
    for name, (data, pointers, fields) in STRUCTS.items()
}
KINDS = {name: kind for name, (kind, _) in MESSAGE_UNION.items()}
NAMES = {kind: name for name, (kind, _) in MESSAGE_UNION.items()}
MEMBER_STRUCT = {name: struct_name for name, (_, struct_name) in MESSAGE_UNION.items()}
_CODES = {"bool": None, "u8": "<B", "u16": "<H", "u32": "<I", "u64": "<Q", "f32": "<f"}
_SIZES = {"u8": 1, "u16": 2, "u32": 4, "u64": 8, "f32": 4}
_Q = struct.Struct("<Q")
_TRAVERSAL_SLACK_WORDS = 1024  # a budget of 4 words per header word, plus this (as the pycapnp oracle)


# ---------------------------------------------------------------------------------------------------- building
class Builder:
    """One segment, grown word by word in allocation order (the order codec.py sets fields in, as pycapnp would)."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray(8)  # word 0: the root pointer

    def alloc(self, words: int) -> int:
        at = len(self.buf) >> 3
        self.buf += bytes(words << 3)
        return at

    def pointer(self, at: int, target: int, tail: int, kind: int) -> None:
        _Q.pack_into(self.buf, at << 3, (((target - at - 1) << 2) & 0xFFFFFFFF) | kind | (tail << 32))

    def struct(self, at: int, name: str) -> int:
        data, pointers, _ = LAYOUT[name]
        target = self.alloc(data + pointers)
        self.pointer(at, target, data | (pointers << 16), 0)
        return target

    def bytes_(self, at: int, value: bytes, text: bool = False) -> None:
        size = len(value) + text
        target = self.alloc((size + 7) >> 3)
        self.buf[target << 3 : (target << 3) + len(value)] = value
        self.pointer(at, target, 2 | (size << 3), 1)

    def texts(self, at: int, values: Sequence[str]) -> None:
        target = self.alloc(len(values))
        self.pointer(at, target, 6 | (len(values) << 3), 1)
        for i, value in enumerate(values):
            self.bytes_(target + i, value.encode(), True)

    def structs(self, at: int, name: str, count: int) -> list[int]:
        """A list of `count` structs `name`; the word of each element."""
        data, pointers, _ = LAYOUT[name]
        size = data + pointers
        target = self.alloc(1 + count * size)
        self.pointer(at, target, 7 | ((count * size) << 3), 1)
        _Q.pack_into(self.buf, target << 3, (count << 2) | (data << 32) | (pointers << 48))
        return [target + 1 + i * size for i in range(count)]

    def set(self, at: int, name: str, field: str, value: Any) -> None:
        """Set field `field` of the struct `name` at word `at` (pointer fields allocate now)."""
        data, _, fields = LAYOUT[name]
        kind, offset = fields[field]
        if kind == "text":
            self.bytes_(at + data + offset, value.encode(), True)
        elif kind == "data":
            self.bytes_(at + data + offset, value)
        elif kind == "list:text":
            self.texts(at + data + offset, value)
        elif kind == "bool":
            if value:
                self.buf[(at << 3) + (offset >> 3)] |= 1 << (offset & 7)
        else:
            struct.pack_into(_CODES[kind], self.buf, (at << 3) + offset * _SIZES[kind], value)  # type: ignore[arg-type]

    def message(self, name: str) -> int:
        """The root Message with member `name` begun: the member struct's word."""
        root = self.alloc(2)
        self.pointer(0, root, 1 | (1 << 16), 0)
        self.buf[root << 3 : (root << 3) + 2] = KINDS[name].to_bytes(2, "little")
        return self.struct(root + 1, MEMBER_STRUCT[name])

    def frame(self) -> bytes:
        return struct.pack("<II", 0, len(self.buf) >> 3) + self.buf


# ---------------------------------------------------------------------------------------------------- reading
class View:
    """A struct read from a message: its segment, where its data and pointers begin (bytes), their sizes."""

    __slots__ = ("data", "data_bytes", "pointer_count", "pointers", "segment")

    def __init__(self, segment: int, data: int, data_words: int, pointer_count: int) -> None:
        self.segment = segment
        self.data = data
        self.data_bytes = data_words << 3
        self.pointers = data + self.data_bytes
        self.pointer_count = pointer_count


class Reader:
    """Cap'n Proto's standard encoding read with every bound checked; anything wrong raises ProtocolError."""

    __slots__ = ("budget", "header", "segments")

    def __init__(self, header: bytes) -> None:
        if len(header) < 8:
            raise ProtocolError("undecodable header: shorter than a segment table")
        count = int.from_bytes(header[:4], "little") + 1
        table = 4 + 4 * count + (4 if count % 2 == 0 else 0)  # padded to a whole word
        if count > 512 or table > len(header):
            raise ProtocolError(f"undecodable header: a segment table of {count} segments does not fit")
        sizes = struct.unpack_from(f"<{count}I", header, 4)
        self.segments: list[tuple[int, int]] = []  # (first byte, end byte)
        at = table
        for size in sizes:
            self.segments.append((at, at + 8 * size))
            at += 8 * size
        if at > len(header) or len(header) % 8:  # whole words; words after the segments are ignored (as pycapnp)
            raise ProtocolError(f"undecodable header: segments of {at - table} bytes in {len(header) - table}")
        self.header = header
        self.budget = 4 * (len(header) >> 3) + _TRAVERSAL_SLACK_WORDS

    def _charge(self, words: int) -> None:
        self.budget -= words
        if self.budget < 0:
            raise ProtocolError("undecodable header: traversal limit exceeded (lists claiming far more than sent)")

    def _target(self, segment: int, at: int) -> tuple[int, int, int]:
        """The pointer at byte `at` of `segment` followed, far pointers included: (segment, its target's first
        byte, the pointer word describing the target)."""
        value = _Q.unpack_from(self.header, at)[0]
        if value & 3 == 2:  # far: a landing pad elsewhere
            pad_segment = value >> 32
            if pad_segment >= len(self.segments):
                raise ProtocolError("undecodable header: a far pointer to a missing segment")
            start, end = self.segments[pad_segment]
            pad = start + 8 * ((value >> 3) & 0x1FFFFFFF)
            double = value & 4
            if pad + (16 if double else 8) > end:
                raise ProtocolError("undecodable header: a far pointer out of its segment")
            landing = _Q.unpack_from(self.header, pad)[0]
            if not double:
                if landing & 3 == 2:
                    raise ProtocolError("undecodable header: a far pointer landing on a far pointer")
                return self._direct(pad_segment, pad, landing)
            if landing & 7 != 2:
                raise ProtocolError("undecodable header: a double-far landing pad that is not a far pointer")
            tag = _Q.unpack_from(self.header, pad + 8)[0]
            segment = landing >> 32
            if segment >= len(self.segments) or tag & 3 == 2 or tag & 0xFFFFFFFC:
                raise ProtocolError("undecodable header: a bad double-far landing pad")
            return segment, self.segments[segment][0] + 8 * ((landing >> 3) & 0x1FFFFFFF), tag
        return self._direct(segment, at, value)

    def _direct(self, segment: int, at: int, value: int) -> tuple[int, int, int]:
        offset = (value & 0xFFFFFFFF) >> 2
        if offset >= 1 << 29:
            offset -= 1 << 30
        return segment, at + 8 + 8 * offset, value

    def _within(self, segment: int, begin: int, size: int) -> None:
        if not size:  # an empty object may point anywhere: nothing is read from it (Cap'n Proto's bounds rule)
            return
        start, end = self.segments[segment]
        if begin < start or begin + size > end:
            raise ProtocolError("undecodable header: a pointer out of its segment")

    def root(self) -> View:
        """The root struct; a null root reads as a struct of defaults, as in every Cap'n Proto library."""
        start, end = self.segments[0]
        if end == start:
            raise ProtocolError("undecodable header: no root pointer")
        return self.struct(0, start) or View(0, 0, 0, 0)

    def struct(self, segment: int, at: int) -> View | None:
        """The struct the pointer at byte `at` points to, or None if null."""
        if not _Q.unpack_from(self.header, at)[0]:
            return None
        segment, begin, value = self._target(segment, at)
        if value & 3:
            raise ProtocolError("undecodable header: a struct expected, another kind of pointer found")
        data, pointers = (value >> 32) & 0xFFFF, value >> 48
        self._within(segment, begin, 8 * (data + pointers))
        self._charge(data + pointers)
        return View(segment, begin, data, pointers)

    def list_at(self, segment: int, at: int, element: int) -> tuple[int, int, int]:
        """(segment, first byte, element count) of the list of element size `element` that the pointer at `at`
        points to (not null)."""
        segment, begin, value = self._target(segment, at)
        if value & 3 != 1:
            raise ProtocolError("undecodable header: a list expected, another kind of pointer found")
        if (value >> 32) & 7 != element:
            raise ProtocolError(f"undecodable header: a list of element size {(value >> 32) & 7}, not {element}")
        return segment, begin, value >> 35

    def bytes_at(self, segment: int, at: int) -> bytes:
        if not _Q.unpack_from(self.header, at)[0]:
            return b""
        segment, begin, count = self.list_at(segment, at, 2)
        self._within(segment, begin, count)
        self._charge((count + 7) >> 3)
        return self.header[begin : begin + count]

    def text_at(self, segment: int, at: int) -> str:
        if not _Q.unpack_from(self.header, at)[0]:
            return ""
        raw = self.bytes_at(segment, at)
        if not raw or raw[-1]:
            raise ProtocolError("undecodable header: a text that is not NUL-terminated")
        try:
            return raw[:-1].decode()
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"undecodable header: a text that is not UTF-8 ({exc})") from None

    def texts_at(self, segment: int, at: int) -> list[str]:
        if not _Q.unpack_from(self.header, at)[0]:
            return []
        segment, begin, count = self.list_at(segment, at, 6)
        self._within(segment, begin, 8 * count)
        self._charge(count)
        return [self.text_at(segment, begin + 8 * i) for i in range(count)]

    def structs_at(self, segment: int, at: int) -> list[View]:
        value = _Q.unpack_from(self.header, at)[0]
        if not value:
            return []
        if value & 3 == 1 and (value >> 32) & 7 not in (1, 7):
            return self._upgraded_structs(segment, at)
        segment, begin, words = self.list_at(segment, at, 7)
        self._within(segment, begin, 8 + 8 * words)
        tag = _Q.unpack_from(self.header, begin)[0]
        if tag & 3:
            raise ProtocolError("undecodable header: a struct list whose tag is not a struct")
        count, data, pointers = (tag & 0xFFFFFFFF) >> 2, (tag >> 32) & 0xFFFF, tag >> 48
        if count * (data + pointers) > words:
            raise ProtocolError("undecodable header: a struct list longer than its words")
        self._charge(max(words, count))
        size = 8 * (data + pointers)
        return [View(segment, begin + 8 + i * size, data, pointers) for i in range(count)]

    def _upgraded_structs(self, segment: int, at: int) -> list[View]:
        """A list of primitives or pointers where structs are expected, read as Cap'n Proto reads one (a schema may
        turn a List(T) into a list of structs whose first field is a T): each element is a struct whose data section
        is the element (or, for a pointer, whose one pointer it is)."""
        segment, begin, value = self._target(segment, at)
        element, count = (value >> 32) & 7, value >> 35
        size = _ELEMENT_BYTES[element]
        self._within(segment, begin, size * count)
        self._charge(max((size * count + 7) >> 3, count))
        views = []
        for i in range(count):
            view = View(segment, begin + i * size, 0, 1 if element == 6 else 0)
            if element != 6:
                view.data_bytes = size
                view.pointers = view.data + size
            views.append(view)
        return views

    # fields, by the layout of the struct `name`
    def get(self, view: View, name: str, field: str) -> Any:
        kind, offset = LAYOUT[name][2][field]
        if kind in _SIZES:
            size = _SIZES[kind]
            if (offset + 1) * size > view.data_bytes:
                return 0.0 if kind == "f32" else 0
            return struct.unpack_from(_CODES[kind], self.header, view.data + offset * size)[0]  # type: ignore[arg-type]
        if kind == "bool":
            if (offset >> 3) >= view.data_bytes:
                return False
            return bool(self.header[view.data + (offset >> 3)] >> (offset & 7) & 1)
        if offset >= view.pointer_count:  # (a struct written with fewer pointers: the field is its default)
            if kind.startswith("list:"):
                return []  # (a new list each time: the caller may keep it)
            return _EMPTY[kind] if kind in _EMPTY else None
        at = view.pointers + 8 * offset
        if kind == "text":
            return self.text_at(view.segment, at)
        if kind == "data":
            return self.bytes_at(view.segment, at)
        if kind == "list:text":
            return self.texts_at(view.segment, at)
        if kind.startswith("list:"):
            return self.structs_at(view.segment, at)
        return self.struct(view.segment, at)  # "struct:..."

    def record(self, view: View, name: str, cls: Any, fields: dict[str, str]) -> Any:
        return cls(**{py_name: self.get(view, name, capnp_name) for py_name, capnp_name in fields.items()})


_EMPTY: dict[str, Any] = {"text": "", "data": b"", "list:text": []}
_ELEMENT_BYTES = {0: 0, 2: 1, 3: 2, 4: 4, 5: 8, 6: 8}  # by list element size code (1, bits: not read as structs)
