"""scaler_ui's gate (scaler.monitor.access.gate and its helpers), pure: a request's Host, query, cookie and
Authorization in, what to answer instead of the page out (None: let it through)."""

from __future__ import annotations

import hmac
import socket
from typing import Any

import pytest

from scaler.monitor import access
from scaler.monitor.access import (
    TOKEN_ENV,
    Access,
    access_for,
    bearer,
    chosen_token,
    cookie_value,
    dashboard_url,
    exposure_warning,
    gate,
    serves_loopback_only,
    split_host,
)

TOKEN = "Jp9MyO1q0mhI7ams1pqlersx83_HyF6_"
ACCESS = access_for("127.0.0.1", 8081, TOKEN, ["dash.example"])
COOKIE = f"scaler_ui_8081={TOKEN}"


def ask(
    target: str = "/", host: str | None = "127.0.0.1:8081", cookie: str | None = None, auth: str | None = None
) -> Any:
    return gate(ACCESS, [] if host is None else [host], target, cookie, auth)


def test_a_request_with_the_cookie_or_the_bearer_header_goes_through() -> None:
    assert ask(cookie=COOKIE) is None
    assert ask("/api/outputs?since=3", cookie=f"a=b; {COOKIE}; c=d") is None
    assert ask("/status.json", auth=f"Bearer {TOKEN}") is None and ask(auth=f"bearer  {TOKEN} ") is None


@pytest.mark.parametrize(
    "cookie, auth",
    [
        (None, None),
        ("scaler_ui_8081=wrong", None),
        (f"scaler_ui_8082={TOKEN}", None),  # another scaler_ui's cookie
        (f"scaler_ui_8081={TOKEN}x", None),
        (None, f"Basic {TOKEN}"),
        (None, "Bearer"),
        (None, f"Bearer {TOKEN[:-1]}"),
    ],
)
def test_without_the_token_the_answer_is_401_saying_how_to_get_it(cookie: str | None, auth: str | None) -> None:
    answer = ask("/api/failures", cookie=cookie, auth=auth)
    assert answer.code == 401 and answer.headers == (("WWW-Authenticate", 'Bearer realm="scaler_ui"'),)
    assert "needs the token scaler_ui printed when it started" in answer.text
    assert f"--token TOKEN or the environment variable {TOKEN_ENV}" in answer.text


def test_the_token_in_the_query_redirects_to_the_same_path_without_it_setting_the_cookie() -> None:
    answer = ask(f"/?token={TOKEN}")
    assert answer.code == 303
    headers = dict(answer.headers)
    assert headers["Location"] == "/" and headers["Referrer-Policy"] == "no-referrer"
    assert headers["Set-Cookie"] == f"scaler_ui_8081={TOKEN}; HttpOnly; SameSite=Strict; Path=/"
    assert dict(ask(f"/api/tasks?limit=3&token={TOKEN}&status=failed").headers)["Location"] == (
        "/api/tasks?limit=3&status=failed"
    )
    assert dict(ask(f"//evil.example/x?token={TOKEN}").headers)["Location"] == "/x"  # never to another site
    assert ask("/?token=wrong").code == 401 and ask("/?token=").code == 401


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1:8081",
        "127.0.0.1",
        "localhost:8081",
        "LocalHost",
        "localhost.:8081",
        "[::1]:8081",
        "[::1]",
        "dash.example:8081",
        "DASH.example",
    ],
)
def test_a_host_naming_this_server_on_its_port_is_accepted(host: str) -> None:
    assert ask(host=host, cookie=COOKIE) is None


@pytest.mark.parametrize(
    "host",
    [
        "evil.example:8081",
        "evil.example",
        "localhost:8082",
        "127.0.0.1:80",
        "127.0.0.2:8081",
        "localhost.evil.example",
        "[::1]x",
        "::1",
        "localhost:80a",
        "[localhost",
        "",
        None,
        socket.gethostname(),  # served on loopback only: the machine's names are not accepted
    ],
)
def test_any_other_host_is_403_even_with_the_token(host: str | None) -> None:
    if host == "localhost":
        pytest.skip("this machine is called localhost")
    for credentials in ({"cookie": COOKIE}, {"auth": f"Bearer {TOKEN}"}, {}):
        answer = ask(host=host, **credentials)
        assert answer.code == 403, (host, credentials)
    assert ask(f"/?token={TOKEN}", host=host).code == 403  # the Host before the token
    text = ask(host=host).text
    assert "localhost, 127.0.0.1, [::1], dash.example) with no port or port 8081" in text
    assert "--allow-host NAME adds a name" in text and "ssh -L 8081:127.0.0.1:8081 HOST" in text


