"""scaler_ui's dashboard in headless Chromium, fed by a fake scheduler (tests/e2e/dashboard_fake.py: real encoded
statuses on a real PUB socket) so that every view has data, at any size: live charts, the task stream, failures,
sorting, clients, output, a scheduler that stops, and 1,000 workers."""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.e2e.dashboard_browser import Page, browser
from tests.e2e.dashboard_fake import FUNCTIONS, FakeScheduler
from tests.e2e.test_ui import dashboard_page, start_ui, status_of
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(240)
FUNCTION_NAMES = sorted(name for name, *_ in FUNCTIONS)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    with browser() as running:
        yield running


class Dashboard:
    """A fake scheduler, scaler_ui reading it, and a browser."""

    def __init__(self, chromium: Any, fake: FakeScheduler, url: str) -> None:
        self.chromium, self.fake, self.url = chromium, fake, url

    def page(self, width: int = 1500, height: int = 1000) -> Page:
        return dashboard_page(self.chromium, self.url, width, height)


@contextmanager
def running_dashboard(chromium: Any, n_workers: int, processors: int, interval: float) -> Iterator[Dashboard]:
    folder = tempfile.mkdtemp(prefix="scaler_ui_")  # short: an ipc path has a length limit
    try:
        with FakeScheduler(f"ipc://{folder}/monitor", interval, n_workers=n_workers, processors=processors) as fake:
            ui, url = start_ui(fake.address)
            try:
                wait_until(lambda: status_of(url)["status"] is not None, timeout=30, what="a first status")
                yield Dashboard(chromium, fake, url)
            finally:
                ui.kill()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def dashboard(chromium: Any) -> Iterator[Dashboard]:
    with running_dashboard(chromium, n_workers=16, processors=4, interval=0.5) as running:
        yield running


def test_the_overview_draws_live_charts_from_the_packaged_assets_only(dashboard: Dashboard) -> None:
    page = dashboard.page()
    p = page.open("overview")
    page.wait(f"document.querySelectorAll('#functions tbody tr[data-function]').length === {len(FUNCTIONS)}")
    before = page.chart_points("chart-throughput")[0]
    page.chart_has_points("chart-throughput", before + 3)
    for chart in ("chart-throughput", "chart-states", "chart-cpu", "chart-memory"):
        points = page.chart_points(chart)
        assert len(points) >= 3 and min(points) >= before + 4, (chart, points)
    assert page.js("echarts.version") == "5.6.0"
    assert p.inner_text("#banner").startswith("live from ipc://")
    assert p.locator('#functions tr[data-function="fit_model"] .progress .success').count() == 1
    page.wait("/workers\\s+15/.test(document.getElementById('chips').innerText)")  # 16, one lost
    assert p.inner_text('#tasks tr[data-state="queued"] td:last-child') != ""
    assert page.outside_requests() == [] and page.errors == []


def test_the_task_stream_shows_bars_for_the_running_functions(dashboard: Dashboard) -> None:
    page = dashboard.page()
    p = page.open("stream")
    functions = page.wait(
        "names => { const d = document.getElementById('chart-stream').dataset;"
        " return Number(d.bars) > 100 && names.every(n => d.functions.split(',').includes(n)) && d.functions }",
        arg=FUNCTION_NAMES,
    )
    assert sorted(functions.split(",")) == FUNCTION_NAMES
    assert page.js("stream.running.length") >= 40  # 15 workers of 4 processors, each running a task now
    lanes = page.js("Math.max(...stream.drawn.map(b => b.lane))")
    assert lanes == 3, lanes  # as many lanes as a worker has processors
    assert page.js("stream.drawn.some(b => b.status === 'error')")  # failures are drawn (in red)
    # The tooltip of a bar names its function, task, worker and status.
    page.js(
        "() => { const i = stream.drawn.findIndex(b => b.status === 'error');"
        " echarts.getInstanceByDom(document.getElementById('chart-stream'))"
        ".dispatchAction({type: 'showTip', seriesIndex: 0, dataIndex: i}); }"
    )
    tip = page.wait(
        "[...document.querySelectorAll('#chart-stream div')].map(d => d.innerText).find(t => /task/.test(t))"
    )
    assert re.search(r"function (\w+)\ntask 0x[0-9a-f]+\nworker \S+ \(lane \d\)\nstatus error", tip), tip
    # The window: 5 min by default, 30 min when chosen.
    span = "() => { const o = echarts.getInstanceByDom(document.getElementById('chart-stream')).getOption();"
    span += " return o.xAxis[0].max - o.xAxis[0].min; }"
    assert page.js(span) == 5 * 60_000
    p.select_option("#stream-window", "1800000")
    assert page.js(span) == 30 * 60_000
    assert "running in the window" in p.inner_text("#stream-note")
    assert page.errors == []


