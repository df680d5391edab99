"""Payloads around and over the 1 MiB frame limit through a real scheduler and workers: arguments, results, objects
and maps come back byte-exact; a batch with long keyword names is cut to fit; a task with too many arguments is
refused at submit with what to do (docs/protocol.md section 2)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.protocol.frames import MAX_FRAME
from scaler.security.keys import generate
from tests.helpers import digest, free_address

pytestmark = pytest.mark.timeout(120)
SIZES = [MAX_FRAME - 1, MAX_FRAME, MAX_FRAME + 1, 3 * MAX_FRAME + 5]


def make(n: int) -> bytes:
    return os.urandom(n)


def keywords(**values: int) -> int:
    return sum(values.values())


@pytest.fixture(scope="module", params=["plain", "keys"])
def client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    """With keys, every frame is a CurveZMQ MESSAGE command 33 bytes longer than its content: the limit allows it."""
    address = free_address()
    keys: str | bool = False
    if request.param == "keys":
        keys = str(tmp_path_factory.mktemp("keys") / "keys")
        generate(keys)
    with (
        SchedulerClusterCombo(address=address, n_workers=2, keys=keys),
        Client(address, shared_memory=False, keys=keys) as c,
    ):
        yield c


@pytest.mark.parametrize("size", SIZES)
def test_results_arguments_and_objects_over_a_frame_come_back_exactly(client: Client, size: int) -> None:
    result = client.submit(make, size).result(timeout=60)
    assert len(result) == size
    assert client.submit(digest, result).result(timeout=60) == digest(result)  # as an argument
    ref = client.send_object(result)
    assert client.submit(digest, ref).result(timeout=60) == digest(result)  # as an object
    assert client.map(digest, [(result,), (result[:10],)]) == [digest(result), digest(result[:10])]


def test_a_map_with_long_keyword_names_is_cut_into_messages_that_fit(client: Client) -> None:
    names = {f"keyword_argument_with_a_long_name_{i}": i for i in range(10)}
    futures = [client.submit(keywords, **names) for _ in range(5000)]
    assert {f.result(timeout=60) for f in futures} == {45}


def test_a_task_with_too_many_arguments_is_refused_with_what_to_do(client: Client) -> None:
    with pytest.raises(ValueError, match="pass them as one list, tuple or dict argument"):
        client.submit(max, *range(20_000))
    assert client.submit(max, *range(1000)).result(timeout=60) == 999
