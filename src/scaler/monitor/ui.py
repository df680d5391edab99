"""scaler_ui: a web dashboard of a scheduler, from its monitor address.

A thread subscribes to the monitor address and feeds every status to a History (scaler.monitor.history: what the
dashboard remembers, bounded); an HTTP server (standard library) serves the page and its assets from the package
(scaler/monitor/static: no CDN, nothing fetched from elsewhere), the JSON the page polls (/api/...), /status.json
(the latest status as it came) and /metrics (Prometheus's text format, scaler.monitor.metrics).

Every request passes `gate` first (scaler.monitor.access, pure): its Host header must name this server (no DNS
rebinding) and it must hold the token printed at start (query, cookie or Authorization: Bearer), else 403 or 401 and
nothing of the scheduler.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import http.server
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from scaler.entry_points.help import HelpFormatter, add_version
from scaler.entry_points.logging_options import add_logging_level
from scaler.io.logs import setup_logging
from scaler.monitor.access import (
    TOKEN_ENV,
    TOKEN_IN_LOG,
    TOKEN_PATTERN,
    TOKEN_RULE,
    Access,
    access_for,
    checked_allowed,
    chosen_token,
    dashboard_url,
    exposure_warning,
    gate,
    serves_loopback_only,
)
from scaler.monitor.fleet import SORT_KEYS
from scaler.monitor.history import History
from scaler.monitor.metrics import CONTENT_TYPE, render_metrics
from scaler.monitor.task_history import LOG_STATUSES
from scaler.monitor.top import Subscription, add_monitor_arguments, checked_monitor
from scaler.protocol.messages import Status
from scaler.security.keys import PeerKeys
from scaler.settings.config_file import add_config_option, apply_config
from scaler.settings.opengris import translated

logger = logging.getLogger(__name__)

POLL_MS = 500  # the feed looks for a stop request at least this often
GZIP_FROM = 2048  # answers at least this long are compressed for a browser that accepts gzip
STATIC_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
}
# Bounds on what one request may ask for.
MAX_WORKER_ROWS = 500
MAX_BARS = 50_000
MAX_RUNNING_BARS = 20_000
MAX_WINDOW_MS = 30 * 60 * 1000
MAX_LOG = 2000
MAX_FAILURES = 1000
MAX_OUTPUTS = 5000
TEXT = "text/plain; charset=utf-8"


def status_json(status: Status | None, monitor_address: str, age_seconds: float | None) -> dict[str, Any]:
    """What /status.json answers: the latest status as plain data (None before the first), and how old it is."""
    return {
        "monitor_address": monitor_address,
        "age_seconds": None if age_seconds is None else round(age_seconds, 3),
        "status": None if status is None else _plain(dataclasses.asdict(status)),
    }


def _plain(value: Any) -> Any:
    """JSON-ready: byte columns (task event kinds and statuses) as lists of integers."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return list(value)
    return value


class StatusFeed:
    """The statuses published on a monitor address, fed to a History by a thread of its own."""

    def __init__(self, monitor_address: str, keys: PeerKeys | None = None) -> None:
        self.monitor_address = monitor_address
        self.keys = keys
        self.lock = threading.Lock()  # held while the history changes, and while it is read
        self.history = History(epoch=f"{time.time_ns():x}")
        self._received_at = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scaler-ui-feed", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def latest(self) -> tuple[Status | None, float | None]:
        """The latest status and its age in seconds (None, None before the first)."""
        with self.lock:
            return self.history.latest, self.age()

    def age(self) -> float | None:
        """The latest status's age in seconds (None before the first); call with the lock held."""
        return None if self.history.latest is None else time.monotonic() - self._received_at

    def add(self, status: Status) -> None:
        with self.lock:
            self.history.add(status)
            self._received_at = time.monotonic()

    def _run(self) -> None:
        feed = Subscription(self.monitor_address, self.keys)
        said = False
        try:
            while not self._stop.is_set():
                status = feed.next(POLL_MS)
                if status is not None:
                    self.add(status)
                elif feed.failure is not None and not said:
                    logger.error("scaler_ui: %s", feed.failure)
                    said = True
        finally:
            feed.close()


