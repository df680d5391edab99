"""scaler_ui: the program serving a scheduler's dashboard, checked over HTTP (its JSON, /status.json, /metrics, the
packaged assets) and in headless Chromium against a real cluster at work (tests/e2e/test_dashboard.py drives every
view against a fake scheduler; tests/e2e/test_ui_auth.py checks its token and Host header checks).

The helpers here hold the token each scaler_ui printed: `get` sends it (Authorization: Bearer), `dashboard_page`
opens the printed URL first, as a user would, so that the browser holds the cookie."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.monitor.ui import status_json
from scaler.protocol.messages import Status, WorkerStatus
from tests.e2e.dashboard_browser import Page, browser
from tests.e2e.dashboard_fake import FakeScheduler
from tests.e2e.test_cli import Program, cli
from tests.helpers import free_address, free_port, wait_until
from tests.unit.test_metrics import Exposition, parse

pytestmark = pytest.mark.timeout(180)
TIMEOUT = 30


TOKENS: dict[str, str] = {}  # the base URL of each scaler_ui start_ui started -> the token it printed


def token_of(url: str) -> str:
    """The token of the scaler_ui serving `url` (a URL under a base URL start_ui returned)."""
    return next(token for base, token in TOKENS.items() if url.startswith(base))


def login_url(url: str) -> str:
    """The URL scaler_ui printed: its page, with the token."""
    return f"{url}?token={token_of(url)}"


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, bytes]:
    """GET with the token (Authorization: Bearer) of the scaler_ui serving `url`."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token_of(url)}", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read()


def api(url: str, path: str) -> dict[str, Any]:
    code, content_type, body = get(url + path)
    assert code == 200 and content_type == "application/json", (path, code, body[:300])
    answer: dict[str, Any] = json.loads(body)
    return answer


def status_of(url: str) -> dict[str, Any]:
    return api(url, "status.json")


def metrics_of(url: str) -> Exposition:
    code, content_type, body = get(url + "metrics")
    assert code == 200 and content_type == "text/plain; version=0.0.4; charset=utf-8"
    return parse(body.decode())


def start_ui(monitor_address: str, *options: str) -> tuple[Program, str]:
    """scaler_ui on a free port, and its base URL; the token it printed goes to TOKENS."""
    port = free_port()
    ui = Program(cli("scaler_ui"), monitor_address, "--port", str(port), *options)
    printed = ui.wait_for_output(r"scaler_ui: dashboard at (http://\S+/)\?token=(\S+)")
    url = f"http://127.0.0.1:{port}/"
    assert printed.group(1) == url, printed.group(0)
    TOKENS[url] = printed.group(2)
    return ui, url


def dashboard_page(chromium: Any, url: str, width: int = 1500, height: int = 1000) -> Page:
    """A browser page holding scaler_ui's cookie: it opened the URL scaler_ui printed (the token in the query)."""
    page = Page(chromium, url, width, height)
    page.page.goto(login_url(url))
    assert page.page.url == url, page.page.url  # redirected to the page without the token
    return page


@pytest.fixture()
def cluster() -> Iterator[SchedulerClusterCombo]:
    with SchedulerClusterCombo(address=free_address(), n_workers=2, logging_level="WARNING") as combo:
        yield combo


@pytest.fixture()
def fake_ui() -> Iterator[tuple[FakeScheduler, str]]:
    folder = tempfile.mkdtemp(prefix="scaler_ui_")
    try:
        with FakeScheduler(f"ipc://{folder}/monitor", 0.3, n_workers=6, processors=2) as fake:
            ui, url = start_ui(fake.address)
            try:
                yield fake, url
            finally:
                ui.kill()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_status_json_is_the_status_as_plain_data() -> None:
    status = Status("s", 1, 2.5, 3, {"success": 4}, {"welcome": 1}, {}, [WorkerStatus("w1", free=9)], [], False, 0)
    data = json.loads(json.dumps(status_json(status, "ipc:///tmp/m", 0.25)))
    assert data["monitor_address"] == "ipc:///tmp/m" and data["age_seconds"] == 0.25
    assert data["status"]["tasks_by_state"] == {"success": 4}
    assert data["status"]["workers"][0]["name"] == "w1" and data["status"]["workers"][0]["free"] == 9
    empty = {"monitor_address": "ipc:///tmp/m", "age_seconds": None, "status": None}
    assert status_json(None, "ipc:///tmp/m", None) == empty


