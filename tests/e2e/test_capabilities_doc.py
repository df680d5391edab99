"""docs/capabilities.md's complete example runs as a user would run it, and prints what the document says it prints.

The example is taken from the document itself (the python block under "## A complete example"), so the two cannot
drift apart; only its port changes, as in tests/e2e/test_examples.py.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import free_port, session_members, wait_until

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "capabilities.md"
HEADING = "## A complete example"
LOG_RECORD = re.compile(r"\[(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\]\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\n]*\n")


def example_and_output() -> tuple[str, list[str]]:
    """The section's python block, and the lines of the plain block after it (what it prints)."""
    section = DOC.read_text(encoding="utf-8").split(f"\n{HEADING}\n", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    printed = re.search(r"It prints:\n\n```(?:text)?\n(.*?)```", section, re.S)
    assert code is not None and printed is not None, f"docs/capabilities.md: no example or output under {HEADING}"
    return code.group(1), printed.group(1).splitlines()


def test_the_example_is_where_the_test_looks() -> None:
    code, printed = example_and_output()
    assert "127.0.0.1:2345" in code and "MissingCapabilityError" in code
    assert printed


@pytest.mark.timeout(120)
def test_the_complete_example_runs_and_prints_what_the_document_says(tmp_path: Path) -> None:
    code, expected = example_and_output()
    script = tmp_path / "capabilities_example.py"
    script.write_text(code.replace("127.0.0.1:2345", f"127.0.0.1:{free_port()}"))
    process = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        stdout, stderr = process.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"the example did not finish within 90 s\n--- stdout:\n{stdout}\n--- stderr:\n{stderr}")
    explain = f"exit code {process.returncode}\n--- stdout:\n{stdout[-3000:]}\n--- stderr:\n{stderr[-3000:]}"
    try:
        wait_until(lambda: not session_members(process.pid), timeout=10, interval=0.2, what="no process left")
    except AssertionError:
        left = session_members(process.pid)
        os.killpg(process.pid, signal.SIGKILL)
        pytest.fail(f"the example left processes running after it exited: {left}\n{explain}")
    assert process.returncode == 0, explain
    assert "Traceback" not in stderr, explain
    lines = [line for line in LOG_RECORD.sub("", stdout).splitlines() if line.strip()]
    assert lines == expected, explain
