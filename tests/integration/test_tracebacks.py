"""Tracebacks of tasks whose functions travel by value (defined in the driving script, in `python -c`, in a
notebook-like cell): the client's traceback names the file the function was defined in and shows its source lines,
as they were when the function was shipped, also when the worker cannot read that file or it changed since.

Each case runs a real driving script in its own Python process against a scheduler and workers started here."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scaler import SchedulerClusterCombo
from tests.helpers import free_address

COMMON = textwrap.dedent(
    """
    import json, os, sys, threading, traceback
    from scaler import Client

    def helper(x):
        y = x + 1
        raise ValueError(f"bad value {y}")  # MARK helper

    def failing(x):
        return helper(x)  # MARK failing

    def nested(clnt, x):
        return clnt.submit(failing, x).result()  # MARK nested

    class Unpicklable(Exception):
        def __init__(self, text):
            super().__init__(text)
            self.lock = threading.Lock()  # the worker cannot pickle it: only its text comes back

    def unpicklable(x):
        raise Unpicklable(f"unpicklable {x}")  # MARK unpicklable

    def show(future):
        try:
            future.result()
        except BaseException as exc:
            return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        raise AssertionError("the task did not fail")
    """
)

BASIC = COMMON + textwrap.dedent(
    """
    with Client(address=sys.argv[1], timeout_seconds=15) as client:
        out = {
            "plain": show(client.submit(failing, 1)),
            "lambda": show(client.submit(lambda x: 1 // x, 0)),  # MARK lambda
            "nested": show(client.submit(nested, client, 1)),
            "remote": show(client.submit(unpicklable, 1)),
            "works": client.submit(lambda: 42).result(),
        }
    print(json.dumps(out))
    """
)

CHANGED = COMMON + textwrap.dedent(
    """
    with Client(address=sys.argv[1], timeout_seconds=15) as client:
        out = {"before": show(client.submit(failing, 1)), "before_remote": show(client.submit(unpicklable, 1))}
        lines = open(__file__).read().count("\\n")
        with open(__file__, "w") as rewritten:
            rewritten.write("# rewritten after the functions were shipped\\n" * (lines + 5))
        out["changed"] = show(client.submit(failing, 2))
        out["changed_remote"] = show(client.submit(unpicklable, 2))
        os.remove(__file__)
        out["deleted"] = show(client.submit(failing, 3))
        out["deleted_remote"] = show(client.submit(unpicklable, 3))
    print(json.dumps(out))
    """
)

# A notebook cell: code compiled under a file name that exists nowhere, its lines only in the client's linecache (as
# IPython registers them); functions defined there go by value.
CELL = (
    textwrap.dedent(
        '''
    import json, linecache, sys
    CELL_NAME = "/nonexistent/ipykernel_4242/1234567.py"
    CELL = """
    import threading

    class Unpicklable(Exception):
        def __init__(self, text):
            super().__init__(text)
            self.lock = threading.Lock()

    def cell_fn(x):
        raise Unpicklable(f"from the cell {x}")  # MARK cell
    """
    linecache.cache[CELL_NAME] = (len(CELL), None, CELL.splitlines(True), CELL_NAME)
    exec(compile(CELL, CELL_NAME, "exec"), globals())
    '''
    )
    + COMMON.split("class Unpicklable")[0].replace("def helper", "def _unused_helper")
    + textwrap.dedent(
        """
    def show(future):
        try:
            future.result()
        except BaseException as exc:
            return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        raise AssertionError("the task did not fail")

    with Client(address=sys.argv[1], timeout_seconds=15) as client:
        print(json.dumps({"cell": show(client.submit(cell_fn, 1))}))
    """
    )
)


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    combo = SchedulerClusterCombo(
        address=free_address(), n_workers=2, heartbeat_interval_seconds=0.5, logging_level="WARNING"
    )
    try:
        yield combo.address
    finally:
        combo.shutdown()


def run(args: list[str], address: str, cwd: Path, stdin: str | None = None) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, *args, address], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def line_of(source: str, mark: str) -> tuple[int, str]:
    """The line number and stripped text of the line of `source` carrying `# MARK <mark>`."""
    for number, text in enumerate(source.splitlines(), 1):
        if text.endswith(f"# MARK {mark}"):
            return number, text.strip()
    raise AssertionError(f"no line marked {mark}")


def frame(filename: str, source: str, mark: str, name: str) -> str:
    """A traceback's frame as Python prints it: where, then the source line."""
    number, text = line_of(source, mark)
    return f'File "{filename}", line {number}, in {name}\n    {text}\n'


@pytest.mark.timeout(60)
def test_a_script_function_s_traceback_names_the_script_and_shows_its_lines(address: str, tmp_path: Path) -> None:
    script = tmp_path / "driver.py"
    script.write_text(BASIC)
    out = run([str(script)], address, tmp_path)
    path = str(script)
    assert frame(path, BASIC, "failing", "failing") in out["plain"], out["plain"]
    assert frame(path, BASIC, "helper", "helper") in out["plain"], out["plain"]
    assert "ValueError: bad value 2" in out["plain"]
    assert frame(path, BASIC, "lambda", "<lambda>") in out["lambda"], out["lambda"]
    for mark in ("nested", "failing", "helper"):  # every level of a nested task
        assert frame(path, BASIC, mark, mark) in out["nested"], out["nested"]
    # The text the worker formatted itself (an exception it cannot send back whole) says where too.
    assert frame(path, BASIC, "unpicklable", "unpicklable") in out["remote"], out["remote"]
    assert "<dynamic-code>" not in "".join(str(text) for text in out.values())
    assert out["works"] == 42


@pytest.mark.timeout(60)
def test_a_changed_or_deleted_script_shows_the_lines_that_were_shipped(address: str, tmp_path: Path) -> None:
    script = tmp_path / "changing.py"
    script.write_text(CHANGED)
    out = run([str(script)], address, tmp_path)
    path = str(script)
    for key in ("before", "changed", "deleted"):
        assert frame(path, CHANGED, "helper", "helper") in out[key], (key, out[key])
        assert frame(path, CHANGED, "failing", "failing") in out[key], (key, out[key])
    for key in ("before_remote", "changed_remote", "deleted_remote"):  # the worker's own text
        assert frame(path, CHANGED, "unpicklable", "unpicklable") in out[key], (key, out[key])
    assert "rewritten" not in "".join(out.values())


@pytest.mark.timeout(60)
def test_a_notebook_cell_s_lines_reach_the_worker(address: str, tmp_path: Path) -> None:
    script = tmp_path / "notebook.py"
    script.write_text(CELL)
    out = run([str(script)], address, tmp_path)
    cell = CELL.split('CELL = """', 1)[1].split('"""', 1)[0]
    assert frame("/nonexistent/ipykernel_4242/1234567.py", cell, "cell", "cell_fn") in out["cell"], out["cell"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("args", "filename"), [(["-c", BASIC], "<string>"), (["-"], "<stdin>")])
def test_code_without_a_file_still_runs_and_says_what_it_can(
    address: str, tmp_path: Path, args: list[str], filename: str
) -> None:
    out = run(args, address, tmp_path, stdin=BASIC if args == ["-"] else None)
    number, _ = line_of(BASIC, "helper")
    assert f'File "{filename}", line {number}, in helper' in out["plain"], out["plain"]
    assert "ValueError: bad value 2" in out["plain"]
    assert f'File "{filename}", line {line_of(BASIC, "nested")[0]}, in nested' in out["nested"], out["nested"]
    assert out["works"] == 42
