"""Regenerate tests/protocol/golden/: byte-exact encodings of one representative message of each kind.

    python tests/protocol/make_golden.py          # rewrite the files
    python tests/protocol/make_golden.py --check  # exit 1 if a file differs from what encode() gives now

Files, for each message member name NAME of scaler.capnp's `Message` union:
    golden/NAME.bin       the header frame: one Cap'n Proto message (standard unpacked encoding, one segment),
                          decodable with `capnp decode scaler.capnp Message < NAME.bin`;
    golden/manifest.json  for each NAME: the header file; `frames_hex`, the frames that follow the header on the
                          wire; `payloads_hex`, the payloads those frames carry once cut by `payloadSizes`; and
                          `fields`, the header's fields named as in the schema, in a language-neutral form (u64
                          and u16 columns as lists of integers, u8 columns such as flags and statuses as hex,
                          enums by their schema names, an absent list or column as []).

Another implementation's decoder must turn [NAME.bin, *frames] into exactly those fields and payloads. A Cap'n Proto
encoder may lay a message out differently and still be correct, so byte equality is only required of this
implementation (which the tests check), not of others.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
from pathlib import Path
from typing import Any

from scaler.protocol import messages as m

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
MANIFEST = GOLDEN_DIR / "manifest.json"

P = 3 << m.ID_PREFIX_SHIFT  # ids minted by the session that got idPrefix 3
U64_MAX = 2**64 - 1

_CAPNP_ENUM_NAMES: dict[type[enum.Enum], dict[Any, str]] = {
    m.PeerKind: {m.PeerKind.CLIENT: "client", m.PeerKind.WORKER: "worker"},
    m.ErrorCode: {
        m.ErrorCode.MALFORMED: "malformed",
        m.ErrorCode.NOT_CONNECTED: "notConnected",
        m.ErrorCode.BAD_REQUEST: "badRequest",
        m.ErrorCode.PROTECTED: "protected",
        m.ErrorCode.TOO_LARGE: "tooLarge",
    },
}


def golden_messages() -> dict[str, m.Message]:
    """One representative message per kind, in the order of the schema's union."""
    messages: list[m.Message] = [
        m.Hello(
            m.PeerKind.WORKER, "worker-1", "host-a", 4242, 2000, 1000, capabilities=["payload=python", "gpu", "mem=64G"]
        ),
        # to a client: two workers may take tasks, six tasks at once between them
        m.Welcome(3, "scheduler@tcp://127.0.0.1:8516", True, 10_000, 1, 8 << 30, 2, 6, workers_stated=True),
        m.Refused("the key 'w' is authorized for workers only", 1, key_problem=True),
        m.Heartbeat(12.5, 50_000_000, 270, 5, 1, 99.5, 80_000_000, 1, 0, 0),
        m.HeartbeatEcho(0, workers=3, worker_capacity=9, workers_stated=True),  # the echo of a client's heartbeat
        # Two tasks of one function (object P|1): f(b"x", key=<object P|2>) profiled, and f(<task P|10>) silent.
        # The second has options: a 2 s timeout, 3 retries, priority -1. The first requires payload=python, the second
        # payload=python and gpu, and has the idempotency key "report-2026-12".
        m.SubmitTasks(
            [P | 10, P | 11],
            [P | 1, P | 1],
            b"\x01\x02",
            [2, 1],
            [0, P | 2, P | 10],
            ["", "key", ""],
            [b"x"],
            [0, 2000],
            b"\x00\x03",
            [0, -1],
            requirements=[["payload=python"], ["payload=python", "gpu"]],
            requirement_index=[0, 1],
            idempotency_keys=["", "report-2026-12"],
        ),
        m.DispatchTasks(
            [P | 10, P | 11], [P | 1, P | 1], b"\x00\x00", [1, 2], [0, 0, P | 2], None, [b"a", b"b"], [0, 2000]
        ),
        m.TaskResults(
            [P | 10, P | 11, P | 12, P | 13, P | 14, P | 15, P | 16],
            bytes([0, 1, 2, 3, 4, 5, 6]),
            [
                b"result",
                b"\x04\x00\x00\x00boom",
                b"",
                b"crashed: exit 9",
                b"failed: lost",
                b"timed out after 2s",
                b"over the memory limit",
            ],
            [1500, 20, 0, 0, 0, 0, 0],
            [4096, 0, 0, 0, 0, 0, 0],
            [1200, 15, 0, 0, 0, 0, 0],
        ),
        m.CancelTasks([P | 10, P | 11]),
        m.PutObjects([P | 1, P | 2, P | 3], [b"function-bytes", b"", b"table"], ["square", "empty", "table"]),
        m.FreeObjects([P | 2]),
        m.BalanceRequest([P | 12, P | 13, P | 14]),
        m.BalanceResponse([P | 13, P | 14]),
        m.Disconnect("the client disconnected"),
        m.ShutdownRequest("client.shutdown()"),
        m.Shutdown("the scheduler received SIGTERM", workers_stay=True),  # to a worker: wait for it to come back
        m.Error(m.ErrorCode.BAD_REQUEST, "1 task ids are not this session's, are 0 or are already in use", [U64_MAX]),
        m.Status(
            scheduler_name="scheduler@tcp://127.0.0.1:8516",
            time_us=1_700_000_000_000_000,
            cpu_percent=1.5,
            rss_bytes=60_000_000,
            tasks_by_state={"queued": 3, "assigned": 2, "success": 10},
            sent={"welcome": 2, "dispatchTasks": 1},
            received={"hello": 2, "submitTasks": 1},
            workers=[
                m.WorkerStatus(
                    "worker-1", 0.5, 40_000_000, 99.0, 80_000_000, 998, 2, 1, 270, 1, 0, 1, 10, 0, 4500, 120, ["gpu"]
                )
            ],
            clients=[m.ClientStatus("client-1", 5, 1, 10, 3)],
            protected=True,
            dropped_messages=1,
            refused_peers=2,
            handler_errors=0,
            clock_us=5_000_000,
            functions=[m.FunctionStatus("inc", 20, 2, 10, 1, 0, 0, 11_000)],
            events=m.TaskEvents(
                task_ids=[P | 10, P | 11],
                kinds=bytes([0, 1]),
                statuses=bytes([0, int(m.TaskStatus.ERROR)]),
                functions=[0, 0],
                workers=[1, m.NO_NAME],
                times_us=[4_900_000, 4_950_000],
                durations_us=[0, 1_000],
                peak_memory=[0, 0],
                names=["inc", "worker-1"],
                sample_every=1,
                dropped=0,
            ),
            failures=[m.TaskFailure(P | 11, "inc", "worker-1", int(m.TaskStatus.ERROR), "ValueError: x", 4_950_000)],
            outputs=[m.OutputRecord(P | 10, "inc", "worker-1", m.OUTPUT_STDOUT, "hello\n", 4_920_000)],
            departed=[m.DepartedWorker("worker-2", "timed out", True, 4_000_000)],
            managers=[m.ManagerStatus("slurm-gpu", 1, ["gpu"], 0, 8, 1, 0, 2, 12_000, 0, "", 0)],
            waiting=[m.WaitingTasks(["gpu"], 12, "worker manager slurm-gpu requested 2 units 12s ago, 0 connected")],
            units_started=3,
            units_stopped=1,
            units_failed=0,
            started_us=1_700_000_000_000_000,
            recovered="1 client session, 3 tasks, 0 held results",
        ),
        m.TasksStarted([P | 10, P | 11]),
        m.TaskOutput([P | 10, P | 11], bytes([m.OUTPUT_STDOUT, m.OUTPUT_ERROR]), ["hello\n", "Traceback ..."]),
        # a Slurm manager: up to 8 units of 4 workers (2 tasks each) offering gpu, one unit ended since its last report
        m.ManagerReport(0, 8, 4, 2, 1, 60_000, 600_000, ["slurm-gpu-3", "slurm-gpu-4"], ["slurm-gpu-2"], "exit 0"),
        m.ScaleUnits(["slurm-gpu-5"], ["slurm-gpu-3"], "12 tasks requiring gpu wait for room"),
        m.ExplainTasks([P | 10, P | 11]),
        m.TaskExplanations(
            [P | 10, P | 11],
            [
                f"task {P | 10:#x} was sent to worker worker-1 (attempt 1)",
                f"task {P | 11:#x} is queued: no connected worker offers gpu",
            ],
        ),
    ]
    return {m.MESSAGE_NAMES[type(message)]: message for message in messages}


