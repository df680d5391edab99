"""The names and types scaler 1.9.9 code relies on (issue 15), without processes: error bases, the graph cycle
error, ProfilingInfo's 1.9.9 names, the version and every command's --version."""

from __future__ import annotations

import graphlib
import itertools
from collections.abc import Callable

import pytest
from packaging.version import Version

import scaler
from scaler.client.future import ProfilingInfo
from scaler.client.graph import plan_graph
from scaler.cluster.combo import free_local_address
from scaler.errors import AuthenticationError, ConnectionFailedError, GraphCycleError, ProtectedModeError, ScalerError
from tests.helpers import Graph


def test_errors_are_also_what_1_9_9_raised() -> None:
    assert issubclass(ConnectionFailedError, TimeoutError) and issubclass(ConnectionFailedError, ConnectionError)
    assert issubclass(AuthenticationError, TimeoutError)
    assert issubclass(ProtectedModeError, ValueError) and issubclass(ProtectedModeError, PermissionError)
    assert issubclass(ProtectedModeError, ScalerError)
    assert str(ConnectionFailedError("the scheduler has not answered")) == "the scheduler has not answered"


def test_a_graph_cycle_is_a_graphlib_cycle_error_listing_the_cycle_as_graphlib_does() -> None:
    graph: Graph = {"a": (abs, "b"), "b": (abs, "c"), "c": (abs, "a"), "x": (abs, "a")}
    with pytest.raises(graphlib.CycleError) as raised:
        plan_graph(graph, ["x"])
    error = raised.value
    assert isinstance(error, GraphCycleError) and isinstance(error, ValueError)
    assert str(error) == "the graph has a cycle among keys 'a', 'b', 'c'"
    cycle = error.args[1]
    assert cycle[0] == cycle[-1] and sorted(cycle[:-1]) == ["a", "b", "c"]
    needs = {"a": "b", "b": "c", "c": "a"}
    # graphlib's order: each key is an immediate predecessor of (needed by) the next
    assert all(needs[after] == before for before, after in itertools.pairwise(cycle))


def test_profiling_info_answers_the_names_of_1_9_9() -> None:
    info = ProfilingInfo(duration_us=1_500_000, peak_memory=4096, cpu_time_us=250_000)
    assert (info.duration_s, info.memory_peak, info.cpu_time_s) == (1.5, 4096, 0.25)
    assert ProfilingInfo(10, 20).cpu_time_us == 0  # built the old way


def test_the_version_sorts_after_the_package_it_replaces() -> None:
    assert scaler.__version__ == "2.0.0.dev0"
    assert Version(scaler.__version__) > Version("1.9.9")


def _commands() -> list[tuple[str, Callable[[list[str]], None]]]:
    from scaler.__main__ import main as package_main
    from scaler.entry_points.cluster import main as cluster_main
    from scaler.entry_points.keygen import main as keygen_main
    from scaler.entry_points.scheduler import main as scheduler_main
    from scaler.monitor.top import main as top_main
    from scaler.monitor.ui import main as ui_main

    return [
        ("scaler_scheduler", scheduler_main),
        ("scaler_cluster", cluster_main),
        ("scaler_top", top_main),
        ("scaler_ui", ui_main),
        ("scaler_keygen", keygen_main),
        ("python -m scaler", package_main),
    ]


@pytest.mark.parametrize("name", [name for name, _ in _commands()])
def test_every_command_tells_its_version(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    main = dict(_commands())[name]
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"{name} {scaler.__version__}\n"


def test_a_free_local_address_is_on_loopback() -> None:
    address = free_local_address()
    assert address.startswith("tcp://127.0.0.1:") and int(address.rsplit(":", 1)[1]) > 0


def _positional_only(a: int, b: int = 0, /) -> None: ...
def _defaults(a: int, b: int, c: int = 0, d: int = 1) -> None: ...
def _star(a: int, *rest: int) -> None: ...
def _keyword_needed(a: int, *, k: int) -> None: ...
def _keyword_optional(a: int, *, k: int = 0, **more: int) -> None: ...
def _nothing() -> None: ...


@pytest.mark.parametrize("fn", [_positional_only, _defaults, _star, _keyword_needed, _keyword_optional, _nothing])
def test_counting_positional_arguments_agrees_with_binding_them(fn: Callable[..., None]) -> None:
    """submit checks calls without keywords by counting (Client._check_call): the same verdict as Signature.bind."""
    import inspect

    from scaler.client.client import _CallCheck

    check = _CallCheck(inspect.signature(fn))
    for count in range(6):
        try:
            check.signature.bind(*range(count))
            binds = True
        except TypeError:
            binds = False
        assert (check.fewest <= count <= check.most) == binds, (fn.__name__, count)


def test_the_package_lists_its_public_names_only() -> None:
    """dir(scaler), what tab completion shows: the public names and the submodules loaded, not the imports the
    package's own code uses (Any, importlib, TYPE_CHECKING...)."""
    listed = set(dir(scaler))
    assert set(scaler.__all__) <= listed
    private_helpers = {"Any", "TYPE_CHECKING", "annotations", "importlib", "require_python_310"}
    assert not listed & private_helpers, sorted(listed & private_helpers)
    assert all(getattr(scaler, name) is not None for name in scaler.__all__)
