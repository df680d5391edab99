"""scaler.shm: references, host tokens, segment headers, the writer's segments and the sweep of dead clients'."""

from __future__ import annotations

import hashlib
import os
import pickle
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from scaler import shm
from scaler.shm import (
    DATA_OFFSET,
    MalformedReference,
    Parts,
    Reference,
    SharedArguments,
    SharedMemoryUnreachable,
    decode_reference,
    encode_reference,
    pickle_parts,
    read_argument,
)
from tests.helpers import make_char_device, make_fifo

NAME = "scaler-4026531836-1234-5678-" + "ab" * 16


def reference(**changes: object) -> Reference:
    fields: dict[str, Any] = {"name": NAME, "size": 10, "nonce": b"n" * 16, "token": b"t" * 16}
    fields.update(changes)
    return Reference(**fields)


def test_reference_round_trip() -> None:
    ref = reference(size=123_456_789_012)
    payload = encode_reference(ref)
    assert payload[0] == shm.TAG_REFERENCE
    assert decode_reference(payload) == ref
    assert decode_reference(memoryview(payload)) == ref


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        (b"", "too short"),
        (b"\x01abc", "too short"),
        (b"\x00" + encode_reference(reference())[1:], "not tagged"),
        (b"\x01\x09" + encode_reference(reference())[2:], "version 9"),
        (encode_reference(reference())[: -len(NAME)] + b"../../../etc/passwd", "not the name"),
        (encode_reference(reference())[: -len(NAME)] + "scaler-é".encode(), "not ASCII"),
        (encode_reference(reference())[: -len(NAME)] + b"scaler-1-2-3-" + b"AB" * 16, "not the name"),
    ],
)
def test_malformed_references_are_refused_clearly(payload: bytes, says: str) -> None:
    with pytest.raises(MalformedReference, match=says):
        decode_reference(payload)


def test_split_payload_needs_a_tag() -> None:
    assert shm.split_payload(b"\x00abc")[0] == shm.TAG_INLINE
    with pytest.raises(MalformedReference, match="no valid tag"):
        shm.split_payload(b"\x07abc")
    with pytest.raises(MalformedReference, match="no valid tag"):
        shm.split_payload(b"")


def test_host_token_is_this_boot_this_shm_this_user() -> None:
    token = shm.host_token()
    assert len(token) == 16 and token == shm.host_token()
    boot = Path("/proc/sys/kernel/random/boot_id").read_bytes().strip()
    st = os.stat("/dev/shm")
    other_uid = hashlib.sha256(b"%s|%d|%d|%d" % (boot, st.st_dev, st.st_ino, os.getuid() + 1)).digest()[:16]
    assert other_uid != token


def test_header_must_match_the_reference() -> None:
    ref = reference()
    shm.check_header(shm.encode_header(ref.nonce, ref.size), ref)
    with pytest.raises(SharedMemoryUnreachable, match="not the one"):
        shm.check_header(shm.encode_header(b"x" * 16, ref.size), ref)
    with pytest.raises(SharedMemoryUnreachable, match="not the one"):
        shm.check_header(shm.encode_header(ref.nonce, ref.size + 1), ref)
    with pytest.raises(SharedMemoryUnreachable, match="not the one"):
        shm.check_header(b"XXXXXXXX" + shm.encode_header(ref.nonce, ref.size)[8:], ref)
    with pytest.raises(SharedMemoryUnreachable, match="too short"):
        shm.check_header(b"SCLRSHM1", ref)


def test_unreachable_payload_is_recognised() -> None:
    payload = SharedMemoryUnreachable("segment x is gone").payload()
    assert shm.is_unreachable(True, payload)
    assert not shm.is_unreachable(False, payload)  # only as `failed`
    assert not shm.is_unreachable(True, b"task 0x1 was not completed: ...")


