"""Names of a package loaded on first use (PEP 562): `import scaler` costs next to nothing, and a program that only
needs a Client never loads the scheduler's or the workers' code. Used by scaler/__init__.py and
scaler/client/__init__.py.

Imports nothing of Scaler's but scaler.about. The scheduler imports it (through scaler/__init__.py): Python 3.9.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable, Mapping
from typing import Any

from scaler.about import require_python_310


def lazy_names(
    namespace: dict[str, Any], where: Mapping[str, str], public: list[str], needs: str
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level __getattr__ and __dir__ of the package whose globals() are `namespace`: a name of `where` is
    imported from the module `where` names on first use (after checking that this Python can run `needs`, see
    require_python_310), then kept as a plain attribute. dir() lists `public` and the submodules loaded so far."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        require_python_310(needs)
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # once loaded, a plain module attribute
        return value

    def __dir__() -> list[str]:
        loaded = {name for name, value in namespace.items() if isinstance(value, types.ModuleType)}
        return sorted(set(public) | loaded)

    return __getattr__, __dir__
