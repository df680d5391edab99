"""scaler.compat.ray: the import path the documents show for Ray's task API on Scaler, which lives in
scaler.integrations.ray (the same functions, classes and session).

    import scaler.compat.ray as ray
"""

from scaler.integrations.ray import *  # noqa: F403 (the names of its __all__)
from scaler.integrations.ray import __all__ as __all__
from scaler.integrations.ray import __getattr__ as __getattr__
