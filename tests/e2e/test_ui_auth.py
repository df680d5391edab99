"""scaler_ui lets in only who holds its token and names it in the Host header: checked against the real program (fed
by the fake scheduler of tests/e2e/dashboard_fake.py) with raw HTTP requests, a cookie-keeping client, another local
user (nobody, when the tests run as root) and headless Chromium."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

import pytest

from scaler.monitor.ui import APIS, static_files
from tests.e2e import test_cli
from tests.e2e.dashboard_browser import Page, browser
from tests.e2e.dashboard_fake import FakeScheduler
from tests.e2e.test_cli import Program, cli
from tests.e2e.test_ui import TIMEOUT, api, login_url, start_ui, token_of
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(180)
PATHS = sorted({*static_files(), *APIS, "/status.json", "/metrics", "/no-such-page"})
NOBODY = 65534
SYSTEM_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")  # not the venv's: it may sit in root's home


class Answer:
    def __init__(self, response: http.client.HTTPResponse) -> None:
        self.status = response.status
        self.headers = response.headers
        self.body = response.read()

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")


def request(url: str, path: str, headers: dict[str, str] | None = None) -> Answer:
    """One GET, following no redirect and sending no token unless `headers` has one."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        connection.request("GET", path, headers=headers or {})
        return Answer(connection.getresponse())
    finally:
        connection.close()


def port_of(url: str) -> int:
    return int(urllib.parse.urlsplit(url).port or 0)


def bearer(url: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token_of(url)}"}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeScheduler]:
    folder = tempfile.mkdtemp(prefix="scaler_ui_")  # short: an ipc path has a length limit
    try:
        with FakeScheduler(f"ipc://{folder}/monitor", 0.3, n_workers=4, processors=2, speed=5.0) as running:
            yield running
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def ui(fake: FakeScheduler) -> Iterator[tuple[Program, str]]:
    program, url = start_ui(fake.address, "--logging-level", "DEBUG")
    try:
        wait_until(lambda: api(url, "api/failures")["seq"] >= 1, timeout=TIMEOUT, what="a failure to keep secret")
        wait_until(lambda: api(url, "api/outputs")["seq"] >= 1, timeout=TIMEOUT, what="output to keep secret")
        yield program, url
    finally:
        program.kill()


def test_every_path_without_the_token_is_401_and_says_how_to_get_it(ui: tuple[Program, str]) -> None:
    _, url = ui
    for path in PATHS:
        answer = request(url, path)
        assert answer.status == 401, (path, answer.status, answer.body[:200])
        assert answer.headers["Content-Type"] == "text/plain; charset=utf-8"
        assert "needs the token scaler_ui printed when it started" in answer.text, answer.text
        assert "--token" in answer.text and "SCALER_UI_TOKEN" in answer.text
        assert answer.headers["WWW-Authenticate"] == 'Bearer realm="scaler_ui"'


def test_a_wrong_token_is_401_wherever_it_is(ui: tuple[Program, str]) -> None:
    _, url = ui
    port, wrong = port_of(url), token_of(url)[:-1] + ("A" if token_of(url)[-1] != "A" else "B")
    for path in ("/status.json", "/api/outputs", "/api/failures", "/"):
        assert request(url, f"{path}?token={wrong}").status == 401, path
        assert request(url, path, {"Authorization": f"Bearer {wrong}"}).status == 401, path
        assert request(url, path, {"Cookie": f"scaler_ui_{port}={wrong}"}).status == 401, path
        assert request(url, path, {"Cookie": f"scaler_ui_{port + 1}={token_of(url)}"}).status == 401, path
        assert request(url, path, {"Authorization": f"Basic {token_of(url)}"}).status == 401, path


def test_the_token_in_the_query_redirects_without_it_and_sets_a_cookie(ui: tuple[Program, str]) -> None:
    _, url = ui
    token, port = token_of(url), port_of(url)
    answer = request(url, f"/?token={token}")
    assert answer.status == 303 and answer.headers["Location"] == "/"
    cookie = answer.headers["Set-Cookie"]
    assert cookie == f"scaler_ui_{port}={token}; HttpOnly; SameSite=Strict; Path=/", cookie
    page = request(url, "/", {"Cookie": f"other=1; scaler_ui_{port}={token}"})
    assert page.status == 200 and b"<title>Scaler</title>" in page.body
    answer = request(url, f"/api/failures?since=0&token={token}&limit=5")
    assert answer.status == 303 and answer.headers["Location"] == "/api/failures?since=0&limit=5"
    failures = request(url, answer.headers["Location"], {"Cookie": f"scaler_ui_{port}={token}"})
    assert failures.status == 200 and json.loads(failures.body)["failures"], failures.body[:200]


