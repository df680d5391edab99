"""Dask collections on the last dask release before its task-spec format (2024.11.2: graphs of task tuples), with
the real package: the client as Dask's scheduler (scheduler=client, client.dask_get), results equal to dask's own sync
scheduler.

dask 2024.11.2 is pure Python: it is installed (without dependencies, which the current dask already brought) into a
directory of its own under .venv, and put first on the path of a child interpreter, which starts its own cluster (the
workers must have the client's dask). Its dataframe needs the separate
dask-expr package of that time and is not run here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)

VERSION = "2024.11.2"
TARGET = Path(sys.prefix) / "extra" / f"dask-{VERSION}"

SCRIPT = textwrap.dedent(
    """
    import sys
    import dask
    import dask.array as da
    import dask.bag as db
    from dask import delayed
    from scaler import Client, SchedulerClusterCombo

    assert dask.__version__ == sys.argv[2], dask.__version__

    def inc(x):
        return x + 1

    # workers must run the client's dask: this interpreter's, forked
    with SchedulerClusterCombo(n_workers=2) as combo, Client(combo.address) as client:
        x = da.arange(400, chunks=37).reshape((20, 20)).rechunk((7, 5))
        arrays = [x.sum(), x.mean(axis=0), x.map_blocks(lambda b: b * 2).std(), (x @ x.T).max()]
        bag = db.from_sequence(range(100), npartitions=7)
        bags = [bag.map(inc).filter(lambda v: v % 3 == 0).sum(), bag.fold(lambda a, b: a + b, initial=0)]
        total = delayed(sum)([delayed(inc)(i) for i in range(20)])
        for scheduler, collections in ((client, arrays), (client.dask_get, bags), (client, [total])):
            ours = dask.compute(*collections, scheduler=scheduler)
            theirs = dask.compute(*collections, scheduler="sync")
            assert all((a == b).all() if hasattr(a, "all") else a == b for a, b in zip(ours, theirs)), (ours, theirs)
        with dask.config.set(scheduler=client):
            assert total.compute() == 210
            (kept,) = dask.persist(x.sum())  # a dict and flat keys, as persist hands them over: answered a tuple
            bag_kept, total_kept = dask.persist(bag.map(inc), total)
        assert kept.compute(scheduler="sync") == x.sum().compute(scheduler="sync")
        assert bag_kept.compute(scheduler="sync") == list(range(1, 101)) and total_kept.compute() == 210
    print("ok", dask.__version__)
    """
)


@pytest.fixture(scope="module")
def old_dask() -> Path:
    if not (TARGET / "dask" / "__init__.py").exists():
        command = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(TARGET),
            f"dask=={VERSION}",
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            pytest.skip(f"could not install dask {VERSION} (no package index?): {done.stderr[-500:]}")
    return TARGET


def test_dask_2024_collections_run_with_the_client_as_scheduler(old_dask: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(old_dask), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, "unused", VERSION], capture_output=True, text=True, timeout=150, env=env
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"ok {VERSION}" in done.stdout
