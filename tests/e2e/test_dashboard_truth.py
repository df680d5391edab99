"""The dashboard must not lie: with scaler_ui attached to a real cluster, tasks past the scheduler's per-period event
cap (10,000 events a status period: past it no events of further tasks are sent) must not stay "running" once
the scheduler holds none (task stream, summary, page), and running figures come from the scheduler's counts.

Real processes: a scheduler and 4 workers (SchedulerClusterCombo), scaler_ui, a client."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from scaler import Client, SchedulerClusterCombo
from tests.e2e.dashboard_browser import browser
from tests.e2e.test_ui import api, dashboard_page, metrics_of, start_ui
from tests.helpers import free_address, wait_until

pytestmark = pytest.mark.timeout(60)
QUICK = 40_000
SLOW = 30
SETTLE_S = 5.0  # the bar: this long after the end, nothing shows as running


def slow(i: int) -> int:
    time.sleep(0.3)
    return i


def summary(url: str) -> dict[str, Any]:
    status: dict[str, Any] = api(url, "api/summary")["status"] or {}
    return status


def ended(url: str) -> int:
    by_state = summary(url).get("tasks_by_state", {})
    return sum(by_state.get(name, 0) for name in ("success", "error", "canceled", "failed"))


def test_no_task_shows_running_once_the_scheduler_holds_none() -> None:
    with SchedulerClusterCombo(address=free_address(), n_workers=4, logging_level="WARNING") as combo:
        ui, url = start_ui(combo.monitor_address)
        try:
            wait_until(lambda: api(url, "api/summary")["status"] is not None, timeout=30, what="a first status")
            with Client(address=combo.address, timeout_seconds=60) as client:
                slow_ones = [client.submit(slow, i) for i in range(SLOW)]
                assert client.map(abs, [(-i,) for i in range(QUICK)]) == list(range(QUICK))
                assert [f.result(timeout=60) for f in slow_ones] == list(range(SLOW))
            wait_until(lambda: ended(url) == QUICK + SLOW, timeout=30, what="the status to count every task ended")
            wait_until(
                lambda: api(url, "api/stream?window=600000&limit=1")["running"] == 0,
                timeout=SETTLE_S,
                what=f"no task running in the task stream {SETTLE_S} s after the end",
            )
            now = summary(url)
            assert now["running"] == 0 and now["assigned"] == 0, now
            assert now["dropped_events"] > 0, "the run did not overflow the per-period cap: it proves nothing"
            with browser() as chromium:  # and the page says so
                page = dashboard_page(chromium, url)
                page.open("stream")
                page.wait("document.getElementById('chart-stream').dataset.bars !== undefined")
                assert page.js("stream.running.length") == 0
                chips = page.page.inner_text("#chips")
                assert re.search(r"running\s+0\b", chips) and re.search(r"assigned\s+0\b", chips), chips
                assert "did not send" in page.page.inner_text("#stream-dropped")
        finally:
            ui.kill()


def test_two_clients_of_one_thread_have_two_names_and_no_duplicate_series() -> None:
    with SchedulerClusterCombo(address=free_address(), n_workers=1, logging_level="WARNING") as combo:
        ui, url = start_ui(combo.monitor_address)
        try:
            with Client(address=combo.address, timeout_seconds=30) as first:
                with Client(address=combo.address, timeout_seconds=30) as second:
                    assert first.submit(abs, -1).result() == 1 and second.submit(abs, -2).result() == 2

                    def names() -> list[str]:
                        return [c["name"] for c in summary(url).get("clients", [])]

                    wait_until(lambda: len(names()) == 2, timeout=30, what="two clients in the status")
                    assert len(set(names())) == 2, names()
                    clients = metrics_of(url).labelled(
                        "scaler_client_unfinished_tasks", "client"
                    )  # parse: no series twice
                    assert sorted(clients) == sorted(names()), clients
        finally:
            ui.kill()