def test_a_bearer_header_is_enough_for_every_path(ui: tuple[Program, str]) -> None:
    _, url = ui
    asks_more = {"/no-such-page": 404, "/api/task": 400, "/api/worker": 400}  # answered: past the gate
    for path in PATHS:
        assert request(url, path).status == 401, path
        assert request(url, path, bearer(url)).status == asks_more.get(path, 200), path
    status = json.loads(request(url, "/status.json", {"Authorization": f"bearer  {token_of(url)}"}).body)
    assert status["status"] is not None


def test_a_host_that_does_not_name_this_server_is_403_even_with_the_token(ui: tuple[Program, str]) -> None:
    _, url = ui
    port = port_of(url)
    for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}", f"localhost:{port + 1}"):
        for path in ("/", "/status.json", "/api/outputs"):
            answer = request(url, path, {"Host": host, **bearer(url)})
            assert answer.status == 403, (host, path, answer.status)
            assert "--allow-host NAME adds a name" in answer.text and "localhost, 127.0.0.1, [::1]" in answer.text
            assert f"port {port}" in answer.text and "ValueError" not in answer.text
    # The Host is checked before the token: a foreign Host without the token is 403, not 401.
    assert request(url, "/status.json", {"Host": f"evil.example:{port}"}).status == 403
    assert request(url, f"/?token={token_of(url)}", {"Host": f"evil.example:{port}"}).status == 403
    for host in (f"localhost:{port}", "LOCALHOST", f"127.0.0.1:{port}", f"[::1]:{port}", "127.0.0.1"):
        assert request(url, "/status.json", {"Host": host, **bearer(url)}).status == 200, host


def test_the_printed_url_opens_the_page_in_a_client_that_keeps_cookies(ui: tuple[Program, str]) -> None:
    _, url = ui
    jar = CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with opener.open(login_url(url), timeout=10) as response:
        assert response.status == 200 and response.url == url and b"<title>Scaler</title>" in response.read()
    with opener.open(url + "api/outputs", timeout=10) as response:  # the cookie, as the page's own fetches
        assert json.loads(response.read())["outputs"]
    assert [(c.name, c.path, c.has_nonstandard_attr("HttpOnly")) for c in jar] == [
        (f"scaler_ui_{port_of(url)}", "/", True)
    ]


def test_the_token_never_reaches_the_log(ui: tuple[Program, str]) -> None:
    program, url = ui
    assert request(url, f"/status.json?token={token_of(url)}").status == 303
    wait_until(lambda: "token=<token>" in program.output, timeout=TIMEOUT, what="the request in the DEBUG log")
    assert program.output.count(token_of(url)) == 1  # the one line printing the URL to open


@pytest.mark.skipif(os.geteuid() != 0, reason="runs a request as user nobody: needs root")
def test_another_local_user_cannot_read_task_output_or_failures(ui: tuple[Program, str]) -> None:
    _, url = ui
    python = next((path for path in SYSTEM_PYTHONS if os.access(path, os.X_OK)), None)
    if python is None:
        pytest.skip(f"no Python that user nobody may run (looked for {', '.join(SYSTEM_PYTHONS)})")
    script = f"""
import http.client, json, os
assert os.getuid() == {NOBODY}
answers = {{}}
for path in ("/api/outputs", "/api/failures", "/status.json"):
    c = http.client.HTTPConnection("127.0.0.1", {port_of(url)}, timeout=10)
    c.request("GET", path + "?since=0")
    r = c.getresponse()
    answers[path] = [r.status, r.read().decode()]
print(json.dumps(answers))
"""
    done = subprocess.run(
        [python, "-I", "-c", script],
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout)
    assert {path: status for path, (status, _) in answers.items()} == dict.fromkeys(answers, 401)
    assert not any(re.search("Traceback|ValueError|chunk", text) for _, text in answers.values()), answers
    assert request(url, "/api/outputs?since=0", bearer(url)).status == 200  # what it was refused is there


def test_a_non_loopback_host_logs_a_warning_and_accepts_this_machine_s_names(fake: FakeScheduler) -> None:
    program, url = start_ui(fake.address, "--host", "0.0.0.0", "--allow-host", "dash.example")
    try:
        warning = program.wait_for_output(r"WARNING.*")
        for text in (
            "--host 0.0.0.0 is not a loopback address",
            "task output, exception texts, worker names",
            "anyone who can reach that address and holds the token",
            "HTTP is not encrypted: the token crosses the network in clear",
            f"ssh -L {port_of(url)}:127.0.0.1:{port_of(url)} HOST",
            "TLS reverse proxy",
        ):
            assert text in warning.group(0), (text, warning.group(0))
        port = port_of(url)
        for host in (socket.gethostname(), "dash.example", "0.0.0.0", "localhost"):
            assert request(url, "/status.json", {"Host": f"{host}:{port}", **bearer(url)}).status == 200, host
        assert request(url, "/status.json", {"Host": f"evil.example:{port}", **bearer(url)}).status == 403
        assert request(url, "/status.json", {"Host": f"{socket.gethostname()}:{port}"}).status == 401
    finally:
        program.kill()


