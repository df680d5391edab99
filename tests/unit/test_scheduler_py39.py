"""The scheduler runs on PyPy, which Debian ships as Python 3.9 (PyPy 7.3.11): every module the scheduler imports
(its import closure, computed here in a fresh interpreter with the pure-Python codec, as PyPy loads it) keeps to
Python 3.9 at run time, although the package as a whole requires 3.10 (clients and workers).

Checked on the source: the 3.9 grammar (no `match`), and none of the 3.10+ run-time features that once were there
(dataclass(slots=True) -> scaler.core.slotted, zip(strict=), `X | Y` unions evaluated at run time) nor a few other
3.10+ names. And, where a PyPy with pyzmq is at hand ($SCALER_PYPY, else .venv-pypy (scripts/pypy-venv), else
`pypy3` on PATH, else /usr/bin/pypy3), by running there: the closure imports, slotted dataclasses behave, frames are
read whole (pyzmq's CFFI backend).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import scaler
from scaler.core.slotted import NATIVE_SLOTS, slotted, with_slots

SRC = Path(scaler.__file__).resolve().parent.parent
ROOTS = ("scaler.entry_points.scheduler", "scaler.scheduler.server", "scaler.scheduler.gate")
# Modules of the closure allowed what the checks below refuse, and why.
EXEMPT = {"scaler.core.slotted": "calls dataclass(slots=True) only where dataclass() takes it"}

CLOSURE_CODE = textwrap.dedent(
    f"""
    import json, sys
    for name in {ROOTS!r}:
        __import__(name)
    modules = {{n: m.__file__ for n, m in sys.modules.items() if n == "scaler" or n.startswith("scaler.")}}
    foreign = [n for n in ("capnp", "cloudpickle", "tblib") if n in sys.modules]
    print(json.dumps({{"modules": modules, "capnp": "capnp" in sys.modules, "foreign": foreign}}))
    """
)


def run_closure(python: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [python, "-c", CLOSURE_CODE], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def closure() -> dict[str, str]:
    """The scheduler's modules, by name, as the interpreter loads them (pycapnp installed: it must not be loaded)."""
    found = run_closure(sys.executable)
    assert found["capnp"] is False, "the scheduler's closure imports pycapnp (the one codec is pure Python, ADR 0019)"
    modules = found["modules"]
    assert isinstance(modules, dict)
    return modules


def test_pyproject_lists_exactly_the_closure_for_ruff_at_python_3_9(closure: dict[str, str]) -> None:
    """The one list of the scheduler's modules is pyproject.toml's [tool.ruff.per-file-target-version] (ruff then
    refuses 3.10 syntax in them): a module the scheduler comes to import must be added, one it no longer imports
    removed."""
    text = (SRC.parent / "pyproject.toml").read_text()  # (tomllib is 3.11+; the section is lines "path" = "version")
    section = text.split("[tool.ruff.per-file-target-version]\n", 1)[1].split("\n[", 1)[0]
    listed = dict(re.findall(r'^"([^"]+)" = "([^"]+)"$', section, re.MULTILINE))
    assert listed and set(listed.values()) == {"py39"}
    closure_files = {str(Path(path).resolve().relative_to(SRC.parent)) for path in closure.values()}
    assert closure_files - set(listed) == set(), "add these to pyproject.toml's per-file-target-version"
    assert set(listed) - closure_files == set(), "the scheduler no longer imports these: remove them there"


def test_the_closure_is_the_schedulers_without_pycapnp(closure: dict[str, str]) -> None:
    for name in (*ROOTS, "scaler.core.scheduler.core", "scaler.protocol.records", "scaler.protocol.codec"):
        assert name in closure
    # no upward imports: the errors and the protocol stand on their own, without the client's code or its pickling
    assert not [name for name in closure if name.startswith("scaler.client")]
    assert "scaler.payloads" not in closure and "scaler.serializer" not in closure
    assert len(closure) >= 40


def test_the_scheduler_loads_no_pickling_library() -> None:
    assert run_closure(sys.executable)["foreign"] == []  # cloudpickle, tblib, pycapnp