def test_queries_are_bounded_and_long_answers_compressed() -> None:
    from scaler.monitor.ui import BadRequest, Query, encoded

    q = Query("limit=9999&since=0x10&sort=cpu&q=")
    assert q.int("limit", 50, 1, 500) == 500 and q.int("since", 0, 0, 100) == 16 and q.int("offset", 7, 0, 9) == 7
    assert q.str("sort", "name", ("name", "cpu")) == "cpu" and q.str("q") == ""
    with pytest.raises(BadRequest, match="limit must be an integer"):
        Query("limit=many").int("limit", 50, 1, 500)
    with pytest.raises(BadRequest, match="sort must be one of cpu, name, not 'x'"):
        Query("sort=x").str("sort", "name", ("name", "cpu"))
    with pytest.raises(BadRequest, match=r"must be one of a, b \(or empty\), not 'x'"):
        Query("s=x").str("s", "", ("", "a", "b"))
    assert Query("status=error,failed").choices("status", ("success", "error", "failed")) == {"error", "failed"}
    with pytest.raises(BadRequest, match="status must be one or more of success, error, failed, separated by commas"):
        Query("status=error,oops").choices("status", ("success", "error", "failed"))
    assert encoded(b"short", None, "gzip") == (b"short", False)
    body = b"x" * 5000
    zipped, is_zipped = encoded(body, None, "gzip, deflate, br")
    assert is_zipped and gzip.decompress(zipped) == body
    assert encoded(body, None, "") == (body, False) and encoded(body, b"z", "gzip") == (b"z", True)


def test_the_api_answers_what_came_since_the_number_the_page_saw(fake_ui: tuple[FakeScheduler, str]) -> None:
    _, url = fake_ui
    wait_until(lambda: api(url, "api/summary")["status"] is not None, timeout=TIMEOUT, what="a first status")
    epoch = api(url, "api/summary")["epoch"]
    wait_until(lambda: api(url, "api/series")["seq"] >= 5, timeout=TIMEOUT, what="five statuses")
    series = api(url, "api/series?since=0")
    assert series["epoch"] == epoch and len(series["t"]) == series["seq"] and series["workers"][-1] == 6
    assert len(api(url, f"api/series?since={series['seq'] - 2}")["t"]) <= 2 + 2  # the newest only (and any new)
    wait_until(lambda: api(url, "api/failures")["seq"] >= 1, timeout=TIMEOUT, what="a failure")
    failures = api(url, "api/failures?since=0")["failures"]
    assert failures[0]["summary"].startswith("ValueError: bad input in chunk")
    task = api(url, "api/task?id=" + failures[0]["task"])
    assert task["failures"][0]["text"].startswith("Traceback") and task["runs"][0]["status"] == "error"

    def running() -> int:
        return int(api(url, "api/stream?since=0&window=60000")["running"])

    wait_until(lambda: running() == 12, timeout=TIMEOUT, what="6 workers of 2 processors to run a task each")
    stream = api(url, "api/stream?since=0&window=60000")
    assert len(stream["task"]) >= 12 and set(stream["names"]) >= {"node000-w0"}
    again = api(url, f"api/stream?since={stream['seq']}&running=0")
    assert len(again["task"]) < len(stream["task"])  # only what ended since
    workers = api(url, "api/workers?sort=cpu&order=desc&limit=2")
    assert workers["total"] == 6 and len(workers["rows"]) == 2 and len(workers["rows"][0]["spark_cpu"]) >= 1
    assert api(url, "api/worker?name=node000-w0")["history"]["t"]
    assert len(api(url, "api/tasks?limit=3&status=failed")["tasks"]) <= 3
    for wrong in ("api/workers?sort=nonsense", "api/stream?since=x", "api/tasks?status=maybe", "api/task"):
        code, _, body = get(url + wrong)
        assert code == 400 and body.endswith(b"\n"), (wrong, body)
    assert get(url + "api/worker?name=nobody")[0] == 404
    code, _, body = get(url + "api/task?id=0x7777777777")
    assert code == 404 and body.startswith(b"no task 0x7777777777"), body
    errors = api(url, "api/tasks?status=error")["tasks"]  # the word of the status itself, as every view uses it
    assert errors and {t["status"] for t in errors} == {"error"}
    assert {t["status"] for t in api(url, "api/tasks?status=error,failed")["tasks"]} <= {"error", "failed"}


