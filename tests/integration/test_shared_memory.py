"""Large arguments through shared memory (scaler.shm, ADR 0013), with real processes: on the same host they pass the
scheduler by (its connections carry only references), results are right, segments are gone once their tasks end
and when the client closes, a killed client's are swept by the next client; a worker that cannot read them (a private
/dev/shm in a mount namespace of its own: another host, as far as shared memory goes) still runs the tasks, which
the client sends again inline; cancel and a killed worker lose nothing and leave nothing.

Every process killed here is a descendant of this test process (checked before each kill).
"""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.serializer import Serializer
from scaler.shm import encode_reference, load_object
from tests.helpers import digest, free_address, kill_tree, wait_until

pytestmark = pytest.mark.timeout(120)

TIMEOUT = 30
BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
FAST: dict[str, Any] = {"heartbeat_interval_seconds": 0.5, "worker_timeout_seconds": 2, "logging_level": "WARNING"}
BIG = 2 * 1024 * 1024  # above the client's default threshold (1 MiB)


def shm_identity() -> tuple[int, int]:
    st = os.stat("/dev/shm")
    return st.st_dev, st.st_ino


def digest_where(data: bytes) -> tuple[str, tuple[int, int]]:
    """The argument's digest, and the device and inode of the /dev/shm the processor sees."""
    return digest(data), shm_identity()


def digest_after(data: bytes, marker_dir: str, seconds: float) -> str:
    """Say it started (a file named after the processor's pid), work for `seconds` the first time only."""
    first = not any(Path(marker_dir).iterdir())
    Path(marker_dir, str(os.getpid())).touch()
    if first:
        time.sleep(seconds)
    return digest(data)


def blobs(n: int, size: int = BIG) -> list[bytes]:
    base = bytearray(os.urandom(size))
    out = []
    for i in range(n):
        base[:8] = i.to_bytes(8, "little")
        out.append(bytes(base))
    return out


def segments(client: Client) -> list[str]:
    """This client's segments in /dev/shm."""
    shared = client._shared
    assert shared is not None
    return sorted(name for name in os.listdir("/dev/shm") if name.startswith(shared._prefix))


def scheduler_received(port: int) -> int:
    """Bytes the scheduler's established connections on `port` received, from the kernel (ss)."""
    out = subprocess.run(
        ["ss", "-tinH", "state", "established", f"( sport = :{port} )"], capture_output=True, text=True, check=True
    ).stdout
    total = 0
    for word in out.split():
        if word.startswith("bytes_received:"):
            total += int(word.split(":")[1])
    return total


def kill_descendant(pid: int, sig: int = signal.SIGKILL) -> None:
    assert pid in {p.pid for p in psutil.Process().children(recursive=True)}, f"{pid} is not ours"
    os.kill(pid, sig)


@pytest.fixture()
def combo() -> Iterator[SchedulerClusterCombo]:
    cluster = SchedulerClusterCombo(address=free_address(), n_workers=2, max_task_retries=2, **FAST)
    try:
        yield cluster
    finally:
        cluster.shutdown()


# ----------------------------------------------------------------------------------------------- same host
@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to count the scheduler's bytes")
def test_big_arguments_pass_the_scheduler_by(combo: SchedulerClusterCombo) -> None:
    port = int(combo.address.rsplit(":", 1)[1])
    data = blobs(6)
    with Client(address=combo.address, timeout_seconds=TIMEOUT) as client:
        assert client.submit(len, b"warm").result(timeout=TIMEOUT) == 4
        before = scheduler_received(port)
        futures = [client.submit(digest_where, blob) for blob in data[:4]]
        mapped = client.map(digest_where, [(blob,) for blob in data[4:]], timeout=TIMEOUT)
        results = [f.result(timeout=TIMEOUT) for f in futures] + mapped
        assert [r[0] for r in results] == [digest(blob) for blob in data]
        assert {r[1] for r in results} == {shm_identity()}
        through = scheduler_received(port) - before
        assert client._shared is not None
        assert client._shared.shared == 6 and client._shared.fallbacks == 0
        assert through < 200_000, f"the scheduler received {through:,} bytes for 6 arguments of {BIG:,}"
        wait_until(lambda: not segments(client), timeout=TIMEOUT, what="the segments to be unlinked")

    # the same without shared memory: the bytes go through the scheduler (so the figure above means something)
    with Client(address=combo.address, timeout_seconds=TIMEOUT, shared_memory=False) as client:
        before = scheduler_received(port)
        assert client.submit(digest, data[0]).result(timeout=TIMEOUT) == digest(data[0])
        assert scheduler_received(port) - before > BIG


