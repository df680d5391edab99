"""The code blocks of the documentation (docs/*.md and README.md), read as a reader sees them.

A ```python block runs in the suite (tests/e2e/test_docs_code.py) unless the line just before it says why it cannot:

    <!-- docs-test: skip: needs a worker with a GPU -->

A block may also say what it needs: `<!-- docs-test: own-cluster -->` (it starts its own scheduler: it gets a port of
its own instead of the shared cluster's).
"""

from __future__ import annotations

import functools
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^( *)```(\w*)[^\n]*\n(.*?)^\1```\s*$", re.M | re.S)  # (indented too: in a list item)
MARK = re.compile(r"<!--\s*docs-test:\s*([\w-]+)(?::\s*(.*?))?\s*-->\s*$")
# the documents' scheduler addresses (also in a monitor's ipc path: 127.0.0.1_2345_monitor)
ADDRESS = re.compile(r"127\.0\.0\.1([:_])(2345|2346|2347|8516)(?!\d)")
# a line that prints and says what it prints: `print(...)  # what it prints`
SAYS = re.compile(r"^(\s*)print\((.*)\)\s+#\s*(.+?)\s*$")


@dataclass(frozen=True)
class Block:
    path: str  # relative to the repository root
    line: int  # of the opening fence
    language: str
    code: str
    mark: str | None  # "skip", "own-cluster", or None
    reason: str | None

    @property
    def name(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def starts_a_cluster(self) -> bool:
        return self.mark == "own-cluster" or "SchedulerClusterCombo(" in self.code or "Scheduler(" in self.code


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.search(before)
        found.append(
            Block(
                str(path.relative_to(ROOT)),
                line,
                match.group(2),
                textwrap.dedent(match.group(3)) if match.group(1) else match.group(3),
                mark.group(1) if mark else None,
                mark.group(2) if mark else None,
            )
        )
    return found


def expected_output(comment: str) -> str:
    """What a `print(...)  # comment` line says it prints: the comment without a closing remark in parentheses
    (`# 36 (the task's lines go to the worker's output)` says 36)."""
    if comment.endswith(")"):
        depth = 0
        for index in range(len(comment) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(comment[index], 0)
            if depth == 0:
                if index > 0 and comment[index - 1] == " ":
                    return comment[: index - 1].rstrip()
                break
    return comment


def prints_as_said(comment: str, printed: str) -> bool:
    """Whether `printed` is what the comment says, `...` standing for any text."""
    pattern = ".*".join(re.escape(part) for part in expected_output(comment).split("..."))
    return re.fullmatch(pattern, printed, re.S) is not None


def instrumented(code: str) -> str:
    """The code with each `print(...)  # comment` line calling __said__(line, comment)(...) instead of print(...):
    the same output, and what was printed is kept beside the comment (the first time the line prints)."""
    lines = code.split("\n")
    for number, line in enumerate(lines, 1):
        said = SAYS.match(line)
        if said is not None:
            indent, arguments, comment = said.groups()
            lines[number - 1] = f"{indent}__said__({number}, {comment!r})({arguments})"
    return "\n".join(lines)


def _printing(said: dict[int, tuple[str, str]], line: int, comment: str) -> Any:
    """print, keeping what the line printed (the first time) beside its comment in `said`."""

    def printing(*args: Any, **kwargs: Any) -> None:
        said.setdefault(line, (comment, kwargs.get("sep", " ").join(str(arg) for arg in args)))
        print(*args, **kwargs)

    return printing


def run(items_file: str) -> None:
    """Run the blocks listed in items_file (JSON: name, code, timeout) one after another, each in a fresh namespace
    named __main__, printing one JSON line per block: its error (a traceback) or None, and what it printed."""
    import contextlib
    import io
    import json
    import signal
    import time
    import traceback

    def too_long(signum: int, frame: object) -> None:
        raise TimeoutError("the block ran past its time")

    signal.signal(signal.SIGALRM, too_long)
    for item in json.loads(Path(items_file).read_text()):
        said: dict[int, tuple[str, str]] = {}
        printed = io.StringIO()
        start = time.monotonic()
        error = None
        signal.alarm(int(item["timeout"]))
        try:
            with contextlib.redirect_stdout(printed):
                code = compile(instrumented(item["code"]), item["name"], "exec")
                exec(code, {"__name__": "__main__", "__said__": functools.partial(_printing, said)})
        except BaseException:
            error = traceback.format_exc(limit=-8)
        finally:
            signal.alarm(0)
        seconds = round(time.monotonic() - start, 2)
        record = {
            "name": item["name"],
            "error": error,
            "stdout": printed.getvalue()[-2000:],
            "seconds": seconds,
            "said": [[line, *said[line]] for line in sorted(said)],
        }
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    import sys

    run(sys.argv[1])
