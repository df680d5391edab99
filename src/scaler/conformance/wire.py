"""Raw wire helpers of the conformance kit: the schema (pycapnp), columns, frames, peers and the check runner.

Written from docs/protocol.md and scaler.capnp alone; nothing here imports scaler's protocol, client or worker code.
"""

from __future__ import annotations

import importlib.resources
import itertools
import os
import struct
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import zmq

PROTOCOL_VERSION = 1
SUCCESS, ERROR, CANCELED, CRASHED, FAILED, TIMED_OUT, OVER_MEMORY = range(7)
STATUS_NAMES = ("success", "error", "canceled", "crashed", "failed", "timedOut", "overMemory")
PROFILE, SILENT, STREAM_OUTPUT = 1, 2, 4
MAX_FRAME = 1 << 20  # no frame sent to a scheduler may be bigger (section 2): bigger payloads span frames

_schema: Any = None


def schema() -> Any:
    """The `scaler.capnp` schema shipped in the installed package, loaded with pycapnp on first use."""
    global _schema
    if _schema is None:
        try:
            import capnp  # type: ignore[import-not-found,unused-ignore]
        except ModuleNotFoundError as exc:  # Scaler itself does not need pycapnp (ADR 0019): the kit does
            raise ImportError("the conformance kit needs pycapnp: pip install 'scaler[conformance]'") from exc

        resource = importlib.resources.files("scaler").joinpath("protocol").joinpath("scaler.capnp")
        with importlib.resources.as_file(resource) as path:
            _schema = capnp.load(str(path))
    return _schema


# ------------------------------------------------------------------------------------------------ outcomes
class CheckFailed(Exception):
    """A check's expectation did not hold; the message says what was seen."""


class CheckSkipped(Exception):
    """A check cannot run against this peer (the message says why)."""


def expect(condition: bool, detail: str) -> None:
    if not condition:
        raise CheckFailed(detail)


_advice: list[str] = []  # what the check running now found against a "should" of docs/protocol.md


def advise(condition: bool, detail: str) -> None:
    """A recommendation ("should") that does not hold: the check still passes, and its line says what was seen."""
    if not condition:
        _advice.append(detail)


# ------------------------------------------------------------------------------------------------ columns
def u64(values: Iterable[int]) -> bytes:
    items = list(values)
    return struct.pack(f"<{len(items)}Q", *items)


def u32(values: Iterable[int]) -> bytes:
    items = list(values)
    return struct.pack(f"<{len(items)}I", *items)


def i32(values: Iterable[int]) -> bytes:
    items = list(values)
    return struct.pack(f"<{len(items)}i", *items)


def u16(values: Iterable[int]) -> bytes:
    items = list(values)
    return struct.pack(f"<{len(items)}H", *items)


def _unpack(data: bytes, size: int, code: str, column: str) -> list[int]:
    if len(data) % size:
        raise CheckFailed(f"column {column} has {len(data)} bytes, not a multiple of {size}")
    return list(struct.unpack(f"<{len(data) // size}{code}", data))


def unpack_u64(data: bytes, column: str = "u64") -> list[int]:
    return _unpack(data, 8, "Q", column)


def unpack_u32(data: bytes, column: str = "u32") -> list[int]:
    return _unpack(data, 4, "I", column)


def unpack_u16(data: bytes, column: str = "u16") -> list[int]:
    return _unpack(data, 2, "H", column)


# ------------------------------------------------------------------------------------------------ messages
def build(member: str, /, **fields: Any) -> bytes:
    """A header frame: a `Message` whose union member is `member`, with `fields` (schema names; columns packed;
    `requirements` as a list of lists of capability texts)."""
    root = schema().Message.new_message()
    body = root.init(member)
    for key, value in fields.items():
        if key == "requirements":
            entries = body.init("requirements", len(value))
            for k, capabilities in enumerate(value):
                entries[k].capabilities = list(capabilities)
        else:
            setattr(body, key, value)
    header = bytes(root.to_bytes())
    if len(header) > MAX_FRAME:
        raise ValueError(f"the kit built a {member} header of {len(header):,} bytes, over the 1 MiB frame limit")
    return header


