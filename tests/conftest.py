"""Fixtures shared by every test tier. Tests start their own processes and kill only those."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.helpers import free_address, kill_tree, my_children, my_descendants, stop_children_born_since, wait_until

if TYPE_CHECKING:
    from scaler import Client, SchedulerClusterCombo

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)
# Every program picks up $SCALER_KEYS when given no keys: the suite decides itself where keys are used.
os.environ.pop("SCALER_KEYS", None)
# Shells fail loudly on a handler's exception and check their core's invariants after every flush (scaler.io.driver);
# the schedulers and workers the tests start inherit it.
os.environ["SCALER_DEBUG"] = "1"


@pytest.fixture(scope="module")
def cluster() -> Iterator[SchedulerClusterCombo]:
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
def client(cluster: SchedulerClusterCombo) -> Iterator[Client]:
    from scaler import Client

    c = Client(address=cluster.address, timeout_seconds=15)
    try:
        yield c
    finally:
        c.disconnect()


@pytest.fixture(autouse=True)
def _no_orphans() -> Iterator[None]:
    """A test must stop every process it started: a child of this process born during the test and still running
    10 s after it (with anything it started) fails the test, and is killed. Processes of module fixtures were born
    before the test, and the processes their children start (processors, say) are not this process's children."""
    before = {process.pid for process in my_children()}
    yield
    leftovers = stop_children_born_since(before, timeout=10)
    if leftovers:
        pytest.fail(f"the test left {len(leftovers)} processes running (killed now): {leftovers}")


@pytest.fixture(autouse=True, scope="session")
def _nothing_left_at_the_end() -> Iterator[None]:
    """After the whole run, nothing this test process started may still be running (module fixtures included)."""
    yield
    if not my_descendants():
        return
    try:
        wait_until(lambda: not my_descendants(), timeout=10, what="child processes to exit")
    except AssertionError:
        leftovers = my_descendants()
        kill_tree(leftovers)
        pytest.fail(f"the run left {len(leftovers)} processes running (killed now): {[p.pid for p in leftovers]}")