def test_the_task_stream_zooms_opens_a_clicked_bar_finds_a_task_and_says_events_were_dropped(
    dashboard: Dashboard,
) -> None:
    page = dashboard.page()
    p = page.open("stream")
    page.wait("Number(document.getElementById('chart-stream').dataset.bars) > 20")
    span = "() => { const o = echarts.getInstanceByDom(document.getElementById('chart-stream')).getOption();"
    span += " return o.xAxis[0].max - o.xAxis[0].min; }"
    p.select_option("#stream-window", "10000")
    assert page.js(span) == 10_000
    page.wait("!document.getElementById('stream-dropped').hidden")
    assert "did not send" in p.inner_text("#stream-dropped") and "sample" in p.inner_text("#stream-dropped")
    # A click on a bar opens its task: the pixel of the middle of an ended bar, clicked with the mouse.
    where = page.js(
        "() => { const chart = echarts.getInstanceByDom(document.getElementById('chart-stream'));"
        " const data = chart.getOption().series[0].data;"
        " const i = stream.drawn.findIndex(b => b.status === 'success' && b.end - b.start > 300);"
        " const [row, start, end] = data[i];"
        " const [x, y] = chart.convertToPixel({gridIndex: 0}, [(start + end) / 2, row]);"
        " const box = document.getElementById('chart-stream').getBoundingClientRect();"
        " return {x: box.left + x, y: box.top + y, task: stream.drawn[i].task}; }"
    )
    p.mouse.click(where["x"], where["y"])
    page.wait("!document.getElementById('stream-task').hidden")
    assert p.inner_text("#stream-task-id") == where["task"]
    page.wait("/success on \\S+: started/.test(document.getElementById('stream-task-body').innerText)")
    # Search by task id: an unknown one says so (scaler_ui answers 404).
    p.fill("#task-search-id", "0x7777777777")
    p.click("#task-search button")
    page.wait("/404 no task 0x7777777777/.test(document.getElementById('stream-task-body').innerText)")
    assert all("404 (Not Found)" in error for error in page.errors), page.errors  # the browser logs the 404


def test_a_failing_task_appears_in_the_failures_view_with_its_error(dashboard: Dashboard) -> None:
    page = dashboard.page()
    p = page.open("tasks")
    page.wait("document.querySelectorAll('#failures tr[data-task]').length > 0")
    row = p.locator("#failures tr[data-task]").first
    assert re.fullmatch(r"ValueError: bad input in chunk \d+", row.locator("td").last.inner_text())
    task = row.get_attribute("data-task")
    row.click()
    detail = p.locator(f'#failures tr[data-detail="{task}"] pre.error')
    detail.wait_for()
    assert detail.inner_text().startswith("Traceback (most recent call last):")
    page.wait("() => document.querySelectorAll('#task-log tr[data-task]').length >= 50")
    p.select_option("#log-status", "error")  # the status's own word, as the failures list shows it
    page.wait(
        "() => { const s = [...document.querySelectorAll('#task-log tr[data-task] td:last-child')]"
        ".map(td => td.innerText); return s.length > 0 && s.every(x => x === 'error'); }"
    )
    assert page.errors == []


def test_workers_sort_show_their_state_and_open_a_detail(dashboard: Dashboard) -> None:
    page = dashboard.page()
    p = page.open("workers")
    page.wait("document.querySelector('#workers').dataset.total === '16'")
    page.wait("document.querySelector('#workers tbody .state-lost')")
    states = page.js("[...document.querySelectorAll('#workers tbody .state')].map(s => s.innerText)")
    assert {"held back", "stale", "lost", "busy"} <= set(states), states
    read = """key => [...document.querySelectorAll('#workers tbody tr')].map(tr => {
        const td = tr.children[2].querySelector('.value');
        return key === 'name' ? tr.dataset.worker : parseFloat(td.innerText); })"""
    p.click('#workers th[data-key="cpu"]')
    page.wait("document.querySelector('#workers').dataset.sort === 'cpu:desc'")
    cpu = page.js(read, "cpu")
    assert cpu == sorted(cpu, reverse=True) and len(cpu) == 16
    p.click('#workers th[data-key="cpu"]')
    page.wait("document.querySelector('#workers').dataset.sort === 'cpu:asc'")
    cpu = page.js(read, "cpu")
    assert cpu == sorted(cpu)
    assert p.locator('#workers th[data-key="cpu"]').get_attribute("class") == "sorted asc"
    p.click('#workers th[data-key="name"]')
    page.wait("document.querySelector('#workers').dataset.sort === 'name:asc'")
    names = page.js(read, "name")
    assert names == sorted(names)
    # Sparklines (ECharts, SVG) in every row, and the detail of a lost worker.
    assert page.js("document.querySelectorAll('#workers tbody .spark svg').length") == 32
    p.click('#workers tr[data-worker="node000-w5"]')
    page.wait("document.getElementById('detail-reason').innerText.includes('no heartbeat for 60 s')")
    assert p.inner_text("#detail-title") == "node000-w5" and "lost at " in p.inner_text("#detail-reason")
    assert min(page.chart_points("chart-worker-usage")) >= 5
    p.fill("#workers-filter", "node001")
    page.wait("document.querySelector('#workers').dataset.total === '8'")
    # The capabilities column: what a worker offers beyond payload=python (the fake's node001 workers offer gpu),
    # the whole list in its tooltip; the filter matches capabilities too.
    cells = "[...document.querySelectorAll('#workers tbody td:last-child')]"
    assert page.js(f"{cells}.map(td => td.innerText)") == ["gpu"] * 8
    assert page.js(f"{cells}[0].title") == "payload=python, gpu"
    p.fill("#workers-filter", "gpu")
    page.wait("document.querySelector('#workers').dataset.total === '8'")
    p.fill("#workers-filter", "")
    page.wait("document.querySelector('#workers').dataset.total === '16'")
    p.click('#workers th[data-key="capabilities"]')
    page.wait("document.querySelector('#workers').dataset.sort === 'capabilities:desc'")
    shown = page.js(f"{cells}.map(td => td.innerText)")
    assert shown == ["gpu"] * 8 + [""] * 8, shown
    assert page.errors == []


