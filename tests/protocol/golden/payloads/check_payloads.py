"""Check golden Python payloads the way a peer WITHOUT the `scaler` package reads them (standard library, cloudpickle
for functions and by-value code, tblib for an exception's traceback). Needs nothing of Scaler: copy it anywhere.

    python check_payloads.py [--dir DIR] [--path DIR ...] [FILE ...]

--dir       where manifest.json and the files are (default: this script's directory)
--path      a directory put first on sys.path (where cloudpickle/tblib are, when run with `python -I -S`)
FILE        the files to check (default: all in the manifest)

Prints `importable: name,...` (which of scaler, cloudpickle, tblib, zmq, capnp import here), then one line per file:
PASS name, SKIP name — why, or FAIL name — detail. Exit status 0 if none failed. How each kind is read (manifest.json,
"kind"):
  function         serializer, data = pickle.loads(payload); serializer must be None; fn = pickle.loads(data); each of
                   "calls": fn(*args, **kwargs), and repr(result) must be "returns"
  argument, object, result
                   value = pickle.loads(payload); type(value).__name__ must be "type", and repr(value) "repr"
                   unless that is null (a value holding functions: it is used by a call instead)
  error            u32 little-endian length L, L bytes of UTF-8 text, then exc = pickle.loads(rest) (tblib rebuilds its
                   traceback): the text, exc's type and args, and its traceback's function names, innermost last
  error_text_only  u32 length L, L bytes of UTF-8 text and nothing after (what a non-Python worker writes: a Python
                   client raises RemoteError(text))
An argument of a call is {"literal": a Python literal} or {"file": another file of the manifest}, loaded as an argument.
"""

from __future__ import annotations

import sys

sys.modules["scaler"] = None  # type: ignore[assignment]  # before anything else: any reference to scaler fails

import argparse  # noqa: E402
import ast  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pickle  # noqa: E402
import struct  # noqa: E402
from typing import Any  # noqa: E402

PROBED = ("scaler", "cloudpickle", "tblib", "zmq", "capnp")


def importable() -> list[str]:
    found = []
    for name in PROBED:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        found.append(name)
    return found


def read_text(payload: bytes) -> tuple[str, bytes]:
    if len(payload) < 4:
        raise ValueError(f"an error payload of {len(payload)} bytes has no length")
    (length,) = struct.unpack_from("<I", payload)
    if 4 + length > len(payload):
        raise ValueError(f"the text length {length} runs past the payload's {len(payload)} bytes")
    return payload[4 : 4 + length].decode("utf-8"), payload[4 + length :]


def frames(exc: BaseException) -> list[str]:
    names = []
    tb = exc.__traceback__
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    return names


def argument(directory: str, item: dict[str, Any]) -> Any:
    if "file" in item:
        with open(os.path.join(directory, item["file"]), "rb") as f:
            return pickle.loads(f.read())
    return ast.literal_eval(item["literal"])


def check(directory: str, name: str, entry: dict[str, Any]) -> str | None:
    """None if the file reads as documented, else what differs."""
    with open(os.path.join(directory, name), "rb") as f:
        payload = f.read()
    kind = entry["kind"]
    if kind == "function":
        return check_function(directory, payload, entry)
    if kind in ("argument", "object", "result"):
        value = pickle.loads(payload)
        if type(value).__name__ != entry["type"] or entry["repr"] not in (None, repr(value)):
            return f"loaded {type(value).__name__} {value!r}"
        return None
    if kind == "error_text_only":
        text, rest = read_text(payload)
        if rest:
            return f"{len(rest)} bytes after the text"
        return None if text == entry["text"] else f"the text is {text!r}"
    if kind == "error":
        return check_error(payload, entry)
    return f"unknown kind {kind!r}"


def check_function(directory: str, payload: bytes, entry: dict[str, Any]) -> str | None:
    serializer, data = pickle.loads(payload)
    if serializer is not None:
        return f"the serializer is {serializer!r}, not None (the default)"
    function = pickle.loads(data)
    for call in entry["calls"]:
        args = [argument(directory, item) for item in call["args"]]
        kwargs = {key: argument(directory, item) for key, item in call.get("kwargs", {}).items()}
        got = repr(function(*args, **kwargs))
        if got != call["returns"]:
            return f"called with {call}: returned {got}"
    return None


def check_error(payload: bytes, entry: dict[str, Any]) -> str | None:
    text, rest = read_text(payload)
    if not text.startswith(entry["text_starts_with"]) or not text.endswith(entry["text_ends_with"]):
        return f"the text is {text!r}"
    exc = pickle.loads(rest)
    want = entry["exception"]
    if type(exc).__name__ != want["type"] or repr(exc.args) != want["args"]:
        return f"the exception is {type(exc).__name__}{exc.args!r}"
    if frames(exc) != want["frames"]:
        return f"its traceback's frames are {frames(exc)}"
    return None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--path", action="append", default=[])
    parser.add_argument("files", nargs="*")
    options = parser.parse_args(argv)
    sys.path[:0] = options.path
    with open(os.path.join(options.dir, "manifest.json")) as f:
        manifest = json.load(f)
    print("importable: " + ",".join(importable()))
    python = "{}.{}".format(*sys.version_info[:2])
    failed = False
    for name in options.files or sorted(manifest["files"]):
        entry = manifest["files"][name]
        if entry.get("same_python") and python != manifest["python"]:
            print(f"SKIP {name} — by-value code of Python {manifest['python']}, this is {python}")
            continue
        try:
            problem = check(options.dir, name, entry)
        except Exception as exc:  # what failed is the report
            problem = f"{type(exc).__name__}: {exc}"
        print(f"PASS {name}" if problem is None else f"FAIL {name} — {problem}")
        failed = failed or problem is not None
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
