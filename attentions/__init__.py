"""The attention zoo: every variant behind one interface, ``forward(x [B, N, D], mask [B, N] | None)``.

Importing this package registers every variant. Adding a variant = one module here + one import line below.
"""

from . import s3attention, vanilla  # noqa: F401  (imported to register)
from .registry import (
    AttentionConfig,
    AttentionSpec,
    Capabilities,
    DuplicateNameError,
    RegistryError,
    UnknownAttentionError,
    UnknownConfigKeyError,
    build,
    config_fields,
    list_attentions,
    make_config,
    register,
    register_preset,
    spec,
)

__all__ = [
    "AttentionConfig",
    "AttentionSpec",
    "Capabilities",
    "DuplicateNameError",
    "RegistryError",
    "UnknownAttentionError",
    "UnknownConfigKeyError",
    "build",
    "config_fields",
    "list_attentions",
    "make_config",
    "register",
    "register_preset",
    "spec",
]
