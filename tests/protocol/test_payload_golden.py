"""The golden Python payloads (tests/protocol/golden/payloads/): each one reads as documented by a peer WITHOUT the
`scaler` package, with nothing importable but the standard library and what its manifest entry "needs" (cloudpickle,
tblib), `sys.modules["scaler"] = None` set first; and the files are what the current code writes (byte for byte
where the bytes are stable, else: what it writes now reads the same way)."""

from __future__ import annotations

import importlib.util
import json
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import cloudpickle
import pytest
import tblib

from scaler.serializer import DefaultSerializer

GOLDEN = Path(__file__).resolve().parent / "golden" / "payloads"
CHECKER = GOLDEN / "check_payloads.py"
MANIFEST: dict[str, Any] = json.loads((GOLDEN / "manifest.json").read_text())
PACKAGES = {"cloudpickle": cloudpickle, "tblib": tblib}
PYTHON = "{}.{}".format(*sys.version_info[:2])


def by_needs(manifest: dict[str, Any]) -> dict[tuple[str, ...], list[str]]:
    groups: dict[tuple[str, ...], list[str]] = {}
    for name, entry in manifest["files"].items():
        groups.setdefault(tuple(sorted(entry["needs"])), []).append(name)
    return groups


def read_in_isolation(tmp: Path, directory: Path, files: list[str], needs: tuple[str, ...]) -> list[str]:
    """check_payloads.py run by `python -I -S` (no site-packages, no PYTHONPATH) with only `needs` put on its path;
    its output lines. The importable line must name exactly `needs`."""
    path = tmp / ("only-" + "-".join(needs or ("stdlib",)))
    path.mkdir(exist_ok=True)
    for name in needs:
        link = path / name
        if not link.exists():
            link.symlink_to(Path(PACKAGES[name].__file__ or "").parent, target_is_directory=True)
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(CHECKER), "--dir", str(directory), "--path", str(path), *files],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp,
    )
    lines = done.stdout.splitlines()
    assert lines and lines[0] == "importable: " + ",".join(needs), done.stdout + done.stderr
    assert len(lines) == 1 + len(files), done.stdout + done.stderr
    failed = [line for line in lines[1:] if not line.startswith(("PASS ", "SKIP "))]
    assert done.returncode == (1 if failed else 0), done.stdout + done.stderr
    return lines[1:]


def assert_read(lines: list[str], manifest: dict[str, Any]) -> None:
    for line in lines:
        name = line.split()[1]
        if line.startswith("SKIP "):  # by-value code of another Python minor version: what the code writes is read
            assert manifest["files"][name].get("same_python") and manifest["python"] != PYTHON, line
        else:
            assert line.startswith("PASS "), line


@pytest.fixture(scope="module")
def maker() -> Iterator[ModuleType]:
    """make_payloads.py imported (under a name of its own: its functions then go by value, registered)."""
    spec = importlib.util.spec_from_file_location("golden_make_payloads", GOLDEN / "make_payloads.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def test_the_manifest_covers_every_kind_and_every_file() -> None:
    names = {p.name for p in GOLDEN.glob("*.bin")}
    assert names == set(MANIFEST["files"])
    kinds = {entry["kind"] for entry in MANIFEST["files"].values()}
    assert kinds == {"function", "argument", "object", "result", "error", "error_text_only"}
    for required in ("function_plain.bin", "function_lambda.bin", "graph_build_list.bin", "error.bin"):
        assert required in names
    assert {"grouped_block_function.bin", "grouped_block_spec.bin"} <= names


@pytest.mark.parametrize("needs", sorted(by_needs(MANIFEST)), ids=lambda needs: "+".join(needs) or "stdlib-only")
def test_each_golden_payload_reads_with_only_what_it_needs(tmp_path: Path, needs: tuple[str, ...]) -> None:
    files = sorted(by_needs(MANIFEST)[needs])
    assert_read(read_in_isolation(tmp_path, GOLDEN, files, needs), MANIFEST)


@pytest.mark.parametrize(
    ("name", "missing"),
    [("function_plain.bin", "cloudpickle"), ("grouped_block_function.bin", "cloudpickle"), ("error.bin", "tblib")],
)
def test_without_what_a_payload_needs_it_does_not_read(tmp_path: Path, name: str, missing: str) -> None:
    if MANIFEST["files"][name].get("same_python") and MANIFEST["python"] != PYTHON:
        pytest.skip(f"by-value code of Python {MANIFEST['python']}")
    needs = tuple(n for n in MANIFEST["files"][name]["needs"] if n != missing)
    (line,) = read_in_isolation(tmp_path, GOLDEN, [name], needs)
    assert line.startswith(f"FAIL {name}") and f"No module named '{missing}'" in line


def test_a_payload_naming_scaler_does_not_read(tmp_path: Path) -> None:
    # A default function object as clients wrote it before issue 18: its serializer, by reference to scaler.
    old = cloudpickle.dumps((DefaultSerializer(), pickle.dumps(len)), protocol=pickle.HIGHEST_PROTOCOL)
    (tmp_path / "old.bin").write_bytes(old)
    entry = {"kind": "function", "needs": [], "calls": [{"args": [{"literal": "'ab'"}], "returns": "2"}]}
    (tmp_path / "manifest.json").write_text(json.dumps({"python": PYTHON, "files": {"old.bin": entry}}))
    (line,) = read_in_isolation(tmp_path, tmp_path, ["old.bin"], ("cloudpickle", "tblib"))
    assert line.startswith("FAIL old.bin") and "scaler" in line


def test_the_stable_golden_files_and_the_manifest_are_what_the_code_writes(maker: ModuleType) -> None:
    files, manifest = maker.golden_payloads()
    assert maker.manifest_text({**manifest, "python": MANIFEST["python"]}) == (GOLDEN / "manifest.json").read_text()
    stable = [name for name, entry in manifest["files"].items() if entry["bytes_stable"]]
    assert len(stable) >= 15
    for name in stable:
        assert (GOLDEN / name).read_bytes() == files[name], f"{name}: regenerate with make_payloads.py"


@pytest.mark.parametrize("needs", sorted(by_needs(MANIFEST)), ids=lambda needs: "+".join(needs) or "stdlib-only")
def test_what_the_code_writes_now_reads_as_documented(
    maker: ModuleType, tmp_path: Path, needs: tuple[str, ...]
) -> None:
    files, manifest = maker.golden_payloads()
    out = tmp_path / "now"
    out.mkdir()
    for name, payload in files.items():
        (out / name).write_bytes(payload)
    (out / "manifest.json").write_text(maker.manifest_text(manifest))
    names = sorted(by_needs(manifest)[needs])
    lines = read_in_isolation(tmp_path, out, names, needs)
    assert all(line.startswith("PASS ") for line in lines), lines  # same Python: nothing skipped


def test_the_checker_needs_no_scaler() -> None:
    # It is the reference reader for other implementations: standard library only at import.
    source = CHECKER.read_text()
    assert "import scaler" not in source and "from scaler" not in source
