"""Encode and decode speed of Scaler's codec (scaler.protocol.codec, pure Python: ADR 0019) beside the tests' pycapnp
oracle (tests/protocol/capnp_codec.py, every field through pycapnp), for the hot messages: taskResults and submitTasks
batches of 1 and 1,000.

Runs under any interpreter: where pycapnp is missing (PyPy) only Scaler's codec is measured. On Python 3.9 (Debian's
pypy3) the records module does not import as it is (dataclass(slots=True), a `X | Y` alias at run time): this loads
it through a small source rewrite (drops slots=, makes the alias a typing.Union), for measuring only.

usage:
  python benchmarks/codec_speed.py [--seconds 0.5]
  PYTHONPATH=src pypy3 benchmarks/codec_speed.py
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(1, ROOT)  # tests.protocol.capnp_codec


def _load_records_on_39() -> None:
    """scaler.protocol.records for Python 3.9: without slots= and with the Message alias as a typing.Union."""
    path = os.path.join(ROOT, "src", "scaler", "protocol", "records.py")
    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "dataclass":
            node.keywords = [k for k in node.keywords if k.arg not in ("slots", "kw_only")]
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.BitOr):
            members: list[ast.expr] = []
            value: ast.expr = node.value
            while isinstance(value, ast.BinOp):
                members.insert(0, value.right)
                value = value.left
            members.insert(0, value)
            union = ast.Attribute(ast.Name("typing", ast.Load()), "Union", ast.Load())
            node.value = ast.Subscript(union, ast.Tuple(members, ast.Load()), ast.Load())
    tree.body.insert(2, ast.Import([ast.alias("typing")]))  # after the docstring and the __future__ import
    ast.fix_missing_locations(tree)
    spec = importlib.util.spec_from_loader("scaler.protocol.records", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__file__ = path
    sys.modules["scaler.protocol.records"] = module
    exec(compile(tree, path, "exec"), module.__dict__)


if sys.version_info < (3, 10):  # noqa: UP036 (Debian's pypy3 is Python 3.9)
    _load_records_on_39()

from scaler.protocol import codec  # noqa: E402
from scaler.protocol.records import SubmitTasks, TaskResults  # noqa: E402

try:
    from tests.protocol import capnp_codec
except ImportError:  # no pycapnp (PyPy)
    # a module or None: its rows are skipped without pycapnp
    capnp_codec = None  # type: ignore[assignment]

PREFIX = 3 << 40


def messages(n: int) -> dict[str, Any]:
    ids = [PREFIX | i for i in range(1, n + 1)]
    payload = b"r" * 40
    return {
        f"taskResults x{n}": TaskResults(ids, bytes(n), [payload] * n),
        f"submitTasks x{n}": SubmitTasks(ids, [PREFIX] * n, bytes(n), [1] * n, [0] * n, None, [payload] * n),
    }


def per_call(action: Callable[[], Any], seconds: float) -> float:
    """Microseconds per call: the best of 5 timed runs, after a warm-up as long as one (the JIT's)."""
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        action()
        count += 1
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(count):
            action()
        best = min(best, (time.perf_counter() - started) / count)
    return best * 1e6


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="warm-up and length of one timed run")
    args = parser.parse_args(argv)
    pypy = getattr(sys, "pypy_version_info", None)
    version = f"(PyPy {'.'.join(map(str, pypy[:3]))})" if pypy else ""
    print(platform.python_implementation(), platform.python_version(), version)
    codecs: list[tuple[str, Any]] = [("codec", codec)]
    if capnp_codec is not None:
        codecs.append(("pycapnp", capnp_codec))
    print(f"{'message':<20}" + "".join(f"{name + ' ' + op:>20}" for name, _ in codecs for op in ("encode", "decode")))
    for n in (1, 1000):
        for label, message in messages(n).items():
            row = f"{label:<20}"
            for _, module in codecs:
                frames = module.encode(message)
                assert module.decode(frames) == message
                encode = lambda module=module, message=message: module.encode(message)  # noqa: E731
                decode = lambda module=module, frames=frames: module.decode(frames)  # noqa: E731
                row += f"{per_call(encode, args.seconds):>17.2f} µs{per_call(decode, args.seconds):>17.2f} µs"
            print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