def test_threshold_option_and_custom_serializer(combo: SchedulerClusterCombo) -> None:
    from scaler.serializer import Serializer

    class Reversed(Serializer):
        @staticmethod
        def serialize(obj: object) -> bytes:
            import cloudpickle

            pickled: bytes = cloudpickle.dumps(obj)
            return pickled[::-1]

        @staticmethod
        def deserialize(payload: bytes) -> object:
            import cloudpickle

            return cloudpickle.loads(bytes(payload)[::-1])

    data = os.urandom(300_000)
    with Client(address=combo.address, timeout_seconds=TIMEOUT, shared_memory=100_000, serializer=Reversed()) as c:
        # one shared, one inline argument, a keyword, and a small task untouched
        assert c.submit(lambda a, b, key=None: (digest(a), b, key), data, 5, key="k").result(TIMEOUT) == (
            digest(data),
            5,
            "k",
        )
        assert c.submit(len, b"small").result(TIMEOUT) == 5
        assert c._shared is not None and c._shared.shared == 1
    with pytest.raises(ValueError, match="shared_memory must be"):
        Client(address=combo.address, shared_memory=-1)


def test_segments_are_unlinked_when_tasks_end_and_on_close(combo: SchedulerClusterCombo, tmp_path: Path) -> None:
    data = blobs(3)
    client = Client(address=combo.address, timeout_seconds=TIMEOUT)
    try:
        slow = client.submit(digest_after, data[0], str(tmp_path), 60)
        wait_until(lambda: any(tmp_path.iterdir()), timeout=TIMEOUT, what="the slow task to start")
        quick = [client.submit(digest, blob) for blob in data[1:]]
        assert [f.result(timeout=TIMEOUT) for f in quick] == [digest(blob) for blob in data[1:]]
        wait_until(lambda: len(segments(client)) == 1, timeout=TIMEOUT, what="the quick tasks' segments to go")
        assert not slow.done()
        assert client._shared is not None
        prefix = client._shared._prefix
    finally:
        client.disconnect()
    assert not [name for name in os.listdir("/dev/shm") if name.startswith(prefix)]


def test_cancel_leaks_nothing(combo: SchedulerClusterCombo, tmp_path: Path) -> None:
    data = blobs(1)
    with Client(address=combo.address, timeout_seconds=TIMEOUT) as client:
        future = client.submit(digest_after, data[0], str(tmp_path), 60)
        wait_until(lambda: any(tmp_path.iterdir()), timeout=TIMEOUT, what="the task to start")
        assert len(segments(client)) == 1
        assert future.cancel()
        wait_until(lambda: not segments(client), timeout=TIMEOUT, what="the cancelled task's segment to go")
        assert client.submit(digest, data[0]).result(timeout=TIMEOUT) == digest(data[0])  # the workers serve on


def test_a_killed_processor_mid_task_reruns_from_the_same_segment(combo: SchedulerClusterCombo, tmp_path: Path) -> None:
    data = blobs(1)
    with Client(address=combo.address, timeout_seconds=TIMEOUT) as client:
        future = client.submit(digest_after, data[0], str(tmp_path), 60)
        wait_until(lambda: any(tmp_path.iterdir()), timeout=TIMEOUT, what="the task to start")
        (marker,) = list(tmp_path.iterdir())
        kill_descendant(int(marker.name))  # the processor running it
        assert future.result(timeout=TIMEOUT) == digest(data[0])  # run again, reading the same segment
        assert len(list(tmp_path.iterdir())) == 2
        assert client._shared is not None and client._shared.fallbacks == 0
        wait_until(lambda: not segments(client), timeout=TIMEOUT, what="the segment to go")