# Data fields holding columns of other widths than u64 (every other Data field is a u64 column).
U8_COLUMNS = {"flags", "statuses", "retries", "kinds", "streams"}
U16_COLUMNS = {"argCounts", "requirementIndex"}
U32_COLUMNS = {"timeoutsMs", "functions", "workers"}
I32_COLUMNS = {"priorities"}


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def fields(message: m.Message) -> dict[str, Any]:
    """The message's fields as the schema names them, as JSON values: u64 and u16 columns as lists of integers,
    u8 columns as hex, enums by their schema names, Counter lists as [{name, value}], an absent optional list or
    column as []. Payload frames are excluded (the manifest lists them apart)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(message):
        if f.name != "payloads":
            out[camel(f.name)] = _json(camel(f.name), getattr(message, f.name))
    if hasattr(message, "payloads"):  # batch messages: the size of each payload, in order
        out["payloadSizes"] = [len(p) for p in message.payloads]
    return out


def _json(name: str, value: Any) -> Any:
    if value is None:
        return "" if name in U8_COLUMNS else []
    if name == "requirements":  # a list of Requirement structs
        return [{"capabilities": list(capabilities)} for capabilities in value]
    if isinstance(value, enum.Enum):
        return _CAPNP_ENUM_NAMES[type(value)][value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if dataclasses.is_dataclass(value):
        return {camel(f.name): _json(camel(f.name), getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return [{"name": k, "value": v} for k, v in value.items()]
    if isinstance(value, list):
        return [_json(name, v) for v in value]
    return value


def render() -> tuple[dict[str, bytes], str]:
    """The header files and the manifest text encode() gives now."""
    headers: dict[str, bytes] = {}
    manifest: dict[str, Any] = {}
    for name, message in golden_messages().items():
        frames = m.encode(message)
        # encode's frames are bytes or buffers (Payload in its type); run as a script: no tests.helpers here
        headers[f"{name}.bin"] = bytes(frames[0])  # type: ignore[call-overload]
        manifest[name] = {
            "header": f"{name}.bin",
            "frames_hex": [bytes(f).hex() for f in frames[1:]],  # type: ignore[call-overload]
            "payloads_hex": [bytes(p).hex() for p in getattr(message, "payloads", [])],
            "fields": fields(message),
        }
    return headers, json.dumps(manifest, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    headers, manifest = render()
    if "--check" in argv:
        stale = [n for n, data in headers.items() if (GOLDEN_DIR / n).read_bytes() != data]
        if MANIFEST.read_text(encoding="utf-8") != manifest:
            stale.append(MANIFEST.name)
        for name in stale:
            print(f"differs: {GOLDEN_DIR / name}")
        return 1 if stale else 0
    GOLDEN_DIR.mkdir(exist_ok=True)
    for name, data in headers.items():
        (GOLDEN_DIR / name).write_bytes(data)
    MANIFEST.write_text(manifest, encoding="utf-8")
    print(f"wrote {len(headers)} headers and {MANIFEST.name} to {GOLDEN_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
