"""The help formatter of every CLI: each option's default is shown once, and never as "None" or "[]"."""

from __future__ import annotations

import argparse

from scaler.about import __version__


def add_version(p: argparse.ArgumentParser) -> None:
    """--version: print "PROG VERSION" and exit."""
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    def _get_help_string(self, action: argparse.Action) -> str:
        default = action.default
        if default is None or default is argparse.SUPPRESS or isinstance(default, bool) or default == []:
            return action.help or ""
        return super()._get_help_string(action) or ""