def pieces(payload: bytes, first: int = MAX_FRAME) -> list[bytes]:
    """The frames a payload travels in alone: none for an empty one, itself up to MAX_FRAME, else pieces of MAX_FRAME
    bytes (the last one shorter) after a first one of `first` bytes (any cut is valid: receivers must accept it)."""
    if len(payload) <= MAX_FRAME:
        return [payload] if payload else []
    assert 0 < first <= MAX_FRAME
    cuts = [0, *range(first, len(payload), MAX_FRAME), len(payload)]
    return [payload[a:b] for a, b in itertools.pairwise(cuts)]


def layout(payloads: Sequence[bytes], pack: bool) -> list[bytes]:
    """Frames for payloads, none bigger than MAX_FRAME: each non-empty payload alone, or (pack) runs of them back to
    back in frames of at most MAX_FRAME; a payload bigger than MAX_FRAME starts a frame and spans frames of 1 MiB."""
    frames: list[bytes] = []
    run: list[bytes] = []
    run_bytes = 0
    for payload in payloads:
        if not payload:
            continue
        if run and (not pack or len(payload) > MAX_FRAME or run_bytes + len(payload) > MAX_FRAME):
            frames.append(b"".join(run))
            run, run_bytes = [], 0
        if len(payload) > MAX_FRAME or not pack:
            frames.extend(pieces(payload))
        else:
            run.append(payload)
            run_bytes += len(payload)
    if run:
        frames.append(b"".join(run))
    return frames


def cut(sizes: Sequence[int], frames: Sequence[bytes]) -> list[bytes]:
    """The payloads in `frames`, walking `sizes` as docs/protocol.md section 2 says: a payload within the rest of its
    frame, or (not fitting there) starting a frame and filling whole frames, joined; CheckFailed otherwise."""
    out: list[bytes] = []
    index, position = 0, 0
    for k, size in enumerate(sizes):
        if size == 0:
            out.append(b"")
            continue
        while index < len(frames) and position == len(frames[index]):
            index, position = index + 1, 0
        if index == len(frames):
            raise _misfit(sizes, frames, f"payload {k} ({size:,} bytes) is missing")
        room = len(frames[index]) - position
        if room >= size:
            out.append(frames[index][position : position + size])
            position += size
            continue
        if position:
            raise _misfit(sizes, frames, f"payload {k} ({size:,} bytes) starts inside frame {index} and does not fit")
        end, total = index, 0
        while total < size and end < len(frames):
            total, end = total + len(frames[end]), end + 1
        if total != size:
            why = f"payload {k} ({size:,} bytes) spans frames {index} to {end - 1}, which hold {total:,} bytes"
            raise _misfit(sizes, frames, why)
        out.append(b"".join(frames[index:end]))
        index, position = end - 1, len(frames[end - 1])
    rest = frames[index:]
    if rest and (position != len(rest[0]) or any(rest[1:])):
        raise _misfit(sizes, frames, "frames carry bytes payloadSizes do not cover")
    return out


def _misfit(sizes: Sequence[int], frames: Sequence[bytes], why: str) -> CheckFailed:
    shown = [len(f) for f in frames]
    return CheckFailed(f"payloads do not match payloadSizes {list(sizes)} over frames of {shown} bytes: {why}")


PAYLOAD_KINDS = ("submitTasks", "dispatchTasks", "taskResults", "putObjects")


