"""scaler_top: a top-like terminal view of a scheduler, from its monitor address."""

from __future__ import annotations

import argparse
import curses
import sys
import time
from datetime import datetime
from typing import Any

import zmq

from scaler.entry_points.help import HelpFormatter, add_version
from scaler.errors import KeysError
from scaler.io.addresses import parse_address
from scaler.io.curve import HandshakeWatch
from scaler.io.ipc import find_monitor
from scaler.io.sockets import new_subscriber, recv_message, subscribe
from scaler.monitor.render import SHORTCUTS, function_rows, is_stale, render, screen, waiting
from scaler.protocol.errors import ProtocolError
from scaler.protocol.messages import ACCEPTED_BY_MONITOR, Message, Refused, Status
from scaler.security.keys import PeerKeys, load_peer_keys, resolve
from scaler.settings.common import KEYS_HELP
from scaler.settings.config_file import add_config_option, apply_config

_WATCH_MS = 100  # a status is waited for in slices this long, to see a failed handshake at once
RESUBSCRIBE_SECONDS = 3.0  # no status this long: say hello again (the scheduler restarted, or forgot this monitor)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scaler_top",
        description="Show a scheduler's status like top. Keys: the shortcuts shown sort the workers; q quits.",
        formatter_class=HelpFormatter,
    )
    add_version(p)
    add_monitor_arguments(p)
    p.add_argument("--once", action="store_true", help="print one status as text and exit (no full-screen view)")
    p.add_argument("--timeout", type=float, default=10.0, help="with --once: seconds to wait for a status")
    add_config_option(p, "top")
    return p


def add_monitor_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments scaler_top and scaler_ui share: the monitor address and the keys to read it with."""
    p.add_argument(
        "monitor_address", help="the address the scheduler logs at start, e.g. ipc:///tmp/127.0.0.1_8516_monitor"
    )
    p.add_argument(
        "--keys", "-k", metavar="DIR", default=None, help=KEYS_HELP + "; used for a tcp:// monitor address only"
    )


def checked_monitor(p: argparse.ArgumentParser, args: argparse.Namespace) -> PeerKeys | None:
    """The keys to subscribe with (see monitor_keys), once the address is checked; a usage error otherwise."""
    try:
        parse_address(args.monitor_address)
        args.monitor_address = find_monitor(args.monitor_address)
        return monitor_keys(args.monitor_address, args.keys)
    except (ValueError, KeysError) as exc:
        p.error(str(exc))


class Subscription:
    """A monitor of a scheduler's monitor address: says hello (again whenever no status came for a while: a scheduler
    that restarted knows nobody), and watches its connections and handshakes (a tcp:// monitor of a scheduler with
    keys takes authorized monitor keys only). `failure` says why the scheduler will not serve it, once known, or, while
    that holds, that nothing listens at the address (then it keeps trying: a scheduler may start there)."""

    def __init__(self, address: str, keys: PeerKeys | None, name: str = "") -> None:
        self.address = address
        self.name = name
        self.sock = new_subscriber(address, keys=keys)
        use_keys = keys if address.startswith("tcp://") else None
        self.watch = HandshakeWatch(self.sock, address, use_keys, "monitor", log_refusals=False)
        self.sock.connect(address)
        subscribe(self.sock, name)
        self._said = time.monotonic()
        self._failed: str | None = None

    @property
    def failure(self) -> str | None:
        return self._failed or self.watch.refused

    def next(self, timeout_ms: int) -> Status | None:
        """The next status within `timeout_ms`; None at the deadline, or as soon as a handshake fails, the scheduler
        refuses this monitor or nothing is found listening, each for the first time (`failure` then says why; later
        calls wait their whole timeout)."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            now = time.monotonic()
            left_ms = max(0, int((deadline - now) * 1000))
            message = next_message(self.sock, min(left_ms, _WATCH_MS))
            if isinstance(message, Status):
                self._said = time.monotonic()
                return message
            if isinstance(message, Refused) and self._failed is None:
                self._failed = f"the scheduler at {self.address} refused this monitor: {message.reason}"
                return None
            if self._failed is None and self._watch_failed():
                return None
            if now - self._said >= RESUBSCRIBE_SECONDS:
                subscribe(self.sock, self.name)
                self._said = now
            if left_ms == 0:
                return None

    def _watch_failed(self) -> bool:
        """Whether the watch saw a handshake fail, or nothing listening, for the first time. A failed handshake may be
        a scheduler's address for clients and workers given instead of its monitor address: that is said too."""
        refused = self.watch.refused
        failure = self.watch.failure()
        if failure is not None:
            self._failed = (
                f"{failure}. If {self.address} is the scheduler's address for clients and workers, give this monitor "
                'its monitor address instead (the scheduler logs "monitor address is ..." at start; '
                "scaler_scheduler --monitor-address sets it)"
            )
            return True
        return refused is None and self.watch.refused is not None

    def close(self) -> None:
        self.watch.close(self.sock)
        self.sock.close()


