"""The logging options of the CLIs (scaler.entry_points.logging_options) as argparse reads them: the address after
--logging-paths stays the address, the paths given replace the default and add up, bad values are usage errors."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from scaler.entry_points.logging_options import add_logging_options, start_logging, take_address_out_of_paths
from scaler.io.logs import check_logging_level, setup_logging

A = "tcp://127.0.0.1:8516"


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["-lp", "x.log", A], [A, "-lp", "x.log"]),
        (["--logging-paths", "a", "b", A, "--cpu", "none"], [A, "--logging-paths", "a", "b", "--cpu", "none"]),
        (["-lp", "-", A], [A, "-lp", "-"]),
        (["--logging-pa", "x", A], [A, "--logging-pa", "x"]),
        (["--logging-level", "INFO", A], ["--logging-level", "INFO", A]),
        ([A, "-lp", "x.log"], [A, "-lp", "x.log"]),
        (["--monitor-address", "ipc:///tmp/m", "-lp", "x", A], [A, "--monitor-address", "ipc:///tmp/m", "-lp", "x"]),
        (["-lp", "x", "--", A], ["-lp", "x", "--", A]),
        (["-ll", "INFO", A], ["-ll", "INFO", A]),
    ],
)
def test_an_address_after_the_paths_goes_in_front(argv: list[str], expected: list[str]) -> None:
    assert take_address_out_of_paths(argv) == expected


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="prog")
    p.add_argument("address")
    add_logging_options(p)
    return p


@pytest.mark.parametrize(
    "argv, paths",
    [
        ([A], ["/dev/stdout"]),
        (["-lp", "a", "b", A], ["a", "b"]),
        (["-lp", "a", "-lp", "b", A], ["a", "b"]),
        (["-lp", "a", A, "-lp", "b"], ["a", "b"]),
    ],
)
def test_the_paths_given_replace_the_default_and_add_up(argv: list[str], paths: list[str]) -> None:
    args = parser().parse_args(take_address_out_of_paths(argv))
    assert (args.address, args.logging_paths) == (A, paths)


def test_the_default_is_left_as_it_was() -> None:
    parser().parse_args([A, "-lp", "a"])
    assert parser().parse_args([A]).logging_paths == ["/dev/stdout"]


@pytest.mark.parametrize("level, expected", [("debug", "DEBUG"), (" Warning ", "WARNING"), (10, 10)])
def test_levels_are_names_in_any_case_or_numbers(level: str | int, expected: str | int) -> None:
    assert check_logging_level(level) == expected


@pytest.mark.parametrize("level", ["LOUD", "", -1, True, None])
def test_other_levels_are_refused_naming_the_levels(level: object) -> None:
    with pytest.raises(ValueError, match="one of DEBUG, INFO, WARNING, ERROR, CRITICAL"):
        # a call mypy refuses, made anyway: the run-time check is what is tested
        check_logging_level(level)  # type: ignore[arg-type]


@pytest.fixture
def root_handlers() -> Iterator[list[logging.Handler]]:
    """The root logger's handlers, put back after the test."""
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    yield before
    for handler in list(root.handlers):
        if handler not in before:
            handler.close()
        root.removeHandler(handler)
    for handler in before:
        root.addHandler(handler)
    root.setLevel(level)


def test_a_path_that_cannot_be_opened_leaves_the_logging_untouched(
    tmp_path: Path, root_handlers: list[logging.Handler]
) -> None:
    good, bad = tmp_path / "good.log", tmp_path / "missing" / "x.log"
    with pytest.raises(ValueError, match=f"cannot log to {bad}: No such file or directory"):
        setup_logging("INFO", (str(good), str(bad)))
    assert logging.getLogger().handlers == root_handlers


def test_start_logging_makes_it_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = parser()
    args = p.parse_args([A, "-lp", str(tmp_path)])
    with pytest.raises(SystemExit) as stopped:
        start_logging(p, args)
    assert stopped.value.code == 2
    assert f"prog: error: --logging-paths: cannot log to {tmp_path}: Is a directory" in capsys.readouterr().err