def test_two_host_headers_are_403() -> None:
    answer = gate(ACCESS, ["127.0.0.1:8081", "evil.example"], "/", COOKIE, None)
    assert answer is not None and answer.code == 403 and "several Host headers" in answer.text


def test_the_token_is_compared_in_constant_time(monkeypatch: Any) -> None:
    seen: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def recorded(a: bytes, b: bytes) -> bool:
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", recorded)
    assert ask(auth=f"Bearer {TOKEN}") is None
    assert seen == [(TOKEN.encode(), TOKEN.encode())]
    assert ask(auth="Bearer \u00e9t\u00e9-not-ascii").code == 401  # bytes: any text compares, no TypeError


def test_host_header_parsing() -> None:
    assert split_host("Example.COM:8081") == ("example.com", 8081)
    assert split_host("[::1]:8081") == ("::1", 8081) and split_host("[::1]") == ("::1", None)
    assert split_host("localhost:") == ("localhost", None)
    for wrong in ("", ":8081", "[::1", "::1", "a:b:c", "x:8o", "[::1]8081"):
        assert split_host(wrong) is None, wrong


def test_cookie_and_authorization_parsing() -> None:
    assert cookie_value("a=1; scaler_ui_8081=t1; b=2", "scaler_ui_8081") == "t1"
    assert cookie_value('scaler_ui_8081="t2"', "scaler_ui_8081") == "t2"
    assert cookie_value("scaler_ui_80811=t; x_scaler_ui_8081=t", "scaler_ui_8081") is None
    assert cookie_value(None, "scaler_ui_8081") is None and cookie_value("garbage;;=", "scaler_ui_8081") is None
    assert bearer("Bearer abc") == "abc" and bearer("BEARER abc ") == "abc"
    assert bearer("Basic abc") is None and bearer("Bearer ") is None and bearer(None) is None


def test_the_token_comes_from_the_option_else_the_environment_else_is_new() -> None:
    assert chosen_token("from-option-0123456", {TOKEN_ENV: "from-env-0123456789"}) == ("from-option-0123456", "--token")
    assert chosen_token(None, {TOKEN_ENV: "from-env-0123456789"}) == ("from-env-0123456789", TOKEN_ENV)
    made, source = chosen_token(None, {TOKEN_ENV: ""})  # empty: as if unset
    again, _ = chosen_token(None, {})
    assert source == "" and len(made) == 32 and made != again and access.TOKEN_PATTERN.fullmatch(made)


def test_only_a_loopback_host_keeps_the_machine_s_names_out() -> None:
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.5"):
        assert serves_loopback_only(host), host
    for host in ("0.0.0.0", "", "::", "192.0.2.7"):
        assert not serves_loopback_only(host), host
    wide = access_for("0.0.0.0", 8081, TOKEN, [])
    assert {socket.gethostname().lower(), "0.0.0.0", "localhost", "::1"} <= wide.names
    assert wide.shown[-1] == "this machine's hostname, FQDN and addresses"
    narrow = access_for("localhost", 8081, TOKEN, [])
    assert narrow.names == {"localhost", "127.0.0.1", "::1"} and narrow.shown == ("localhost", "127.0.0.1", "[::1]")
    assert access_for("::1", 8081, TOKEN, ["fe80::1"]).shown == ("localhost", "127.0.0.1", "[::1]", "[fe80::1]")


def test_the_url_to_open_and_the_warning() -> None:
    assert dashboard_url("127.0.0.1", 8081, "t") == "http://127.0.0.1:8081/?token=t"
    assert dashboard_url("0.0.0.0", 8081, "t") == "http://127.0.0.1:8081/?token=t"
    assert dashboard_url("::", 8081, "t") == "http://[::1]:8081/?token=t"
    assert dashboard_url("fe80::1", 9, "t") == "http://[fe80::1]:9/?token=t"
    warning = exposure_warning("0.0.0.0", 9000)
    assert "the dashboard (task output, exception texts, worker names) is served to anyone" in warning
    assert "the token crosses the network in clear" in warning and "ssh -L 9000:127.0.0.1:9000 HOST" in warning


def test_a_refused_answer_carries_nothing_of_the_scheduler() -> None:
    refused = [ask(host="evil.example"), ask(), ask("/status.json?token=no")]
    assert all(isinstance(answer, access.Answer) and answer.code in (401, 403) for answer in refused)
    assert all(TOKEN not in answer.text for answer in refused)


def test_access_is_a_frozen_value() -> None:
    with pytest.raises(AttributeError):
        # an assignment mypy refuses (frozen), made anyway: the run-time refusal is what is tested
        ACCESS.token = "x"  # type: ignore[misc]
    assert isinstance(ACCESS, Access) and ACCESS.cookie == "scaler_ui_8081"
