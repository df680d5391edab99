"""The help formatter of every CLI: each option's default is shown once, and never as "None"."""

from __future__ import annotations

import argparse
import re

from scaler.about import __version__

_SIZE = re.compile(r"\s*(\d+)\s*([kmgt]?)(i?b)?\s*", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
KEYS_HELP = (
    "the keys directory scaler_keygen made: connections are encrypted and only authorized keys get in "
    "(default: $SCALER_KEYS if set, else no keys; see docs/security.md)"
)


def byte_size(text: str) -> int:
    """A size in bytes from '8GiB', '512M', '1048576' (K, M, G, T are powers of 1024), for argparse's type=."""
    match = _SIZE.fullmatch(text)
    if match is None or int(match.group(1)) < 1:
        raise argparse.ArgumentTypeError(f"a size in bytes such as 1048576, 512M or 8G is expected, not {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def add_version(p: argparse.ArgumentParser) -> None:
    """--version: print "PROG VERSION" and exit."""
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is argparse.SUPPRESS or isinstance(action.default, bool):
            return action.help or ""
        return super()._get_help_string(action) or ""
