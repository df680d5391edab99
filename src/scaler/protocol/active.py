"""The codec this process uses: pycapnp's (scaler.protocol.codec) where pycapnp imports, otherwise the pure-Python
one (scaler.protocol.purecodec: PyPy, which has no pycapnp). Both give and read the same bytes (tests/protocol).

The environment variable SCALER_CODEC chooses instead: "pure" forces the pure-Python codec (to run anything with it
on CPython), "capnp" requires pycapnp (an ImportError without it), "auto" or unset picks as above.

The shells take the codec from scaler.protocol.messages (encode, decode, clear_caches, CODEC), and
scaler.protocol.lone its batch reader (read_batch) from here; only the codecs' own tests import a codec module.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

from scaler.protocol.layout import MESSAGE_UNION, STRUCTS
from scaler.protocol.records import Message, Payload

CODEC_ENV = "SCALER_CODEC"
CODEC_CHOICES = ("auto", "capnp", "pure")

Columns = tuple[bytes, ...]
BatchReader = Callable[[bytes], "tuple[int, Columns] | None"]


class Decode(Protocol):
    def __call__(self, frames: Sequence[Payload], accept: frozenset[str] | None = None) -> Message: ...


class Codec(NamedTuple):
    name: str
    encode: Callable[[Message], list[Payload]]
    decode: Decode
    clear_caches: Callable[[], None]
    read_batch: BatchReader | None


def _wanted() -> str:
    wanted = os.environ.get(CODEC_ENV, "").strip().lower() or "auto"
    if wanted not in CODEC_CHOICES:
        raise ImportError(f"{CODEC_ENV}={os.environ[CODEC_ENV]!r}: expected one of {', '.join(CODEC_CHOICES)}")
    return wanted


def _slots(struct_name: str) -> dict[str, int]:
    return {name: offset for name, _, offset in STRUCTS[struct_name][2]}


def _pycapnp() -> Codec | None:
    """pycapnp's codec, or None if pycapnp does not import (any other ImportError is a bug: it propagates)."""
    try:
        from scaler.protocol import codec
    except ModuleNotFoundError as exc:
        if exc.name != "capnp":
            raise
        return None
    fast = codec._fast
    # lone.py reads the fields by the slots of scaler.protocol.layout: the fast reader must agree (it reads the
    # schema pycapnp loaded; layout.py is generated from the same file, and tests/protocol check that)
    agrees = fast is not None and (
        fast.task_slots == _slots("TaskBatch")
        and fast.result_slots == _slots("ResultBatch")
        and all(fast.kinds[name] == MESSAGE_UNION[name][0] for name in fast.kinds)
    )
    return Codec("pycapnp", codec.encode, codec.decode, codec.clear_caches, fast.read if fast and agrees else None)


def _pure() -> Codec:
    from scaler.protocol import purecodec

    return Codec("pure-Python", purecodec.encode, purecodec.decode, purecodec.clear_caches, purecodec.read_batch)


def _choose() -> Codec:
    wanted = _wanted()
    if wanted == "pure":
        return _pure()
    chosen = _pycapnp()
    if chosen is None:
        if wanted == "capnp":
            raise ImportError(f"{CODEC_ENV}=capnp but pycapnp is not installed (pip install pycapnp)")
        return _pure()
    return chosen


ACTIVE = _choose()
CODEC = ACTIVE.name
"""Which codec: "pycapnp" or "pure-Python"."""
encode = ACTIVE.encode
"""The frames of a message: its Cap'n Proto header, then its payload frames (not copied)."""
decode = ACTIVE.decode
"""The message in `frames` (header first), of a kind in `accept` if given; ProtocolError otherwise."""
clear_caches = ACTIVE.clear_caches
"""Forget the message shapes learnt (rebuilt on use): for a shell giving memory back."""
read_batch = ACTIVE.read_batch
"""(Message discriminant, the member struct's Data fields by pointer slot, b"" for null) of a one-segment
taskResults, submitTasks or dispatchTasks header laid out as the writers lay it out, or None: decode() it. None
itself where the codec has no such reader (scaler.protocol.lone then reads nothing)."""
