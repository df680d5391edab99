"""scaler_ui: a web page showing a scheduler's status, from its monitor address.

A thread subscribes to the monitor address and keeps the latest status; an HTTP server (standard library) serves
one self-contained page, which fetches /status.json every second and draws the scheduler, task, message, worker
and client tables; /metrics gives the same status in Prometheus's text format (scaler.monitor.metrics). Nothing is
stored: a page opened later shows the present.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.server
import json
import logging
import sys
import threading
import time
from importlib import resources
from typing import Any

from scaler.entry_points.help import HelpFormatter, add_version
from scaler.io.processes import setup_logging
from scaler.monitor.metrics import CONTENT_TYPE, render_metrics
from scaler.monitor.top import Subscription, add_monitor_arguments, checked_monitor
from scaler.protocol.messages import Status
from scaler.security.keys import PeerKeys

logger = logging.getLogger(__name__)

POLL_MS = 500  # the feed looks for a stop request at least this often


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
    """The latest status published on a monitor address, kept up to date by a thread of its own."""

    def __init__(self, monitor_address: str, keys: PeerKeys | None = None) -> None:
        self.monitor_address = monitor_address
        self.keys = keys
        self._lock = threading.Lock()
        self._status: Status | None = None
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
        with self._lock:
            if self._status is None:
                return None, None
            return self._status, time.monotonic() - self._received_at

    def _run(self) -> None:
        feed = Subscription(self.monitor_address, self.keys)
        said = False
        try:
            while not self._stop.is_set():
                status = feed.next(POLL_MS)
                if status is not None:
                    with self._lock:
                        self._status, self._received_at = status, time.monotonic()
                elif feed.failure is not None and not said:
                    logger.error("scaler_ui: %s", feed.failure)
                    said = True
        finally:
            feed.close()


def page() -> bytes:
    return resources.files("scaler.monitor").joinpath("ui.html").read_bytes()


def make_handler(feed: StatusFeed) -> type[http.server.BaseHTTPRequestHandler]:
    html = page()

    class Handler(http.server.BaseHTTPRequestHandler):
        server_version = "scaler_ui"

        def do_GET(self) -> None:  # the name http.server calls
            path = self.path.split("?", 1)[0]
            if path in ("/", "/index.html"):
                self._answer(200, "text/html; charset=utf-8", html)
            elif path == "/status.json":
                status, age = feed.latest()
                body = json.dumps(status_json(status, feed.monitor_address, age)).encode()
                self._answer(200, "application/json", body)
            elif path == "/metrics":
                self._answer(200, CONTENT_TYPE, render_metrics(*feed.latest()).encode())
            else:
                wrong = f"no page {path!r}: try /, /status.json or /metrics\n"
                self._answer(404, "text/plain; charset=utf-8", wrong.encode())

        def _answer(self, code: int, content_type: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("%s %s", self.address_string(), format % args)

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


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scaler_ui",
        description="Serve a web page showing a scheduler's status, read from its monitor address.",
        formatter_class=HelpFormatter,
    )
    add_version(p)
    add_monitor_arguments(p)
    p.add_argument("--host", default="127.0.0.1", help="the interface to serve on (0.0.0.0: every interface)")
    p.add_argument("--port", "-p", type=int, default=8081, help="the HTTP port to serve on")
    p.add_argument("--logging-level", "-ll", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    return p


def main(argv: list[str] | None = None) -> None:
    p = parser()
    args = p.parse_args(argv)
    keys = checked_monitor(p, args)
    if not 0 < args.port < 65536:
        p.error(f"--port must be from 1 to 65535, not {args.port}")
    setup_logging(args.logging_level, ("/dev/stdout",))
    feed = StatusFeed(args.monitor_address, keys)
    try:
        server = Server((args.host, args.port), make_handler(feed))
    except OSError as exc:
        logger.error("scaler_ui: cannot serve on %s:%d: %s", args.host, args.port, exc.strerror or exc)
        sys.exit(1)
    feed.start()
    logger.info("scaler_ui: serving http://%s:%d/ for monitor address %s", args.host, args.port, args.monitor_address)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        feed.stop()


if __name__ == "__main__":
    main()
