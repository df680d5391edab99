"""scaler_worker_manager TYPE [options] SCHEDULER_ADDRESS: start and stop units of workers where the machines are,
as many as the scheduler asks for (docs/deploying/autoscaling.md). TYPE is `local` (processes on this machine),
`slurm` (Slurm jobs) or `kubernetes` (pods)."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys

from scaler.entry_points.help import HelpFormatter, add_version
from scaler.entry_points.logging_options import start_logging, take_address_out_of_paths
from scaler.errors import KeysError
from scaler.manager.units import keys_for_units
from scaler.security.keys import PeerKeys, load_peer_keys
from scaler.settings.cli import add_settings, settings_from
from scaler.settings.common import keys_directory
from scaler.settings.config_file import ConfigError, add_config_option, apply_config, config_table
from scaler.settings.manager import (
    KubernetesManagerSettings,
    LocalManagerSettings,
    ManagerSettings,
    SlurmManagerSettings,
)

TYPES: dict[str, tuple[type[ManagerSettings], str]] = {
    "local": (LocalManagerSettings, "units are scaler_cluster processes on this machine"),
    "slurm": (SlurmManagerSettings, "units are Slurm jobs (sbatch, squeue, scancel; Slurm found as its commands do)"),
    "kubernetes": (
        KubernetesManagerSettings,
        "units are Kubernetes pods (the API reached as kubectl does, or from a pod with its service account)",
    ),
}


def parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The command's parser, and each type's."""
    p = argparse.ArgumentParser(
        prog="scaler_worker_manager",
        description=(
            "Start and stop workers where the machines are, as many as the scheduler at ADDRESS asks for: it asks for "
            "more when tasks wait, and retires idle ones (drained first: no task is lost or run twice)."
        ),
        formatter_class=HelpFormatter,
    )
    add_version(p)
    types = p.add_subparsers(dest="type", required=True, metavar="TYPE")
    subs = {}
    for name, (cls, text) in TYPES.items():
        sub = subs[name] = types.add_parser(name, help=text, description=text, formatter_class=HelpFormatter)
        add_settings(sub, cls)
        add_config_option(sub, "worker_manager")
    return p, subs


def _type_first(p: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """`words` with the TYPE first: moved there from later on, or read from the --config file's `type`."""
    if not words or words[0] in TYPES:
        return words
    later = [word for word in words if word in TYPES]
    if later:
        words.remove(later[0])
        return [later[0], *words]
    try:
        found = config_table(words, "worker_manager")
    except ConfigError as exc:
        p.error(str(exc))
    if found is None:
        return words  # (argparse says what is missing)
    path, name, table = found
    kind = table.get("type")
    if kind not in TYPES:
        p.error(f"{path}: {name} needs type = one of {', '.join(repr(t) for t in TYPES)}, not {kind!r}")
    return [str(kind), *words]


def main(argv: list[str] | None = None) -> None:
    p, subs = parser()
    words = _type_first(p, list(sys.argv[1:] if argv is None else argv))
    if words and words[0] in TYPES:  # (the address moves to the front of the type's own words)
        words = [words[0], *take_address_out_of_paths(words[1:])]
        apply_config(subs[words[0]], words[1:], "worker_manager", fixed={"type": words[0]})
    args = p.parse_args(words)
    cls = TYPES[args.type][0]
    sub = subs[args.type]
    values = argparse.Namespace(**{k: v for k, v in vars(args).items() if k != "type"})
    settings = settings_from(sub, cls, values)
    problem = settings.problem()
    if problem is not None:
        sub.error(problem)
    assert settings.address is not None
    directory = keys_directory(settings.keys)
    keys: PeerKeys | None = None
    if directory is not None:
        try:
            keys = load_peer_keys(directory, "manager")
        except KeysError as exc:
            sub.error(str(exc))
    try:  # (kubernetes: the pods mount a Secret of their own; the manager holds no worker key)
        kubernetes = isinstance(settings, KubernetesManagerSettings)
        unit_keys = None if kubernetes else keys_for_units(directory, getattr(settings, "log_directory", "") or None)
    except KeysError as exc:
        sub.error(str(exc))
    paths = start_logging(sub, settings)
    logging.info("worker manager (%s) for %s, pid %d; logging to %s", args.type, settings.address, os.getpid(), paths)
    from scaler.manager.shell import ManagerShell
    from scaler.manager.units import LocalUnits, Units

    units: Units
    if isinstance(settings, LocalManagerSettings):
        units = LocalUnits(settings, settings.address, unit_keys)
    elif isinstance(settings, KubernetesManagerSettings):
        from scaler.manager.kubernetes import KubernetesError, KubernetesUnits

        try:
            units = KubernetesUnits(settings, settings.address, directory)
        except KubernetesError as exc:
            sub.error(str(exc))
    else:
        from scaler.manager.slurm import SlurmUnits

        assert isinstance(settings, SlurmManagerSettings)
        units = SlurmUnits(settings, settings.address, unit_keys)
    try:
        code = ManagerShell(settings, units, keys).run()
    finally:
        if unit_keys is not None:
            shutil.rmtree(unit_keys, ignore_errors=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