def monitor_keys(address: str, keys: str | None) -> PeerKeys | None:
    """The monitor keys to subscribe to `address` with: for tcp:// only, from `keys` or $SCALER_KEYS. KeysError if
    the directory lacks them."""
    directory = resolve(keys)
    if directory is None or not address.startswith("tcp://"):
        return None
    return load_peer_keys(directory, "monitor")


def next_message(sock: zmq.Socket[Any], timeout_ms: int) -> Message | None:
    """The next message from the scheduler's monitor address (welcome, refused or status) within `timeout_ms`."""
    if not sock.poll(timeout_ms):
        return None
    try:
        return recv_message(sock, 0, ACCEPTED_BY_MONITOR)
    except ProtocolError:
        return None


def next_status(sock: zmq.Socket[Any], timeout_ms: int) -> Status | None:
    """The next status within `timeout_ms` (a welcome or anything else that comes first counts as none)."""
    message = next_message(sock, timeout_ms)
    return message if isinstance(message, Status) else None


def run_once(address: str, timeout: float, keys: PeerKeys | None = None) -> int:
    feed = Subscription(address, keys)
    status = feed.next(int(timeout * 1000))
    failure = feed.failure
    feed.close()
    if status is None:
        if failure is not None:
            print(failure)
            return 1
        gave_up = waiting(address, timeout)[0]
        print(f"{gave_up}: none came (is a scheduler running with that monitor address?)", file=sys.stderr)
        return 1
    print("\n".join(render(status)))
    return 0


def lines_to_show(
    feed: Subscription, status: Status | None, age_seconds: float, sort_key: str, width: int, height: int
) -> list[str]:
    """What the screen shows: the latest status (under a banner once stale), else why none came yet. `age_seconds`
    is the status's age, or how long scaler_top has waited when none came."""
    if status is not None:
        return screen(status, datetime.now(), age_seconds, sort_key, width, function_rows(height))
    if feed.failure is not None:
        return [feed.failure[:width]]
    return waiting(feed.address, age_seconds, width)


def draw(window: Any, lines: list[str], banner: bool) -> None:
    window.erase()
    height, _ = window.getmaxyx()
    for row, line in enumerate(lines[: height - 1]):
        attr = curses.A_REVERSE | curses.A_BOLD if banner and row == 0 else curses.A_NORMAL
        try:
            window.addstr(row, 0, line, attr)
        except UnicodeEncodeError:  # a terminal without unicode: "…" becomes "..."
            window.addstr(row, 0, line.replace("\u2026", "...").encode("ascii", "replace").decode(), attr)
    window.refresh()


def run_screen(window: Any, address: str, keys: PeerKeys | None = None) -> None:
    curses.curs_set(0)
    window.nodelay(True)
    feed = Subscription(address, keys)
    sort_key = "n"
    status: Status | None = None
    since = time.monotonic()  # when the latest status came, or when scaler_top started
    shown: list[str] = []
    while True:
        key = window.getch()
        if key in (ord("q"), ord("Q")):
            break
        if key != -1 and chr(key) in SHORTCUTS:
            sort_key = chr(key)
        fresh = feed.next(100)
        if fresh is not None:
            status, since = fresh, time.monotonic()
        age = time.monotonic() - since
        height, width = window.getmaxyx()
        lines = lines_to_show(feed, status, age, sort_key, width - 1, height)
        if lines != shown or key != -1:  # the clock in the waiting line and the banner ticks once a second
            draw(window, lines, status is not None and is_stale(age))
            shown = lines
    feed.close()


def main(argv: list[str] | None = None) -> None:
    p = parser()
    words = sys.argv[1:] if argv is None else argv
    apply_config(p, words, "top")
    args = p.parse_args(words)
    keys = checked_monitor(p, args)
    if args.once:
        sys.exit(run_once(args.monitor_address, args.timeout, keys))
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        p.exit(
            2,
            f"{p.prog}: the full-screen view needs a terminal (standard input and output are not one here); "
            "to print the status as text, run it with --once\n",
        )
    try:
        curses.wrapper(run_screen, args.monitor_address, keys)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