def test_write_read_release(tmp_path: Path) -> None:
    shared = SharedArguments(100, str(tmp_path))
    big, small = os.urandom(1000), b"tiny"
    result = shared.share([small, big])
    assert result is not None
    payloads, names = result
    assert len(names) == 1 and shared.live == names
    assert payloads[0] == b"\x00" + small
    ref = decode_reference(payloads[1])
    assert ref.size == len(big) and ref.token == shm.host_token()
    assert (tmp_path / ref.name).stat().st_size == DATA_OFFSET + len(big)
    assert (tmp_path / ref.name).stat().st_mode & 0o777 == 0o600
    assert read_argument(ref, bytes, str(tmp_path)) == big
    assert shared.read_back(ref.name) == big
    shared.release(names)
    assert list(tmp_path.iterdir()) == [] and shared.live == []
    with pytest.raises(SharedMemoryUnreachable, match="is gone"):
        read_argument(ref, bytes, str(tmp_path))


def test_reader_refuses_another_host_or_another_segment(tmp_path: Path) -> None:
    shared = SharedArguments(10, str(tmp_path))
    result = shared.share([b"y" * 50])
    assert result is not None
    ref = decode_reference(result[0][0])
    with pytest.raises(SharedMemoryUnreachable, match="another host"):
        read_argument(Reference(ref.name, ref.size, ref.nonce, b"o" * 16), bytes, str(tmp_path))
    with pytest.raises(SharedMemoryUnreachable, match="not the one"):
        read_argument(Reference(ref.name, ref.size, b"z" * 16, ref.token), bytes, str(tmp_path))
    with pytest.raises(SharedMemoryUnreachable, match="bytes, not"):
        read_argument(Reference(ref.name, ref.size + 1, ref.nonce, ref.token), bytes, str(tmp_path))
    shared.close()
    assert list(tmp_path.iterdir()) == []


def test_the_mapping_is_closed_after_reading(tmp_path: Path) -> None:
    shared = SharedArguments(10, str(tmp_path))
    result = shared.share([pickle.dumps(b"z" * 4096)])
    assert result is not None
    ref = decode_reference(result[0][0])
    value = read_argument(ref, pickle.loads, str(tmp_path))
    assert value == b"z" * 4096
    maps = Path("/proc/self/maps").read_text()
    assert ref.name not in maps
    shared.close()


def test_full_or_missing_shm_means_inline(tmp_path: Path) -> None:
    shared = SharedArguments(10, str(tmp_path / "missing"))
    assert not shared.enabled
    assert shared.share([b"x" * 100]) is None


def test_fallback_backs_off_and_success_resets(tmp_path: Path) -> None:
    shared = SharedArguments(10, str(tmp_path))
    shared.fell_back()
    assert not shared.active()
    assert shared.share([b"x" * 100]) is None  # inline for a while
    assert list(tmp_path.iterdir()) == []
    shared._inline_until = 0.0
    assert shared.active()
    shared.fell_back()
    assert shared._backoff == 4.0
    shared.read_ok()
    assert shared._backoff == 1.0


def test_pickle_parts_does_not_copy_big_buffers() -> None:
    data = os.urandom(200_000)
    parts = pickle_parts(data, True, 100_000)
    assert isinstance(parts, Parts) and len(parts) > len(data)
    assert any(chunk is data for chunk in parts.chunks)
    assert pickle.loads(parts.join()) == data
    small = pickle_parts({"a": 1}, False, 100_000)
    assert isinstance(small, bytes) and pickle.loads(small) == {"a": 1}


def test_parts_written_to_a_segment_read_back_whole(tmp_path: Path) -> None:
    value = {"blob": os.urandom(300_000), "tag": "x"}
    parts = pickle_parts(value, False, 1000)
    shared = SharedArguments(1000, str(tmp_path))
    result = shared.share([parts])
    assert result is not None
    assert read_argument(decode_reference(result[0][0]), pickle.loads, str(tmp_path)) == value
    shared.close()
    assert list(tmp_path.iterdir()) == []


def test_sweep_removes_dead_clients_segments_only(tmp_path: Path) -> None:
    namespace = shm._pid_namespace()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    dead_pid = int(dead.stdout)
    me = os.getpid()
    started = shm._start_time(me)
    assert started is not None
    names = {
        "dead": f"scaler-{namespace}-{dead_pid}-1-{'0' * 32}",
        "reused pid": f"scaler-{namespace}-{me}-{started + 1}-{'1' * 32}",
        "alive": f"scaler-{namespace}-{me}-{started}-{'2' * 32}",
        "other namespace": f"scaler-{namespace + 1}-{dead_pid}-1-{'3' * 32}",
        "not ours": "psm_0123",
    }
    for name in names.values():
        (tmp_path / name).write_bytes(b"x")
    assert shm.sweep(str(tmp_path)) == 2
    left = {path.name for path in tmp_path.iterdir()}
    assert left == {names["alive"], names["other namespace"], names["not ours"]}


