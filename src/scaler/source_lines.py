"""The source lines of functions that travel by value (defined in a script, a notebook, `python -c`), so that a
traceback raised through them on a worker says where, as ProcessPoolExecutor's do.

cloudpickle names the file of code it pickles by value `<dynamic-code>`. The default serializer pickles with
`SourcePickler`, which keeps the real file name, and appends to the pickle, when it pickled such code, the lines
of that code (those lines only) read from the client's `linecache`. `pickle.loads` stops at the pickle's end and
ignores them; a Python worker registers them in its own `linecache` (`register_shipped`), once per function object.
Code pickled by reference (a function of an importable module) is not touched: the worker reads its file itself.
"""

from __future__ import annotations

import io
import linecache
import pickle
import struct
import sys
import threading
import types
from collections import ChainMap
from collections.abc import Callable, Iterable
from typing import Any

import cloudpickle

# Appended to a pickle: the lines pickled, their length ("<I"), then this mark (a pickle itself ends with b".").
MARK = b"\x00shipped-source-lines\x01"
_LENGTH = struct.Struct("<I")
# {file name: ((first line number, (line, line...)), ...)}: consecutive lines of that file, their text with "\n".
Shipped = dict[str, tuple[tuple[int, tuple[str, ...]], ...]]

_noted = threading.local()  # .codes: the code objects _reduce_code saw in this thread since dumps began
_CODE_REDUCE: Callable[[types.CodeType], tuple[Any, tuple[Any, ...]]] = cloudpickle.Pickler.dispatch_table[
    types.CodeType
]


def _filename_index() -> int | None:
    """Where cloudpickle's reduction of a code object holds its file name (None: it keeps the real one)."""
    args = _CODE_REDUCE(_filename_index.__code__)[1]
    marks = [i for i, arg in enumerate(args) if arg == "<dynamic-code>"]
    return marks[0] if len(marks) == 1 else None


_FILENAME_AT = _filename_index()


def _reduce_code(code: types.CodeType) -> tuple[Any, tuple[Any, ...]]:
    """cloudpickle's reduction of a code object (cloudpickle pickles code by value only), with its real file name;
    noted for dumps, which takes the notes of this thread when its pickle is written."""
    constructor, args = _CODE_REDUCE(code)
    if _FILENAME_AT is not None:
        args = (*args[:_FILENAME_AT], code.co_filename, *args[_FILENAME_AT + 1 :])
    _noted.__dict__.setdefault("codes", []).append(code)
    return constructor, args


_OWN, *_OTHERS = cloudpickle.Pickler.dispatch_table.maps  # cloudpickle's reducers, then copyreg's (live)


class SourcePickler(cloudpickle.Pickler):  # type: ignore[misc]  # cloudpickle is not typed
    """cloudpickle's Pickler with _reduce_code for code objects. Its table is as deep as cloudpickle's: an object
    of a type no map holds costs one miss per map, and a plain dict or list argument costs what it did."""

    dispatch_table = ChainMap({**_OWN, types.CodeType: _reduce_code}, *_OTHERS)


def dumps(obj: Any) -> bytes:
    """cloudpickle.dumps(obj) with the highest protocol, the code it holds by value keeping its file name, and that
    code's source lines appended after the pickle (if there is such code and its lines are known)."""
    noted = _noted.__dict__
    noted.pop("codes", None)  # a pickle that failed half-way
    with io.BytesIO() as file:
        SourcePickler(file, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
        data = file.getvalue()
    codes = noted.pop("codes", None)
    if codes is None:
        return data
    shipped = lines_of(codes)
    if not shipped:
        return data
    lines = pickle.dumps(shipped, protocol=pickle.HIGHEST_PROTOCOL)
    return data + lines + _LENGTH.pack(len(lines)) + MARK


def lines_of(codes: Iterable[types.CodeType]) -> Shipped:
    """The source lines of `codes` that the client's linecache knows, in runs of consecutive lines by file. A
    script's own file is pinned in the client's linecache first, so that its tracebacks show these lines too."""
    numbers: dict[str, set[int]] = {}
    for code in codes:
        numbers.setdefault(code.co_filename, set()).update(range(code.co_firstlineno, _last_line(code) + 1))
    shipped: Shipped = {}
    for filename, wanted in numbers.items():
        _pin_script(filename)
        known = linecache.getlines(filename)
        runs = tuple((first, tuple(known[first - 1 : last])) for first, last in _runs(wanted, len(known)))
        if runs:
            shipped[filename] = runs
    return shipped


def _last_line(code: types.CodeType) -> int:
    """The last source line of `code` (its nested code objects are noted on their own)."""
    positions = getattr(code, "co_positions", None)
    if positions is not None:  # Python 3.11+: where each instruction ends
        ends = [end or line or 0 for line, end, _, _ in positions()]
    else:
        import dis  # Python 3.10: where each line starts

        ends = [line for _, line in dis.findlinestarts(code) if line is not None]
    return max([code.co_firstlineno, *ends])


def _runs(numbers: Iterable[int], known: int) -> list[tuple[int, int]]:
    """Sorted runs (first, last) of consecutive line numbers, of those up to `known`."""
    runs: list[tuple[int, int]] = []
    for number in sorted(n for n in numbers if n <= known):
        if runs and runs[-1][1] == number - 1:
            runs[-1] = (runs[-1][0], number)
        else:
            runs.append((number, number))
    return runs


def _pin_script(filename: str) -> None:
    """Keep the client's lines of the script it runs (__main__) as they are now, when functions of it ship: should the
    script change or go, the client's tracebacks show what the workers ran, as the workers do."""
    main = sys.modules.get("__main__")
    if getattr(main, "__file__", None) != filename:
        return
    lines = linecache.getlines(filename)
    entry = linecache.cache.get(filename)
    if lines and entry is not None and len(entry) == 4 and entry[1] is not None:
        linecache.cache[filename] = (entry[0], None, entry[2], entry[3])


def shipped_in(data: bytes | bytearray | memoryview) -> Shipped:
    """The source lines appended to a pickle by dumps ({} if none)."""
    view = memoryview(data)
    if len(view) < len(MARK) + _LENGTH.size or view[-len(MARK) :] != MARK:
        return {}
    end = len(view) - len(MARK) - _LENGTH.size
    (length,) = _LENGTH.unpack_from(view, end)
    shipped: Shipped = pickle.loads(view[end - length : end])
    return shipped


def register(shipped: Shipped) -> None:
    """Put shipped source lines into this process's linecache, under their files' names, beside the lines shipped
    before (the last shipped wins a line). They are kept as shipped: a file of that name here is not read."""
    for filename, runs in shipped.items():
        entry = linecache.cache.get(filename)
        lines = list(entry[2]) if entry is not None and len(entry) == 4 and entry[1] is None else []
        for first, texts in runs:
            last = first - 1 + len(texts)
            if len(lines) < last:
                lines.extend("\n" for _ in range(last - len(lines)))
            lines[first - 1 : last] = texts
        linecache.cache[filename] = (sum(len(line) for line in lines), None, lines, filename)


def register_shipped(function_object: bytes) -> None:
    """Register the source lines shipped in a function object (a default serializer's, see scaler.payloads)."""
    try:
        serializer, function_bytes = pickle.loads(function_object)
        if serializer is None and isinstance(function_bytes, (bytes, bytearray)):
            register(shipped_in(function_bytes))
    except Exception:  # lines are a courtesy: a payload they cannot be read from still runs
        return
