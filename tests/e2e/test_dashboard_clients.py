"""scaler_ui's Clients view (issue 25 item 4): each client's open tasks split into queued and assigned, and clients
made inside a task (nested-<pid>-<n>) tagged "nested". A fake scheduler, scaler_ui and a browser."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from scaler.protocol.messages import ClientStatus, ManagerStatus, WaitingTasks
from tests.e2e.dashboard_browser import browser
from tests.e2e.test_dashboard import Dashboard, running_dashboard

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def dashboard() -> Iterator[Dashboard]:
    with browser() as chromium, running_dashboard(chromium, n_workers=4, processors=2, interval=0.5) as running:
        yield running


def cells(page: Any, client: str) -> list[str]:
    return list(
        page.js(f"[...document.querySelectorAll('#clients tr[data-client=\"{client}\"] td')].map(td => td.innerText)")
    )


def test_clients_show_queued_and_assigned_and_nested_ones_are_tagged(dashboard: Dashboard) -> None:
    dashboard.fake.cluster.extra_clients = [ClientStatus("nested-4242-1", tasks=3, completed=5, assigned=2)]
    page = dashboard.page()
    p = page.open("clients")
    page.wait("document.querySelectorAll('#clients tr[data-client]').length === 3")
    heads = page.js("[...document.querySelectorAll('#clients th')].map(th => th.innerText)")
    assert heads == ["client", "progress", "queued", "assigned", "completed", "objects"], heads
    name, _, _, assigned, _, objects = cells(page, "client-analytics")
    assert (name, assigned, objects) == ("client-analytics", "120", "3")
    name, _, queued, assigned, completed, _ = cells(page, "nested-4242-1")
    assert (queued, assigned, completed) == ("1", "2", "5") and name.startswith("nested-4242-1")
    assert p.locator('#clients tr[data-client="nested-4242-1"] .tag').inner_text() == "nested"
    assert p.locator('#clients tr[data-client="client-batch"] .tag').count() == 0
    assert p.locator('#clients tr[data-client="client-analytics"] .progress .assigned').count() == 1
    assert page.errors == []


def test_why_tasks_wait_and_the_worker_managers_show_under_the_clients(dashboard: Dashboard) -> None:
    page = dashboard.page()
    page.open("clients")
    page.wait("document.querySelector('#managers tbody').innerText.includes('no worker manager connected')")
    cluster = dashboard.fake.cluster
    cluster.managers = [
        ManagerStatus("slurm-gpu", 1, ["payload=python", "gpu"], 0, 8, 1, 0, 2, 12_000, 1, "slurm-gpu-3: exit 1", 4_000)
    ]
    why = "no connected worker offers gpu; worker manager slurm-gpu requested 2 units 12s ago, 0 connected"
    cluster.waiting = [WaitingTasks(["gpu", "payload=python"], 12, why)]
    page.wait("document.querySelectorAll('#managers tr[data-manager]').length === 1")
    row = page.js("[...document.querySelectorAll('#managers tr[data-manager] td')].map(td => td.innerText)")
    assert row == [
        "slurm-gpu",
        "1",
        "gpu",
        "1",
        "0",
        "2 (oldest 12 s)",
        "0..8",
        "1: slurm-gpu-3: exit 1 (asked again in 4 s)",
    ]
    page.wait("document.querySelectorAll('#waiting tr[data-requires]').length === 1")
    waiting = page.js("[...document.querySelectorAll('#waiting tr[data-requires] td')].map(td => td.innerText)")
    assert waiting == ["gpu", "12", why]
    assert page.js("document.getElementById('managers-title').innerText") == "Worker managers (1)"
    assert "units started 3" in page.js("document.getElementById('units-events').innerText")
    assert page.errors == []
