"""Who may read scaler_ui's dashboard: a request whose Host header names this server (no DNS rebinding) and which
holds the token printed at start (in the query once, then a cookie; or Authorization: Bearer). `gate` decides, pure:
no sockets, no clock; ui.py asks it before answering anything.
"""

from __future__ import annotations

import argparse
import dataclasses
import hmac
import ipaddress
import re
import secrets
import socket
from collections.abc import Mapping
from urllib.parse import parse_qsl, urlencode, urlsplit

import psutil

from scaler.io.addresses import is_loopback

TOKEN_ENV = "SCALER_UI_TOKEN"
TOKEN_RULE = "at least 16 characters of A-Z a-z 0-9 . _ ~ -"  # it goes in a URL and a cookie as it is
TOKEN_PATTERN = re.compile(r"[A-Za-z0-9._~-]{16,}")
TOKEN_IN_LOG = re.compile(r"([?&]token=)[^&\s\"]*")
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
NEEDS_TOKEN = (
    "scaler_ui: this dashboard needs the token scaler_ui printed when it started: open the URL it printed "
    "(http://HOST:PORT/?token=...), or send the header 'Authorization: Bearer TOKEN'. To choose the token, start "
    f"scaler_ui with --token TOKEN or the environment variable {TOKEN_ENV}.\n"
)


# ------------------------------------------------------------------------------ who may read it (pure)
@dataclasses.dataclass(frozen=True)
class Access:
    """Who may read the dashboard: a request whose Host names this server (one of `names`, on `port`) and which
    holds the token (in the query, the cookie, or an Authorization: Bearer header)."""

    token: str
    port: int
    names: frozenset[str]  # lower case, IPv6 addresses without brackets
    shown: tuple[str, ...]  # the names a refused request is told

    @property
    def cookie(self) -> str:
        """The cookie's name: one per port, so that two scaler_ui on one machine keep their own."""
        return f"scaler_ui_{self.port}"

    def holds(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())


@dataclasses.dataclass(frozen=True)
class Answer:
    """What the gate answers instead of the page: 403 (Host), 401 (token) or 303 (the token in the query: the same
    path without it, and the cookie that holds it)."""

    code: int
    text: str
    headers: tuple[tuple[str, str], ...] = ()


def gate(access: Access, hosts: list[str], target: str, cookie: str | None, authorization: str | None) -> Answer | None:
    """None when the request may be answered, else what to answer: the Host header is checked first, then the
    token. `hosts`: every Host header of the request; `target`: its path and query."""
    if len(hosts) != 1 or not names_this_server(access, hosts[0]):
        return Answer(403, wrong_host(access, hosts))
    url = urlsplit(target)
    pairs = parse_qsl(url.query, keep_blank_values=True)
    if access.holds(next((v for k, v in reversed(pairs) if k == "token"), None)):
        return logged_in(access, url.path, [(k, v) for k, v in pairs if k != "token"])
    if access.holds(cookie_value(cookie, access.cookie)) or access.holds(bearer(authorization)):
        return None
    return Answer(401, NEEDS_TOKEN, (("WWW-Authenticate", 'Bearer realm="scaler_ui"'),))


def logged_in(access: Access, path: str, rest: list[tuple[str, str]]) -> Answer:
    """The redirect to `path` without the token (so that it leaves the address bar), setting the cookie."""
    location = "/" + path.lstrip("/") + ("?" + urlencode(rest) if rest else "")
    cookie = f"{access.cookie}={access.token}; HttpOnly; SameSite=Strict; Path=/"
    headers = (("Location", location), ("Set-Cookie", cookie), ("Referrer-Policy", "no-referrer"))
    return Answer(303, f"scaler_ui: token accepted; on to {location}\n", headers)


def split_host(value: str) -> tuple[str, int | None] | None:
    """(name, port or None) from a Host header such as `localhost:8081` or `[::1]:8081`; None if it is not one."""
    value = value.strip()
    if value.startswith("["):
        name, closed, rest = value[1:].partition("]")
        if not closed or (rest and not rest.startswith(":")):
            return None
        port = rest[1:]
    elif value.count(":") > 1:
        return None
    else:
        name, _, port = value.partition(":")
    if not name or not (port == "" or (port.isascii() and port.isdigit())):
        return None
    return normal_name(name), int(port) if port else None


def normal_name(name: str) -> str:
    """How names are compared: lower case, IPv6 addresses without brackets, no trailing dot."""
    return name.strip().strip("[]").lower().rstrip(".")