class BadRequest(ValueError):
    """A query the page (or someone) got wrong: answered 400 with the message."""


class NotFound(LookupError):
    """A query for something scaler_ui does not know (a task, a worker): answered 404 with the message."""


class Query:
    """A request's query string, read with bounds."""

    def __init__(self, query: str) -> None:
        self.values = {k: v[-1] for k, v in parse_qs(query).items()}

    def int(self, name: str, default: int, low: int, high: int) -> int:
        text = self.values.get(name)
        if text is None or text == "":
            return default
        try:
            value = int(text, 0)
        except ValueError:
            raise BadRequest(f"{name} must be an integer, not {text!r}") from None
        return min(max(value, low), high)

    def choices(self, name: str, allowed: tuple[str, ...]) -> frozenset[str]:
        """A comma-separated list of `allowed` words (empty: none given)."""
        words = frozenset(w.strip() for w in self.values.get(name, "").split(",") if w.strip())
        wrong = sorted(words.difference(allowed))
        if wrong:
            raise BadRequest(
                f"{name} must be one or more of {', '.join(allowed)}, separated by commas, not {', '.join(wrong)!r}"
            )
        return words

    def str(self, name: str, default: str = "", choices: Any = None) -> str:
        value = self.values.get(name, default)
        if choices is not None and value not in choices:
            named = ", ".join(sorted(c for c in choices if c))
            raise BadRequest(f"{name} must be one of {named}{' (or empty)' if '' in choices else ''}, not {value!r}")
        return value


def static_files() -> dict[str, tuple[str, bytes, bytes]]:
    """The page's files by URL path: content type, body, and the body gzipped."""
    folder = resources.files("scaler.monitor").joinpath("static")
    files: dict[str, tuple[str, bytes, bytes]] = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if entry.is_file() and suffix in STATIC_TYPES:
            body = entry.read_bytes()
            files["/static/" + entry.name] = (STATIC_TYPES[suffix], body, gzip.compress(body, 6))
    files["/"] = files["/index.html"] = files["/static/index.html"]
    return files


Api = Callable[[History, Query, StatusFeed], Any]  # called with the feed's lock held


def api_summary(h: History, q: Query, feed: StatusFeed) -> Any:
    return h.summary(feed.monitor_address, feed.age())


def api_series(h: History, q: Query, feed: StatusFeed) -> Any:
    return h.series_since(q.int("since", 0, 0, 2**62))


def api_workers(h: History, q: Query, feed: StatusFeed) -> Any:
    sort = q.str("sort", "name", SORT_KEYS)
    descending = q.str("order", "asc", ("asc", "desc")) == "desc"
    offset = q.int("offset", 0, 0, 2**31)
    return h.workers(sort, descending, offset, q.int("limit", 50, 1, MAX_WORKER_ROWS), q.str("q"))


def api_worker(h: History, q: Query, feed: StatusFeed) -> Any:
    name = q.str("name")
    if not name:
        raise BadRequest("name is required: /api/worker?name=W (known workers: /api/workers)")
    detail = h.worker(name)
    if detail is None:
        raise NotFound(f"no worker {name!r} (known workers: /api/workers)")
    return detail


def api_stream(h: History, q: Query, feed: StatusFeed) -> Any:
    window = q.int("window", 10 * 60 * 1000, 1000, MAX_WINDOW_MS)
    since = q.int("since", 0, 0, 2**62)
    return h.stream(since, window, q.int("limit", 20_000, 1, MAX_BARS), q.int("running", 10_000, 0, MAX_RUNNING_BARS))


def api_tasks(h: History, q: Query, feed: StatusFeed) -> Any:
    statuses = q.choices("status", LOG_STATUSES)
    return h.log(q.int("limit", 200, 1, MAX_LOG), statuses, q.str("function"), q.str("worker"))


def api_failures(h: History, q: Query, feed: StatusFeed) -> Any:
    return h.failures(q.int("since", 0, 0, 2**62), q.int("limit", MAX_FAILURES, 1, MAX_FAILURES))


