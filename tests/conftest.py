"""Fixtures shared by every test tier. Tests start their own processes and kill only those."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator

import pytest

from tests.helpers import free_address, kill_tree, my_descendants, wait_until

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)
# Every program picks up $SCALER_KEYS when given no keys: the suite decides itself where keys are used.
os.environ.pop("SCALER_KEYS", None)


@pytest.fixture(scope="module")
def cluster() -> Iterator[object]:
    """A scheduler and two workers for the tests of one module (fast timeouts, quiet logs)."""
    from scaler import SchedulerClusterCombo

    combo = SchedulerClusterCombo(
        address=free_address(),
        n_workers=2,
        heartbeat_interval_seconds=0.5,
        worker_timeout_seconds=3,
        logging_level="WARNING",
    )
    try:
        yield combo
    finally:
        combo.shutdown()


@pytest.fixture()
def client(cluster: object) -> Iterator[object]:
    from scaler import Client

    c = Client(address=cluster.address, timeout_seconds=15)  # type: ignore[attr-defined]
    try:
        yield c
    finally:
        c.disconnect()


@pytest.fixture(autouse=True, scope="session")
def _no_orphans() -> Iterator[None]:
    """After the whole run, nothing this test process started may still be running."""
    yield
    leftovers = my_descendants()
    if leftovers:
        try:
            wait_until(lambda: not my_descendants(), timeout=10, what="child processes to exit")
        except AssertionError:
            logging.getLogger(__name__).error("killing leftover processes: %s", leftovers)
            kill_tree(my_descendants())