CLIENT_THAT_WAITS = textwrap.dedent(
    """
    import os, sys, time
    from scaler import Client
    client = Client(address=sys.argv[1], timeout_seconds=30)
    future = client.submit(time.sleep, 60, os.urandom(2 * 1024 * 1024))  # an extra big argument: a segment
    print(client._shared._prefix, flush=True)
    time.sleep(120)
    """
)


def test_a_client_killed_with_9_leaves_segments_the_next_client_sweeps(combo: SchedulerClusterCombo) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(
        [sys.executable, "-c", CLIENT_THAT_WAITS, combo.address], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert process.stdout is not None
        prefix = process.stdout.readline().strip()
        assert prefix.startswith("scaler-")
        left = [name for name in os.listdir("/dev/shm") if name.startswith(prefix)]
        assert len(left) == 1
        kill_descendant(process.pid)
        process.wait(timeout=TIMEOUT)
        # (Any client that starts on this host now sweeps it, a client of a test running beside this one too: so
        # whether it is still there at this point is not asserted. scaler.shm.sweep's own test is in tests/unit.)
        with Client(address=combo.address, timeout_seconds=TIMEOUT):
            assert not os.path.exists(os.path.join("/dev/shm", left[0]))  # swept at start
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=TIMEOUT)


# ----------------------------------------------------------------------------------------------- another host
def _can_unshare() -> str | None:
    if shutil.which("unshare") is None:
        return "needs unshare (util-linux)"
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs tmpfs /dev/shm"], capture_output=True, text=True, timeout=10
    )
    if probe.returncode != 0:
        return f"cannot make a mount namespace with a private /dev/shm here: {probe.stderr.strip()}"
    return None


@pytest.fixture()
def worker_elsewhere() -> Iterator[str]:
    """A scheduler, and one worker whose processes see a /dev/shm of their own (a mount namespace with a private
    tmpfs there): to shared memory, it is on another host."""
    reason = _can_unshare()
    if reason is not None:
        pytest.skip(reason)
    combo = SchedulerClusterCombo(address=free_address(), n_workers=0, **FAST)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    command = f'mount -t tmpfs tmpfs /dev/shm && exec "{BIN / "scaler_cluster"}" "$0" -n 1 --logging-level WARNING'
    worker = subprocess.Popen(["unshare", "-rm", "sh", "-c", command, combo.address], env=env, stdin=subprocess.DEVNULL)
    try:
        yield combo.address
    finally:
        try:
            kill_tree([psutil.Process(worker.pid)])
        except psutil.Error:
            pass
        worker.wait(timeout=TIMEOUT)
        combo.shutdown()


def test_a_worker_that_cannot_read_the_segment_still_runs_the_task(worker_elsewhere: str) -> None:
    data = blobs(4)
    with Client(address=worker_elsewhere, timeout_seconds=TIMEOUT) as client:
        assert client._shared is not None
        future = client.submit(digest_where, data[0])
        task_id = future.task_id
        result, where = future.result(timeout=TIMEOUT)
        assert result == digest(data[0])
        assert where != shm_identity()  # it ran where our /dev/shm is not
        assert future.task_id != task_id  # sent again, inline, under a new id, for the same future
        assert client._shared.fallbacks == 1
        assert client._shared._inline_until > time.monotonic() - TIMEOUT  # a back-off began
        # within the back-off, arguments go inline at once (made long here: a slow machine must not outlast it)...
        client._shared._inline_until = time.monotonic() + 600
        assert client.map(digest, [(blob,) for blob in data[1:3]], timeout=TIMEOUT) == [digest(b) for b in data[1:3]]
        assert client._shared.fallbacks == 1 and client._shared.shared == 1
        # ...past it, they try shared memory again, and fall back again
        client._shared._inline_until = 0.0
        assert client.map(digest, [(blob,) for blob in data[1:3]], timeout=TIMEOUT) == [digest(b) for b in data[1:3]]
        assert client._shared.fallbacks >= 2
        client._shared._inline_until = 0.0
        assert client.submit(digest, data[3]).result(timeout=TIMEOUT) == digest(data[3])
        assert not segments(client)