def api_outputs(h: History, q: Query, feed: StatusFeed) -> Any:
    return h.outputs(q.int("since", 0, 0, 2**62), q.int("limit", 1000, 1, MAX_OUTPUTS))


def api_task(h: History, q: Query, feed: StatusFeed) -> Any:
    if "id" not in q.values:
        raise BadRequest("id is missing (a task id, such as 0x10000000001)")
    task_id = q.int("id", 0, 0, 2**64 - 1)
    found = h.task(task_id)
    if not (found["runs"] or found["failures"] or found["output"]):
        raise NotFound(
            f"no task {task_id:#x} in scaler_ui's history: it never ran since scaler_ui started, was not among the "
            f"sampled tasks, or ended before the newest {h.tasks.ended.capacity:,} tasks"
        )
    return found


APIS: dict[str, Api] = {
    "/api/summary": api_summary,
    "/api/series": api_series,
    "/api/workers": api_workers,
    "/api/worker": api_worker,
    "/api/stream": api_stream,
    "/api/tasks": api_tasks,
    "/api/failures": api_failures,
    "/api/outputs": api_outputs,
    "/api/task": api_task,
}


def encoded(body: bytes, zipped: bytes | None, accept_encoding: str) -> tuple[bytes, bool]:
    """The body to send, and whether it is gzipped: when the browser accepts it and the body is long enough."""
    if "gzip" not in accept_encoding:
        return body, False
    if zipped is None:
        if len(body) < GZIP_FROM:
            return body, False
        zipped = gzip.compress(body, 5)
    return zipped, True


# ------------------------------------------------------------------------------ the server
@dataclasses.dataclass(frozen=True)
class Reply:
    """What an admitted request is answered."""

    code: int
    content_type: str
    body: bytes
    zipped: bytes | None = None  # the body gzipped ahead (static files)
    cache: str = "no-store"


def reply(feed: StatusFeed, files: dict[str, tuple[str, bytes, bytes]], path: str, query: str) -> Reply:
    """The answer to an admitted GET of `path`: a file of the page, the JSON of an API, /status.json or /metrics."""
    if path in files:
        content_type, body, zipped = files[path]
        cache = "no-cache" if content_type.startswith("text/html") else "max-age=3600"
        return Reply(200, content_type, body, zipped, cache)
    if path in APIS:
        try:
            with feed.lock:
                return json_reply(APIS[path](feed.history, Query(query), feed))
        except BadRequest as error:
            return Reply(400, TEXT, f"{error}\n".encode())
        except NotFound as error:
            return Reply(404, TEXT, f"{error.args[0]}\n".encode())
    if path == "/status.json":
        status, age = feed.latest()
        return json_reply(status_json(status, feed.monitor_address, age))
    if path == "/metrics":
        return Reply(200, CONTENT_TYPE, render_metrics(*feed.latest()).encode())
    return Reply(404, TEXT, f"no page {path!r}: try /, /status.json, /metrics or /api/summary\n".encode())


def json_reply(data: Any) -> Reply:
    return Reply(200, "application/json", json.dumps(data, separators=(",", ":")).encode())


def make_handler(feed: StatusFeed, access: Access) -> type[http.server.BaseHTTPRequestHandler]:
    files = static_files()

    class Handler(http.server.BaseHTTPRequestHandler):
        server_version = "scaler_ui"

        def do_GET(self) -> None:  # the name http.server calls
            hosts = self.headers.get_all("Host") or []
            refused = gate(access, hosts, self.path, self.headers.get("Cookie"), self.headers.get("Authorization"))
            if refused is not None:
                self._send(Reply(refused.code, TEXT, refused.text.encode()), refused.headers)
            else:
                url = urlsplit(self.path)
                self._send(reply(feed, files, url.path, url.query))

        def _send(self, answer: Reply, extra: tuple[tuple[str, str], ...] = ()) -> None:
            body, zipped = encoded(answer.body, answer.zipped, self.headers.get("Accept-Encoding", ""))
            self.send_response(answer.code)
            self.send_header("Content-Type", answer.content_type)
            if zipped:
                self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", answer.cache)
            self.send_header("X-Content-Type-Options", "nosniff")
            for name, value in extra:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            line = TOKEN_IN_LOG.sub(r"\1<token>", format % args)  # a request line may carry the token
            logger.debug("%s %s", self.address_string(), line)

    return Handler


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A browser that went away mid-answer is routine: one debug line, not a traceback on stderr."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):
            logger.debug("scaler_ui: %s went away: %s", client_address, error)
        else:
            logger.exception("scaler_ui: answering %s failed", client_address)


