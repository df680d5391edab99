"""Command-line flags made from a settings class: add_settings() declares one argparse argument per setting (its
flags, help, default, choices), each word checked as it is read by the setting's rule (a bad one is a usage error,
exit code 2, naming the flag and what it takes); settings_from() makes the settings object of the parsed arguments
(a usage error for what only the whole value shows, as a capability given twice over the limit).

Runs on Python 3.9: the scheduler (PyPy) imports it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from dataclasses import is_dataclass
from typing import Any, TypeVar

from scaler.settings.model import Rule, SettingError, Settings, Spec, spec_of

S = TypeVar("S", bound=Settings)


def long_flag(name: str, spec: Spec) -> str:
    """How the command line names a setting: its first flag (--the-field-name when none is declared)."""
    return spec.flags[0] if spec.flags else "--" + name.replace("_", "-")


def add_settings(parser: argparse.ArgumentParser, cls: type[Settings], only: Iterable[str] | None = None) -> None:
    """An argument per setting of `cls` (or of `only` those): the class's own settings first, then its bases'."""
    inherited = {
        n for base in cls.__bases__ if is_dataclass(base) and issubclass(base, Settings) for n in base.fields()
    }
    names = [n for n in cls.fields() if n not in inherited] + [n for n in cls.fields() if n in inherited]
    for name in names if only is None else [n for n in names if n in set(only)]:
        _add(parser, cls, name)


def _add(parser: argparse.ArgumentParser, cls: type[Settings], name: str) -> None:
    spec = spec_of(cls.fields()[name])
    rule = spec.rule
    if spec.positional:
        parser.add_argument(name, type=word_reader(rule), help=spec.help)
        return
    default = cls.default(name)
    # a sequence starts as a list: argparse appends to a copy of it; ReplaceThenAdd knows the default by identity
    options: dict[str, Any] = {"dest": name, "default": list(default) if rule.many else default, "help": spec.help}
    if spec.metavar is not None:
        options["metavar"] = spec.metavar
    if rule.choices:
        options["choices"] = rule.choices
    if rule.types == (bool,):
        options["action"] = argparse.BooleanOptionalAction
    elif rule.many == "append":
        options["action"] = "append"
    elif rule.many == "+":
        options.update(nargs="+", action=ReplaceThenAdd)
    else:
        options["type"] = word_reader(rule)
    parser.add_argument(*(spec.flags or (long_flag(name, spec),)), **options)


def word_reader(rule: Rule) -> Callable[[str], Any]:
    """argparse's type=: a word to a value the rule takes, or an ArgumentTypeError saying what it takes."""

    def read(word: str) -> Any:
        try:
            value = rule.parse(word)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {rule.allowed}, not {word!r}") from None
        try:
            return rule.check(value)
        except SettingError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    read.__name__ = rule.allowed  # what argparse would say of it
    setattr(read, "rule", rule)  # a config file's value that is not a word is checked by the rule itself  # noqa: B010
    return read


class ReplaceThenAdd(argparse.Action):
    """-lp A B, or -lp A -lp B: the values given replace the default, and add up when the option is repeated."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        current = getattr(namespace, self.dest)
        given: list[Any] = list(values)
        setattr(namespace, self.dest, given if current is self.default else [*current, *given])


def settings_from(parser: argparse.ArgumentParser, cls: type[S], args: argparse.Namespace) -> S:
    """The settings the parsed `args` give (every setting of `cls` that `parser` has); a usage error naming the flag
    for a value the settings refuse."""
    declared = cls.fields()
    values = {name: getattr(args, name) for name in declared if hasattr(args, name)}
    labels = {name: long_flag(name, spec_of(declared[name])) for name in values}
    labels.update({name: name for name in values if spec_of(declared[name]).positional})
    try:
        return cls.of(values, labels)
    except SettingError as exc:
        parser.error(str(exc))
