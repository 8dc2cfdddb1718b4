"""The attention zoo: every variant behind one interface, ``forward(x [B, N, D], mask [B, N] | None)``.

Importing this package registers every variant: each public module of the package (a name without a leading
underscore, other than the shared ``base`` and ``registry``) is imported, in name order, and registers its names
on import. Adding a variant = adding one module here.
"""

import importlib
import pkgutil

from ._decode import state_bytes
from .registry import *  # noqa: F403  (the public API is the registry's)
from .registry import __all__ as _registry_api

__all__ = [*_registry_api, "state_bytes"]

_SHARED = {"base", "registry"}
for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):  # noqa: F405  (the package path)
    if not _module.startswith("_") and _module not in _SHARED:
        importlib.import_module(f"{__name__}.{_module}")
