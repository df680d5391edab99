"""The Python peers' capabilities (docs/capabilities.md): a Python worker always offers payload=python, a Python
client's task always requires it; and what users give (scaler_cluster --capability, client.options(capabilities=...))
checked and turned into what travels. The rules of a capability text are scaler.protocol.capabilities'.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from numbers import Integral

from scaler.protocol.capabilities import MAX_OFFERED, MAX_REQUIRED, capability_problem

PYTHON_PAYLOAD = "payload=python"  # the payload convention of Python workers, required by every Python task
PAYLOAD_PREFIX = "payload="
PYTHON_REQUIREMENT: tuple[str, ...] = (PYTHON_PAYLOAD,)  # what a Python task requires when nothing more is asked
_ANY_AMOUNT = -1  # opengris-scaler 2.x's capability value for "any amount": the bare name
_INTERNED_AT_MOST = 1024
_interned: dict[tuple[str, ...], tuple[str, ...]] = {PYTHON_REQUIREMENT: PYTHON_REQUIREMENT}
_FORM = "a capability is a name like 'gpu' or a name=value like 'lang=ts'"


def check_capability(text: object, what: str) -> str:
    """`text` if it is a valid capability; else ValueError naming `what` (where it came from)."""
    problem = capability_problem(text)
    if problem is not None:
        raise ValueError(f"{what}: {problem} ({_FORM})")
    assert isinstance(text, str)
    return text


def worker_capabilities(given: Iterable[str], what: str = "capabilities") -> tuple[str, ...]:
    """What a Python worker offers: payload=python, then the capabilities given (checked, duplicates dropped, in the
    order given). ValueError for an invalid one, for another payload convention (a Python worker runs Python payloads
    only), or for more than a worker may offer."""
    if isinstance(given, (str, bytes)):
        raise ValueError(f"{what} must be a list of capabilities, not a single {type(given).__name__} ({given!r})")
    offered = [PYTHON_PAYLOAD]
    for text in given:
        check_capability(text, what)
        if text.startswith(PAYLOAD_PREFIX) and text != PYTHON_PAYLOAD:
            raise ValueError(
                f"{what}: {text!r}: a Python worker runs Python payloads only; it always offers {PYTHON_PAYLOAD}"
            )
        if text not in offered:
            offered.append(text)
    if len(offered) > MAX_OFFERED:
        raise ValueError(
            f"{what}: a worker offers at most {MAX_OFFERED} capabilities ({PYTHON_PAYLOAD} included), not "
            f"{len(offered)}"
        )
    return tuple(offered)


def requirement(capabilities: object, what: str = "capabilities") -> tuple[str, ...]:
    """What a Python task requires, as it travels (sorted, no duplicates, payload=python included), for
    client.options(capabilities=X): X a mapping {name: value} or an iterable of texts ("gpu", "lang=ts"); None or
    empty: nothing beyond payload=python. Mapping values: True, None or -1 (opengris-scaler 2.x, "any amount") mean
    the bare name; a str or an int means name=value. Equal requirements are one shared tuple (up to a bound)."""
    if capabilities is None:
        return PYTHON_REQUIREMENT
    if isinstance(capabilities, Mapping):
        texts = [_from_item(name, value, what) for name, value in capabilities.items()]
    elif isinstance(capabilities, (str, bytes)) or not isinstance(capabilities, Iterable):
        raise ValueError(
            f"{what} must be a mapping like {{'gpu': True, 'lang': 'ts'}} or a list like ['gpu', 'lang=ts'], not "
            f"{type(capabilities).__name__} ({capabilities!r})"
        )
    else:
        texts = [check_capability(text, what) for text in capabilities]
    for text in texts:
        if text.startswith(PAYLOAD_PREFIX) and text != PYTHON_PAYLOAD:
            raise ValueError(
                f"{what}: {text!r}: this client's tasks are Python payloads: they always require {PYTHON_PAYLOAD}, "
                "and no Python worker offers another payload convention"
            )
    required = tuple(sorted({PYTHON_PAYLOAD, *texts}))
    if len(required) > MAX_REQUIRED:
        raise ValueError(
            f"{what}: a task requires at most {MAX_REQUIRED} capabilities ({PYTHON_PAYLOAD} included), not "
            f"{len(required)}"
        )
    if len(_interned) < _INTERNED_AT_MOST:  # one shared tuple per set: a batch's tasks compare by identity first
        return _interned.setdefault(required, required)
    return _interned.get(required, required)


def _from_item(name: object, value: object, what: str) -> str:
    if not isinstance(name, str):
        raise ValueError(f"{what}: a capability's name is a str, not {type(name).__name__} ({name!r})")
    if "=" in name:
        raise ValueError(f"{what}: the name {name!r} contains '='; give {{name: value}}, like {{'lang': 'ts'}}")
    if isinstance(value, bool):
        if value:
            return check_capability(name, what)
    elif value is None or (isinstance(value, Integral) and int(value) == _ANY_AMOUNT):
        return check_capability(name, what)
    elif isinstance(value, Integral):  # numpy's integers too
        return check_capability(f"{name}={int(value)}", what)
    elif isinstance(value, str):
        return check_capability(f"{name}={value}", what)
    raise ValueError(
        f"{what}: {name!r}: {value!r} is not a capability value; pass True (or None, or -1) for the bare name "
        f"{name!r}, or a str or an int for {name}=value (to not require {name!r}, leave it out)"
    )


def describe(required: Iterable[str]) -> str:
    """The capabilities a user asked for (payload=python, always there, left out), as a list's text."""
    return "[" + ", ".join(repr(text) for text in required if text != PYTHON_PAYLOAD) + "]"