def test_close_and_finalizer_unlink_everything(tmp_path: Path) -> None:
    shared = SharedArguments(10, str(tmp_path))
    for _ in range(3):
        assert shared.share([b"q" * 20]) is not None
    assert len(list(tmp_path.iterdir())) == 3
    del shared  # garbage: its finalizer unlinks
    assert list(tmp_path.iterdir()) == []


def test_no_segment_when_shm_would_be_too_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = SharedArguments(10, str(tmp_path))
    monkeypatch.setattr(shm, "KEEP_FREE_FRACTION", 1.0)  # no segment may make /dev/shm fuller than it is
    assert shared.share([b"x" * 100]) is None
    assert list(tmp_path.iterdir()) == []
    parts = pickle_parts(os.urandom(200), True, 10)
    assert shm.untag([parts, b"y"]) == (parts.join(), b"y")


# ----------------------------------------------------------------------------------------------- hostile files
# A reference names a file in the shared-memory folder; whoever can write there (or submit a crafted payload) decides
# what that file is. Only a regular file of this user, mode 0600, of the reference's size is ever read or mapped;
# anything else fails at once (a FIFO or a device must not block the processor in open() or read()).
def segment_ref(tmp_path: Path) -> tuple[SharedArguments, Reference, Path]:
    shared = SharedArguments(10, str(tmp_path))
    result = shared.share([b"s" * 100])
    assert result is not None
    ref = decode_reference(result[0][0])
    return shared, ref, tmp_path / ref.name


def size_of(path: Path) -> int:
    """The reference size that matches a file's own size (so that only its kind can refuse it)."""
    return max(0, os.lstat(path).st_size - DATA_OFFSET)


def make_directory(path: Path) -> None:
    path.mkdir(mode=0o600)


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("make", "says"),
    [(make_fifo, "is a FIFO"), (make_directory, "is a directory"), (make_char_device, "is a character device")],
)
def test_a_reference_to_a_file_that_is_not_regular_fails_at_once(
    tmp_path: Path, make: Callable[[Path], None], says: str
) -> None:
    path = tmp_path / NAME
    make(path)
    ref = reference(size=size_of(path), token=shm.host_token())
    with pytest.raises(SharedMemoryUnreachable, match=says) as caught:
        shm.open_reference(ref, str(tmp_path))
    assert str(path) in str(caught.value) and "regular file" in str(caught.value)
    with pytest.raises(SharedMemoryUnreachable, match=says):
        read_argument(ref, bytes, str(tmp_path))


@pytest.mark.timeout(10)
def test_a_symbolic_link_to_a_real_segment_is_refused(tmp_path: Path) -> None:
    shared, ref, path = segment_ref(tmp_path)
    link = tmp_path / NAME
    link.symlink_to(path)
    with pytest.raises(SharedMemoryUnreachable, match="symbolic link"):
        read_argument(Reference(NAME, ref.size, ref.nonce, ref.token), bytes, str(tmp_path))
    shared.close()


@pytest.mark.timeout(10)
def test_a_segment_of_another_mode_or_owner_is_refused(tmp_path: Path) -> None:
    shared, ref, path = segment_ref(tmp_path)
    assert read_argument(ref, bytes, str(tmp_path)) == b"s" * 100
    path.chmod(0o644)
    with pytest.raises(SharedMemoryUnreachable, match="mode 0644, not 0600"):
        read_argument(ref, bytes, str(tmp_path))
    with pytest.raises(SharedMemoryUnreachable, match="mode 0644, not 0600"):
        shared.read_back(ref.name)
    path.chmod(0o600)
    if os.geteuid() == 0:  # only root can give a file away
        os.chown(path, 65534, -1)
        with pytest.raises(SharedMemoryUnreachable, match="belongs to uid 65534"):
            read_argument(ref, bytes, str(tmp_path))
        os.chown(path, 0, -1)
    assert read_argument(ref, bytes, str(tmp_path)) == b"s" * 100
    shared.close()