def test_the_page_and_its_assets_come_from_the_package(fake_ui: tuple[FakeScheduler, str]) -> None:
    _, url = fake_ui
    code, content_type, page = get(url)
    assert code == 200 and content_type == "text/html; charset=utf-8" and b"<title>Scaler</title>" in page
    assert not re.search(rb"(src|href)=\"(https?:)?//", page)  # nothing from elsewhere
    code, content_type, plain = get(url + "static/echarts.min.js")
    assert code == 200 and content_type.startswith("text/javascript") and b'version="5.6.0"' in plain
    code, _, zipped = get(url + "static/echarts.min.js", {"Accept-Encoding": "gzip"})
    assert gzip.decompress(zipped) == plain and len(zipped) < len(plain) / 2
    for name in ("dashboard.js", "dashboard.css", "echarts-LICENSE.txt", "echarts-NOTICE.txt"):
        assert get(url + "static/" + name)[0] == 200
    code, _, body = get(url + "nothing-here")
    assert code == 404 and b"/status.json" in body and b"/metrics" in body
    assert get(url + "static/../ui.py")[0] == 404


def test_the_dashboard_shows_a_real_cluster_at_work(cluster: SchedulerClusterCombo) -> None:
    ui, url = start_ui(cluster.monitor_address)
    try:
        # The scheduler records task events once it has seen scaler_ui subscribe: by its first status.
        wait_until(lambda: status_of(url)["status"] is not None, timeout=TIMEOUT, what="a first status")
        with Client(address=cluster.address, timeout_seconds=TIMEOUT) as client:
            assert client.map(abs, [(-i,) for i in range(300)]) == list(range(300))
            failing = [client.submit(fails_on_multiples_of_five, i) for i in range(10)]
            assert sum(1 for f in failing if f.exception(timeout=TIMEOUT) is not None) == 2
            wait_until(
                lambda: (status_of(url)["status"] or {}).get("tasks_by_state", {}).get("success") == 308,
                timeout=TIMEOUT,
                what="the status to count 308 successes",
            )
            with browser() as chromium:
                page = dashboard_page(chromium, url)
                p = page.open("overview")
                page.wait(
                    "document.querySelector('#tasks tr[data-state=\"success\"] td:last-child')?.innerText === '308'"
                )
                assert p.inner_text("#banner") == "live from " + cluster.monitor_address
                assert re.search(r"workers\s+2", p.inner_text("#chips"))
                page.chart_has_points("chart-cpu", 1)
                p = page.open("workers")
                page.wait("document.querySelector('#workers').dataset.total === '2'")
                assert p.locator("#workers tbody tr[data-worker]").count() == 2
                p = page.open("clients")
                page.wait("document.querySelectorAll('#clients tr[data-client]').length === 1")
                assert p.inner_text("#clients-title") == "Clients (1)"
                page.wait("document.querySelector('#functions tr[data-function$=\"fails_on_multiples_of_five\"]')")
                p = page.open("tasks")
                page.wait("document.querySelectorAll('#failures tr[data-task]').length === 2")
                assert sorted(re.findall(r"ValueError: five divides \d+", p.inner_text("#failures"))) == [
                    "ValueError: five divides 0",
                    "ValueError: five divides 5",
                ]
                p.locator("#failures tr[data-task]").first.click()
                page.wait("document.querySelector('#failures tr.expanded pre.error')?.innerText.includes('Traceback')")
                page.wait("document.querySelectorAll('#task-log tr[data-task]').length === 200")  # the newest 200
                p = page.open("stream")
                page.wait("Number(document.getElementById('chart-stream').dataset.bars) >= 310")
                functions = p.get_attribute("#chart-stream", "data-functions") or ""
                assert "fails_on_multiples_of_five" in functions and "abs" in functions
                assert page.outside_requests() == [] and page.errors == []
                cluster.shutdown()  # no more statuses: after 5 s the page says the latest one is old
                p = page.open("overview")
                page.wait(
                    "/the latest status from \\S+ is \\d+ s old: the scheduler may have stopped/"
                    ".test(document.getElementById('banner').innerText)"
                )
    finally:
        ui.kill()


