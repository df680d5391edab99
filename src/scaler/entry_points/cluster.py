"""scaler_cluster (alias scaler_worker): run N workers on this machine against a scheduler, restarting those that
die unexpectedly (worker/supervision.py). Warns at start when the keys directory holds secrets the workers' tasks
could read."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from scaler.core.capabilities import worker_capabilities
from scaler.core.worker.agent import AgentConfig
from scaler.entry_points.help import KEYS_HELP, HelpFormatter, add_version
from scaler.entry_points.logging_options import add_logging_options, start_logging, take_address_out_of_paths
from scaler.errors import KeysError
from scaler.io.loop import EVENT_LOOPS, check_event_loop
from scaler.io.processes import hostname, parse_address, parse_size
from scaler.security.keys import SECRET_SUFFIX, PeerKeys, load_peer_keys, resolve

DEFAULTS = AgentConfig()


def parser(prog: str = "scaler_cluster") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Run Scaler workers on this machine; they connect to the scheduler at ADDRESS. A worker killed by a signal "
            "or crashed starts again after 1 s, doubling up to 60 s while it keeps dying; one that exits 0 (the "
            "scheduler shut down) or 1 (an error it logged: refused, no scheduler) does not."
        ),
        formatter_class=HelpFormatter,
    )
    add_version(p)
    p.add_argument("address", help="the scheduler's address, e.g. tcp://127.0.0.1:8516")
    p.add_argument("--num-of-workers", "-n", type=int, default=os.cpu_count() or 1, help="workers to start")
    p.add_argument(
        "--keys",
        "-k",
        metavar="DIR",
        default=None,
        help=KEYS_HELP + "; workers read scheduler.key and worker.key_secret there",
    )
    p.add_argument(
        "--heartbeat-interval-seconds",
        "-hi",
        type=float,
        default=DEFAULTS.heartbeat_interval_seconds,
        help="how often each worker reports to the scheduler",
    )
    p.add_argument(
        "--per-worker-queue-size",
        "-qs",
        type=int,
        default=DEFAULTS.queue_capacity,
        help="most tasks the scheduler may queue on one worker",
    )
    p.add_argument(
        "--death-timeout-seconds",
        "-dt",
        type=float,
        default=DEFAULTS.scheduler_timeout_seconds,
        help="a worker exits when the scheduler has been silent this long",
    )
    p.add_argument(
        "--max-processors-per-worker",
        "-mp",
        type=int,
        default=DEFAULTS.max_processors,
        help="most processors one worker runs at once (more than one only while tasks wait on nested tasks)",
    )
    p.add_argument(
        "--memory-limit",
        "-ml",
        metavar="SIZE",
        default=None,
        help="most memory (RSS) one processor may use, like 4G or 512M: a processor over it is stopped and the task "
        "it runs fails with TaskMemoryError (default: no limit)",
    )
    p.add_argument(
        "--capability",
        metavar="CAPABILITY",
        action="append",
        default=None,
        help="a capability the workers offer, NAME or NAME=VALUE (e.g. gpu, licence=matlab); repeat for several. Tasks "
        "that require capabilities (client.options(capabilities=...)) run only on workers offering all of them. "
        "Every worker offers payload=python as well (docs/capabilities.md) (default: none, payload=python only)",
    )
    p.add_argument("--event-loop", "-el", choices=EVENT_LOOPS, default="builtin", help="asyncio event loop")
    p.add_argument(
        "--worker-name-prefix",
        default=hostname(),
        help="workers are named PREFIX-<pid>-<index>; a restarted worker keeps its name",
    )
    add_logging_options(p)
    return p


def main(argv: list[str] | None = None) -> None:
    prog = os.path.basename(sys.argv[0]) if argv is None else "scaler_cluster"
    p = parser(prog if prog in ("scaler_cluster", "scaler_worker") else "scaler_cluster")
    args = p.parse_args(take_address_out_of_paths(sys.argv[1:] if argv is None else argv))
    try:
        parse_address(args.address)
        check_event_loop(args.event_loop)
    except ValueError as exc:
        p.error(str(exc))
    if args.num_of_workers < 1 or args.per_worker_queue_size < 1 or args.max_processors_per_worker < 1:
        p.error("--num-of-workers, --per-worker-queue-size and --max-processors-per-worker must be at least 1")
    if args.heartbeat_interval_seconds <= 0 or args.death_timeout_seconds <= 0:
        p.error("--heartbeat-interval-seconds and --death-timeout-seconds must be positive")
    try:
        memory_limit = parse_size(args.memory_limit) if args.memory_limit is not None else 0
    except ValueError as exc:
        p.error(f"--memory-limit: {exc}")
    try:
        capabilities = worker_capabilities(args.capability or (), "--capability")[1:]
    except ValueError as exc:
        p.error(str(exc))
    keys: PeerKeys | None = None
    directory = resolve(args.keys)
    if directory is not None:
        try:
            keys = load_peer_keys(directory, "worker")
        except KeysError as exc:
            p.error(str(exc))
    paths = start_logging(p, args)
    logging.info("logging to %s", paths)
    if directory is not None:
        warn_if_secrets_readable(directory)
    from scaler.worker.cluster import run_cluster

    config = AgentConfig(
        name=args.worker_name_prefix,
        hostname=hostname(),
        queue_capacity=args.per_worker_queue_size,
        heartbeat_interval_seconds=args.heartbeat_interval_seconds,
        scheduler_timeout_seconds=args.death_timeout_seconds,
        max_processors=args.max_processors_per_worker,
        memory_limit_bytes=memory_limit,
        capabilities=capabilities,
    )
    sys.exit(
        run_cluster(
            args.address,
            args.num_of_workers,
            config,
            args.event_loop,
            args.logging_level,
            paths,
            keys,
        )
    )


_WORKER_SECRET = "worker" + SECRET_SUFFIX
_SHOWN = 6


def readable_secrets(directory: str) -> list[str]:
    """The secret key files (*.key_secret) in `directory` and in its folders one level down that this process can
    read, other than the worker.key_secret it uses, as paths relative to `directory`: its tasks can read them too."""
    found: list[str] = []
    for rel in _entries(directory):
        path = os.path.join(directory, rel)
        if os.path.isdir(path) and not os.path.islink(path):
            found += [
                os.path.join(rel, inner) for inner in _entries(path) if _readable_secret(os.path.join(path, inner))
            ]
        elif rel != _WORKER_SECRET and _readable_secret(path):
            found.append(rel)
    return found


def warn_if_secrets_readable(directory: str) -> None:
    """Log a WARNING when the workers' tasks could read secrets of the keys directory beyond the worker's own."""
    others = readable_secrets(directory)
    if not others:
        return
    root = os.path.abspath(directory)
    shown = ", ".join(others[:_SHOWN]) + (f" and {len(others) - _SHOWN} more" if len(others) > _SHOWN else "")
    logging.warning(
        "the keys directory %s holds secret keys other than worker.key_secret that this process can read (%s): the "
        "tasks these workers run can read them too, and act as whoever holds them (the scheduler, its clients). Give "
        "workers a folder holding only scheduler.key and worker.key_secret (`scaler_keygen %s --worker NAME` makes "
        "%s/NAME/) and, on one machine, run them as another user so that tasks cannot read the scheduler's files "
        '(docs/security.md, "On one machine")',
        root,
        shown,
        root,
        root,
    )


def _entries(folder: str) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def _readable_secret(path: str) -> bool:
    return path.endswith(SECRET_SUFFIX) and os.path.isfile(path) and os.access(path, os.R_OK)


if __name__ == "__main__":
    main()