# ----------------------------------------------------------------------------------------------- objects in place
class Plain(Serializer):
    """A serializer of the user's own (plain pickle): objects and results then always travel inline."""

    @staticmethod
    def serialize(obj: object) -> bytes:
        return pickle.dumps(obj)

    @staticmethod
    def deserialize(payload: bytes) -> object:
        return pickle.loads(payload)


ARRAY_ITEMS = 4 << 20  # 32 MiB of float64


def mapped_from(value: Any) -> tuple[float, bool, list[str]]:
    """The sum of a send_object array, whether the task may write into it, and the scaler segments this processor
    has mapped (from /proc/self/maps): the array is read in place if its segment is among them."""
    names = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "/scaler-" in line:
                names.add(line.rsplit("/", 1)[1].split()[0])
    return float(value.sum()), bool(value.flags.writeable), sorted(names)


def add_one_in_place(value: Any) -> float:
    value += 1
    return float(value.sum())


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to count the scheduler's bytes")
def test_a_big_object_is_read_in_place_by_every_processor(combo: SchedulerClusterCombo) -> None:
    numpy = pytest.importorskip("numpy")
    port = int(combo.address.rsplit(":", 1)[1])
    array = numpy.random.default_rng(1).random(ARRAY_ITEMS)
    with Client(address=combo.address, timeout_seconds=TIMEOUT) as client:
        assert client.submit(len, b"warm").result(timeout=TIMEOUT) == 4
        before = scheduler_received(port)
        ref = client.send_object(array, name="big")
        (segment,) = segments(client)
        assert ref.size >= array.nbytes  # the size it has in shared memory, not the reference's
        results = [f.result(timeout=TIMEOUT) for f in [client.submit(mapped_from, ref) for _ in range(8)]]
        results += client.map(mapped_from, [(ref,)] * 4, timeout=TIMEOUT)
        through = scheduler_received(port) - before
        assert through < 200_000, f"the scheduler received {through:,} bytes for an object of {array.nbytes:,}"
        assert {r[0] for r in results} == {float(array.sum())}
        assert {r[1] for r in results} == {True}  # the processor's own (copy-on-write), as an unpickled value is
        assert all(segment in r[2] for r in results)  # every call read it where it is, mapped
        # a write reaches the writer's pages only: the segment, and so every other reader, keeps the value sent
        assert client.submit(add_one_in_place, ref).result(timeout=TIMEOUT) == float((array + 1).sum())
        reference = client._shared_objects[ref.object_id][0]
        assert (load_object(encode_reference(reference)) == array).all()
        # small objects, and the client's other values, go inline as before
        small = client.send_object(list(range(10)))
        assert client.submit(sum, small).result(timeout=TIMEOUT) == 45
        assert segments(client) == [segment]
        client.clear()  # frees the objects: the segment goes with them
        assert not segments(client)
        ref = client.send_object(array)
        assert client.submit(mapped_from, ref).result(timeout=TIMEOUT)[0] == float(array.sum())
        assert len(segments(client)) == 1
        shared = client._shared
    assert shared is not None and shared.fallbacks == 0
    assert not [name for name in os.listdir("/dev/shm") if name.startswith(shared._prefix)]  # gone on disconnect


def test_shared_memory_off_or_a_custom_serializer_send_objects_inline(combo: SchedulerClusterCombo) -> None:
    numpy = pytest.importorskip("numpy")
    array = numpy.arange(1 << 18, dtype=numpy.float64)  # 2 MiB
    for settings in ({"shared_memory": False}, {"serializer": Plain()}):
        with Client(address=combo.address, timeout_seconds=TIMEOUT, **settings) as client:
            ref = client.send_object(array)
            total, writeable, _ = client.submit(mapped_from, ref).result(timeout=TIMEOUT)
            assert total == float(array.sum()) and writeable  # the processor's own copy
            assert not client._shared_objects


