"""Which codec a process uses (scaler.protocol.active): pycapnp's where it imports, the pure-Python one otherwise
(PyPy), SCALER_CODEC forcing either; and the lone-message readers working on both. Each case is a fresh interpreter:
the choice is made once, at import."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# Prints the codec and checks that what messages exports is that codec's, and that a lone submit is read.
PROBE = """
import sys
if "no-capnp" in sys.argv:
    sys.modules["capnp"] = None  # import capnp raises ModuleNotFoundError, as on PyPy
from scaler.protocol import lone, messages
from scaler.protocol.records import SubmitTasks
module = "purecodec" if messages.CODEC == "pure-Python" else "codec"
assert messages.encode.__module__ == messages.decode.__module__ == "scaler.protocol." + module, messages.encode
frames = messages.encode(SubmitTasks([5], [7], b"\\0", [1], [0], None, [b"abc"]))
task = lone.read_lone(frames[0])
assert task is not None and (task.task_id, task.function_id, task.sizes) == (5, 7, [3]), task
dispatch = messages.decode([lone.dispatch_header(task), b"abc"])
assert type(dispatch).__name__ == "DispatchTasks" and dispatch.task_ids == [5], dispatch
print(messages.CODEC, "capnp" in sys.modules and sys.modules["capnp"] is not None)
"""


def probe(codec: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "SCALER_CODEC"}
    if codec is not None:
        env["SCALER_CODEC"] = codec
    return subprocess.run([sys.executable, "-c", PROBE, *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("codec", "args", "expected"),
    [
        (None, (), "pycapnp True"),
        ("", (), "pycapnp True"),
        ("auto", (), "pycapnp True"),
        ("capnp", (), "pycapnp True"),
        (" Pure ", (), "pure-Python False"),  # never loads pycapnp
        (None, ("no-capnp",), "pure-Python False"),
        ("auto", ("no-capnp",), "pure-Python False"),
    ],
)
def test_the_codec_chosen(codec: str | None, args: tuple[str, ...], expected: str) -> None:
    done = probe(codec, *args)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected


@pytest.mark.parametrize(
    ("codec", "args", "error"),
    [
        ("capnp", ("no-capnp",), "SCALER_CODEC=capnp but pycapnp is not installed"),
        ("fast", (), "SCALER_CODEC='fast': expected one of auto, capnp, pure"),
    ],
)
def test_a_codec_that_cannot_be_had_is_a_clear_import_error(codec: str, args: tuple[str, ...], error: str) -> None:
    done = probe(codec, *args)
    assert done.returncode == 1
    assert f"ImportError: {error}" in done.stderr, done.stderr
