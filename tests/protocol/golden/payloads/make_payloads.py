"""Regenerate tests/protocol/golden/payloads/: Python payloads exactly as Scaler's Python client and worker write them
with the default serializer (docs/protocol.md, "Python payloads"), and manifest.json saying what each one is.

    python tests/protocol/golden/payloads/make_payloads.py          # rewrite the files and manifest.json
    python tests/protocol/golden/payloads/make_payloads.py --check  # exit 1 if the current code writes otherwise

check_payloads.py (beside this) reads them as a peer without the `scaler` package would; the tests
(tests/protocol/test_payload_golden.py) run it with nothing but the standard library and what each file's "needs"
lists (cloudpickle, tblib) importable, and `sys.modules["scaler"] = None`.

Bytes: a file with "bytes_stable": true is byte-for-byte what the current code writes (plain pickle of builtin data,
stdlib classes by reference: the same on every machine). The others hold code pickled by value (cloudpickle: a code
object carries its file's path and is specific to one Python minor version, "same_python") or a traceback's text
(paths): for those, --check and the tests check that what the current code writes READS as documented instead.
"""

from __future__ import annotations

import datetime
import decimal
import fractions
import json
import operator
import sys
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import cloudpickle

from scaler.client.graph import build_list, identity, plan_graph
from scaler.client.grouping import group_plan, run_block
from scaler.payloads import pack_exception, pack_function
from scaler.serializer import DEFAULT_SERIALIZER

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.json"
SPEC_FILE = "grouped_block_spec.bin"

# The user's code of the examples: pickled by value, as the functions of a user's __main__ are (this module is
# registered so when imported under another name, as the tests do).
OFFSET = 10


def scale(x: Any, factor: int = 2) -> Any:
    return x * factor


def make_lambda() -> Any:
    offset = OFFSET
    return lambda x, y=1: x + y + offset  # a closure: `offset` travels in the payload


def double(x: Any) -> Any:
    return 2 * x


def fail(n: int) -> None:
    raise ValueError(f"the golden error: {n} is negative")


class GoldenError(Exception):
    """A user's exception class: pickled by value with its instance (cloudpickle), the traceback by tblib."""


def raise_custom(code: int) -> None:
    raise GoldenError("custom", code)


def caught(function: Any, *args: Any) -> BaseException:
    try:
        function(*args)
    except BaseException as exc:
        return exc
    raise AssertionError(f"{function.__name__} did not raise")


ARGUMENTS: dict[str, Any] = {
    "int": 42,
    "big_int": -(2**100),
    "float": 3.25,
    "complex": 1.5 - 2j,
    "str": "héllo, 世界",
    "bytes": b"\x00\x01\xffpayload",
    "bytearray": bytearray(b"mutable"),
    "bool": True,
    "none": None,
    "tuple": (1, "two", 3.0, None, b"4"),
    "list": [[1, 2], ["a", ["b"]], []],
    "dict": {"a": 1, "b": [1.5, None], 3: (True, b"x")},
    "set": {3, 1, 2},
    "frozenset": frozenset({7, 5}),
    "range": range(0, 10, 2),
}

OBJECT = {
    "name": "model",
    "weights": [0.5, -1.25],
    "when": datetime.date(2026, 11, 26),
    "price": decimal.Decimal("19.99"),
    "ratio": fractions.Fraction(1, 3),
}

RESULT = ("done", 15, [0.5, None])


def grouped_block() -> tuple[Any, dict[str, Any], tuple[Any, ...]]:
    """The one block task of a small grouped graph: (run_block, its spec, its inputs), as client.get(group=10) makes
    it. Its nodes: a stdlib function (operator.mul), a user's function (double), build_list (a list argument naming
    keys) and identity (an alias)."""
    graph: dict[Hashable, Any] = {
        "x": 2,
        "y": (operator.mul, "x", 10),
        "z": (double, "y"),
        "w": ["x", "z", 7],
        "v": "w",
    }
    grouped = group_plan(plan_graph(graph, ["v", "y"]), ["v", "y"], 10)
    (block,) = grouped.keys
    function, spec, *inputs = grouped.graph[block]
    return function, spec, tuple(grouped.graph[key] for key in inputs)