@dataclass
class Msg:
    name: str
    fields: dict[str, Any]
    payloads: list[bytes]
    frames: list[bytes]  # as they came, after the header

    def ids(self, column: str = "ids") -> list[int]:
        return unpack_u64(self.fields.get(column, b""), column)

    def __str__(self) -> str:
        shown = {
            k: (v if not isinstance(v, bytes) or len(v) <= 48 else v[:48] + b"...") for k, v in self.fields.items()
        }
        return f"{self.name}({shown}, {len(self.payloads)} payloads)"


def parse(frames: Sequence[bytes]) -> Msg:
    """A received message [header, payload frames...]; CheckFailed if it is not a valid one."""
    if not frames:
        raise CheckFailed("an empty ZeroMQ message")
    try:
        with schema().Message.from_bytes(frames[0]) as root:
            name = str(root.which())
            fields: dict[str, Any] = getattr(root, name).to_dict(verbose=True)
    except CheckFailed:
        raise
    except Exception as exc:
        raise CheckFailed(f"a header that does not decode: {exc}") from None
    rest = [bytes(f) for f in frames[1:]]
    if name in PAYLOAD_KINDS:
        payloads = cut(unpack_u64(fields.get("payloadSizes", b""), "payloadSizes"), rest)
    else:
        if any(rest):
            raise CheckFailed(f"{name} carries {len(rest)} frames after its header; it has no payloads")
        payloads = []
    return Msg(name, fields, payloads, rest)


@dataclass
class Task:
    task_id: int
    function_id: int
    flags: int = 0
    refs: list[int] = field(default_factory=list)
    keywords: list[str] | None = None
    inline: list[bytes] = field(default_factory=list)
    timeout_ms: int = 0


def tasks_of(message: Msg) -> list[Task]:
    """The tasks of a submitTasks/dispatchTasks batch, with their inline payloads; CheckFailed if inconsistent."""
    f = message.fields
    ids = unpack_u64(f.get("taskIds", b""), "taskIds")
    functions = unpack_u64(f.get("functionIds", b""), "functionIds")
    flags = bytes(f.get("flags", b""))
    counts = unpack_u16(f.get("argCounts", b""), "argCounts")
    refs = unpack_u64(f.get("argRefs", b""), "argRefs")
    keywords = list(f.get("keywords", []))
    timeouts = unpack_u32(f.get("timeoutsMs", b""), "timeoutsMs")
    n = len(ids)
    expect(len(functions) == n and len(flags) == n and len(counts) == n, f"columns of different lengths: {message}")
    expect(sum(counts) == len(refs), f"argRefs has {len(refs)} entries, argCounts sum to {sum(counts)}")
    expect(not keywords or len(keywords) == len(refs), "keywords is neither empty nor one per argument")
    expect(not timeouts or len(timeouts) == n, "timeoutsMs is neither empty nor one per task")
    expect(refs.count(0) == len(message.payloads), "payloads are not one per inline argument")
    tasks: list[Task] = []
    arg = payload = 0
    for k, task_id in enumerate(ids):
        mine = refs[arg : arg + counts[k]]
        inline = mine.count(0)
        kws = keywords[arg : arg + counts[k]] if keywords else None
        timeout = timeouts[k] if timeouts else 0
        tasks.append(
            Task(task_id, functions[k], flags[k], mine, kws, message.payloads[payload : payload + inline], timeout)
        )
        arg += counts[k]
        payload += inline
    return tasks


def task_batch_fields(tasks: Sequence[Task]) -> tuple[dict[str, Any], list[bytes]]:
    """The columns of a TaskBatch holding `tasks`, and their inline payloads in order."""
    keywords = [kw for t in tasks for kw in (t.keywords or [""] * len(t.refs))]
    fields: dict[str, Any] = {
        "taskIds": u64(t.task_id for t in tasks),
        "functionIds": u64(t.function_id for t in tasks),
        "flags": bytes(t.flags for t in tasks),
        "argCounts": u16(len(t.refs) for t in tasks),
        "argRefs": u64(r for t in tasks for r in t.refs),
    }
    if any(keywords):
        fields["keywords"] = keywords
    if any(t.timeout_ms for t in tasks):
        fields["timeoutsMs"] = u32(t.timeout_ms for t in tasks)
    return fields, [p for t in tasks for p in t.inline]


