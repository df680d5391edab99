"""Errors a user's code meets on the worker say what, where and what to do (issue 29): a function or an argument from
a module the workers cannot import names the function (or argument), the worker and its host, and the two fixes;
the error is still a ModuleNotFoundError. Against the module's real cluster (tests/conftest.py), whose workers
started before the module below existed."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import cloudpickle
import pytest

from scaler import Client

TIMEOUT = 20
SOURCE = """
class Rectangle:
    def __init__(self, width, height):
        self.width, self.height = width, height


def area(rectangle):
    return rectangle.width * rectangle.height
"""


@pytest.fixture
def lonely(tmp_path: Path) -> Iterator[ModuleType]:
    """A module only this process can import (the workers' processors were forked before it existed)."""
    (tmp_path / "lonely_shapes.py").write_text(SOURCE)
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module("lonely_shapes")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("lonely_shapes", None)


def test_a_function_the_workers_cannot_import_names_itself_the_worker_and_the_fixes(
    client: Client, lonely: ModuleType
) -> None:
    with pytest.raises(ModuleNotFoundError) as info:
        client.submit(lonely.area, lonely.Rectangle(2, 3)).result(TIMEOUT)
    text = str(info.value)
    assert "the task's function lonely_shapes.area cannot be loaded on worker" in text, text
    assert "(host " in text and "No module named 'lonely_shapes'" in text
    assert "Install 'lonely_shapes' on the workers" in text
    assert "cloudpickle.register_pickle_by_value(lonely_shapes)" in text
    assert info.value.name == "lonely_shapes"


def test_an_argument_the_workers_cannot_import_says_whose_it_is(client: Client, lonely: ModuleType) -> None:
    with pytest.raises(ModuleNotFoundError, match=r"an argument of builtins\.repr cannot be loaded on worker"):
        client.submit(repr, lonely.Rectangle(2, 3)).result(TIMEOUT)


def test_the_advice_works(client: Client, lonely: ModuleType) -> None:
    cloudpickle.register_pickle_by_value(lonely)
    try:
        assert client.submit(lonely.area, lonely.Rectangle(2, 3)).result(TIMEOUT) == 6
    finally:
        cloudpickle.unregister_pickle_by_value(lonely)
