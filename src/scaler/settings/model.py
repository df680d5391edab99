"""How a setting is declared: a field of a frozen dataclass made by `setting()`, carrying its default, its help text,
its command-line flags and the Rule its values keep. A settings class (a subclass of Settings) checks every value
when it is made, whoever made it: the command line (scaler.settings.cli), a Python keyword (SchedulerClusterCombo,
Cluster) or a mapping (Settings.from_mapping, what a configuration file gives).

An error names the setting as it was given (the flag, the keyword or the key) and says what it takes: a value of the
wrong type is a SettingTypeError (a TypeError), one out of range a SettingError (a ValueError); both are ValueErrors.

No I/O of its own (a Rule's `normalize` may look at the machine: a CPU, a log file). Runs on Python 3.9: the
scheduler (PyPy) imports it.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

SPEC = "scaler.setting"
Normalize = Callable[[Any, str], Any]  # (value, label) -> the value as kept; ValueError/TypeError naming `label`


class SettingError(ValueError):
    """A setting given a value it does not take. The message names the setting and what it takes; `name` is the
    setting as it was given (a keyword, a flag or a key)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


class SettingTypeError(SettingError, TypeError):
    """A setting given a value of the wrong type (a TypeError and a SettingError, so a ValueError too)."""


@dataclasses.dataclass(frozen=True)
class Rule:
    """What values a setting takes. `allowed` says it in words, after "must be" ("a number more than 0")."""

    allowed: str
    types: tuple[type, ...]  # the types a value may have; bool counts only when listed (True is not a number here)
    test: Callable[[Any], bool] | None = None  # the range, for a value of the right type
    normalize: Normalize | None = None  # after the test: the value as kept (a size in bytes from "8G", ...)
    parse: Callable[[str], Any] = str  # a command-line word to a value (ValueError: not one)
    optional: bool = False  # None is taken too: "not given", the help says what happens then
    many: str = ""  # a sequence: "append" (a flag per item) or "+" (items after the flag); kept as a tuple
    choices: tuple[str, ...] = ()  # the values there are, when they can be listed

    def check(self, value: Any, label: str = "") -> Any:
        """`value` as kept, or a SettingError naming `label` ("" on the command line, where argparse names it)."""
        if value is None:
            if self.optional:
                return None
            raise SettingTypeError(label, _must(label, self.allowed, value))
        if self.many and isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
            value = tuple(value)
        if not isinstance(value, self.types) or (isinstance(value, bool) and bool not in self.types):
            raise SettingTypeError(label, _must(label, self.allowed, value))
        if self.test is not None and not self.test(value):
            raise SettingError(label, _must(label, self.allowed, value))
        if self.normalize is None:
            return value
        try:
            return self.normalize(value, label)
        except TypeError as exc:
            raise SettingTypeError(label, str(exc)) from None
        except ValueError as exc:
            raise SettingError(label, str(exc)) from None


def _must(label: str, allowed: str, value: Any) -> str:
    return f"{label} must be {allowed}, not {value!r}" if label else f"must be {allowed}, not {value!r}"


def labelled(check: Callable[[Any], Any]) -> Normalize:
    """A Normalize from a check whose errors do not name the setting: they are prefixed with its label (unless they
    start with it)."""

    def normalize(value: Any, label: str) -> Any:
        try:
            return check(value)
        except (TypeError, ValueError) as exc:
            text = str(exc)
            kind = TypeError if isinstance(exc, TypeError) else ValueError
            raise kind(f"{label}: {text}" if label and not text.startswith(label) else text) from None

    return normalize


# ---------------------------------------------------------------------------------------------- rules
def number(above: float | None = None, at_least: float | None = None) -> Rule:
    """A number (an int is taken, kept as a float): more than `above`, or `at_least` or more. NaN never is."""
    if above is not None:
        bound = above
        return Rule(f"a number more than {above:g}", (int, float), lambda v: v > bound, _as_float, float)
    low = 0.0 if at_least is None else at_least
    return Rule(f"{low:g} or more", (int, float), lambda v: v >= low, _as_float, float)


def _as_float(value: Any, label: str) -> float:
    return float(value)


def whole(at_least: int, optional: bool = False) -> Rule:
    """A whole number, `at_least` or more (None too when optional)."""
    return Rule(f"a whole number {at_least} or more", (int,), lambda v: v >= at_least, None, int, optional)