def test_an_object_a_worker_cannot_read_in_place_is_sent_again_inline(worker_elsewhere: str) -> None:
    numpy = pytest.importorskip("numpy")
    array = numpy.random.default_rng(2).random(1 << 18)  # 2 MiB
    with Client(address=worker_elsewhere, timeout_seconds=TIMEOUT) as client:
        assert client._shared is not None
        ref = client.send_object(array)
        assert len(segments(client)) == 1
        future = client.submit(mapped_from, ref)
        task_id = future.task_id
        total, writeable, mapped = future.result(timeout=TIMEOUT)
        assert total == float(array.sum()) and writeable and not mapped  # read from an inline copy
        assert future.task_id != task_id and client._shared.fallbacks == 1
        # the copy is sent once: the map's tasks (and a keyword) all use it
        client._shared._inline_until = 0.0
        results = client.map(mapped_from, [(ref,)] * 3, timeout=TIMEOUT)
        results.append(client.submit(mapped_from, value=ref).result(timeout=TIMEOUT))
        assert {r[0] for r in results} == {float(array.sum())}
        assert len(client._inline_copies) == 1
        # within the back-off, a new big object goes inline at once
        client._shared._inline_until = time.monotonic() + 600
        inline = client.send_object(array + 1)
        assert client.submit(mapped_from, inline).result(timeout=TIMEOUT)[0] == float((array + 1).sum())
        assert len(segments(client)) == 1


def test_a_graph_given_a_shared_object_gets_an_inline_copy(combo: SchedulerClusterCombo) -> None:
    numpy = pytest.importorskip("numpy")
    array = numpy.arange(1 << 18, dtype=numpy.float64)  # 2 MiB
    with Client(address=combo.address, timeout_seconds=TIMEOUT) as client:
        ref = client.send_object(array)
        graph = {"a": ref, "total": (mapped_from, "a"), "again": (mapped_from, ref)}
        got = client.get(graph, ["total", "again"], timeout=TIMEOUT)
        assert got["total"][0] == got["again"][0] == float(array.sum())
        assert not got["total"][2]  # not mapped: a copy, which any worker can read
        assert len(client._inline_copies) == 1  # sent once for both


