"""scaler_keygen: create (or complete) a directory of CurveZMQ keys, and say which file goes to which machine."""

from __future__ import annotations

import argparse

from scaler.entry_points.help import HelpFormatter, add_version
from scaler.errors import KeysError
from scaler.security.keys import ENV_VAR, generate


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scaler_keygen",
        description="Create the CurveZMQ keys of a Scaler cluster in DIR, or add what is missing to it (existing "
        "keys are never replaced). With keys, connections to the scheduler are encrypted, and it admits only the "
        "clients, workers and worker managers whose public keys are in DIR/authorized_clients, "
        "DIR/authorized_workers and DIR/authorized_managers (for scaler_worker_manager), and on a tcp:// monitor "
        "address only the monitor keys in DIR/authorized_monitors (for scaler_top and scaler_ui). Run "
        "it once, then copy to each machine the files the report lists for it. DIR, and every directory above it, "
        "must be yours (or root's) and not writable by others (root's sticky directories, such as /tmp, excepted).",
        epilog=f"Examples, all on one machine: scaler_keygen DIR; then scaler_scheduler --keys DIR "
        f"tcp://127.0.0.1:8516; scaler_cluster --keys DIR -n 4 tcp://127.0.0.1:8516; and in Python "
        f'Client("tcp://127.0.0.1:8516", keys="DIR"). Instead of --keys, every program also reads {ENV_VAR}=DIR. '
        "A named key gets its own folder: scaler_keygen DIR --client alice makes DIR/alice, the keys directory "
        "to copy to alice's machine; scaler_keygen DIR --monitor ops makes DIR/ops for the machine that runs "
        "scaler_top --keys DIR/ops tcp://HOST:PORT; scaler_keygen DIR --manager slurm makes DIR/slurm for the "
        "machine that runs scaler_worker_manager, which also needs a worker.key_secret for the workers it starts.",
        formatter_class=HelpFormatter,
    )
    add_version(p)
    p.add_argument("directory", metavar="DIR", help="the keys directory (created if missing)")
    p.add_argument(
        "--client",
        action="append",
        default=None,
        metavar="NAME",
        help="also make a key of its own for client NAME (its own folder DIR/NAME); repeat for more clients",
    )
    p.add_argument(
        "--worker",
        action="append",
        default=None,
        metavar="NAME",
        help="also make a key of its own for worker NAME (its own folder DIR/NAME); repeat for more workers",
    )
    p.add_argument(
        "--monitor",
        action="append",
        default=None,
        metavar="NAME",
        help="also make a monitor key of its own for NAME (its own folder DIR/NAME), for scaler_top or scaler_ui "
        "on a tcp:// monitor address; repeat for more",
    )
    p.add_argument(
        "--manager",
        action="append",
        default=None,
        metavar="NAME",
        help="also make a worker manager key of its own for NAME (its own folder DIR/NAME), for scaler_worker_manager; "
        "repeat for more managers",
    )
    return p


def main(argv: list[str] | None = None) -> None:
    p = parser()
    args = p.parse_args(argv)
    try:
        report = generate(
            args.directory,
            clients=args.client or (),
            workers=args.worker or (),
            monitors=args.monitor or (),
            managers=args.manager or (),
        )
    except (KeysError, OSError) as exc:
        p.error(str(exc))
    print("\n".join(report))


if __name__ == "__main__":
    main()
