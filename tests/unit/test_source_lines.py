"""scaler.source_lines: code pickled by value keeps its file name and ships its own source lines (and only those),
which a worker registers in its linecache; code pickled by reference and plain data are pickled as before."""

from __future__ import annotations

import json
import linecache
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from scaler import source_lines
from scaler.payloads import pack_function, unpack_function
from scaler.serializer import DefaultSerializer

SOURCE = """\
def unrelated(x):
    return [x] * 1000  # never shipped with `shout`


def shout(text):
    loud = text.upper()
    return loud + "!"  # shout's last line


def two():
    return shout("a"), (lambda y: y * 2)(3)  # two's line
"""


@pytest.fixture()
def module_file(tmp_path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """SOURCE in a file of its own, run as a module that cannot be imported (so its functions go by value)."""
    path = tmp_path / "defined_here.py"
    path.write_text(SOURCE)
    namespace: dict[str, Any] = {"__name__": "not_importable_source_lines_test"}
    exec(compile(SOURCE, str(path), "exec"), namespace)
    try:
        yield path, namespace
    finally:
        linecache.cache.pop(str(path), None)


def lines(first: int, last: int) -> tuple[str, ...]:
    return tuple(SOURCE.splitlines(True)[first - 1 : last])


@pytest.mark.timeout(10)
def test_a_by_value_function_keeps_its_file_name_and_ships_only_its_lines(
    module_file: tuple[Path, dict[str, Any]],
) -> None:
    path, namespace = module_file
    payload = DefaultSerializer.serialize(namespace["shout"])
    loaded = pickle.loads(payload)
    assert loaded("hi") == "HI!"
    assert loaded.__code__.co_filename == str(path)
    assert source_lines.shipped_in(payload) == {str(path): ((5, lines(5, 7)),)}
    plain = cloudpickle.dumps(namespace["shout"], protocol=pickle.HIGHEST_PROTOCOL)
    growth = len(payload) - len(plain)
    assert growth <= len("".join(lines(5, 7))) + 2 * len(str(path)) + 64, growth


@pytest.mark.timeout(10)
def test_functions_it_calls_and_lambdas_in_it_ship_their_lines_too(module_file: tuple[Path, dict[str, Any]]) -> None:
    path, namespace = module_file
    payload = DefaultSerializer.serialize(namespace["two"])
    assert pickle.loads(payload)() == ("A!", 6)
    assert source_lines.shipped_in(payload) == {str(path): ((5, lines(5, 7)), (10, lines(10, 11)))}


@pytest.mark.timeout(10)
def test_code_pickled_by_reference_and_plain_data_are_pickled_as_before() -> None:
    for obj in (json.dumps, [1, "a"], {"a": 1}, {1, 2}, range(3)):
        assert DefaultSerializer.serialize(obj) == cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


@pytest.mark.timeout(10)
def test_code_without_a_source_ships_no_lines() -> None:
    namespace: dict[str, Any] = {"__name__": "not_importable_source_lines_test"}
    exec(compile("def f(x):\n    return x + 1\n", "<string>", "exec"), namespace)
    payload = DefaultSerializer.serialize(namespace["f"])
    assert source_lines.shipped_in(payload) == {}
    assert payload.endswith(b".")  # nothing appended
    loaded = pickle.loads(payload)
    assert loaded(1) == 2 and loaded.__code__.co_filename == "<string>"


@pytest.mark.timeout(10)
def test_a_worker_registers_shipped_lines_over_what_its_disk_says(module_file: tuple[Path, dict[str, Any]]) -> None:
    path, namespace = module_file
    shout, two = (pack_function(DefaultSerializer, namespace[name]) for name in ("shout", "two"))
    path.write_text("# changed on the worker's disk\n" * 20)
    source_lines.register_shipped(shout)
    source_lines.register_shipped(two)  # beside shout's lines, not instead of them
    linecache.checkcache(str(path))
    assert [linecache.getline(str(path), n) for n in (1, 6, 7, 10, 11)] == ["\n", *lines(6, 7), *lines(10, 11)]
    assert unpack_function(two)[1]() == ("A!", 6)


@pytest.mark.timeout(10)
def test_a_function_object_without_lines_registers_nothing() -> None:
    before = dict(linecache.cache)
    source_lines.register_shipped(pack_function(DefaultSerializer, json.dumps))
    source_lines.register_shipped(b"not a pickle")
    source_lines.register_shipped(pickle.dumps((None, b"\x00" + source_lines.MARK)))
    assert linecache.cache == before