# ------------------------------------------------------------------------------------------------ keys
@dataclass
class Keys:
    """CurveZMQ keys from a folder laid out as scaler_keygen makes it (docs/security.md)."""

    directory: str

    def _load(self, name: str) -> tuple[bytes, bytes | None]:
        import zmq.auth

        path = os.path.join(self.directory, name)
        if not os.path.exists(path):
            raise SystemExit(f"--keys {self.directory}: {name} is missing")
        public, secret = zmq.auth.load_certificate(path)
        return public, secret

    def server_public(self) -> bytes:
        return self._load("scheduler.key")[0]

    def server_secret(self) -> bytes:
        secret = self._load("scheduler.key_secret")[1]
        if secret is None:
            raise SystemExit(f"--keys {self.directory}: scheduler.key_secret holds no secret key")
        return secret

    def pair(self, role: str) -> tuple[bytes, bytes]:
        public, secret = self._load(f"{role}.key_secret")
        if secret is None:
            raise SystemExit(f"--keys {self.directory}: {role}.key_secret holds no secret key")
        return public, secret

    def make_client(self, sock: zmq.Socket[Any], role: str) -> None:
        public, secret = self.pair(role)
        sock.setsockopt(zmq.CURVE_SERVERKEY, self.server_public())
        sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, secret)

    def make_server(self, sock: zmq.Socket[Any]) -> None:
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.server_secret())


# ------------------------------------------------------------------------------------------------ runner
@dataclass
class Check:
    name: str
    run: Callable[[], None]
    doc: str


@dataclass
class Report:
    out: TextIO = sys.stdout
    failed: int = 0
    passed: int = 0
    skipped: int = 0

    def line(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def outcome(self, name: str, run: Callable[[], None]) -> None:
        _advice.clear()
        try:
            run()
        except CheckSkipped as exc:
            self.skipped += 1
            self.line(f"SKIP {name} — {one_line(str(exc))}")
        except CheckFailed as exc:
            self.failed += 1
            self.line(f"FAIL {name} — {one_line(str(exc))}")
        except Exception as exc:  # a bug in the kit or an unexpected answer: a failure with its origin
            self.failed += 1
            frames = traceback.extract_tb(exc.__traceback__)
            mine = [f for f in frames if os.path.dirname(f.filename) == os.path.dirname(__file__)]
            where = (mine or frames)[-1]
            detail = f"unexpected {type(exc).__name__}: {exc} (at {os.path.basename(where.filename)}:{where.lineno})"
            self.line(f"FAIL {name} — {one_line(detail)}")
        else:
            self.passed += 1
            advice = "; ".join(_advice)
            self.line(f"PASS {name} — advice: {one_line(advice)}" if advice else f"PASS {name}")


def one_line(text: str, limit: int = 1000) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def refuse_unknown(names: Sequence[str], only: Sequence[str]) -> None:
    """SystemExit naming the names in `only` that are not check names."""
    unknown = [n for n in only if n not in names]
    if unknown:
        raise SystemExit(f"unknown check(s): {', '.join(unknown)}; --list shows the names")


def select(checks: Sequence[Check], only: Sequence[str]) -> list[Check]:
    """The checks named in `only` (all when empty), in their order; SystemExit naming an unknown name."""
    if not only:
        return list(checks)
    refuse_unknown([c.name for c in checks], only)
    return [c for c in checks if c.name in set(only)]


def random_id(label: str) -> bytes:
    return f"{label}|conformance|{os.getpid()}|{os.urandom(16).hex()}".encode()


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def ms(self) -> int:
        return int(self.left() * 1000)

    def passed(self) -> bool:
        return time.monotonic() >= self.end