# ------------------------------------------------------------------------------------------------ the source check
DATACLASS_310 = {"slots", "kw_only", "match_args", "weakref_slot"}
TYPING_310 = {
    "TypeAlias",
    "ParamSpec",
    "ParamSpecArgs",
    "ParamSpecKwargs",
    "Concatenate",
    "TypeGuard",
    "is_typeddict",
    "Self",
    "Never",
    "LiteralString",
    "Required",
    "NotRequired",
    "Unpack",
    "TypeVarTuple",
    "assert_never",
    "assert_type",
    "reveal_type",
    "dataclass_transform",
}
NEW_NAMES = {
    "itertools": {"pairwise"},
    "asyncio": {"TaskGroup", "timeout", "timeout_at", "Runner"},
    "contextlib": {"aclosing", "chdir"},
    "enum": {"StrEnum", "verify"},
    "dataclasses": {"KW_ONLY"},
    "datetime": {"UTC"},
    "typing": TYPING_310,
}
NEW_MODULES = {"tomllib"}
NEW_BUILTINS = {"aiter", "anext", "ExceptionGroup", "BaseExceptionGroup", "EncodingWarning"}
TYPE_LIKE = re.compile(r"_?[A-Z]\w*[a-z]\w*")  # CapWords: a class, not a CONSTANT


def _is_newer_python(test: ast.expr) -> bool:
    """`sys.version_info >= (3, N)` with N > 9: its body runs only on a newer Python (the else is checked)."""
    return (
        isinstance(test, ast.Compare)
        and ast.unparse(test.left) == "sys.version_info"
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.GtE)
        and isinstance(test.comparators[0], ast.Tuple)
        and ast.literal_eval(test.comparators[0]) > (3, 9)
    )


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _looks_like_a_type(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value is None
    if isinstance(node, ast.Subscript):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _looks_like_a_type(node.left) or _looks_like_a_type(node.right)
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return bool(TYPE_LIKE.fullmatch(name))


class _Checker(ast.NodeVisitor):
    """Python 3.10+ run-time features in one module (annotations and `if TYPE_CHECKING:` blocks are not run)."""

    def __init__(self, future_annotations: bool) -> None:
        self.problems: list[str] = []
        self.future_annotations = future_annotations

    def report(self, node: ast.AST, text: str) -> None:
        self.problems.append(f"line {getattr(node, 'lineno', '?')}: {text}")

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test) or _is_newer_python(node.test):
            for statement in node.orelse:
                self.visit(statement)
            return
        self.generic_visit(node)

    def _annotation(self, node: ast.expr | None) -> None:
        if node is not None and not self.future_annotations:
            for part in ast.walk(node):
                if isinstance(part, ast.BinOp) and isinstance(part.op, ast.BitOr):
                    self.report(
                        part, "X | Y in an annotation evaluated at run time (add `from __future__ import annotations`)"
                    )

    def visit_arg(self, node: ast.arg) -> None:
        self._annotation(node.annotation)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._annotation(node.returns)
        for field_name, value in ast.iter_fields(node):
            if field_name != "returns":
                for child in value if isinstance(value, list) else [value]:
                    if isinstance(child, ast.AST):
                        self.visit(child)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._annotation(node.annotation)
        if node.value is not None:
            self.visit(node.value)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        keywords = {k.arg for k in node.keywords}
        if name == "dataclass" and keywords & DATACLASS_310:
            found = ", ".join(sorted(k for k in keywords & DATACLASS_310 if k))
            self.report(node, f"dataclass({found}=...) (Python 3.10+: use scaler.core.slotted)")
        if name == "zip" and "strict" in keywords:
            self.report(node, "zip(strict=...) (Python 3.10+)")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.BitOr) and (_looks_like_a_type(node.left) or _looks_like_a_type(node.right)):
            self.report(node, f"`{ast.unparse(node)}` evaluated at run time (Python 3.10+: use typing.Union)")
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name in NEW_MODULES:
                self.report(node, f"imports {alias.name} (Python 3.11+)")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module in NEW_MODULES:
            self.report(node, f"imports {node.module} (Python 3.11+)")
        for alias in node.names:
            if alias.name in NEW_NAMES.get(node.module or "", ()):
                self.report(node, f"from {node.module} import {alias.name} (Python 3.10+)")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name) and node.attr in NEW_NAMES.get(node.value.id, ()):
            self.report(node, f"{node.value.id}.{node.attr} (Python 3.10+)")
        elif node.attr == "bit_count":
            self.report(node, "int.bit_count() (Python 3.10+)")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in NEW_BUILTINS:
            self.report(node, f"{node.id} (Python 3.10+)")


def py39_problems(source: str) -> list[str]:
    """What in `source` Python 3.9 cannot run: its grammar (the parser's feature_version), then the features above."""
    try:
        tree = ast.parse(source, feature_version=(3, 9))
    except SyntaxError as exc:
        return [f"line {exc.lineno}: {exc.msg} (Python 3.9 grammar)"]
    future = any(
        isinstance(node, ast.ImportFrom)
        and node.module == "__future__"
        and any(a.name == "annotations" for a in node.names)
        for node in tree.body
    )
    checker = _Checker(future)
    checker.visit(tree)
    return checker.problems


