"""scaler_ui: the program serving a scheduler's status as a web page, checked over HTTP and in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.monitor.ui import status_json
from scaler.protocol.messages import Status, WorkerStatus
from tests.e2e.test_cli import Program, cli
from tests.helpers import free_address, free_port, wait_until
from tests.unit.test_metrics import Exposition, parse

pytestmark = pytest.mark.timeout(120)
TIMEOUT = 30


def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read()


def status_of(url: str) -> dict[str, Any]:
    code, _, body = get(url + "status.json")
    assert code == 200
    answer: dict[str, Any] = json.loads(body)
    return answer


def metrics_of(url: str) -> Exposition:
    code, content_type, body = get(url + "metrics")
    assert code == 200 and content_type == "text/plain; version=0.0.4; charset=utf-8"
    return parse(body.decode())


def start_ui(monitor_address: str) -> tuple[Program, str]:
    port = free_port()
    ui = Program(cli("scaler_ui"), monitor_address, "--port", str(port))
    ui.wait_for_output(r"serving http://")
    return ui, f"http://127.0.0.1:{port}/"


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("SCALER_BROWSER_TEST") == "required":
            pytest.fail("chromium is not installed (scripts/test installs Debian's package)")
        pytest.skip("chromium is not installed: ./scripts/test installs it")
    return path


def rendered(url: str) -> str:
    """The page's DOM after its script ran, as headless Chromium sees it."""
    result = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=3000", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.fixture()
def cluster() -> Iterator[SchedulerClusterCombo]:
    with SchedulerClusterCombo(address=free_address(), n_workers=2, logging_level="WARNING") as combo:
        yield combo


def test_status_json_is_the_status_as_plain_data() -> None:
    status = Status("s", 1, 2.5, 3, {"success": 4}, {"welcome": 1}, {}, [WorkerStatus("w1", free=9)], [], False, 0)
    data = json.loads(json.dumps(status_json(status, "ipc:///tmp/m", 0.25)))
    assert data["monitor_address"] == "ipc:///tmp/m" and data["age_seconds"] == 0.25
    assert data["status"]["tasks_by_state"] == {"success": 4}
    assert data["status"]["workers"][0]["name"] == "w1" and data["status"]["workers"][0]["free"] == 9
    empty = {"monitor_address": "ipc:///tmp/m", "age_seconds": None, "status": None}
    assert status_json(None, "ipc:///tmp/m", None) == empty


def test_the_page_shows_the_workers_and_the_tasks_in_a_real_browser(cluster: SchedulerClusterCombo) -> None:
    ui, url = start_ui(cluster.monitor_address)
    try:
        with Client(address=cluster.address, timeout_seconds=TIMEOUT) as client:
            assert client.map(abs, [(-i,) for i in range(300)]) == list(range(300))
            wait_until(
                lambda: (status_of(url)["status"] or {}).get("tasks_by_state", {}).get("success") == 300,
                timeout=TIMEOUT,
                what="the status to count 300 successes",
            )
            dom = rendered(url)
        assert re.search(r'<tr data-state="success"><td>success</td><td>300</td></tr>', dom), dom[:3000]
        assert len(re.findall(r'<tr data-worker="', dom)) == 2, dom[:3000]
        assert "Workers (2)" in dom and "live from " + cluster.monitor_address in dom
        assert re.search(r'<tr data-client="[^"]+"><td>[^<]+</td><td>0</td>', dom)  # this client, nothing open
        cluster.shutdown()  # no more statuses: after 5 s the page says the latest one is old
        wait_until(lambda: status_of(url)["age_seconds"] > 5.5, timeout=TIMEOUT, what="the status to age")
        assert re.search(r"the latest status from \S+ is \d+ s old: the scheduler may have stopped", rendered(url))
    finally:
        ui.kill()


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
        code, content_type, body = get(url)
        assert code == 200 and content_type.startswith("text/html") and b"<title>Scaler</title>" in body
        code, _, body = get(url + "nothing-here")
        assert code == 404 and b"/status.json" in body and b"/metrics" in body
        dom = rendered(url)
        assert "waiting for a status from " + address in dom
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
    from scaler.monitor.ui import Server, StatusFeed, make_handler

    server = Server(("127.0.0.1", 0), make_handler(StatusFeed("ipc:///tmp/unused_monitor")))
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