@pytest.mark.timeout(10)
def test_a_segment_replaced_by_a_fifo_is_refused_on_both_ends(tmp_path: Path) -> None:
    """The client reads its own segment back to send a task again inline: that read must not block either."""
    shared, ref, path = segment_ref(tmp_path)
    path.unlink()
    os.mkfifo(path, 0o600)
    with pytest.raises(SharedMemoryUnreachable, match="is a FIFO"):
        read_argument(Reference(ref.name, 0, ref.nonce, ref.token), bytes, str(tmp_path))
    with pytest.raises(SharedMemoryUnreachable, match="is a FIFO"):
        shared.read_back(ref.name)
    shared.close()
    assert list(tmp_path.iterdir()) == []


def test_a_segment_is_0600_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o277)
    try:
        shared, ref, path = segment_ref(tmp_path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_argument(ref, bytes, str(tmp_path)) == b"s" * 100
    shared.close()


# ----------------------------------------------------------------------------------------------- objects in place
def test_an_object_is_read_in_place_and_its_mapping_lives_as_long_as_the_value(tmp_path: Path) -> None:
    numpy = pytest.importorskip("numpy")
    shared = SharedArguments(1000, str(tmp_path))
    value = {"array": numpy.arange(4096, dtype=numpy.float64), "bytes": bytearray(b"b" * 5000), "n": 7}
    made = shared.share_object(value, plain=True)
    assert made is not None
    ref, size = made
    assert size == ref.size and (tmp_path / ref.name).stat().st_size == DATA_OFFSET + size
    payload = shm.object_payload(ref)
    assert len(payload) < 200  # what the scheduler and workers carry
    loaded = shm.load_object(encode_reference(ref), str(tmp_path))  # (what pickle.loads(payload) calls)
    assert (loaded["array"] == value["array"]).all() and loaded["bytes"] == value["bytes"] and loaded["n"] == 7
    assert ref.name in Path("/proc/self/maps").read_text()  # the array is the mapping's memory
    loaded["array"][:] = -1  # writable, copy-on-write: the segment keeps the value
    again = shm.load_object(encode_reference(ref), str(tmp_path))
    assert (again["array"] == value["array"]).all()
    del loaded, again
    assert ref.name not in Path("/proc/self/maps").read_text()  # gone with the value
    plain = shared.share_object(list(range(5000)), plain=True)  # no buffer: read and unmapped at once
    assert plain is not None
    assert shm.load_object(encode_reference(plain[0]), str(tmp_path)) == list(range(5000))
    assert plain[0].name not in Path("/proc/self/maps").read_text()
    assert shared.share_object(b"small", plain=True) is None  # under the threshold: inline
    assert shared.share_object([bytes([k]) * 600 for k in range(3)], plain=True) is not None  # 1,800 bytes in all
    shared.close()
    assert list(tmp_path.iterdir()) == []


def _forged_object(shared: SharedArguments, data: bytes) -> bytes:
    """A segment holding `data` as an object's data, made as a client makes one: its reference payload."""
    ref = shared._create(data)
    assert ref is not None
    return encode_reference(ref)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"short", "too short"),
        (b"NOTATABL" + bytes(60), "no valid table"),
        (shm._OBJECT_TABLE.pack(b"SCLROBJ1", 1 << 30, 0, 0) + bytes(40), "no valid table"),
        (shm._OBJECT_TABLE.pack(b"SCLROBJ1", 0, 0, 1 << 40) + bytes(40), "describes"),
        (shm._OBJECT_TABLE.pack(b"SCLROBJ1", 1, 0, 0) + (1 << 62).to_bytes(8, "little") + bytes(40), "describes"),
    ],
)
def test_a_forged_object_segment_is_refused_clearly(tmp_path: Path, data: bytes, says: str) -> None:
    shared = SharedArguments(1, str(tmp_path))
    with pytest.raises(MalformedReference, match=says):
        shm.load_object(_forged_object(shared, data), str(tmp_path))
    assert ref_maps_clean(tmp_path)
    shared.close()