def names_this_server(access: Access, host: str) -> bool:
    parsed = split_host(host)
    return parsed is not None and parsed[0] in access.names and parsed[1] in (None, access.port)


def wrong_host(access: Access, hosts: list[str]) -> str:
    said = "no Host header" if not hosts else f"Host {hosts[0]!r}" if len(hosts) == 1 else "several Host headers"
    return (
        f"scaler_ui: refused {said}: the dashboard answers only a Host naming this server ({', '.join(access.shown)}) "
        f"with no port or port {access.port}; scaler_ui --allow-host NAME adds a name (an SSH tunnel keeps the port: "
        f"ssh -L {access.port}:127.0.0.1:{access.port} HOST).\n"
    )


def cookie_value(header: str | None, name: str) -> str | None:
    """The value of cookie `name` in a Cookie header (the last one of that name), if any."""
    found = None
    for part in (header or "").split(";"):
        key, eq, value = part.strip().partition("=")
        if eq and key == name:
            found = value.strip().strip('"')
    return found


def bearer(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header, if that is what it is."""
    scheme, _, credentials = (header or "").strip().partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" and credentials.strip() else None


def chosen_token(given: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
    """The token and where it came from: --token, else $SCALER_UI_TOKEN (if not empty), else a new random one ("")."""
    if given is not None:
        return given, "--token"
    if environ.get(TOKEN_ENV):
        return environ[TOKEN_ENV], TOKEN_ENV
    return secrets.token_urlsafe(24), ""


def url_host(host: str) -> str:
    """The host to write in a URL for the address served on: loopback for a wildcard, IPv6 in brackets."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def dashboard_url(host: str, port: int, token: str) -> str:
    return f"http://{url_host(host)}:{port}/?token={token}"


def exposure_warning(host: str, port: int) -> str:
    return (
        f"scaler_ui: --host {host or repr(host)} is not a loopback address: the dashboard (task output, exception "
        "texts, worker names) is served to anyone who can reach that address and holds the token, and HTTP is not "
        "encrypted: the token crosses the network in clear. Prefer the default --host 127.0.0.1 with an SSH tunnel "
        f"(ssh -L {port}:127.0.0.1:{port} HOST) or a TLS reverse proxy"
    )


# ------------------------------------------------------------------------------ who may read it (the machine's names)
def serves_loopback_only(host: str) -> bool:
    """Whether serving on `host` reaches this machine only (a wildcard, a LAN address or a name that resolves
    beyond loopback do not)."""
    return host != "" and is_loopback(f"tcp://[{host}]:1" if ":" in host else f"tcp://{host}:1")


def access_for(host: str, port: int, token: str, allowed: list[str]) -> Access:
    """The names a request may give in Host: loopback's, --host's, --allow-host's and, when serving beyond
    loopback, this machine's hostname, FQDN and addresses."""
    given = [name for name in (host, *allowed) if name]
    shown = [*LOOPBACK_NAMES, *given]
    names = {normal_name(name) for name in shown}
    if not serves_loopback_only(host):
        names |= machine_names()
        shown.append("this machine's hostname, FQDN and addresses")
    shown = [f"[{name}]" if ":" in name and not name.startswith("[") else name for name in shown]
    return Access(token, port, frozenset(names), tuple(dict.fromkeys(shown)))


def machine_names() -> set[str]:
    """This machine's hostname, FQDN and the addresses of its interfaces (and its hostname's)."""
    names = {socket.gethostname(), socket.getfqdn()}
    for addresses in psutil.net_if_addrs().values():
        names.update(a.address for a in addresses if a.family in (socket.AF_INET, socket.AF_INET6))
    try:
        names.update(str(info[4][0]) for info in socket.getaddrinfo(socket.gethostname(), None))
    except OSError:
        pass
    return {normal_name(name.partition("%")[0]) for name in names if name}


def checked_allowed(p: argparse.ArgumentParser, values: list[str]) -> list[str]:
    """--allow-host's names, each a name or an address without a port; a usage error otherwise."""
    for value in values:
        parsed = split_host(value)
        if parsed is None and not is_address(value):
            p.error(f"--allow-host takes a host name or an address, not {value!r}")
        if parsed is not None and parsed[1] is not None:
            p.error(f"--allow-host takes a name without a port (the port must be --port's), not {value!r}")
        if any(c.isspace() or c in "/?#@" for c in value):
            p.error(f"--allow-host takes a host name or an address, not {value!r}")
    return values


def is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