def choice(values: Iterable[str], normalize: Normalize | None = None) -> Rule:
    """One of `values` (then `normalize`, if given, may refuse it: uvloop when it is not installed)."""
    listed = tuple(values)
    return Rule(f"one of {', '.join(listed)}", (str,), lambda v: v in listed, normalize, choices=listed)


def flag() -> Rule:
    """True or False (on the command line --NAME / --no-NAME)."""
    return Rule("True or False", (bool,))


def text(optional: bool = False) -> Rule:
    """Some text, not empty."""
    return Rule("some text", (str,), lambda v: bool(v.strip()), optional=optional)


def any_text() -> Rule:
    """Text, empty for "not given"."""
    return Rule("text", (str,))


# ---------------------------------------------------------------------------------------------- declaring
@dataclasses.dataclass(frozen=True)
class Spec:
    """What a setting declares beside its name, type and default."""

    help: str
    rule: Rule
    flags: tuple[str, ...] = ()  # on the command line; the first is its name there (default: --the-field-name)
    metavar: str | None = None
    positional: bool = False  # on the command line a positional argument (the address), required there


def setting(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    rule: Rule,
    flags: tuple[str, ...] = (),
    metavar: str | None = None,
    positional: bool = False,
    factory: Callable[[], Any] | None = None,
) -> Any:
    """A field of a settings dataclass: `default` (or `factory()` when it depends on the machine), its help text, its
    rule, its flags."""
    spec = Spec(help, rule, flags, metavar, positional)
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={SPEC: spec})
    return dataclasses.field(default=default, metadata={SPEC: spec})


def spec_of(field: dataclasses.Field[Any]) -> Spec:
    spec = field.metadata.get(SPEC)
    if not isinstance(spec, Spec):
        raise TypeError(f"{field.name} is not declared with scaler.settings.model.setting()")
    return spec


S = TypeVar("S", bound="Settings")


class Settings:
    """The base of settings dataclasses (frozen, every field made by setting()): values are checked when made."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, field.name)
            kept = spec_of(field).rule.check(value, field.name)
            if kept is not value:
                object.__setattr__(self, field.name, kept)

    @classmethod
    def fields(cls) -> dict[str, dataclasses.Field[Any]]:
        """The settings, by name, in the order declared (a base class's first)."""
        return {field.name: field for field in dataclasses.fields(cls)}  # type: ignore[arg-type]

    @classmethod
    def default(cls, name: str) -> Any:
        """The default of setting `name` (made now when it depends on the machine, as the number of CPUs)."""
        field = cls.fields()[name]
        if field.default_factory is not dataclasses.MISSING:
            return field.default_factory()
        return field.default

    @classmethod
    def of(cls: type[S], values: Mapping[str, Any], labels: Mapping[str, str] | None = None) -> S:
        """Settings with `values` (the others at their defaults). An error names a setting as `labels` says (a
        keyword or a flag: {"cpu": "scheduler_cpu"}), else by its name."""
        labels = labels or {}
        declared = cls.fields()
        kept = {}
        for name, value in values.items():
            kept[name] = spec_of(declared[name]).rule.check(value, labels.get(name, name))
        return cls(**kept)

    @classmethod
    def from_mapping(cls: type[S], mapping: Mapping[str, Any]) -> S:
        """Settings from a mapping of setting names to values (what a configuration file gives); the others at their
        defaults. SettingError for an unknown key (with the closest names), SettingTypeError for a value of the wrong
        type, SettingError for one out of range."""
        if not isinstance(mapping, Mapping):
            raise SettingTypeError("", f"settings must be a mapping of names to values, not {mapping!r}")
        declared = cls.fields()
        for key in mapping:
            if not isinstance(key, str) or key not in declared:
                raise SettingError(str(key), _unknown(cls, key, declared))
        return cls.of(mapping)

    def as_mapping(self) -> dict[str, Any]:
        """Every setting by name: from_mapping(settings.as_mapping()) == settings."""
        return {name: getattr(self, name) for name in self.fields()}


def _unknown(cls: type, key: object, declared: Mapping[str, Any]) -> str:
    close = difflib.get_close_matches(str(key).replace("-", "_"), list(declared), n=3)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return f"{cls.__name__} has no setting {key!r}: {hint}the settings are {', '.join(declared)}"
