"""The help formatter of every CLI: each option's default is shown once, and never as "None"."""

from __future__ import annotations

import argparse


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is argparse.SUPPRESS or isinstance(action.default, bool):
            return action.help or ""
        return super()._get_help_string(action) or ""
