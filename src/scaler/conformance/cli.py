"""The command line of the conformance kit (`python -m scaler.conformance`)."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Sequence

from scaler.conformance.wire import Keys, Report, select

USAGE_EPILOG = """\
Output: one line per check, `PASS name`, `FAIL name — detail` or `SKIP name — why`; a PASS line ends `— advice:
...` when a recommendation of docs/protocol.md (a "should") did not hold. Exit status 0 when no check failed, 1 when one
did, 2 for a usage error or (worker, manager and client modes) when no peer said hello in time.

scheduler mode: ADDRESS is a running scheduler. The kit connects raw clients and raw workers (their payloads are
opaque bytes); no other worker may be connected to that scheduler meanwhile. A shutdownRequest is sent only to a
protected scheduler (which must refuse it). too_large runs when the welcome states maxPayloadBytes of 16 MiB or less,
spanning_payloads when it states more than 1 MiB. The manager_* checks also play a worker manager (hello kind manager,
managerReport) and the workers of its units (Hello.unit): scaleUnits(start) for tasks only its workers can run, a
unit drained and stopped once idle, never while it holds tasks; they take a few seconds (scaling ticks every 0.25 s);
manager_key_role needs --keys.

In every mode the kit sends no frame over 1 MiB (payloads over 1 MiB span frames of 1 MiB); frame_limit checks that
limit against the peer (docs/protocol.md section 2): a scheduler drops a connection that passes it, a worker or a
client never passes it.

worker mode: the kit binds ADDRESS as a fake scheduler (a ROUTER socket) and waits for one worker's hello; start the
worker pointed at ADDRESS. The hello's capabilities choose the payload convention: payload=python (cloudpickle
functions) or payload=json (the worker registers echo, add, fail and sleep). The last check sends `shutdown`: the
worker must then close its connection.

manager mode: the kit binds ADDRESS as a fake scheduler and waits for one worker manager's hello; start the manager
pointed at ADDRESS (e.g. scaler_worker_manager local ADDRESS). The kit checks its hello and first managerReport, sends
scaleUnits(start) of one unit and waits --connect-timeout for the unit's workers to say hello on ADDRESS (the kit
welcomes them and answers their heartbeats; it sends them no task), sends scaleUnits(stop) and expects the manager's
report to say the unit ended and the workers to leave, then sends `shutdown`: the manager must close its connection.

client mode: the kit binds ADDRESS as a fake scheduler and waits for one client's hello; start the client pointed at
ADDRESS. The kit serves it (welcome idPrefix 7, peerTimeoutMs 10000), running its tasks itself: payload=json tasks run
echo, add, fail and sleep; payload=python tasks are unpickled and called in the kit's process (trusted clients only).
Serving ends when the client says disconnect, its connection closes, it is silent for --timeout seconds, or after
30 x --timeout in all; then the checks are printed.
"""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m scaler.conformance",
        description="Check a Scaler scheduler, worker or client against docs/protocol.md (raw ZeroMQ + Cap'n Proto).",
        epilog=USAGE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("mode", choices=("scheduler", "worker", "manager", "client"), help="what to check")
    p.add_argument(
        "address", help="scheduler mode: the scheduler's address; worker, manager and client modes: the address to bind"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        help="seconds any one expected message may take; client mode: the longest silence of the client (10)",
    )
    p.add_argument(
        "--connect-timeout",
        type=float,
        default=60.0,
        help="worker, manager and client modes: seconds to wait for the peer's hello (manager mode: also for the "
        "hellos of the workers of the unit it starts) (60)",
    )
    p.add_argument(
        "--keys",
        metavar="DIR",
        default=None,
        help="CurveZMQ keys laid out as scaler_keygen makes them (docs/security.md). scheduler mode: scheduler.key, "
        "client.key_secret, worker.key_secret, manager.key_secret; worker, manager and client modes: "
        "scheduler.key_secret (the kit is the CURVE server)",
    )
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAMES",
        help="run only these checks (comma-separated; repeatable); worker, manager and client modes always do the "
        "handshake (manager mode: and start a unit for stop_unit and unit_workers_leave)",
    )
    p.add_argument("--list", action="store_true", help="print the check names (with what each checks) and exit")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except SystemExit as exc:
        if isinstance(exc.code, str):
            sys.stderr.write(f"error: {exc.code}\n")
            return 2
        return int(exc.code or 0)


def _main(argv: Sequence[str] | None) -> int:
    args = parser().parse_args(argv)
    if args.timeout <= 0 or args.connect_timeout <= 0:
        raise SystemExit("--timeout and --connect-timeout must be positive")
    only = [name.strip() for item in args.only for name in item.split(",") if name.strip()]
    keys = Keys(args.keys) if args.keys else None
    report = Report(sys.stdout)
    if args.mode == "scheduler":
        from scaler.conformance.scheduler_checks import SchedulerKit

        kit = SchedulerKit(args.address, args.timeout, keys)
        try:
            checks = kit.checks()
            if args.list:
                for check in checks:
                    report.line(f"{check.name}: {' '.join(check.doc.split())}")
                return 0
            for check in select(checks, only):
                report.outcome(check.name, functools.partial(kit.run_one, check))
        finally:
            kit.close()
    else:
        return _serve_one(args, keys, report, only)
    return 1 if report.failed else 0


def _serve_one(args: argparse.Namespace, keys: Keys | None, report: Report, only: list[str]) -> int:
    """Worker, manager and client modes: bind the address, serve the one peer that says hello, report its checks."""
    if args.mode == "client":
        from scaler.conformance.client_checks import ClientKit as Kit
    elif args.mode == "manager":
        from scaler.conformance.manager_checks import ManagerKit as Kit  # type: ignore[assignment]
    else:
        from scaler.conformance.worker_checks import WorkerKit as Kit  # type: ignore[assignment]

    if args.list:
        for name, doc in Kit.describe():
            report.line(f"{name}: {doc}")
        return 0
    kit = Kit(args.address, args.timeout, args.connect_timeout, keys)
    try:
        if not kit.run(report, only):
            return 2
    finally:
        kit.close()
    return 1 if report.failed else 0
