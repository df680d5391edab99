"""`python -m scaler --version` prints the version; `python -m scaler` lists the commands Scaler installs."""

from __future__ import annotations

import argparse

from scaler.about import __version__
from scaler.entry_points.help import add_version

COMMANDS = {
    "scaler_scheduler": "run a scheduler",
    "scaler_cluster": "run workers connected to a scheduler (also scaler_worker)",
    "scaler_top": "show a scheduler's status like top",
    "scaler_ui": "serve a web page showing a scheduler's status",
    "scaler_keygen": "create the keys of a cluster",
}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m scaler",
        description=f"Scaler {__version__}, a distributed computation engine. Its commands: "
        + "; ".join(f"{name}: {what}" for name, what in COMMANDS.items())
        + ". Each takes --help and --version.",
    )
    add_version(p)
    p.parse_args(argv)
    p.print_help()


if __name__ == "__main__":
    main()
