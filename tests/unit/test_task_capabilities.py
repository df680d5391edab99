"""The Python peers' capabilities: client.options(capabilities=...) read and checked, the worker's capabilities
(scaler_cluster --capability, Cluster, SchedulerClusterCombo, AgentConfig) checked, and MissingCapabilityError."""

from __future__ import annotations

import pickle
from typing import Any

import cloudpickle
import pytest

import scaler
from scaler.client.options import KEEP, ClientOptions, Options, check_options
from scaler.cluster.cluster import Cluster
from scaler.cluster.combo import SchedulerClusterCombo
from scaler.core.capabilities import PYTHON_REQUIREMENT, requirement, worker_capabilities
from scaler.core.worker.agent import AgentConfig
from scaler.entry_points.cluster import main as cluster_main
from scaler.errors import MissingCapabilityError, TaskFailedError, task_failure
from scaler.protocol.records import TaskStatus
from tests.helpers import free_address, my_children

MISSING = (
    "missing capabilities: the task requires gpu, payload=python; no connected worker offers them all (connected "
    "workers offer: [payload=python])"
)


# ----------------------------------------------------------------------------------------------- what a task requires
@pytest.mark.parametrize("nothing", [None, {}, [], (), set()])
def test_nothing_asked_is_payload_python_alone(nothing: Any) -> None:
    assert requirement(nothing) is PYTHON_REQUIREMENT == ("payload=python",)


def test_a_mapping_gives_bare_names_and_name_value_pairs_sorted() -> None:
    asked = {"gpu": True, "lang": "ts", "cores": 4, "numpy": -1, "linux": None, "zero": 0}
    assert requirement(asked) == ("cores=4", "gpu", "lang=ts", "linux", "numpy", "payload=python", "zero=0")


def test_numpy_integers_are_integers() -> None:
    numpy = pytest.importorskip("numpy")
    assert requirement({"gpu": numpy.int64(2), "any": numpy.int32(-1)}) == ("any", "gpu=2", "payload=python")


def test_an_iterable_of_texts_is_sorted_without_repeats() -> None:
    assert requirement(["lang=ts", "gpu", "gpu", "payload=python"]) == ("gpu", "lang=ts", "payload=python")
    assert requirement(iter(["gpu"])) == ("gpu", "payload=python")