class Server6(Server):
    address_family = socket.AF_INET6


def serve(host: str, port: int, handler: type[http.server.BaseHTTPRequestHandler]) -> Server:
    """The server, bound (IPv6 for an IPv6 address); exit 1 with an ERROR line when the address is taken."""
    try:
        return (Server6 if ":" in host else Server)((host, port), handler)
    except OSError as exc:
        logger.error("scaler_ui: cannot serve on %s:%d: %s", host, port, exc.strerror or exc)
        sys.exit(1)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scaler_ui",
        description="Serve a web dashboard of a scheduler, read from its monitor address. Every request must hold "
        "the token (the URL to open, with it, is printed at start) and name this server in its Host header.",
        formatter_class=HelpFormatter,
    )
    add_version(p)
    add_monitor_arguments(p)
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="the interface to serve on (0.0.0.0: every interface); any but loopback logs a WARNING: the dashboard "
        "is then served to the network, unencrypted",
    )
    p.add_argument("--port", "-p", type=int, default=8081, help="the HTTP port to serve on")
    p.add_argument(
        "--token",
        metavar="TOKEN",
        default=None,
        help=f"the token every request must hold, {TOKEN_RULE}; other local users see it in ps: prefer ${TOKEN_ENV} "
        f"(default: ${TOKEN_ENV} if set, else a new random one; either way the URL to open is printed at start)",
    )
    p.add_argument(
        "--allow-host",
        metavar="NAME",
        action="append",
        default=None,
        help="accept requests whose Host header names NAME too (the name a proxy or a browser uses); repeatable "
        "(default: none beyond localhost, 127.0.0.1, [::1], --host and, when --host is not loopback, this "
        "machine's hostname, FQDN and addresses)",
    )
    add_logging_level(p)
    add_config_option(p, "ui")
    return p


def checked_token(p: argparse.ArgumentParser, given: str | None) -> tuple[str, str]:
    """The token and where it came from (see chosen_token); a usage error when it does not follow TOKEN_RULE."""
    token, source = chosen_token(given, os.environ)
    if not TOKEN_PATTERN.fullmatch(token):
        p.error(f"{source} must be {TOKEN_RULE} (it goes in a URL and a cookie as it is)")
    return token, source


def main(argv: list[str] | None = None) -> None:
    p = parser()
    words = translated(p, sys.argv[1:] if argv is None else argv, "ui")
    apply_config(p, words, "ui")
    args = p.parse_args(words)
    keys = checked_monitor(p, args)
    if not 0 < args.port < 65536:
        p.error(f"--port must be from 1 to 65535, not {args.port}")
    token, source = checked_token(p, args.token)
    access = access_for(args.host, args.port, token, checked_allowed(p, args.allow_host or []))
    setup_logging(args.logging_level, ("/dev/stdout",))
    if source == "--token" and any(w == "--token" or w.startswith("--token=") for w in words):  # (not a --config file)
        logger.warning("scaler_ui: --token shows the token to every local user (ps); prefer %s", TOKEN_ENV)
    if not serves_loopback_only(args.host):
        logger.warning(exposure_warning(args.host, args.port))
    feed = StatusFeed(args.monitor_address, keys)
    server = serve(args.host, args.port, make_handler(feed, access))
    feed.start()
    where = f"http://{f'[{args.host}]' if ':' in args.host else args.host}:{args.port}/"
    logger.info("scaler_ui: serving %s for monitor address %s", where, args.monitor_address)
    print(f"scaler_ui: dashboard at {dashboard_url(args.host, args.port, token)}", flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        feed.stop()


if __name__ == "__main__":
    main()