def test_clients_show_their_progress_and_tasks_their_output(dashboard: Dashboard) -> None:
    page = dashboard.page()
    p = page.open("clients")
    page.wait("document.querySelectorAll('#clients tr[data-client]').length === 2")
    assert p.locator('#clients tr[data-client="client-batch"] .progress .done').count() == 1
    assert p.inner_text("#clients-title") == "Clients (2)"
    p = page.open("output")
    page.wait("document.querySelectorAll('#outputs .output-task').length > 3")
    first = p.locator("#outputs .output-task").first
    assert re.fullmatch(r"(load_chunk|simulate_path): chunk \d+ has \d+ rows\n?", first.locator("pre").inner_text())
    assert re.search(r"task 0x[0-9a-f]+ on node\d+-w\d", first.locator("h3").inner_text())
    assert page.errors == []


def test_the_page_says_when_the_scheduler_stopped_and_keeps_its_history(chromium: Any) -> None:
    with running_dashboard(chromium, n_workers=4, processors=2, interval=0.5) as dashboard:
        page = dashboard.page()
        p = page.open("overview")
        page.chart_has_points("chart-states", 3)  # (a wait whose predicate threw before the chart had series failed)
        dashboard.fake.paused.set()
        page.wait("/is \\d+ s old: the scheduler may have stopped/.test(document.getElementById('banner').innerText)")
        assert p.get_attribute("#banner", "class") == "warn"
        assert min(page.chart_points("chart-states")) > 3
        cluster = dashboard.fake.cluster  # it comes back as a restarted scheduler, from its journal
        cluster.started_us, cluster.recovered = int(time.time() * 1e6), "1 client session, 45 tasks, 0 held results"
        dashboard.fake.paused.clear()
        page.wait("document.getElementById('banner').innerText.startsWith('live from')")
        text = p.inner_text("#banner")
        assert re.search(r"the scheduler restarted at \d\d:\d\d:\d\d after \d+ s away", text), text
        assert "resumed from its journal: 1 client session, 45 tasks, 0 held results" in text, text


def test_a_thousand_workers_render_without_freezing_the_page(chromium: Any) -> None:
    with running_dashboard(chromium, n_workers=1000, processors=2, interval=1.0) as dashboard:
        page = dashboard.page()
        p = page.open("workers")
        page.wait("Number(document.querySelector('#workers').dataset.total) >= 999", timeout=60)
        assert p.locator("#workers tbody tr").count() == 50  # one page of rows, not a thousand
        assert re.fullmatch(r"1\u201350 of (1,000|999)", p.inner_text("#workers-range"))  # one may be lost
        for key, order in (("cpu", "desc"), ("rss", "desc"), ("name", "asc")):
            elapsed = page.js(
                """async ([key, order]) => {
                  const t0 = performance.now();
                  document.querySelector(`#workers th[data-key="${key}"]`).click();
                  while (document.querySelector('#workers').dataset.sort !== key + ':' + order)
                    await new Promise(r => setTimeout(r, 10));
                  return performance.now() - t0; }""",
                [key, order],
            )
            assert elapsed < 20_000, f"sorting by {key} took {elapsed:.0f} ms"  # "does not freeze", on a busy CI box
        p.click("#workers-next")
        page.wait("document.getElementById('workers-range').innerText.startsWith('51\u2013100')")
        page.open("stream")
        page.wait("Number(document.getElementById('chart-stream').dataset.bars) > 1000", timeout=60)
        page.open("overview")
        page.wait("document.querySelectorAll('#functions tbody tr[data-function]').length === 5")
        longest = page.longest_task_ms()
        assert longest < 5000, f"the page's main thread was blocked for {longest:.0f} ms"
        assert page.errors == []
