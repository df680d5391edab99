"""A headless Chromium for scaler_ui's browser tests: Playwright (Python) driving the system's Chromium (Debian's
/usr/bin/chromium; no browser is downloaded). Without it the tests skip, or fail when SCALER_BROWSER_TEST=required
(scripts/test sets it)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# Records every request the page makes and every long task (over 50 ms) its main thread runs.
WATCH = """
window.__longTasks = [];
new PerformanceObserver(list => { for (const e of list.getEntries()) window.__longTasks.push(e.duration); })
  .observe({entryTypes: ["longtask"]});
"""


def chromium_path() -> str:
    path = os.environ.get("SCALER_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        missing("chromium is not installed (scripts/test installs Debian's package)")
    return str(path)


def missing(why: str) -> None:
    if os.environ.get("SCALER_BROWSER_TEST") == "required":
        pytest.fail(why)
    pytest.skip(why)


@contextmanager
def browser() -> Iterator[Any]:
    """A Chromium browser (Playwright's Browser), closed at the end with every process it started."""
    path = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("playwright is not installed: pip install -e '.[test]'")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=path, args=ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


class Page:
    """A page of the dashboard, with what it asked for and what went wrong in it."""

    def __init__(self, chromium: Any, base_url: str, width: int = 1500, height: int = 1000) -> None:
        self.base_url = base_url
        self.page = chromium.new_page(viewport={"width": width, "height": height})
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.add_init_script(WATCH)
        self.page.set_default_timeout(30_000)

    def open(self, view: str) -> Any:
        self.page.goto(f"{self.base_url}#{view}")
        self.page.wait_for_function("document.body.dataset.view === " + repr(view))
        return self.page

    def wait(self, js: str, timeout: float = 30, arg: Any = None) -> Any:
        """Wait until the expression `js` (a function of `arg`) is truthy in the page; its value."""
        return self.page.wait_for_function(js, arg=arg, timeout=timeout * 1000, polling=100).json_value()

    def js(self, js: str, arg: Any = None) -> Any:
        return self.page.evaluate(js, arg)

    def chart_points(self, element_id: str) -> list[int]:
        """The number of points of each series of the ECharts chart in that element."""
        chart = "echarts.getInstanceByDom(document.getElementById(id))"
        return list(self.js(f"id => {chart}.getOption().series.map(s => s.data.length)", element_id))

    def chart_has_points(self, element_id: str, more_than: int, timeout: float = 30) -> None:
        """Wait until the first series of that chart has more than `more_than` points."""
        chart = "echarts.getInstanceByDom(document.getElementById(id))"
        self.page.wait_for_function(
            # ?. throughout: a chart made but not yet given its series has none, and a wait whose predicate throws
            # fails at once instead of polling again
            f"([id, n]) => ({chart}?.getOption()?.series?.[0]?.data?.length ?? 0) > n",
            arg=[element_id, more_than],
            timeout=timeout * 1000,
            polling=100,
        )

    def longest_task_ms(self) -> float:
        return float(self.js("Math.max(0, ...window.__longTasks)"))

    def outside_requests(self) -> list[str]:
        return [url for url in self.requests if not url.startswith(self.base_url) and not url.startswith("data:")]
