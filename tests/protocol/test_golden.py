"""Golden encodings: the exact bytes of one representative message of each kind (tests/protocol/golden/).

Other implementations test their decoders against these files and golden/manifest.json; this one must keep
producing them byte for byte. After a deliberate change of the encoding, regenerate them with
`python tests/protocol/make_golden.py` and say why in the commit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scaler.protocol import messages as m
from tests.helpers import encoded
from tests.protocol import capnp_codec
from tests.protocol.make_golden import (
    GOLDEN_DIR,
    I32_COLUMNS,
    MANIFEST,
    U8_COLUMNS,
    U16_COLUMNS,
    U32_COLUMNS,
    golden_messages,
    main,
    render,
)

GOLDEN = golden_messages()
NAMES = list(GOLDEN)


def golden_frames(name: str) -> list[bytes]:
    entry = json.loads(MANIFEST.read_text(encoding="utf-8"))[name]
    return [(GOLDEN_DIR / entry["header"]).read_bytes(), *(bytes.fromhex(f) for f in entry["frames_hex"])]


def cut(sizes: list[int], frames: list[bytes]) -> list[bytes]:
    """Payloads out of frames as scaler.capnp's "Payload frames" says, written from that text alone: a payload of
    size 0 takes no bytes; a bigger one starts where the previous one ended, or at the start of the next frame
    once the current one is used up; every frame must be used up exactly."""
    out, index, position = [], 0, 0
    for size in sizes:
        if size == 0:
            out.append(b"")
            continue
        while index < len(frames) and position == len(frames[index]):
            index, position = index + 1, 0
        assert index < len(frames) and len(frames[index]) - position >= size, "a payload would span frames"
        out.append(frames[index][position : position + size])
        position += size
    assert all(position == len(f) for f in frames[index : index + 1]) and all(not f for f in frames[index + 1 :])
    return out


def test_one_golden_message_per_kind() -> None:
    assert set(NAMES) == set(m.MESSAGE_NAMES.values())
    files = {p.name for p in Path(GOLDEN_DIR).iterdir() if p.is_file()}  # (payloads/: golden payloads)
    assert files == {f"{name}.bin" for name in NAMES} | {MANIFEST.name}, "stale or missing golden files"


@pytest.mark.parametrize("name", NAMES)
def test_encode_gives_the_golden_bytes(name: str) -> None:
    assert encoded(GOLDEN[name]) == golden_frames(name)


@pytest.mark.parametrize("name", NAMES)
def test_decode_of_golden_bytes_gives_the_message(name: str) -> None:
    assert m.decode(golden_frames(name)) == GOLDEN[name]


def test_manifest_is_current() -> None:
    headers, manifest = render()
    assert MANIFEST.read_text(encoding="utf-8") == manifest
    for file, data in headers.items():
        assert (GOLDEN_DIR / file).read_bytes() == data
    assert main(["--check"]) == 0


def _raw_view(name: str, value: Any) -> Any:
    """A field as plain pycapnp reads it, turned into the manifest's JSON form (columns unpacked)."""
    if isinstance(value, bytes):
        if name in U8_COLUMNS:
            return value.hex()
        width = 2 if name in U16_COLUMNS else 4 if name in U32_COLUMNS | I32_COLUMNS else 8
        signed = name in I32_COLUMNS
        return [int.from_bytes(value[i : i + width], "little", signed=signed) for i in range(0, len(value), width)]
    if isinstance(value, dict):
        return {k: _raw_view(k, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_raw_view(name, v) for v in value]
    return value


@pytest.mark.parametrize("name", NAMES)
def test_manifest_fields_are_what_plain_capnp_reads(name: str) -> None:
    """The manifest describes the header the way any Cap'n Proto library sees it (no scaler code involved)."""
    header = golden_frames(name)[0]
    with capnp_codec._schema.Message.from_bytes(header) as root:
        assert root.which() == name
        raw = getattr(root, name).to_dict(verbose=True)
    expected = json.loads(MANIFEST.read_text(encoding="utf-8"))[name]["fields"]
    assert {k: _raw_view(k, v) for k, v in raw.items()} == expected


@pytest.mark.parametrize("name", NAMES)
def test_manifest_payloads_are_the_frames_cut_by_payload_sizes(name: str) -> None:
    entry = json.loads(MANIFEST.read_text(encoding="utf-8"))[name]
    frames = golden_frames(name)[1:]
    payloads = [bytes.fromhex(p) for p in entry["payloads_hex"]]
    assert payloads == [bytes(p) for p in getattr(GOLDEN[name], "payloads", [])]
    if "payloadSizes" in entry["fields"]:
        assert cut(entry["fields"]["payloadSizes"], frames) == payloads
    else:
        assert frames == [] and payloads == []


@pytest.mark.parametrize("name", NAMES)
def test_golden_headers_are_single_segment_and_word_aligned(name: str) -> None:
    header = golden_frames(name)[0]
    assert len(header) % 8 == 0
    segments = int.from_bytes(header[:4], "little") + 1
    assert segments == 1
    assert int.from_bytes(header[4:8], "little") * 8 == len(header) - 8
