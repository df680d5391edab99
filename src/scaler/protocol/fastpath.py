"""A direct reader and writer of the Cap'n Proto bytes of the hot batch messages (taskResults, submitTasks and
dispatchTasks without keywords), for speed: scaler.protocol.codec's hot path (a general builder or reader costs
about 2 µs per field, this about 0.2).

The bytes are standard Cap'n Proto (single segment, the layout pycapnp itself writes: tests/protocol check
byte equality); the field positions come from scaler.protocol.layout (generated from scaler.capnp). Anything
unusual (several segments, far pointers, keywords, a layout this reader does not expect) returns None, and the
caller uses the general reader (scaler.protocol.wire) instead, which decodes it or says why it is malformed. Pure; no
I/O. Written for Python 3.9 syntax.

Messages of one shape (the same field sizes, hence the same pointer words) have their fields at the same places:
the reader works the places out once per shape and remembers a bounded number of shapes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from scaler.protocol.layout import MESSAGE_UNION, STRUCTS

_HEAD = struct.Struct("<IIQQQ")  # segment table (one segment), root pointer, Message's data word, member pointer
_ROOT = (1 << 32) | (1 << 48)  # root struct pointer: offset 0, one data word, one pointer
_POINTERS_AT = 32  # byte offset of the member struct's pointers: 8 (segment table) + 3 words
_ZEROS = [bytes(n) for n in range(8)]
_SPAN_CACHE = 4096  # message shapes remembered (a hostile peer can only make us forget them)


def _slots(struct_name: str) -> tuple[int, dict[str, int]]:
    data_words, pointer_count, fields = STRUCTS[struct_name]
    if data_words != 0:
        raise LookupError(f"{struct_name} has data words")
    return pointer_count, {name: offset for name, _, offset in fields}


def list_words(header: bytes, slot: int) -> int:
    """The element word count of the struct list pointer in `slot` of a message read() read."""
    return int.from_bytes(header[_POINTERS_AT + 8 * slot + 4 : _POINTERS_AT + 8 * slot + 8], "little") >> 3


class FastPath:
    def __init__(self) -> None:
        self.kinds = {name: MESSAGE_UNION[name][0] for name in ("submitTasks", "dispatchTasks", "taskResults")}
        self.names = {kind: name for name, kind in self.kinds.items()}
        self.task_pointers, self.task_slots = _slots("TaskBatch")
        self.result_pointers, self.result_slots = _slots("ResultBatch")
        # kind -> (pointer count, the member pointer pycapnp writes: offset 0, no data words, that many pointers,
        # the struct that reads the pointers as (signed low half, high half) pairs: small numbers, cheap to test,
        # the slot of the one struct list field read: TaskBatch.requirements, or -1)
        self.requirements_slot = self.task_slots.get("requirements", -1)
        self.layouts: dict[int, tuple[int, int, struct.Struct, int]] = {}
        for name, kind in self.kinds.items():
            count = self.result_pointers if name == "taskResults" else self.task_pointers
            lists = -1 if name == "taskResults" else self.requirements_slot
            self.layouts[kind] = (count, count << 48, struct.Struct("<" + "iI" * count), lists)
        self._spans: dict[bytes, tuple[int, Callable[[bytes], tuple[bytes, ...]]]] = {}

    def clear(self) -> None:
        """Forget the shapes read so far (they are worked out again on use)."""
        self._spans = {}

    # ------------------------------------------------------------------------------------------- writing
    def parts(
        self, kind: int, pointer_count: int, sizes: list[int | None], lists: dict[int, int] | None = None
    ) -> tuple[bytes, tuple[bytes, ...]]:
        """(head, pads) of a Message whose `kind` member is a struct of `pointer_count` pointers to Data fields of
        these sizes (None: not set), allocated in slot order as pycapnp does: head, then each set field (in slot
        order) followed by its pad, is the message. Everything but the fields' bytes depends only on the sizes, so
        callers keep these by size. `lists`: the slots that hold a struct list instead (its bytes from the tag word,
        as scaler.protocol.requirements.blob makes them), with the element word count of each."""
        position = 3 + pointer_count  # the word where the next field's bytes go
        word = 4  # the word just after the pointer being written (pointer i sits at word 3 + i)
        pointers = []
        pads = []
        for slot, size in enumerate(sizes):
            if size is None:
                pointers.append(0)
            else:
                if lists and slot in lists:
                    pointers.append((((position - word) << 2) | 1) | (((lists[slot] << 3) | 7) << 32))
                else:
                    pointers.append((((position - word) << 2) | 1) | (((size << 3) | 2) << 32))
                pads.append(_ZEROS[-size & 7])
                position += (size + 7) >> 3
            word += 1
        head = struct.pack(f"<IIQQQ{pointer_count}Q", 0, position, _ROOT, kind, pointer_count << 48, *pointers)
        return head, tuple(pads)

    def template(
        self, kind: int, pointer_count: int, sizes: list[int | None], lists: dict[int, int] | None = None
    ) -> bytes:
        """The bytes %-format of the message parts() describes: `template % fields`, the set fields in slot order,
        is the message (one formatting: the fastest way on CPython)."""
        head, pads = self.parts(kind, pointer_count, sizes, lists)
        return head.replace(b"%", b"%%") + b"".join([b"%b" + pad for pad in pads])

    # ------------------------------------------------------------------------------------------- reading
    def read(self, header: bytes) -> tuple[int, tuple[bytes, ...]] | None:
        """(member discriminant, the member struct's Data fields by slot; null ones as b"") or None."""
        size = len(header)
        if size < _POINTERS_AT:
            return None
        segments, words, root, data, member = _HEAD.unpack_from(header)
        if segments or root != _ROOT or size != 8 + 8 * words:
            return None
        kind = data & 0xFFFF
        layout = self.layouts.get(kind)
        if layout is None or member != layout[1] or size < _POINTERS_AT + 8 * layout[0]:
            return None
        # Messages of the same shape (field sizes) have the same pointer words: their field positions are
        # worked out once, into one struct that cuts every field out.
        pointers = header[_POINTERS_AT : _POINTERS_AT + 8 * layout[0]]
        shape = self._spans.get(pointers)
        if shape is None:
            shape = self._shape(layout, header)
            if shape is None:
                return None
            if len(self._spans) >= _SPAN_CACHE:
                self._spans.clear()
            self._spans[pointers] = shape
        if shape[0] > size:
            return None
        return kind, shape[1](header)

    def _shape(
        self, layout: tuple[int, int, struct.Struct, int], header: bytes
    ) -> tuple[int, Callable[[bytes], tuple[bytes, ...]]] | None:
        """(the end of the last field, a function cutting the fields out of such a message) or None if they
        are not all plain bytes (but the struct list of layout[3], cut from its tag word up to the next field or the
        end of the message: scaler.protocol.requirements reads it)."""
        spans = self._locate(layout, header)
        if spans is None:
            return None
        last, places = spans
        if layout[3] >= 0 and places[layout[3]][1] < 0:  # the struct list: cut up to the next field, or the end
            slot = layout[3]
            begin = places[slot][0]
            after = [b for b, e in places if b > begin and b != e]
            bound = min(after) if after else None
            places = [*places[:slot], (0, 0), *places[slot + 1 :]]
            fixed = self._cutter(last, places)[1]

            def cut(header: bytes) -> tuple[bytes, ...]:
                fields = fixed(header)
                return (*fields[:slot], header[begin:bound], *fields[slot + 1 :])

            return last, cut
        return self._cutter(last, places)

    @staticmethod
    def _cutter(last: int, places: list[tuple[int, int]]) -> tuple[int, Callable[[bytes], tuple[bytes, ...]]]:
        """(last, a function cutting the fields at `places` out of a message)."""
        # Fields laid out in slot order (as pycapnp and our writer do): one struct.unpack_from ("0s" for a null
        # field). Any other order: slices.
        code, at = ["<"], 0
        for begin, end in places:
            if begin == end:
                code.append("0s")
                continue
            if begin < at:
                return last, lambda header: tuple([header[begin:end] for begin, end in places])
            code.append(f"{begin - at}x{end - begin}s")
            at = end
        return last, struct.Struct("".join(code)).unpack_from

    def _locate(
        self, layout: tuple[int, int, struct.Struct, int], header: bytes
    ) -> tuple[int, list[tuple[int, int]]] | None:
        """(the end of the last field, each field's (begin, end) byte positions) or None if not plain bytes. The
        struct list of layout[3]: (its tag word, -1)."""
        first = 8 + 8 * (3 + layout[0])  # fields' bytes lie after the pointers
        word = 4  # the word just after pointer i is 4 + i
        spans = []
        last = 0
        halves = layout[2].unpack_from(header, _POINTERS_AT)
        for slot, (low, high) in enumerate(zip(halves[::2], halves[1::2])):
            if slot == layout[3] and (low or high):
                # a list pointer of inline composite elements (size 7): read by scaler.protocol.requirements
                begin = 8 * (word + (low >> 2)) + 8
                if low & 3 != 1 or high & 7 != 7 or begin < first:
                    return None
                spans.append((begin, -1))
                last = max(last, begin + 8 * (1 + (high >> 3)))
            elif low or high:
                # a list pointer (low bits 01) of bytes (element size 2); its offset in words is the rest of low
                if low & 3 != 1 or high & 7 != 2:
                    return None
                begin = 8 * (word + (low >> 2)) + 8
                end = begin + (high >> 3)
                if begin < first:
                    return None
                spans.append((begin, end))
                last = max(last, end)
            else:
                spans.append((0, 0))
            word += 1
        return last, spans
