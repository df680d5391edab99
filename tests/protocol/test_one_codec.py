"""Scaler runs one codec (ADR 0019): scaler.protocol.codec, pure Python, on CPython and PyPy alike. A process without
pycapnp (here: an interpreter where `import capnp` fails, as on PyPy or an install without the conformance extra)
imports the client, the worker and the scheduler, and encodes and decodes with it; pycapnp is never loaded. Each case
is a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
if "no-capnp" in sys.argv:
    sys.modules["capnp"] = None  # import capnp raises ModuleNotFoundError, as on PyPy
import scaler.client, scaler.scheduler.server, scaler.worker
from scaler.protocol import codec, messages
from scaler.protocol.records import SubmitTasks
assert messages.encode is codec.encode and messages.decode is codec.decode, messages.encode
frames = messages.encode(SubmitTasks([5], [7], b"\\0", [1], [0], None, [b"abc"]))
task = messages.decode(frames)
assert type(task).__name__ == "SubmitTasks" and (task.task_ids, task.function_ids) == ([5], [7]), task
print(messages.CODEC, "capnp" in sys.modules and sys.modules["capnp"] is not None)
"""


def probe(*args: str) -> str:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_every_role_runs_without_pycapnp() -> None:
    assert probe("no-capnp") == "pure-Python False"


def test_pycapnp_installed_is_not_loaded() -> None:
    assert probe() == "pure-Python False"
