"""scaler_scheduler: run a scheduler."""

from __future__ import annotations

import argparse
import logging
import platform
import sys

from scaler.core.scheduler import SchedulerConfig
from scaler.entry_points.help import KEYS_HELP, HelpFormatter, add_version, byte_size
from scaler.entry_points.logging_options import add_logging_options, start_logging, take_address_out_of_paths
from scaler.errors import KeysError
from scaler.io.loop import EVENT_LOOPS, check_event_loop
from scaler.io.processes import check_cpu, default_monitor_address, parse_address, removing_own_files
from scaler.scheduler.monitors import TASK_DATA_CHOICES
from scaler.security.keys import ServerKeys, load_server_keys, resolve

DEFAULTS = SchedulerConfig()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scaler_scheduler",
        description="Run a Scaler scheduler: clients and workers connect to ADDRESS.",
        formatter_class=HelpFormatter,
    )
    add_version(p)
    p.add_argument(
        "address",
        help="address to listen on, e.g. tcp://127.0.0.1:8516 (this machine only); to listen on the network "
        "(e.g. tcp://0.0.0.0:8516), use --keys",
    )
    p.add_argument("--keys", "-k", metavar="DIR", default=None, help=KEYS_HELP)
    p.add_argument(
        "--monitor-address",
        "-ma",
        default=None,
        help="where monitors (scaler_top, scaler_ui) connect (default: ipc://DIR/<host>_<port>_monitor in a folder "
        "private to this user: $XDG_RUNTIME_DIR/scaler or /tmp/scaler-<uid>; scaler_top also finds it given "
        "ipc:///tmp/<host>_<port>_monitor)",
    )
    p.add_argument(
        "--monitor-task-data",
        choices=TASK_DATA_CHOICES,
        default="auto",
        help="whether statuses on the monitor address carry task data (the exception texts of failures and what tasks "
        "print): auto sends it to ipc:// monitors (only this user can connect) and to tcp:// monitors with keys "
        "(only monitor keys can), not to a tcp:// monitor without keys; on: always; off: never",
    )
    p.add_argument(
        "--protected",
        action=argparse.BooleanOptionalAction,
        default=DEFAULTS.protected,
        help="protected mode, on by default: refuse client.shutdown(); --no-protected lets clients stop the cluster",
    )
    p.add_argument("--event-loop", "-el", choices=EVENT_LOOPS, default="builtin", help="asyncio event loop")
    p.add_argument(
        "--worker-timeout-seconds",
        "-wt",
        type=float,
        default=DEFAULTS.worker_timeout_seconds,
        help="a worker silent this long is declared dead and its tasks run elsewhere",
    )
    p.add_argument(
        "--client-timeout-seconds",
        "-ct",
        type=float,
        default=DEFAULTS.client_timeout_seconds,
        help="a client silent this long is disconnected and its tasks cancelled",
    )
    p.add_argument(
        "--max-task-retries",
        type=int,
        default=DEFAULTS.max_task_retries,
        help="times a task is re-run after its worker died, before it fails",
    )
    p.add_argument(
        "--max-payload-bytes",
        type=byte_size,
        default=DEFAULTS.max_payload_bytes,
        help="the most bytes one function, argument, object or result may have once serialized (K, M, G suffixes); "
        "bigger ones are refused with a clear error",
    )
    p.add_argument(
        "--capability-grace-seconds",
        type=float,
        default=DEFAULTS.capability_grace_seconds,
        help="while workers are connected but none offers every capability a queued task requires, the task waits "
        "this long for one to join, then fails (missing capabilities); default 0: at once",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=None,
        help="open connections (clients, workers, monitors, and connections that have not said anything yet) at "
        "most; default: what the file descriptor limit allows once the scheduler raised it to its hard limit, less "
        "an eighth (at least 64) kept for other uses, and 65,536 at most",
    )
    p.add_argument(
        "--max-silent-connections",
        type=int,
        default=None,
        help="connections that have not sent a message yet (a handshake under way, or a peer that says nothing) at "
        "most; past it the oldest of them are ended. By default a quarter of --max-connections, 256 at most",
    )
    p.add_argument(
        "--cpu",
        default="auto",
        help="the CPU the scheduler keeps to, with its ZeroMQ I/O thread: auto (the last CPU it may use that no "
        "other scheduler of this user's on this machine holds; none free: anywhere), none (anywhere), or a CPU "
        "number; on one CPU the hand-over of each message between the two threads is cheaper",
    )
    add_logging_options(p)
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(take_address_out_of_paths(sys.argv[1:] if argv is None else argv))
    try:
        parse_address(args.address)
        check_event_loop(args.event_loop)
        cpu = check_cpu(args.cpu)
    except ValueError as exc:
        parser().error(str(exc))
    if args.worker_timeout_seconds <= 0 or args.client_timeout_seconds <= 0 or args.max_task_retries < 0:
        parser().error("timeouts must be positive and --max-task-retries at least 0")
    if not args.capability_grace_seconds >= 0:  # not NaN, not negative
        parser().error("--capability-grace-seconds must be 0 or more")
    for flag, value in (
        ("--max-connections", args.max_connections),
        ("--max-silent-connections", args.max_silent_connections),
    ):
        if value is not None and value < 1:
            parser().error(f"{flag} must be at least 1")
    keys: ServerKeys | None = None
    directory = resolve(args.keys)
    if directory is not None:
        try:
            keys = load_server_keys(directory)
        except KeysError as exc:
            parser().error(str(exc))
    paths = start_logging(parser(), args)
    logging.info("logging to %s", paths)
    from scaler.protocol.messages import CODEC
    from scaler.scheduler.server import run_scheduler

    logging.info("Scheduler: %s %s, %s codec", platform.python_implementation(), platform.python_version(), CODEC)

    config = SchedulerConfig(
        protected=args.protected,
        worker_timeout_seconds=args.worker_timeout_seconds,
        client_timeout_seconds=args.client_timeout_seconds,
        max_task_retries=args.max_task_retries,
        max_payload_bytes=args.max_payload_bytes,
        capability_grace_seconds=args.capability_grace_seconds,
    )
    monitor = args.monitor_address or default_monitor_address(args.address)
    try:
        with removing_own_files():
            run_scheduler(
                args.address,
                monitor,
                config,
                args.event_loop,
                cpu=cpu,
                keys=keys,
                max_connections=args.max_connections,
                max_silent_connections=args.max_silent_connections,
                monitor_task_data=args.monitor_task_data,
            )
    except Exception as exc:  # bind failures and the like: say it plainly
        logging.error("Scheduler: cannot run: %s", exc)
        sys.exit(1)


if __name__ == "__main__":
    main()