def test_the_schedulers_modules_are_python_3_9(closure: dict[str, str]) -> None:
    problems = []
    for name, path in sorted(closure.items()):
        if name not in EXEMPT:
            problems += [f"{name}: {p}" for p in py39_problems(Path(path).read_text(encoding="utf-8"))]
    assert problems == [], "the scheduler must run on Python 3.9 (PyPy):\n  " + "\n  ".join(problems)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("match x:\n    case 1:\n        pass\n", "Python 3.9 grammar"),
        ("from dataclasses import dataclass\n@dataclass(slots=True)\nclass A:\n    x: int\n", "dataclass(slots=...)"),
        ("import dataclasses\n@dataclasses.dataclass(frozen=True, kw_only=True)\nclass A:\n    x: int\n", "kw_only"),
        ("for a, b in zip(x, y, strict=True):\n    pass\n", "zip(strict=...)"),
        ("Event = Tick | Received\n", "`Tick | Received` evaluated at run time"),
        ("Maybe = int | None\n", "evaluated at run time"),
        ("ok = isinstance(x, (list[int] | Foo))\n", "evaluated at run time"),
        ("def f(x: int | None) -> None:\n    pass\n", "annotation evaluated at run time"),
        ("from typing import TypeAlias\n", "from typing import TypeAlias"),
        ("import itertools\npairs = itertools.pairwise(x)\n", "itertools.pairwise"),
        ("n = x.bit_count()\n", "bit_count"),
        ("y = anext(it)\n", "anext"),
        ("import tomllib\n", "imports tomllib"),
        ("import sys\nif sys.version_info >= (3, 11):\n    pass\nelse:\n    import tomllib\n", "imports tomllib"),
    ],
)
def test_the_check_finds(source: str, expected: str) -> None:
    assert any(expected in p for p in py39_problems(source)), py39_problems(source)


@pytest.mark.parametrize(
    "source",
    [
        "from __future__ import annotations\ndef f(x: int | None) -> list[int] | None:\n    y: A | B = g()\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from typing import TypeAlias\n",
        "FLAGS = zmq.POLLIN | zmq.POLLOUT\nMASK = READ | WRITE\nbits = a | b\n",
        "from typing import Union\nEvent = Union[Tick, Received]\n",
        "for a, b in zip(x, y):\n    pass\n",
        "@slotted(frozen=True)\nclass A:\n    x: int\n",
        "import sys\nif sys.version_info >= (3, 11):\n    import tomllib\nelse:\n    import tomli as tomllib\n",
    ],
)
def test_the_check_lets_pass(source: str) -> None:
    assert py39_problems(source) == []


# ------------------------------------------------------------------------------------------------ slotted
@slotted
class _Point:
    x: int
    y: int = 2
    tags: list[str] = dataclasses.field(default_factory=list)


@slotted(frozen=True)
class _Key:
    name: str
    size: int = 0


