"""`--config FILE.toml` for every command: a TOML file whose keys are the command's long option names with `_`
(`monitor_address`, `max_workers`), read as the command's defaults; what the command line gives wins.

A file may hold one command's settings at its top level, or the tables of a whole stack (what `scaler FILE.toml`
starts): `[scheduler]`, `[cluster]`, `[[worker_manager]]` (each with its `type`), `[ui]`, `[top]`. A command reads its
own table; `--config-section` names another (`worker_manager.2`: the second `[[worker_manager]]`). The other tables
take the scheduler's `address` (workers, managers), `monitor_address` (dashboard, top) and `keys` from `[scheduler]`
unless they give their own.

Every key is checked before anything starts: one the command does not have is a usage error naming the file, the
table and the key, with the closest names; a value the setting does not take is one too, saying what it takes.

Runs on Python 3.9 (the scheduler on PyPy): tomllib where there is one, else tomli.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from scaler.settings import opengris

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover (Python 3.9 and 3.10: PyPy's scheduler)
    import tomli as tomllib

CONFIG_FLAG = "--config"
SECTION_FLAG = "--config-section"
STACK_TABLES = ("scheduler", "cluster", "worker_manager", "ui", "top")
_NOT_SETTINGS = ("help", "version", "config", "config_section")


class ConfigError(ValueError):
    """A configuration file that cannot be used: the message names the file and what is wrong."""


def add_config_option(parser: argparse.ArgumentParser, section: str) -> None:
    """--config FILE.toml and --config-section NAME; `section` is the command's own table in a stack's file."""
    parser.add_argument(
        CONFIG_FLAG,
        metavar="FILE.toml",
        default=None,
        help=f"read settings from a TOML file: its keys are this command's long option names with _ (at the top "
        f"level, or in a [{section}] table); options given here win (default: none; docs/deploying/config.md)",
    )
    parser.add_argument(
        SECTION_FLAG,
        metavar="NAME",
        default=section,
        help="with --config: the table to read (worker_manager.2 is the second [[worker_manager]])",
    )


def read_document(path: str) -> dict[str, Any]:
    """The TOML file at `path`, parsed; ConfigError naming the file (missing, unreadable, not TOML: line and column)."""
    try:
        with open(path, "rb") as file:
            document: dict[str, Any] = tomllib.load(file)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    try:
        return opengris.translate_document(document, path)  # (opengris-scaler 2.x's tables and keys)
    except opengris.Refused as exc:
        raise ConfigError(str(exc)) from None


def table_of(document: Mapping[str, Any], section: str, path: str) -> dict[str, Any]:
    """The settings `section` names in a parsed file: its table when the file has stack tables (an empty one when it
    lacks this one), else the whole file (one command's settings at the top level)."""
    if not any(name in document for name in STACK_TABLES):
        unknown = [key for key, value in document.items() if isinstance(value, dict)]
        if unknown:  # a table of another name: a typo of a stack table, most likely
            close = difflib.get_close_matches(unknown[0], STACK_TABLES, n=1)
            hint = f" (did you mean [{close[0]}]?)" if close else ""
            raise ConfigError(f"{path}: [{unknown[0]}] is not a table Scaler knows{hint}: {', '.join(STACK_TABLES)}")
        try:
            return opengris.translate_table(dict(document), section.partition(".")[0], path)
        except opengris.Refused as exc:
            raise ConfigError(str(exc)) from None
    name, _, number = section.partition(".")
    if name not in STACK_TABLES:
        raise ConfigError(f"{SECTION_FLAG} {section}: the tables are {', '.join(STACK_TABLES)}")
    others = [key for key in document if key not in STACK_TABLES]
    if others:
        raise ConfigError(
            f"{path}: {others[0]!r} is outside the tables: a file with [{'], ['.join(STACK_TABLES)}] tables keeps "
            f"every setting in one"
        )
    value = document.get(name, {})
    if isinstance(value, list):  # an array of tables ([[worker_manager]])
        if not number and len(value) > 1:
            raise ConfigError(f"{path} has {len(value)} [[{name}]] tables: say which, {SECTION_FLAG} {name}.N")
        index = int(number) - 1 if number.isdigit() else 0
        if not 0 <= index < max(1, len(value)):
            raise ConfigError(f"{path} has {len(value)} [[{name}]] tables, not {number}")
        value = value[index] if value else {}
    elif number not in ("", "1"):
        raise ConfigError(f"{path} has one [{name}] table, not {number}")
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: {name} must be a table ([{name}]), not {value!r}")
    return {**inherited(document, name), **value}


def inherited(document: Mapping[str, Any], name: str) -> dict[str, Any]:
    """What table `name` of a stack's file takes from its [scheduler] table unless it says otherwise: the workers and
    managers its address and keys; the dashboard and top its monitor address (the one the scheduler is given, else
    the one it makes: scaler_ui and scaler_top find it) and keys."""
    scheduler = document.get("scheduler")
    if not isinstance(scheduler, dict) or name == "scheduler":
        return {}
    address, keys = scheduler.get("address"), scheduler.get("keys")
    taken: dict[str, Any] = {}
    if name in ("cluster", "worker_manager") and isinstance(address, str):
        taken["address"] = address
    elif name in ("ui", "top"):
        monitor = scheduler.get("monitor_address")
        if monitor is None and isinstance(address, str):
            from scaler.io.addresses import documented_monitor_address

            try:
                monitor = documented_monitor_address(address)
            except ValueError:
                monitor = None  # (the scheduler's own check says what is wrong with it)
        if isinstance(monitor, str):
            taken["monitor_address"] = monitor
    if isinstance(keys, str):
        taken["keys"] = keys
    return taken


def config_table(argv: Sequence[str], section: str) -> tuple[str, str, dict[str, Any]] | None:
    """The --config file `argv` names, the table it reads (--config-section, else `section`) and that table's
    settings; None without --config. ConfigError naming the file."""
    path = _flag_value(argv, CONFIG_FLAG)
    if path is None:
        return None
    name = _flag_value(argv, SECTION_FLAG) or section
    return path, name, table_of(read_document(path), name, path)


def apply_config(
    parser: argparse.ArgumentParser, argv: Sequence[str], section: str, fixed: Mapping[str, str] | None = None
) -> str | None:
    """If `argv` names a --config file, make its settings for this command the parser's defaults (the command line
    still wins), after checking every key and value; a usage error (exit code 2) naming the file otherwise. `fixed`:
    keys the table may hold that are not options, and the value each must have (a worker manager's `type`). The
    file's path, or None."""
    try:
        found = config_table(argv, section)
        if found is None:
            return None
        path, name, table = found
        for key, value in (fixed or {}).items():
            given = table.pop(key, value)
            if given != value:
                raise ConfigError(f"{path}: {name} has {key} = {given!r}, but this command is {value!r}")
        defaults = checked(parser, table, f"{path}: {name}")
    except ConfigError as exc:
        parser.error(str(exc))
    for action in parser._actions:
        if not action.option_strings and action.dest in defaults:  # a positional the file gives: not required now
            action.required = False
            action.nargs = "?"
    parser.set_defaults(**defaults)
    return path


def checked(parser: argparse.ArgumentParser, table: Mapping[str, Any], where: str) -> dict[str, Any]:
    """`table` as the parser's defaults: each key one of its arguments, each value one it takes (a word as from the
    command line; a number, a flag or a list as such). ConfigError naming `where` and the key."""
    actions = {key_of(a): a for a in parser._actions if a.dest not in _NOT_SETTINGS}
    values: dict[str, Any] = {}
    for key, value in table.items():
        action = actions.get(key)
        if action is None:
            close = difflib.get_close_matches(key.replace("-", "_"), list(actions), n=3)
            hint = f"did you mean {' or '.join(close)}? " if close else ""
            raise ConfigError(f"{where} has no setting {key!r}: {hint}the settings are {', '.join(actions)}")
        values[action.dest] = _value(action, value, f"{where} {key}")
    return values


def key_of(action: argparse.Action) -> str:
    """An argument's key in a file: its long option name with _ (--num-of-workers: num_of_workers), or a
    positional's name (address)."""
    long = [option for option in action.option_strings if option.startswith("--")]
    return long[0][2:].replace("-", "_") if long else action.dest


def _value(action: argparse.Action, value: Any, label: str) -> Any:
    many = isinstance(action, argparse._AppendAction) or action.nargs in ("+", "*")
    if action.nargs == 0 or isinstance(action, argparse.BooleanOptionalAction):  # a flag: True or False
        if not isinstance(value, bool):
            raise ConfigError(f"{label} must be true or false, not {value!r}")
        return value
    if many:
        items = value if isinstance(value, list) else None
        if items is None:
            raise ConfigError(f'{label} must be a list, e.g. ["a", "b"], not {value!r}')
        return [_one(action, item, label) for item in items]
    return _one(action, value, label)


def _one(action: argparse.Action, value: Any, label: str) -> Any:
    if isinstance(value, (dict, list)):
        raise ConfigError(f"{label} must be one value, not {value!r}")
    if action.choices is not None and value not in action.choices:
        raise ConfigError(f"{label} must be one of {', '.join(map(str, action.choices))}, not {value!r}")
    read = action.type
    if read is None:
        if not isinstance(value, str):
            raise ConfigError(f"{label} must be text (in quotes), not {value!r}")
        return value
    rule = getattr(read, "rule", None)
    try:
        if rule is not None and not isinstance(value, str):  # a setting's rule checks a number as it is
            return rule.check(value, label)
        if read in (int, float) and isinstance(value, (int, float)) and not isinstance(value, bool):
            if read is int and not isinstance(value, int):
                raise ValueError
            return read(value)
        if not isinstance(value, str):
            raise ValueError
        return read(value)  # type: ignore[operator]
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"{label} {exc}") from None
    except (TypeError, ValueError) as exc:
        text = str(exc)
        if text.startswith(label):
            raise ConfigError(text) from None
        kind = getattr(read, "__name__", "a value")
        raise ConfigError(f"{label} must be {kind}, not {value!r}") from None


def _flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of `flag` in `argv` (`--flag V` or `--flag=V`; the last one given), or None."""
    found = None
    for index, word in enumerate(argv):
        if word == "--":
            break
        if word == flag and index + 1 < len(argv):
            found = argv[index + 1]
        elif word.startswith(flag + "="):
            found = word[len(flag) + 1 :]
    return found
