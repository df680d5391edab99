"""slotted: `@dataclass(slots=True)` on every Python the scheduler runs on, 3.9 included (PyPy 7.3 is Python 3.9).

`@slotted` is `@dataclass(slots=True)` and `@slotted(frozen=True)` is `@dataclass(frozen=True, slots=True)`. Where
dataclass() takes `slots=` (3.10+), it is exactly that call: the very same class, made as fast. On 3.9 the class
dataclass() made is built again with __slots__ for its fields, as 3.10 does it; a method of such a class must not
use super() without arguments (its __class__ cell would name the class before the rebuild). mypy sees a dataclass.

Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeVar, overload

_T = TypeVar("_T")

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_: Any) -> Callable[[_T], _T]:
        return lambda f: f


def _takes_slots() -> bool:
    """Whether this Python's dataclass() takes `slots=` (3.10 and later)."""
    try:
        dataclass(slots=True)
    except TypeError:
        return False
    return True


NATIVE_SLOTS = _takes_slots()


@overload
def slotted(cls: type[_T], /) -> type[_T]: ...


@overload
def slotted(*, frozen: bool = False) -> Callable[[type[_T]], type[_T]]: ...


@dataclass_transform(field_specifiers=(field,))
def slotted(cls: type[_T] | None = None, /, *, frozen: bool = False) -> Any:
    """A dataclass with __slots__ for its fields (frozen if asked): `@slotted` or `@slotted(frozen=True)`."""

    def wrap(cls: type[_T]) -> type[_T]:
        if NATIVE_SLOTS:
            return dataclass(cls, frozen=frozen, slots=True)
        return with_slots(dataclass(cls, frozen=frozen), frozen)

    return wrap if cls is None else wrap(cls)


def with_slots(cls: type[_T], frozen: bool) -> type[_T]:
    """The dataclass `cls` made again with __slots__ for its fields (what dataclass(slots=True) does on 3.10+).
    Defaults live in the generated __init__, so the class attributes that held them (which __slots__ forbids) go."""
    inherited = {name for base in cls.__mro__[1:-1] for name in base.__dict__.get("__slots__", ())}
    names = tuple(f.name for f in fields(cls) if f.name not in inherited)  # type: ignore[arg-type]
    body = {key: value for key, value in cls.__dict__.items() if key not in names}
    body.pop("__dict__", None)
    body.pop("__weakref__", None)
    body["__slots__"] = names
    body["__qualname__"] = cls.__qualname__
    if frozen:  # pickle and copy set the fields back with object.__setattr__: a frozen class refuses setattr
        body["__getstate__"] = _getstate
        body["__setstate__"] = _setstate
    metaclass: Any = type(cls)
    made: type[_T] = metaclass(cls.__name__, cls.__bases__, body)
    return made


def _getstate(self: Any) -> list[Any]:
    return [getattr(self, f.name) for f in fields(self)]


def _setstate(self: Any, state: list[Any]) -> None:
    for f, value in zip(fields(self), state):
        object.__setattr__(self, f.name, value)