def _call(args: list[dict[str, str]], returns: Any, kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"args": args, "returns": repr(returns)}
    if kwargs:
        call["kwargs"] = {key: {"literal": repr(value)} for key, value in kwargs.items()}
    return call


def _literals(*values: Any) -> list[dict[str, str]]:
    return [{"literal": repr(value)} for value in values]


def golden_payloads() -> tuple[dict[str, bytes], dict[str, Any]]:
    """(file name -> bytes, the manifest) as the current code writes them."""
    this = sys.modules[__name__]
    if __name__ != "__main__":  # __main__'s functions go by value anyway
        cloudpickle.register_pickle_by_value(this)
    files: dict[str, bytes] = {}
    entries: dict[str, dict[str, Any]] = {}

    def add(name: str, payload: bytes, describes: str, needs: list[str], stable: bool, **entry: Any) -> None:
        files[name] = bytes(payload)
        entries[name] = {"describes": describes, "needs": needs, "bytes_stable": stable, **entry}

    def function(name: str, fn: Any, describes: str, calls: list[dict[str, Any]], by_value: bool = True) -> None:
        needs = ["cloudpickle"] if by_value else []
        payload = pack_function(DEFAULT_SERIALIZER, fn)
        add(name, payload, describes, needs, not by_value, kind="function", same_python=by_value, calls=calls)

    function(
        "function_plain.bin",
        scale,
        "function object of a plain function def scale(x, factor=2): return x * factor (by value)",
        [_call(_literals(3), 6), _call(_literals(3), 15, {"factor": 5}), _call(_literals("ab"), "abab")],
    )
    function(
        "function_lambda.bin",
        make_lambda(),
        "function object of a lambda x, y=1: x + y + offset, a closure over offset = 10 (by value)",
        [_call(_literals(1), 12), _call(_literals(1), 16, {"y": 5})],
    )
    function(
        "function_builtin.bin",
        len,
        "function object of the builtin len (by reference to builtins: plain pickle reads it)",
        [_call(_literals("abc"), 3)],
        by_value=False,
    )
    function(
        "graph_build_list.bin",
        build_list,
        "function object of a graph's list node, scaler's build_list(*items) -> list(items) (by value)",
        [_call(_literals(1, "a", None), [1, "a", None]), _call([], [])],
    )
    function(
        "graph_identity.bin",
        identity,
        "function object of a graph's alias node, scaler's identity(value) -> value (by value)",
        [_call(_literals({"k": 1}), {"k": 1})],
    )
    block_function, spec, inputs = grouped_block()
    assert block_function is run_block
    returns = run_block(spec, *inputs)
    function(
        "grouped_block_function.bin",
        run_block,
        "function object of a grouped block task, scaler's run_block(spec, *inputs) (by value); called with the "
        f"block spec ({SPEC_FILE}) and the block's input (the literal x = 2) it returns (v, y)",
        [_call([{"file": SPEC_FILE}, *_literals(*inputs)], returns)],
    )
    add(
        SPEC_FILE,
        DEFAULT_SERIALIZER.serialize(spec),
        "argument: the spec of that block, builtins only: {'steps': ((function, ((kind, a, b), ...)), ...), "
        "'outputs': (position, ...)}, kinds 0 LOCAL (value of step a), 1 FROM (item b of input a), 2 WHOLE (input a), "
        "3 VALUE (a itself), for the graph {x: 2, y: (mul, x, 10), z: (double, y), w: [x, z, 7], v: w} asked for "
        "[v, y]; its steps hold operator.mul (by reference), double, build_list and identity (by value)",
        ["cloudpickle"],
        False,
        kind="argument",
        same_python=True,
        type="dict",
        repr=None,
    )
    for kind_name, value in ARGUMENTS.items():
        add(
            f"argument_{kind_name}.bin",
            DEFAULT_SERIALIZER.serialize(value),
            f"argument of type {type(value).__name__}",
            [],
            True,
            kind="argument",
            type=type(value).__name__,
            repr=repr(value),
        )
    add(
        "object.bin",
        DEFAULT_SERIALIZER.serialize(OBJECT),
        "object (send_object, a graph literal): a dict holding stdlib classes (date, Decimal, Fraction) by reference",
        [],
        True,
        kind="object",
        type="dict",
        repr=repr(OBJECT),
    )
    add(
        "result.bin",
        DEFAULT_SERIALIZER.serialize(RESULT),
        "result of a success: a tuple",
        [],
        True,
        kind="result",
        type="tuple",
        repr=repr(RESULT),
    )
    error = caught(fail, -1)
    add(
        "error.bin",
        pack_exception(error),
        "error: a ValueError raised in fail(-1), called from caught(); its traceback rebuilt by tblib",
        ["tblib"],
        False,
        kind="error",
        text_starts_with="Traceback (most recent call last):\n",
        text_ends_with="ValueError: the golden error: -1 is negative\n",
        exception={"type": "ValueError", "args": repr(error.args), "frames": ["caught", "fail"]},
    )
    custom = caught(raise_custom, 7)
    add(
        "error_custom.bin",
        pack_exception(custom),
        "error: an instance of the user's exception class GoldenError(Exception) (the class by value)",
        ["cloudpickle", "tblib"],
        False,
        kind="error",
        same_python=True,
        text_starts_with="Traceback (most recent call last):\n",
        text_ends_with="GoldenError: ('custom', 7)\n",
        exception={"type": "GoldenError", "args": repr(custom.args), "frames": ["caught", "raise_custom"]},
    )
    text = "Error: boom\n    at fail (worker.ts:3:9)"
    encoded = text.encode()
    add(
        "error_text_only.bin",
        len(encoded).to_bytes(4, "little") + encoded,
        "error as a non-Python worker writes it: the length-prefixed UTF-8 text and nothing after (a Python "
        "client raises RemoteError(text))",
        [],
        True,
        kind="error_text_only",
        text=text,
    )
    manifest = {
        "python": "{}.{}".format(*sys.version_info[:2]),
        "about": "Python payloads as Scaler's Python client and worker write them with the default serializer: see "
        "make_payloads.py and check_payloads.py here, and docs/protocol.md, 'Python payloads'.",
        "files": dict(sorted(entries.items())),
    }
    return files, manifest


def manifest_text(manifest: dict[str, Any]) -> str:
    return json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    files, manifest = golden_payloads()
    if "--check" in argv:
        import subprocess
        import tempfile

        stale = [name for name, payload in files.items() if manifest["files"][name]["bytes_stable"]]
        stale = [name for name in stale if (HERE / name).read_bytes() != files[name]]
        if MANIFEST.read_text() != manifest_text(manifest):
            stale.append("manifest.json")
        with tempfile.TemporaryDirectory() as tmp:  # the unstable ones: what the code writes now must read the same
            for name, payload in files.items():
                Path(tmp, name).write_bytes(payload)
            Path(tmp, "manifest.json").write_text(manifest_text(manifest))
            checked = subprocess.run([sys.executable, str(HERE / "check_payloads.py"), "--dir", tmp], check=False)
        for name in stale:
            print(f"differs: {name}")
        return 1 if stale or checked.returncode else 0
    for old in HERE.glob("*.bin"):
        old.unlink()
    for name, payload in files.items():
        (HERE / name).write_bytes(payload)
    MANIFEST.write_text(manifest_text(manifest))
    print(f"wrote {len(files)} files and manifest.json to {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
