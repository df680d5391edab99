"""The futures of the keys asked for in a grouped graph (get / submit_graph with group=K, see grouping.py): one
KeyFuture per key, ended by the future of the block task that computes it, and decoded, like any ScalerFuture, in
the caller's thread on first use. Submitting goes through the client's ordinary graph path, given as a callable.
"""

from __future__ import annotations

import concurrent.futures
import functools
import threading
from collections.abc import Callable, Hashable
from typing import Any

from scaler.client.future import _UNDECODED, ScalerFuture
from scaler.client.grouping import GroupedGraph

SubmitGraph = Callable[[dict[Hashable, Any], list[Hashable]], tuple[list[ScalerFuture], list[int]]]


class KeyFuture(ScalerFuture):
    """The future of one key computed inside a block task: its block's outcome, the key's own value on success.
    task_id and profiling_info() are the block's."""

    def __init__(self, block: ScalerFuture, index: int, label: str, on_cancel: Callable[[int], None]) -> None:
        super().__init__(block.task_id, label, on_cancel, block._io_thread)
        self._block: ScalerFuture | None = block
        self._index = index
        self.set_running_or_notify_cancel()

    def _block_ended(self, block: ScalerFuture) -> None:
        """In the I/O thread (a done-callback of the block's future): end as the block ended, decoding nothing."""
        if block.cancelled():
            self._cancel_quietly()
            return
        self._profiling = block._profiling
        if block._exception is not None:
            self._fail(block._exception)
            return
        try:
            self.set_result(_UNDECODED)
        except concurrent.futures.InvalidStateError:
            pass  # cancelled meanwhile

    def _decode(self) -> Any:
        with self._decode_lock:
            if self._result is _UNDECODED:
                try:
                    assert self._block is not None
                    self._result = self._block.result(0)[self._index]
                except Exception as exc:
                    self._result = None
                    self._exception = exc
                    raise
                finally:
                    self._block = None
            if self._exception is not None:
                raise self._exception
            return self._result


def submit_grouped(
    grouped: GroupedGraph, keys: list[Hashable], submit: SubmitGraph, cancel_many: Callable[[list[int]], None]
) -> tuple[list[ScalerFuture], list[int]]:
    """Submit the grouped graph; one future per key of `keys` (the keys it was grouped for), in order, and the ids of
    all the block tasks. Cancelling a key's future stops work only once no key's future is still pending: then every
    block task is cancelled (until then the blocks run on for the other keys)."""
    futures, task_ids = submit(grouped.graph, grouped.keys)
    by_key = dict(zip(grouped.keys, futures))
    out: dict[Hashable, ScalerFuture] = {}
    pending = _Pending()

    def on_cancel(_: int) -> None:
        if pending.count == 0:  # a key's future's done-callbacks (pending.end) ran in its cancel(), before this
            for block in futures:
                block._cancel_quietly()
            cancel_many(task_ids)

    by_block: dict[Hashable, list[KeyFuture]] = {}
    for key, (source, index) in grouped.where.items():
        if index < 0:  # a literal: its future is done already
            out[key] = by_key[source]
            continue
        future = KeyFuture(by_key[source], index, f"key {key!r}", on_cancel)
        by_block.setdefault(source, []).append(future)
        out[key] = future
        pending.count += 1
        future.add_done_callback(pending.end)
    for source, waiting in by_block.items():
        by_key[source].add_done_callback(functools.partial(_block_ended, waiting))
    return [out[key] for key in keys], task_ids


def _block_ended(waiting: list[KeyFuture], block: concurrent.futures.Future[Any]) -> None:
    assert isinstance(block, ScalerFuture)
    for future in waiting:
        future._block_ended(block)


class _Pending:
    """How many keys' futures of a grouped graph are not done yet."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def end(self, _: object) -> None:
        with self._lock:
            self.count -= 1