def _check_slotted(point_cls: type[Any], key_cls: type[Any]) -> None:
    point = point_cls(1)
    assert point_cls.__slots__ == ("x", "y", "tags") and not hasattr(point, "__dict__")
    assert (point.x, point.y, point.tags) == (1, 2, []) and point == point_cls(1, 2, [])
    assert repr(point) == f"{point_cls.__name__}(x=1, y=2, tags=[])" and dataclasses.is_dataclass(point_cls)
    with pytest.raises(AttributeError):
        point.z = 3
    key = key_cls("a", 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        key.size = 4
    assert hash(key) == hash(key_cls("a", 3)) and not hasattr(key, "__dict__")
    for again in (copy.deepcopy(key), pickle.loads(pickle.dumps(key)), copy.copy(point)):
        assert again == (key if isinstance(again, key_cls) else point)


def test_slotted_is_dataclass_with_slots_here() -> None:
    assert NATIVE_SLOTS == (sys.version_info >= (3, 10))
    _check_slotted(_Point, _Key)


class _Point39:
    x: int
    y: int = 2
    tags: list[str] = dataclasses.field(default_factory=list)


class _Key39:
    name: str
    size: int = 0


# What Python 3.9 gets from slotted (dataclass() without slots=, then with_slots()), made here to be checked here too.
# mypy refuses to rebind a class name (misc); 3.9's slotted does rebind it, to the class with_slots makes
_Point39 = with_slots(dataclasses.dataclass(_Point39), frozen=False)  # type: ignore[misc]
_Key39 = with_slots(dataclasses.dataclass(_Key39, frozen=True), frozen=True)  # type: ignore[misc]


def test_with_slots_builds_what_dataclass_slots_builds() -> None:
    _check_slotted(_Point39, _Key39)
    assert _Point39.__qualname__ == "_Point39" and _Point39.__module__ == __name__
    assert "y" not in _Point39.__dict__ or isinstance(_Point39.__dict__["y"], type(_Point39.x))  # a slot, not 2


# ------------------------------------------------------------------------------------------------ under PyPy
def _pypy() -> str | None:
    """A PyPy with pyzmq and psutil, or None."""
    venv = SRC.parent / ".venv-pypy" / "bin" / "python"  # scripts/pypy-venv makes it (scripts/test runs that)
    candidates = [os.environ.get("SCALER_PYPY", ""), str(venv), shutil.which("pypy3") or "", "/usr/bin/pypy3"]
    for candidate in filter(None, candidates):
        probe = "import sys, zmq, psutil; assert sys.implementation.name == 'pypy'"
        try:
            done = subprocess.run([candidate, "-c", probe], capture_output=True, timeout=60, check=False)
        except OSError:
            continue
        if done.returncode == 0:
            return candidate
    return None


@pytest.fixture(scope="module")
def pypy() -> str:
    found = _pypy()
    if found is None:
        pytest.skip("no PyPy with pyzmq and psutil here ($SCALER_PYPY, .venv-pypy, pypy3 on PATH, /usr/bin/pypy3)")
    return found


def run_pypy(pypy: str, code: str) -> str:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{SRC.parent}"}
    done = subprocess.run([pypy, "-c", code], capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_under_pypy_the_closure_imports(pypy: str, closure: dict[str, str]) -> None:
    found = run_closure(pypy)
    assert found["capnp"] is False
    modules = found["modules"]
    assert isinstance(modules, dict)
    assert sorted(set(closure) - set(modules)) == [], "modules CPython's closure has that PyPy's has not"


def test_under_pypy_slotted_dataclasses_behave(pypy: str) -> None:
    code = textwrap.dedent(
        """
        import copy, dataclasses, pickle, sys
        from scaler.core.slotted import NATIVE_SLOTS, slotted
        from scaler.core.scheduler.events import Received, Tick
        from scaler.protocol.records import Heartbeat, Status

        @slotted(frozen=True)
        class Key:
            name: str
            size: int = 0

        assert NATIVE_SLOTS == (sys.version_info >= (3, 10))
        key = Key("a")
        try:
            key.size = 1
        except dataclasses.FrozenInstanceError:
            pass
        else:
            raise AssertionError("not frozen")
        assert Key.__slots__ == ("name", "size") and not hasattr(key, "__dict__")
        assert copy.deepcopy(key) == key and pickle.loads(pickle.dumps(key)) == key and hash(key) == hash(Key("a"))
        for record in (Tick(1.0), Received(1.0, b"p", Heartbeat()), Status()):
            assert not hasattr(record, "__dict__"), type(record)
        assert Status().workers == [] and Status().workers is not Status().workers
        print("ok", sys.version_info[:2])
        """
    )
    assert run_pypy(pypy, code).startswith("ok")


def test_under_pypy_frames_are_read_whole(pypy: str) -> None:
    """pyzmq's CFFI backend never sets Frame.more and has no Frame.get(): the scheduler read each frame of a
    message as a message of its own, and failed on every message reading its connection's fd (SRCFD)."""
    code = textwrap.dedent(
        """
        import zmq
        from scaler.io.frameinfo import cffi_backend, frame_get
        from scaler.io.sockets import recv_frames

        ctx = zmq.Context()
        router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
        port = router.bind_to_random_port("tcp://127.0.0.1")
        dealer.connect(f"tcp://127.0.0.1:{port}")
        dealer.send_multipart([b"header", b"payload"])
        dealer.send(b"second")
        assert router.poll(10_000)
        first = recv_frames(router)
        assert [f.bytes for f in first[1:]] == [b"header", b"payload"], [f.bytes for f in first]
        assert router.poll(10_000)
        assert [f.bytes for f in recv_frames(router)[1:]] == [b"second"]
        fd = frame_get(first[0], zmq.SRCFD)
        assert isinstance(fd, int) and fd > 2, fd
        try:
            frame_get(first[0], "User-Id")  # no CURVE here: libzmq has none
        except zmq.ZMQError:
            pass
        else:
            raise AssertionError("a User-Id without CURVE")
        dealer.close(0)
        router.close(0)
        ctx.term()
        print("ok", cffi_backend())
        """
    )
    assert run_pypy(pypy, code).strip() == "ok True"
