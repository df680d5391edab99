"""Every ```python block of the documentation runs (tests/e2e/docs_blocks.py says how blocks are read and marked):
the blocks of one document run in order in one process, each in a fresh namespace, against a scheduler with two
workers started here (its port substituted for the documents' 127.0.0.1:2345, :2346, :2347 and :8516, the only
change), or on a port of their own when they start their own scheduler. A block that cannot run here says why, in a
marker the reader does not see; a marker without a reason fails."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from scaler import SchedulerClusterCombo
from tests.e2e.docs_blocks import ADDRESS, ROOT, Block, blocks, documents, prints_as_said
from tests.helpers import free_port, kill_tree

pytestmark = pytest.mark.timeout(300)

BLOCK_SECONDS = 60
PYTHON_DOCUMENTS = [path for path in documents() if any(b.language == "python" for b in blocks(path))]


@pytest.fixture(scope="module")
def cluster() -> Iterator[SchedulerClusterCombo]:
    address = f"tcp://127.0.0.1:{free_port()}"
    # (the documents' examples of capabilities ask for a worker with a GPU)
    with SchedulerClusterCombo(address, n_workers=2, capabilities=["gpu"], logging_level="WARNING") as combo:
        yield combo


def runnable(block: Block, shared_port: int) -> str:
    port = free_port() if block.starts_a_cluster else shared_port
    return ADDRESS.sub(lambda match: f"127.0.0.1{match.group(1)}{port}", block.code)


def test_a_comment_after_print_is_read_as_the_output_and_a_closing_remark() -> None:
    assert prints_as_said("[0, 1, 4, ..., 49] (after a progress bar)", "[0, 1, 4, 9, 16, 25, 36, 49]")
    assert prints_as_said("ProfilingInfo(duration_us=..., peak=...)", "ProfilingInfo(duration_us=3, peak=9)")
    assert prints_as_said("(np.int64(4950), 30)", "(np.int64(4950), 30)")
    assert not prints_as_said("36 (the lines go elsewhere)", "37")
    assert not prints_as_said("661.46...", "61.46")  # (the text before ... must begin it)


def test_every_skipped_block_says_why() -> None:
    for path in documents():
        for block in blocks(path):
            if block.mark == "skip":
                assert block.reason, f"{block.name}: a skipped block must say why"
            assert block.mark in (None, "skip", "own-cluster"), f"{block.name}: unknown marker {block.mark!r}"


@pytest.mark.parametrize("document", PYTHON_DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_python_blocks_of_a_document_run(document: Path, cluster: SchedulerClusterCombo, tmp_path: Path) -> None:
    shared_port = int(cluster.address.rsplit(":", 1)[1])
    items = [
        {"name": block.name, "code": runnable(block, shared_port), "timeout": BLOCK_SECONDS}
        for block in blocks(document)
        if block.language == "python" and block.mark != "skip"
    ]
    if not items:
        pytest.skip("every python block of this document is marked not runnable")
    (tmp_path / "items.json").write_text(json.dumps(items))
    subprocess.run(
        [str(Path(sys.executable).parent / "scaler_keygen"), "keys"], cwd=tmp_path, check=True, capture_output=True
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.e2e.docs_blocks", str(tmp_path / "items.json")],
        cwd=tmp_path,  # (a block that writes files writes them here)
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        out, err = process.communicate(timeout=BLOCK_SECONDS * len(items) + 30)
    except subprocess.TimeoutExpired:
        runner = psutil.Process(process.pid)
        kill_tree([*runner.children(recursive=True), runner])  # (the runner and what its blocks started)
        raise
    records = [json.loads(line) for line in out.splitlines() if line.startswith('{"name"')]
    failed = [f"{r['name']}:\n{r['error']}" for r in records if r["error"]]
    assert not failed, "\n".join(failed) + f"\nstderr: {err[-2000:]}"
    assert [r["name"] for r in records] == [item["name"] for item in items], err[-3000:]
    wrong = [
        f"{r['name']} (line {line} of the block) says it prints {comment!r}, but printed {text!r}"
        for r in records
        for line, comment, text in r["said"]
        if not prints_as_said(comment, text)
    ]
    assert not wrong, "\n".join(wrong)


# ----------------------------------------------------------------------------------------------- shell commands
SHELL = ("bash", "console", "sh", "shell")
PROGRAM = re.compile(r"(?:^|[\s/])((?:scaler|scaled)_[a-z_]+)\b(.*)")
SUBCOMMANDS = {"scaler_worker_manager": ("local", "slurm", "kubernetes")}
NOT_CHECKED = {"scaler_object_storage_server"}  # (accepts and ignores anything: opengris 2.x scripts start it)


def commands(block: Block) -> Iterator[tuple[str, str]]:
    """(program, the rest of its command line) for each scaler command of a shell block, continuations joined."""
    text = re.sub(r"\\\n\s*", " ", block.code)
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if line.startswith("#") or not line:
            continue
        match = PROGRAM.search(line)
        if match is not None and match.group(1) not in NOT_CHECKED:
            yield match.group(1), match.group(2)


def help_text(program: str, subcommand: str | None, cache: dict[tuple[str, str | None], str]) -> str:
    key = (program, subcommand)
    if key not in cache:
        argv = [str(Path(sys.executable).parent / program), *([subcommand] if subcommand else []), "--help"]
        run = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        assert run.returncode == 0, f"{' '.join(argv)}: {run.stderr[-500:]}"
        cache[key] = run.stdout
    return cache[key]


def test_the_shell_blocks_use_programs_and_options_that_exist() -> None:
    """Every scaler_* / scaled_* command in a shell block of the documents is a program this package installs, and
    every --option on its line is one its --help lists (a renamed or removed option fails here), in the blocks that
    cannot run here too (Slurm, Kubernetes: test_docs_shell.py runs the others)."""
    installed = set(re.findall(r"^(\w+) = \"scaler\.", (ROOT / "pyproject.toml").read_text(), re.M))
    cache: dict[tuple[str, str | None], str] = {}
    problems = []
    checked = 0
    for path in documents():
        for block in blocks(path):
            if block.language not in SHELL:  # (a block that cannot run here still names real options)
                continue
            for program, rest in commands(block):
                if program not in installed:
                    problems.append(f"{block.name}: {program} is not a program of this package")
                    continue
                words = rest.split()
                subcommand = words[0] if words and words[0] in SUBCOMMANDS.get(program, ()) else None
                listed = help_text(program, subcommand, cache)
                for option in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest):
                    checked += 1
                    if option not in listed:
                        problems.append(f"{block.name}: {program} {subcommand or ''} has no {option}")
    assert not problems, "\n".join(problems)
    assert checked > 30  # (the documents show many options: this test reads them)


def test_the_toml_blocks_parse() -> None:
    tomllib = pytest.importorskip("tomllib")  # (Python 3.11)

    parsed = 0
    for path in documents():
        for block in blocks(path):
            if block.language == "toml" and block.mark != "skip":
                try:
                    tomllib.loads(block.code)
                except ValueError as exc:  # (tomllib.TOMLDecodeError)
                    pytest.fail(f"{block.name}: {exc}")
                parsed += 1
    assert parsed >= 1


SHOWN = ("text", "mermaid", "yaml", "promql", "capnp", "json")  # shown, not run: output, diagrams, configs of others


def test_every_block_says_what_it_is() -> None:
    """A block is python (run), a shell (its scaler commands checked), TOML (parsed), or one of the kinds shown and
    not run, and says which (docs/development.md, "The documentation"): a block without a kind is neither."""
    for path in documents():
        for block in blocks(path):
            known = ("python", *SHELL, "toml", *SHOWN)
            assert block.language in known, f"{block.name}: a ``` block must name its kind, one of {known}"