# ----------------------------------------------------------------------------------------------- results
def big_result(seed: int, size: int = BIG) -> bytes:
    return seed.to_bytes(8, "little") * (size // 8)


def big_array(n: int) -> Any:
    import numpy

    return numpy.full(n, 1.5)


def results_left(client: Client) -> list[str]:
    """Result segments of this client's tasks still in /dev/shm."""
    assert client._shared is not None
    return [name for name in os.listdir("/dev/shm") if name.startswith(client._shared.results_prefix)]


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to count the scheduler's bytes")
def test_big_results_come_back_through_shared_memory(combo: SchedulerClusterCombo) -> None:
    numpy = pytest.importorskip("numpy")
    port = int(combo.address.rsplit(":", 1)[1])
    with Client(address=combo.address, timeout_seconds=TIMEOUT) as client:
        assert client.submit(len, b"warm").result(timeout=TIMEOUT) == 4
        before = scheduler_received(port)
        futures = [client.submit(big_result, k) for k in range(3)]
        values = [f.result(timeout=TIMEOUT) for f in futures] + client.map(big_result, range(3, 6), timeout=TIMEOUT)
        array = client.submit(big_array, 1 << 18).result(timeout=TIMEOUT)
        through = scheduler_received(port) - before
        assert values == [big_result(k) for k in range(6)]
        assert isinstance(array, numpy.ndarray) and array.flags.writeable and float(array.sum()) == 1.5 * (1 << 18)
        array += 1  # the caller's own: read in place, copy-on-write
        assert through < 200_000, f"the scheduler received {through:,} bytes for 7 results of {BIG:,}"
        assert results_left(client) == []  # each unlinked once read
        assert client.submit(big_result, 7, 100).result(timeout=TIMEOUT) == big_result(7, 100)  # small: inline
        # a result nobody reads stays until the client closes
        unread = client.submit(big_result, 8)
        wait_until(lambda: unread.done(), timeout=TIMEOUT, what="the unread task to end")
        assert len(results_left(client)) == 1
        shared = client._shared
    assert shared is not None
    assert not [name for name in os.listdir("/dev/shm") if name.startswith(shared.results_prefix)]


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to count the scheduler's bytes")
def test_graph_keyed_and_custom_serializer_results_stay_inline(combo: SchedulerClusterCombo) -> None:
    port = int(combo.address.rsplit(":", 1)[1])
    with Client(address=combo.address, timeout_seconds=TIMEOUT) as client:
        before = scheduler_received(port)
        # a graph's result may feed other tasks, a keyed result is kept by the scheduler: both must be real bytes
        got = client.get({"a": (big_result, 1), "n": (len, "a")}, ["a", "n"], timeout=TIMEOUT)
        assert got == {"a": big_result(1), "n": BIG}
        keyed = client.options(idempotency_key="big-result").submit(big_result, 2)
        assert keyed.result(timeout=TIMEOUT) == big_result(2)
        assert client.options(idempotency_key="big-result").submit(big_result, 2).result(TIMEOUT) == big_result(2)
        assert scheduler_received(port) - before > 2 * BIG
    with Client(address=combo.address, timeout_seconds=TIMEOUT, serializer=Plain()) as client:
        before = scheduler_received(port)
        assert client.submit(big_result, 3).result(timeout=TIMEOUT) == big_result(3)
        assert scheduler_received(port) - before > BIG


def test_a_big_result_for_a_client_on_another_host_comes_inline(worker_elsewhere: str) -> None:
    with Client(address=worker_elsewhere, timeout_seconds=TIMEOUT) as client:
        assert client.map(big_result, range(2), timeout=TIMEOUT) == [big_result(0), big_result(1)]
        assert client._shared is not None and client._shared.fallbacks == 0  # nothing to fall back from


def test_the_docs_example_runs(tmp_path: Path) -> None:
    """docs/guide/data.md's "Large objects and results" example against a real cluster (only the address changes)."""
    pytest.importorskip("numpy")
    import re

    section = (ROOT / "docs" / "guide" / "data.md").read_text().split("\n## Large objects and results\n", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    address = free_address()
    script = tmp_path / "example.py"
    script.write_text(match.group(1).replace("tcp://127.0.0.1:2345", address))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    with SchedulerClusterCombo(address=address, n_workers=2, **FAST):
        run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.splitlines() == [str([16_000_000.0] * 16), "2000000"]


def test_the_same_big_argument_to_many_tasks_says_once_to_use_send_object(
    combo: SchedulerClusterCombo, caplog: pytest.LogCaptureFixture
) -> None:
    numpy = pytest.importorskip("numpy")
    array = numpy.arange(1 << 18, dtype=numpy.float64)  # 2 MiB
    with Client(address=combo.address, timeout_seconds=TIMEOUT) as client:
        with caplog.at_level("WARNING", logger="scaler.client.client"):
            client.map(mapped_from, [(numpy.ones(1 << 18),), (array,), (numpy.zeros(1 << 18),)], timeout=TIMEOUT)
            assert "send_object" not in caplog.text  # three arrays: nothing to say
            assert len(client.map(mapped_from, [(array,)] * 4, timeout=TIMEOUT)) == 4
            [client.submit(mapped_from, array).result(timeout=TIMEOUT) for _ in range(3)]
        hints = [r.getMessage() for r in caplog.records if "send_object" in r.getMessage()]
        assert len(hints) == 1, hints  # once per client
        assert "the same ndarray argument (2,097," in hints[0] and "ref = client.send_object(value)" in hints[0]