def test_equal_requirements_are_one_shared_tuple() -> None:
    assert requirement(["gpu", "licence"]) is requirement({"licence": True, "gpu": -1})


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (False, "pass True"),
        (1.5, "is not a capability value"),
        ([1], "is not a capability value"),
        (b"x", "is not a capability value"),
    ],
)
def test_a_mapping_value_that_means_nothing_is_refused_saying_what_to_pass(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        requirement({"gpu": value})


@pytest.mark.parametrize(
    ("asked", "message"),
    [
        ("gpu", "a mapping like .* or a list like"),
        (b"gpu", "a mapping like"),
        (3, "a mapping like"),
        ([3], "must be a string"),
        ([""], "1 to 256 bytes"),
        (["x" * 257], "1 to 256 bytes"),
        (["é" * 129], "1 to 256 bytes"),  # 258 bytes of UTF-8
        ([" gpu"], "white space"),
        (["gpu\n"], "white space"),
        (["g\x01pu"], "control character"),
        ({"a=b": True}, "contains '='"),
        ({3: True}, "name is a str"),
        ({"gpu ": True}, "white space"),
        ({"lang": "ts\n"}, "white space"),
        (["payload=json"], "always require payload=python"),
        ({"payload": "json"}, "always require payload=python"),
    ],
)
def test_a_bad_requirement_is_refused_clearly(asked: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        requirement(asked)


def test_a_task_requires_at_most_64_capabilities_payload_python_included() -> None:
    assert len(requirement([f"c{i}" for i in range(63)])) == 64
    with pytest.raises(ValueError, match=r"at most 64 capabilities .*not 65"):
        requirement([f"c{i}" for i in range(64)])


def test_options_replace_capabilities_keep_them_when_not_given_and_clear_them_with_none() -> None:
    gpu = check_options(Options(), KEEP, KEEP, KEEP, KEEP, {"gpu": True})
    assert gpu.requirement == ("gpu", "payload=python")
    assert check_options(gpu, 5, KEEP, KEEP).requirement == ("gpu", "payload=python")
    assert check_options(gpu, KEEP, KEEP, KEEP, KEEP, ["licence"]).requirement == ("licence", "payload=python")
    assert check_options(gpu, KEEP, KEEP, KEEP, KEEP, None).requirement == PYTHON_REQUIREMENT
    assert Options().requirement == PYTHON_REQUIREMENT


class _FakeClient:
    address = "tcp://127.0.0.1:2345"


class _PicklableClient(_FakeClient):
    def __reduce__(self) -> tuple[type[_PicklableClient], tuple[()]]:  # as Client: reconnects where it lands
        return _PicklableClient, ()


def test_the_view_of_a_client_shows_its_capabilities() -> None:
    # _FakeClient stands in for a Client (only what ClientOptions reads of it)
    view = ClientOptions(_FakeClient(), Options())  # type: ignore[arg-type]
    assert repr(view) == "<Client tcp://127.0.0.1:2345 with timeout=None retries=0 priority=0>"
    gpu = view.options(capabilities={"gpu": True, "lang": "ts"}, timeout=3)
    assert (
        repr(gpu)
        == "<Client tcp://127.0.0.1:2345 with timeout=3s retries=0 priority=0 capabilities=['gpu', 'lang=ts']>"
    )
    with pytest.raises(ValueError, match="pass True"):
        view.options(capabilities={"gpu": False})


def test_a_view_of_a_client_passed_to_a_task_keeps_its_options() -> None:
    # _PicklableClient stands in for a Client (only what ClientOptions reads of it)
    view = ClientOptions(_PicklableClient(), Options()).options(capabilities=["gpu"], priority=3)  # type: ignore[arg-type]
    copy = pickle.loads(cloudpickle.dumps(view))
    assert isinstance(copy, ClientOptions) and isinstance(copy._client, _PicklableClient)
    assert copy._options == view._options
    assert copy._options.requirement == ("gpu", "payload=python")


# ----------------------------------------------------------------------------------------------- what a worker offers
def test_a_worker_offers_payload_python_first_then_what_it_was_given_in_order() -> None:
    assert worker_capabilities([]) == ("payload=python",)
    assert worker_capabilities(["lang=py", "gpu", "gpu", "payload=python"]) == ("payload=python", "lang=py", "gpu")
    config = AgentConfig(capabilities=("gpu", "gpu"))
    assert config.capabilities == ("gpu",) and config.offered == ("payload=python", "gpu")
    assert AgentConfig().offered == ("payload=python",)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("gpu", "a list of capabilities, not a single str"),
        (["payload=json"], "runs Python payloads only"),
        ([" gpu"], "white space"),
        ([f"c{i}" for i in range(256)], "at most 256 capabilities .*not 257"),
    ],
)
def test_a_bad_worker_capability_is_refused_clearly(given: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        worker_capabilities(given)
    with pytest.raises(ValueError, match=message):
        AgentConfig(capabilities=given)


def test_scaler_cluster_refuses_a_bad_capability_before_starting_anything(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cluster_main([free_address(), "--capability", "gpu", "--capability", "lang= "])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--capability: capability 'lang= ' has white space at an end" in err
    assert "a name like 'gpu' or a name=value like 'lang=ts'" in err


def test_the_cluster_classes_check_capabilities_before_starting_anything() -> None:
    before = {p.pid for p in my_children()}
    with pytest.raises(ValueError, match="runs Python payloads only"):
        Cluster(free_address(), n_workers=1, capabilities=["payload=json"])
    with pytest.raises(ValueError, match="a list of capabilities, not a single str"):
        SchedulerClusterCombo(free_address(), n_workers=1, capabilities="gpu")
    for grace in (-1, float("nan"), "5", True):
        with pytest.raises(ValueError, match="capability_grace_seconds must be 0 or more"):
            # a call mypy refuses, made anyway: the run-time check is what is tested
            SchedulerClusterCombo(free_address(), n_workers=1, capability_grace_seconds=grace)  # type: ignore[arg-type]
    assert {p.pid for p in my_children()} <= before
    cluster = Cluster(free_address(), n_workers=1, capabilities=["gpu", "licence=matlab"])
    assert cluster._agent_config.offered == ("payload=python", "gpu", "licence=matlab")


# ----------------------------------------------------------------------------------------------- the error
def test_a_failed_task_missing_capabilities_raises_missing_capability_error() -> None:
    error = task_failure(TaskStatus.FAILED, MISSING.encode())
    assert type(error) is MissingCapabilityError and isinstance(error, TaskFailedError)
    assert error.required == ("gpu", "payload=python")
    assert str(error).startswith(MISSING)
    assert "scaler_cluster --capability" in str(error)
    assert scaler.MissingCapabilityError is MissingCapabilityError
    assert "MissingCapabilityError" in scaler.__all__


def test_required_is_exact_when_a_capability_holds_the_separator() -> None:
    """The text joins capabilities with ", ", which a capability may hold itself (region=eu, us): the task's own
    requirement, when the text names exactly it, is the answer; another requirement (a dependent failing with the
    task it needed) or none falls back to splitting the text."""
    own = requirement({"region": "eu, us"})
    assert own == ("payload=python", "region=eu, us")
    text = (
        b"missing capabilities: the task requires payload=python, region=eu, us; no connected worker offers them all "
        b"(connected workers offer: [payload=python])"
    )

    def required(known: tuple[str, ...] | None) -> tuple[str, ...]:
        error = task_failure(TaskStatus.FAILED, text, known)
        assert isinstance(error, MissingCapabilityError)
        return error.required

    assert required(own) == own
    assert required(None) == ("payload=python", "region=eu", "us")  # best effort without the task's requirement
    assert required(PYTHON_REQUIREMENT) == ("payload=python", "region=eu", "us")
    error = task_failure(TaskStatus.FAILED, text, own)
    assert isinstance(pickle.loads(pickle.dumps(error)), MissingCapabilityError)


def test_other_failures_stay_task_failed_errors() -> None:
    assert type(task_failure(TaskStatus.FAILED, b"the task's worker died 3 times")) is TaskFailedError
    # The text alone does not make it: only a task the scheduler failed (status failed).
    assert type(task_failure(TaskStatus.CRASHED, MISSING.encode())) is TaskFailedError
