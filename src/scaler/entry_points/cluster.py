"""scaler_cluster (alias scaler_worker): run N workers on this machine against a scheduler, restarting those that
die unexpectedly (worker/supervision.py). Warns at start when the keys directory holds secrets the workers' tasks
could read."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from scaler.entry_points.help import HelpFormatter, add_version
from scaler.entry_points.logging_options import start_logging, take_address_out_of_paths
from scaler.errors import KeysError
from scaler.io.addresses import hostname
from scaler.security.keys import SECRET_SUFFIX, PeerKeys, load_peer_keys
from scaler.settings.cli import add_settings, settings_from
from scaler.settings.common import keys_directory
from scaler.settings.config_file import add_config_option, apply_config
from scaler.settings.opengris import translated
from scaler.settings.worker import ClusterSettings


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
    add_settings(p, ClusterSettings)
    add_config_option(p, "cluster")
    return p


def main(argv: list[str] | None = None) -> None:
    prog = os.path.basename(sys.argv[0]) if argv is None else "scaler_cluster"
    p = parser(prog if prog in ("scaler_cluster", "scaler_worker") else "scaler_cluster")
    words = take_address_out_of_paths(sys.argv[1:] if argv is None else argv)
    words = translated(p, words, "cluster")
    apply_config(p, words, "cluster")
    settings = settings_from(p, ClusterSettings, p.parse_args(words))
    assert settings.address is not None  # a positional argument: argparse requires it (or the --config file gives it)
    keys: PeerKeys | None = None
    directory = keys_directory(settings.keys)
    if directory is not None:
        try:
            keys = load_peer_keys(directory, "worker")
        except KeysError as exc:
            p.error(str(exc))
    paths = start_logging(p, settings)
    logging.info("logging to %s", paths)
    if directory is not None:
        warn_if_secrets_readable(directory)
    from scaler.worker.cluster import run_cluster

    sys.exit(
        run_cluster(
            settings.address,
            settings.n_workers,
            settings.agent_config(settings.worker_name_prefix, hostname()),
            settings.event_loop,
            settings.logging_level,
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
