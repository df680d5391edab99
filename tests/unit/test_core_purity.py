"""The pure cores stay pure: no module under scaler.core (nor the graph planner) imports I/O, threads, the clock,
unseeded randomness, or any shell module. Checked on the source (AST), so an import hidden in a function counts.

Only what a core module imports itself is judged here; test_the_pure_cores_import_with_io_modules_blocked checks
what the imports pull in, in a fresh interpreter.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import scaler

PACKAGE = Path(scaler.__file__).resolve().parent
PURE_ROOTS = [PACKAGE / "core"]
# pure by their own docstrings; errors.py: exception classes and their texts, over the protocol's records only
PURE_FILES = [
    PACKAGE / "client" / "graph.py",
    PACKAGE / "client" / "shipped.py",
    PACKAGE / "errors.py",
    PACKAGE / "task_context.py",  # the hooks a processor installs; it imports nothing of its own
]

# Standard-library and third-party modules a pure core may not import at all.
FORBIDDEN = {
    "asyncio",
    "capnp",
    "concurrent",
    "datetime",
    "importlib",
    "multiprocessing",
    "os",
    "pathlib",
    "psutil",
    "queue",
    "select",
    "selectors",
    "secrets",
    "shutil",
    "signal",
    "socket",
    "subprocess",
    "sys",
    "tempfile",
    "threading",
    "time",
    "uuid",
    "zmq",
}
# Scaler modules a pure core may import: other core modules, and the protocol's records and pure helpers.
# scaler.about: the version and the interpreter check (clients and workers refuse Python 3.9, where only the
# scheduler runs); it reads sys and platform only.
ALLOWED_SCALER = (
    "scaler.core",
    "scaler.protocol.records",
    "scaler.protocol.columns",
    "scaler.protocol.errors",
    "scaler.protocol.capabilities",
    "scaler.protocol.frames",  # payloads <-> frames, Pieces: pure functions
    "scaler.about",
    "scaler.client.shipped",
    "scaler.errors",  # GraphCycleError (client/graph.py)
)
FORBIDDEN_CALLS = {"open", "print", "input", "breakpoint", "exec", "eval", "compile", "__import__"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def pure_modules() -> list[Path]:
    return sorted({*(p for root in PURE_ROOTS for p in root.rglob("*.py")), *PURE_FILES})


def imported_names(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the tree, relative ones resolved."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.append((node.lineno, name))
            found += [(node.lineno, f"{name}.{alias.name}") for alias in node.names if name.startswith("scaler")]
    return found


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    tree = ast.parse(source)
    problems = []
    for line, name in imported_names(tree, module, is_package):
        top = name.split(".")[0]
        if top in FORBIDDEN:
            problems.append(f"line {line}: imports {name}")
        elif top == "scaler" and not name.startswith(ALLOWED_SCALER) and name not in ("scaler", "scaler.protocol"):
            problems.append(f"line {line}: imports {name}, a module outside the pure layers")
    random_names, logging_names = _module_aliases(tree, problems)
    return problems + _uses(tree, random_names, logging_names)


def _module_aliases(tree: ast.AST, problems: list[str]) -> tuple[set[str], set[str]]:
    """The names random and logging are imported as; forbidden from-imports and calls go to `problems`."""
    random_names: set[str] = set()
    logging_names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "random":
                    random_names.add(alias.asname or "random")
                if alias.name == "logging":
                    logging_names.add(alias.asname or "logging")
        elif isinstance(node, ast.ImportFrom) and node.module == "random":
            problems += [f"line {node.lineno}: from random import {a.name}" for a in node.names if a.name != "Random"]
        elif isinstance(node, ast.ImportFrom) and node.module == "logging":
            names = [a.name for a in node.names if not a.name.isupper()]
            problems += [f"line {node.lineno}: from logging import {name}" for name in names]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            problems.append(f"line {node.lineno}: calls {node.func.id}()")
    return random_names, logging_names


def _uses(tree: ast.AST, random_names: set[str], logging_names: set[str]) -> list[str]:
    """Uses of the shared random generator, of logging beyond its levels, and unseeded Random()."""
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in random_names and node.attr != "Random":
                problems.append(f"line {node.lineno}: uses random.{node.attr} (the shared, unseeded generator)")
            if node.value.id in logging_names and not node.attr.isupper():
                problems.append(f"line {node.lineno}: uses logging.{node.attr} (log through commands; levels only)")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "Random":
            if not node.args and not node.keywords:
                problems.append(f"line {node.lineno}: Random() without a seed")
    return problems


def test_there_are_pure_modules_to_check() -> None:
    names = [module_name(p) for p in pure_modules()]
    assert "scaler.core.scheduler.core" in names
    assert "scaler.core.worker.agent" in names
    assert "scaler.core.client.session" in names
    assert len(names) >= 12


@pytest.mark.parametrize("path", pure_modules(), ids=module_name)
def test_pure_module_imports_nothing_impure(path: Path) -> None:
    problems = violations(path.read_text(), module_name(path), path.name == "__init__.py")
    assert problems == [], f"{module_name(path)} is not pure:\n  " + "\n  ".join(problems)


# ----------------------------------------------------------------------------------------------- the checker itself
@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import asyncio", "imports asyncio"),
        ("import zmq.asyncio", "imports zmq.asyncio"),
        ("from time import monotonic", "imports time"),
        ("def f():\n    import os\n    return os.getpid()", "line 2: imports os"),
        ("import threading as t", "imports threading"),
        ("from scaler.io import sockets", "imports scaler.io"),
        ("from scaler.client.connection import Connection", "imports scaler.client.connection"),
        ("from scaler import io", "imports scaler.io"),
        ("from ...io import sockets", "imports scaler.io"),
        ("import random\nx = random.random()", "uses random.random"),
        ("from random import choice", "from random import choice"),
        ("import random\nr = random.Random()", "Random() without a seed"),
        ("import logging\nlogging.getLogger(__name__)", "uses logging.getLogger"),
        ("from logging import getLogger", "from logging import getLogger"),
        ("print('hello')", "calls print()"),
        ("data = open('f').read()", "calls open()"),
    ],
)
def test_the_checker_catches(source: str, expected: str) -> None:
    problems = violations(source, "scaler.core.scheduler.example")
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize(
    "source",
    [
        "import random\nr = random.Random(42)",
        "from random import Random\nr = Random(7)",
        "import logging\nLEVEL = logging.WARNING",
        "from logging import INFO",
        "from scaler.protocol.records import Hello",
        "from scaler.protocol.columns import pack_u64",
        "from .placement import water_fill",
        "from scaler.core.worker import messages",
        "import math\nfrom collections import deque",
    ],
)
def test_the_checker_accepts(source: str) -> None:
    assert violations(source, "scaler.core.scheduler.example") == []


BLOCKED = ("capnp", "zmq", "psutil", "asyncio", "cloudpickle", "tblib", "socket", "select", "multiprocessing")
PURE_PACKAGES = (
    "scaler.core.scheduler",
    "scaler.core.worker.agent",
    "scaler.core.client.session",
    "scaler.client.graph",
)


def test_the_pure_cores_import_with_io_modules_blocked() -> None:
    """In a fresh interpreter where importing Cap'n Proto, ZeroMQ, psutil, asyncio, sockets or multiprocessing fails,
    the cores and the graph planner still import (nothing they pull in at import time needs them)."""
    code = "\n".join(
        [
            "import sys",
            f"for name in {BLOCKED!r}:",
            "    sys.modules[name] = None  # importing it now raises ImportError",
            *(f"import {name}" for name in PURE_PACKAGES),
            "print('imported')",
        ]
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and "imported" in done.stdout, done.stderr


def test_importing_scaler_for_a_client_leaves_the_servers_out() -> None:
    code = (
        "import sys; from scaler import Client; "
        "print(sorted(m for m in sys.modules if m.startswith(('scaler.scheduler', 'scaler.worker', "
        "'scaler.cluster', 'psutil'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout
