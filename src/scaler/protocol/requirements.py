"""TaskBatch.requirements (a List(Requirement), each a List(Text)) as raw Cap'n Proto bytes, for the direct writers and
readers of batch messages (scaler.protocol.fastpath): most batches carry the same one or two requirements, so their
bytes are made once and read once (both remembered, bounded).

The bytes of a struct list whose pointers all point forward inside it (as every writer lays one out) do not depend on
where the list lies: `blob(requirements)` is such a list, from its tag word to its last text, laid out as pycapnp lays
it out; a writer puts it anywhere and points at it with a list pointer of `words` element words. `read(data)` reads a
list from the start of `data` (its tag word), following pointers only inside `data`; anything else (a far pointer, a
text without its NUL, invalid UTF-8, a pointer out of `data`) gives None, and the caller decodes the message the
general way, which says what is wrong. Pure; no I/O.
"""

from __future__ import annotations

import struct

_Q = struct.Struct("<Q")
_I = struct.Struct("<iI")  # a pointer's two halves: signed offset and kind, then the size and count
_REMEMBERED = 256
_blobs: dict[tuple[tuple[str, ...], ...], tuple[bytes, int]] = {}
_reads: dict[tuple[int, bytes], list[list[str]]] = {}


def blob(requirements: list[list[str]]) -> tuple[bytes, int]:
    """(the list's bytes from its tag word, its element word count) for a list pointer to it."""
    key = tuple(map(tuple, requirements))
    known = _blobs.get(key)
    if known is not None:
        return known
    count = len(key)
    words = bytearray(_Q.pack((count << 2) | (1 << 48)))  # tag: count elements of 0 data words, 1 pointer
    words += bytes(8 * count)
    for i, capabilities in enumerate(key):
        if not capabilities:
            continue  # a null pointer: an empty list
        at = len(words) >> 3  # the pointer list of this element's texts
        pointer = 8 * (1 + i)
        _Q.pack_into(words, pointer, (((at - 1 - i - 1) << 2) | 1) | ((6 | (len(capabilities) << 3)) << 32))
        words += bytes(8 * len(capabilities))
        for j, text in enumerate(capabilities):
            data = text.encode() + b"\x00"
            target = len(words) >> 3
            slot = at + j
            _Q.pack_into(words, 8 * slot, (((target - slot - 1) << 2) | 1) | ((2 | (len(data) << 3)) << 32))
            words += data + bytes(-len(data) & 7)
    made = (bytes(words), count)
    if len(_blobs) >= _REMEMBERED:
        _blobs.clear()
    _blobs[key] = made
    return made


def read(data: bytes, words: int) -> list[list[str]] | None:
    """The requirements in the struct list at the start of `data` (`words`: the element words its pointer says), or
    None if it cannot be read from `data` alone (see the module's docstring). Messages of the same requirements share
    the lists returned: do not change them."""
    key = (words, data)
    known = _reads.get(key)
    if known is None:
        try:
            read = _read(data, words)
        except (struct.error, UnicodeDecodeError, ValueError):
            return None
        if read is None:
            return None
        known = [list(capabilities) for capabilities in read]
        if len(_reads) >= _REMEMBERED:
            _reads.clear()
        _reads[(words, bytes(data))] = known
    return known


def _target(data: bytes, at: int, low: int) -> int:
    """The byte where the object a pointer at byte `at` points to begins (low: its signed first half)."""
    return at + 8 + 8 * (low >> 2)


def _read(data: bytes, words: int) -> tuple[tuple[str, ...], ...] | None:
    tag = _Q.unpack_from(data, 0)[0]
    if tag & 3:
        return None  # not a struct tag
    count = (tag & 0xFFFFFFFF) >> 2
    data_words, pointers = (tag >> 32) & 0xFFFF, tag >> 48
    size = data_words + pointers
    if count * size != words or 8 * (1 + words) > len(data):
        return None
    out: list[tuple[str, ...]] = []
    for i in range(count):
        if not pointers:
            out.append(())
            continue
        at = 8 * (1 + i * size + data_words)
        low, high = _I.unpack_from(data, at)
        if not (low or high):
            out.append(())
            continue
        if low & 3 != 1 or high & 7 != 6:
            return None  # not a list of pointers
        texts = high >> 3
        begin = _target(data, at, low)
        if begin < 8 * (1 + words) or begin + 8 * texts > len(data):
            return None
        capabilities = []
        for j in range(texts):
            where = begin + 8 * j
            low, high = _I.unpack_from(data, where)
            if not (low or high):
                capabilities.append("")
                continue
            if low & 3 != 1 or high & 7 != 2:
                return None  # not a list of bytes
            start, length = _target(data, where, low), high >> 3
            if start < 8 * (1 + words) or start + length > len(data) or not length or data[start + length - 1]:
                return None  # out of the list's bytes, or no NUL at the end
            capabilities.append(data[start : start + length - 1].decode("utf-8"))
        out.append(tuple(capabilities))
    return tuple(out)