def test_the_default_loopback_host_logs_no_warning_and_allows_no_machine_name(ui: tuple[Program, str]) -> None:
    program, url = ui
    assert "WARNING" not in program.output
    if socket.gethostname() == "localhost":
        pytest.skip("this machine is called localhost")
    host = {"Host": f"{socket.gethostname()}:{port_of(url)}", **bearer(url)}
    assert request(url, "/status.json", host).status == 403


def test_the_token_can_be_chosen_by_environment_or_option(fake: FakeScheduler, monkeypatch: Any) -> None:
    chosen = "chosen-token_0123456789.~"
    monkeypatch.setitem(test_cli.ENV, "SCALER_UI_TOKEN", chosen)
    program, url = start_ui(fake.address)
    try:
        assert token_of(url) == chosen and "WARNING" not in program.output
        assert request(url, "/status.json", {"Authorization": f"Bearer {chosen}"}).status == 200
    finally:
        program.kill()
    given = "given-on-the-command-line-0123"
    program, url = start_ui(fake.address, "--token", given)  # --token wins over the environment
    try:
        assert token_of(url) == given
        assert "WARNING" in program.wait_for_output(r".*--token shows the token to every local user.*").group(0)
    finally:
        program.kill()


@pytest.mark.parametrize("option", [["--token", "short"], ["--token", "has space in it 0123456789"]])
def test_a_weak_or_unusable_token_is_a_usage_error(option: list[str]) -> None:
    done = subprocess.run([cli("scaler_ui"), "ipc:///tmp/m", *option], capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 2 and "--token must be at least 16 characters" in done.stderr, done.stderr
    assert option[1] not in done.stderr + done.stdout  # the token is not echoed


@pytest.mark.parametrize("name", ["dash.example:8081", "a/b", ""])
def test_allow_host_takes_a_name_without_a_port(name: str) -> None:
    done = subprocess.run(
        [cli("scaler_ui"), "ipc:///tmp/m", "--allow-host", name], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 2 and "--allow-host takes" in done.stderr, done.stderr


def test_help_documents_the_token_and_the_allowed_hosts() -> None:
    text = " ".join(
        subprocess.run([cli("scaler_ui"), "-h"], capture_output=True, text=True, timeout=TIMEOUT).stdout.split()
    )
    assert "--token TOKEN" in text and "(default: $SCALER_UI_TOKEN if set, else a new random one;" in text
    assert "--allow-host NAME" in text and "(default: none beyond localhost, 127.0.0.1, [::1], --host" in text
    assert "any but loopback logs a WARNING" in text and "(default: 127.0.0.1)" in text


def test_the_browser_gets_the_401_text_without_the_token_and_the_dashboard_with_it(ui: tuple[Program, str]) -> None:
    _, url = ui
    with browser() as chromium:
        page = Page(chromium, url)
        response = page.page.goto(url)
        assert response is not None and response.status == 401
        assert "needs the token scaler_ui printed when it started" in page.page.inner_text("body")
        # The browser asks for /favicon.ico after that plain-text page (401 too), at a moment of its own: wait until
        # nothing is in flight, then forget the console's lines about those 401s.
        page.page.wait_for_load_state("networkidle")
        page.errors.clear()
        page.page.goto(login_url(url) + "#workers")  # the URL printed, with a view
        page.wait("document.body.dataset.view === 'workers'")
        assert page.page.url == url + "#workers"  # the token left the address bar
        page.wait("document.getElementById('banner').innerText.startsWith('live from')")
        page.wait("Number(document.querySelector('#workers').dataset.total) >= 3")
        assert page.js("document.cookie") == ""  # HttpOnly: the page's scripts cannot read the token
        assert page.outside_requests() == [] and page.errors == [], (page.outside_requests(), page.errors)


def test_the_documented_command_starts_and_prints_the_url_with_its_token() -> None:
    readme = (Path(__file__).resolve().parents[2] / "docs" / "monitoring.md").read_text()
    command = "scaler_ui ipc:///tmp/127.0.0.1_2345_monitor --port 8081"
    assert f"\n{command}\n" in readme
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", 8081))
        except OSError:
            pytest.skip("port 8081 is in use here")
    program = Program(cli("scaler_ui"), *command.split()[1:])
    try:
        printed = program.wait_for_output(r"scaler_ui: dashboard at (http://127\.0\.0\.1:8081/\?token=[\w-]{32})\n")
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
        with opener.open(printed.group(1), timeout=10) as response:
            assert response.status == 200 and response.url == "http://127.0.0.1:8081/"
            assert b"<title>Scaler</title>" in response.read()
        assert "scaler_ui: serving http://127.0.0.1:8081/ for monitor address ipc://" in program.output
    finally:
        program.kill()
