"""Error payloads: an exception comes back as itself, however deep the traceback it gathered."""

from __future__ import annotations

from scaler.payloads import PICKLED_FRAMES_AT_MOST, RemoteError, pack_exception, unpack_exception


def _raise(exc: BaseException) -> None:
    raise exc


def _three_frames(exc: BaseException) -> None:
    _raise(exc)


def test_an_exception_raised_through_hundreds_of_levels_keeps_its_type() -> None:
    # Like a nested task re-raising its child's error at each level: the traceback grows by every level's frames.
    try:
        raise ValueError("the bottom")
    except ValueError as exc:
        payload = pack_exception(exc)
    for _ in range(150):  # unpickling failed past about 80 levels when the whole traceback was pickled
        error = unpack_exception(payload)
        assert type(error) is ValueError
        try:
            _three_frames(error)
        except ValueError as exc:
            payload = pack_exception(exc)
    error = unpack_exception(payload)
    assert type(error) is ValueError and str(error) == "the bottom"
    depth = 0
    tb = error.__traceback__
    while tb is not None:
        depth, tb = depth + 1, tb.tb_next
    assert depth == PICKLED_FRAMES_AT_MOST  # the innermost frames: where it was raised
    assert "the bottom" in pack_exception(error).decode(errors="replace")


def test_an_unpicklable_exception_comes_back_as_remote_error_with_its_text() -> None:
    class Local(Exception):  # it holds a lock, which cannot be pickled: only its text travels
        def __init__(self) -> None:
            super().__init__("held a lock")
            import threading

            self.lock = threading.Lock()

    try:
        raise Local()
    except Local as exc:
        error = unpack_exception(pack_exception(exc))
    assert isinstance(error, RemoteError)
    assert "held a lock" in str(error)