def ref_maps_clean(tmp_path: Path) -> bool:
    """No segment of tmp_path is still mapped by this process."""
    return str(tmp_path) not in Path("/proc/self/maps").read_text()


# ----------------------------------------------------------------------------------------------- results
def test_a_function_objects_reply_trailer_is_read_back_and_anything_else_is_none(tmp_path: Path) -> None:
    shared = SharedArguments(4096, str(tmp_path))
    function_object = pickle.dumps((None, b"function bytes")) + shared.reply_trailer(1 << 30)
    assert pickle.loads(function_object) == (None, b"function bytes")  # a worker that knows no trailer ignores it
    reply = shm.parse_reply(function_object)
    assert reply == shm.Reply(shm.host_token(), 4096, shared.results_prefix, 1 << 30)
    assert shm.parse_reply(pickle.dumps((None, b"function bytes"))) is None
    assert shm.parse_reply(b"") is None
    trailer = shared.reply_trailer(1 << 30)
    for forged in (
        trailer[:-1] + b"\xff",  # a length longer than the payload
        trailer.replace(b"SCLRRPLY", b"SCLRXXXX"),
        trailer.replace(shared.results_prefix.encode(), b"../../etc/passwd1234567"[: len(shared.results_prefix)]),
        shm._REPLY.pack(b"SCLRRPLY", b"t" * 16, 0, 1) + trailer[shm._REPLY.size :],  # threshold 0
        shm._REPLY.pack(b"SCLRRPLY", b"t" * 16, 4096, 100) + trailer[shm._REPLY.size :],  # a limit under it
    ):
        assert shm.parse_reply(b"pickle" + forged) is None
    shared.close()


def test_a_result_is_shared_only_for_this_host_and_read_once(tmp_path: Path) -> None:
    shared = SharedArguments(100, str(tmp_path))
    reply = shm.parse_reply(shared.reply_trailer(5000))
    assert reply is not None
    big = shm.pickle_object(b"r" * 1000, True, 100)
    assert isinstance(big, Parts)
    assert shm.share_result(b"small", reply, str(tmp_path)) is None  # under the client's threshold
    elsewhere = shm.Reply(b"o" * 16, reply.threshold, reply.prefix, reply.limit)
    assert shm.share_result(big, elsewhere, str(tmp_path)) is None  # the client is on another host
    assert shm.share_result(b"x" * 5001, reply, str(tmp_path)) is None  # over the limit: inline, the scheduler says
    payload = shm.share_result(big, reply, str(tmp_path))
    assert payload is not None and len(payload) < 200
    (segment,) = list(tmp_path.iterdir())
    assert segment.name.startswith(shared.results_prefix)
    called, reference = called_in(payload)
    assert called is shm.load_result  # what the client's pickle.loads(payload) runs
    assert shm.load_result(reference, str(tmp_path)) == b"r" * 1000
    assert list(tmp_path.iterdir()) == []  # read once: unlinked by the client that read it
    with pytest.raises(SharedMemoryUnreachable, match="is gone"):
        shm.load_result(reference, str(tmp_path))
    shared.close()


def test_reading_a_result_unlinks_only_a_segment_named_for_this_process(tmp_path: Path) -> None:
    shared = SharedArguments(1, str(tmp_path))
    ref = shared._create(shm.pickle_object("argument" * 10, True, 1))  # named for this process, as a result would be
    assert ref is not None
    foreign = Reference(NAME, ref.size, ref.nonce, ref.token)  # another process's name
    os.link(tmp_path / ref.name, tmp_path / NAME)
    assert shm.load_result(encode_reference(foreign), str(tmp_path)) == "argument" * 10
    assert (tmp_path / NAME).exists()  # not ours to unlink
    assert shm.load_result(encode_reference(ref), str(tmp_path)) == "argument" * 10
    assert not (tmp_path / ref.name).exists()
    os.unlink(tmp_path / NAME)
    shared.close()


def called_in(payload: bytes) -> tuple[Any, bytes]:
    """The function a payload's pickle calls and its one argument, found without calling it."""
    found: list[Any] = []

    class Catch(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            function = super().find_class(module, name)
            found.append(function)
            return lambda argument: argument

    import io

    argument = Catch(io.BytesIO(payload)).load()
    return found[0], argument
