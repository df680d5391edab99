"""The journal compacted while the scheduler serves (scheduler/journaling.py, Journaling.tick; ADR 0023): once it has
grown enough, a thread keeps the records still needed (recovery.kept_entries against the live core's ids), the loop
appends what was written meanwhile and installs the new file; a scheduler recovering from it rebuilds what it would
have from the whole journal. A failed compaction leaves the journal as it was. Real files, a real core, its journal
entries written as the shell writes them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from scaler.core.scheduler import SchedulerConfig, SchedulerCore
from scaler.core.scheduler.tasks import TaskState
from scaler.protocol.messages import CancelTasks, FreeObjects
from scaler.scheduler.journaling import Journaling
from tests.simulation.recovery_check import snapshot
from tests.unit.scheduler_driver import Driver, ok, submit, tid
from tests.unit.test_scheduler_replay import RandomRun

IDENTITY = "tcp://127.0.0.1:1"


def served(path: Path, compact_min_bytes: int, d: Driver | None = None) -> tuple[Driver, Journaling, list[Any]]:
    """A journaled core whose journal entries go to the file at `path` after every event, as the shell's flush (and
    to the list returned, all of them)."""
    d = d or Driver(SchedulerConfig(journaled=True))
    journaling = Journaling.recover(str(path), IDENTITY, "none", d.core, 0.0)
    journaling.compact_min_bytes = compact_min_bytes
    after = d._after
    every: list[Any] = []

    def written(commands: list[Any]) -> list[Any]:
        entries, d.core.journal = d.core.journal, []
        if entries:
            journaling.write(entries)
            every.extend(entries)
        return after(commands)

    d._after = written  # type: ignore[method-assign]
    return d, journaling, every


def recovered(path: Path) -> SchedulerCore:
    core = SchedulerCore(SchedulerConfig(journaled=True))
    Journaling.recover(str(path), IDENTITY, "none", core, 100.0).close()
    core.validate()
    return core


def wait_compacted(journaling: Journaling, core: SchedulerCore) -> None:
    journaling.tick(core)
    assert journaling.compaction is not None, "no compaction started"
    assert journaling.compaction.done.wait(10)
    journaling.tick(core)  # installs it
    assert journaling.compaction is None


def test_a_journal_grown_past_the_threshold_is_compacted_and_recovers_the_same(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    d, journaling, _ = served(path, compact_min_bytes=20_000)
    p = d.client(b"c1")
    f = tid(p, 1)
    d.put(b"c1", (f, b"fn"))
    d.worker(b"w1", capacity=8)
    for n in range(300):  # work that comes and goes: what compaction drops
        task = tid(p, 10 + n)
        d.recv(b"c1", submit((task, f, [b"x" * 100])))
        d.recv(b"w1", ok(task))
    live = [tid(p, 1000 + n) for n in range(20)]  # and work still there
    d.recv(b"c1", submit(*((task, f, [b"y" * 100]) for task in live)))
    grown = path.stat().st_size
    assert grown > 20_000
    journaling.tick(d.core)
    compaction = journaling.compaction
    assert compaction is not None and compaction.done.wait(10)
    d.recv(b"c1", CancelTasks([live[0]]))  # written meanwhile: the tail, appended to the new file
    d.recv(b"c1", submit((tid(p, 2000), f, [b"z"])))
    journaling.tick(d.core)
    assert journaling.compaction is None and journaling.compactions == 1
    assert path.stat().st_size < grown / 5
    assert not os.path.exists(f"{path}.new")
    expected = snapshot(d.core)
    journaling.tick(d.core)
    assert journaling.compaction is None  # (not again: it has not grown since)
    journaling.close()
    got = snapshot(recovered(path))
    # the recovered core holds what the live one held (assigned tasks queued: no worker)
    assert got["clients"] == expected["clients"] and got["objects"] == expected["objects"]
    cancelling = {t.task_id for t in d.core.tasks.values() if t.state == TaskState.CANCELING}  # (at the worker)
    assert cancelling == {live[0]}
    assert [t[0] for t in got["tasks"]] == [t[0] for t in expected["tasks"] if t[0] not in cancelling]
    assert live[0] not in {t[0] for t in got["tasks"]} and tid(p, 2000) in {t[0] for t in got["tasks"]}


@pytest.mark.parametrize("seed", [3, 7])
def test_compacting_while_a_random_run_serves_recovers_what_the_whole_journal_would(tmp_path: Path, seed: int) -> None:
    run = RandomRun(seed)
    path = tmp_path / "compacted"
    run.d, journaling, every = served(path, compact_min_bytes=3_000, d=run.d)
    for step in range(150):
        run.step()
        if step % 10 == 9 and journaling.due():
            wait_compacted(journaling, run.d.core)
    journaling.close()
    assert journaling.compactions >= 2
    whole = tmp_path / "whole"  # the same entries, never compacted while serving
    plain = Journaling.recover(str(whole), IDENTITY, "none", SchedulerCore(SchedulerConfig(journaled=True)), 0.0)
    plain.write(every)
    plain.close()
    assert snapshot(recovered(path)) == snapshot(recovered(whole))


def test_a_failed_compaction_is_logged_and_the_journal_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "journal"
    d, journaling, _ = served(path, compact_min_bytes=5_000)
    p = d.client(b"c1")
    d.put(b"c1", *((tid(p, n), b"o" * 200) for n in range(1, 40)))
    d.recv(b"c1", FreeObjects([tid(p, 1)]))
    journaling.identity = "tcp://somewhere.else:1"  # reading back fails: another scheduler's header
    journaling.tick(d.core)
    assert journaling.compaction is not None and journaling.compaction.done.wait(10)
    size = path.stat().st_size
    journaling.tick(d.core)
    assert journaling.compaction_failures == 1 and path.stat().st_size == size
    assert "could not compact the journal" in caplog.text and "belongs to the scheduler at" in caplog.text
    journaling.tick(d.core)
    assert journaling.compaction is None  # not tried again before it has grown by compact_min_bytes
    journaling.identity = IDENTITY
    d.recv(b"c1", FreeObjects([tid(p, 2)]))
    journaling.close()
    assert sorted(recovered(path).objects) == [tid(p, n) for n in range(3, 40)]