def fails_on_multiples_of_five(i: int) -> int:
    if i % 5 == 0:
        raise ValueError(f"five divides {i}")
    time.sleep(0.02)
    return i


def test_metrics_count_the_workers_and_the_tasks_for_prometheus(cluster: SchedulerClusterCombo) -> None:
    ui, url = start_ui(cluster.monitor_address)
    try:
        with Client(address=cluster.address, timeout_seconds=TIMEOUT) as client:
            assert client.map(abs, [(-i,) for i in range(10)]) == list(range(10))
            wait_until(
                lambda: metrics_of(url).labelled("scaler_tasks_ended_total", "state").get("success") == 10,
                timeout=TIMEOUT,
                what="/metrics to count 10 successes",
            )
            wait_until(lambda: metrics_of(url).value("scaler_clients") == 1, timeout=TIMEOUT, what="the client")
            m = metrics_of(url)
        assert m.value("scaler_up") == 1 and 0 <= m.value("scaler_status_age_seconds") <= 5
        assert m.value("scaler_workers") == 2 and len(m.labelled("scaler_worker_free_slots", "worker")) == 2
        assert sum(m.labelled("scaler_worker_completed_tasks_total", "worker").values()) == 10
        assert m.labelled("scaler_tasks", "state") == {"waiting": 0, "queued": 0, "assigned": 0, "canceling": 0}
        assert m.labelled("scaler_messages_received_total", "kind")["submitTasks"] >= 1
        assert m.value("scaler_scheduler_rss_bytes") > 0
    finally:
        ui.kill()


def test_without_a_scheduler_the_page_says_it_waits(tmp_path: Any) -> None:
    address = f"ipc://{tmp_path}/nobody_monitor"
    ui, url = start_ui(address)
    try:
        assert status_of(url) == {"monitor_address": address, "age_seconds": None, "status": None}
        assert metrics_of(url).samples == {("scaler_up", frozenset()): 0}
        assert api(url, "api/summary")["status"] is None
        with browser() as chromium:
            page = dashboard_page(chromium, url)
            p = page.open("workers")
            page.wait("document.getElementById('banner').innerText.startsWith('waiting')")
            assert p.inner_text("#banner") == (
                f"waiting for a status from {address} (is a scheduler running with that monitor address?)"
            )
            assert page.errors == []
    finally:
        ui.kill()


def test_a_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ui = Program(cli("scaler_ui"), "ipc:///tmp/scaler_ui_test_monitor", "--port", str(port))
        assert ui.wait() == 1
    assert f"cannot serve on 127.0.0.1:{port}" in ui.output and "Traceback" not in ui.output


@pytest.mark.parametrize("args", [["notanaddress"], ["ipc:///tmp/m", "--port", "0"], ["ipc:///tmp/m", "--port", "x"]])
def test_bad_arguments_are_usage_errors(args: list[str]) -> None:
    result = subprocess.run([cli("scaler_ui"), *args], capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 2 and "error:" in result.stderr and "Traceback" not in result.stderr


def test_a_browser_leaving_mid_answer_is_not_a_traceback(capsys: Any, caplog: Any) -> None:
    from scaler.monitor.access import access_for
    from scaler.monitor.ui import Server, StatusFeed, make_handler

    access = access_for("127.0.0.1", 1, "t" * 16, [])
    server = Server(("127.0.0.1", 0), make_handler(StatusFeed("ipc:///tmp/unused_monitor"), access))
    try:
        with caplog.at_level("DEBUG", logger="scaler.monitor.ui"):
            try:
                raise BrokenPipeError(32, "Broken pipe")
            except BrokenPipeError:
                server.handle_error(None, ("127.0.0.1", 1234))
            try:
                raise ValueError("a bug")
            except ValueError:
                server.handle_error(None, ("127.0.0.1", 1234))
    finally:
        server.server_close()
    assert capsys.readouterr().err == ""
    levels = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert levels[0][0] == "DEBUG" and "went away" in levels[0][1]
    assert levels[1][0] == "ERROR" and "answering" in levels[1][1]
