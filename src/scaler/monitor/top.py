"""scaler_top: a top-like terminal view of a scheduler, from its monitor address."""

from __future__ import annotations

import argparse
import curses
import sys
from typing import Any

import zmq

from scaler.entry_points.help import HelpFormatter
from scaler.io.sockets import connect_subscriber, recv_message
from scaler.monitor.render import SHORTCUTS, render
from scaler.protocol.errors import ProtocolError
from scaler.protocol.messages import ACCEPTED_BY_MONITOR, Status


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scaler_top",
        description="Show a scheduler's status like top. Keys: the shortcuts shown sort the workers; q quits.",
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "monitor_address", help="the address the scheduler logs at start, e.g. ipc:///tmp/0.0.0.0_8516_monitor"
    )
    p.add_argument("--once", action="store_true", help="print one status as text and exit (no full-screen view)")
    p.add_argument("--timeout", type=float, default=10.0, help="with --once: seconds to wait for a status")
    return p


def next_status(sock: zmq.Socket[Any], timeout_ms: int) -> Status | None:
    if not sock.poll(timeout_ms):
        return None
    try:
        message = recv_message(sock, 0, ACCEPTED_BY_MONITOR)
    except ProtocolError:
        return None
    return message if isinstance(message, Status) else None


def run_once(address: str, timeout: float) -> int:
    sock = connect_subscriber(address)
    status = next_status(sock, int(timeout * 1000))
    sock.close()
    if status is None:
        print(f"no status from {address} within {timeout:g}s (is a scheduler running with that monitor address?)")
        return 1
    print("\n".join(render(status)))
    return 0


def run_screen(screen: Any, address: str) -> None:
    curses.curs_set(0)
    screen.nodelay(True)
    sock = connect_subscriber(address)
    sort_key = "n"
    status: Status | None = None
    while True:
        key = screen.getch()
        if key in (ord("q"), ord("Q")):
            break
        if key != -1 and chr(key) in SHORTCUTS:
            sort_key = chr(key)
        fresh = next_status(sock, 100)
        if fresh is not None:
            status = fresh
        elif key == -1:
            continue
        screen.erase()
        height, width = screen.getmaxyx()
        lines = render(status, sort_key, width - 1) if status else [f"waiting for a status from {address} ..."]
        for row, line in enumerate(lines[: height - 1]):
            screen.addstr(row, 0, line)
        screen.refresh()
    sock.close()


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.once:
        sys.exit(run_once(args.monitor_address, args.timeout))
    try:
        curses.wrapper(run_screen, args.monitor_address)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
