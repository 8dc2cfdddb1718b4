"""The attention registry: one name per variant or preset, one interface, capabilities as data.

A variant module defines a frozen dataclass config and an ``nn.Module`` and registers the pair::

    @dataclass(frozen=True)
    class MyConfig(AttentionConfig):
        rank: int = 8

    @register("mine", MyConfig, Capabilities(complexity="n"))
    class MyAttention(nn.Module):
        def __init__(self, cfg: MyConfig) -> None: ...
        def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor: ...

Presets are further names with fixed hyperparameters (``register_preset("mine_r16", "mine", rank=16)``),
so patterns such as ``mine_*`` in a suite mean something (timm's naming habit).
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

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


class RegistryError(ValueError):
    """Base class of registry errors (a ValueError, so callers can treat them as bad input)."""


class UnknownAttentionError(RegistryError):
    """An attention name that is not registered."""


class UnknownConfigKeyError(RegistryError):
    """An override naming a field the variant's config does not have."""


class DuplicateNameError(RegistryError):
    """A name registered twice."""


@dataclass(frozen=True)
class AttentionConfig:
    """Fields every variant shares.

    Attributes:
        dim: model width D; input and output are [B, N, D].
        heads: number of attention heads; ``dim`` must be divisible by it.
        max_seq_len: longest sequence the layer accepts; variants with fixed-size parameters along the
            sequence (Linformer's E/F, S3Attention's Fourier weights and BatchNorm) size them by it.
        dropout: dropout probability on the attention weights (training only).
    """

    dim: int = 64
    heads: int = 2
    max_seq_len: int = 1024
    dropout: float = 0.1

    def __post_init__(self) -> None:
        for name in ("dim", "heads", "max_seq_len"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.dim % self.heads:
            raise ValueError(f"dim={self.dim} must be divisible by heads={self.heads}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads


@dataclass(frozen=True)
class Capabilities:
    """What a variant can do; the runner and the tests read these to skip cleanly.

    Attributes:
        supports_mask: honours a key-padding mask (real positions never depend on padded ones).
        needs_fixed_length: parameters are sized by ``max_seq_len``; the harness sets
            ``max_seq_len = seq_len`` and shorter inputs are padded inside the layer.
        seq_len_multiple_of: the layer pads internally to this multiple (informational).
        complexity: asymptotic time in the sequence length, e.g. "n^2", "n", "n log n".
        exact: computes softmax attention exactly (only vanilla does).
        devices: device types the variant can run on.
    """

    supports_mask: bool = True
    needs_fixed_length: bool = False
    seq_len_multiple_of: int = 1
    complexity: str = "n^2"
    exact: bool = False
    devices: tuple[str, ...] = ("cpu", "cuda")


AvailabilityCheck = Callable[[torch.device], "str | None"]


def _device_check(caps: Capabilities) -> AvailabilityCheck:
    def check(device: torch.device) -> str | None:
        if device.type not in caps.devices:
            return f"runs on {', '.join(caps.devices)} only, not {device.type}"
        if device.type == "cuda" and not torch.cuda.is_available():
            return "CUDA is not available on this machine"
        return None

    return check


@dataclass(frozen=True)
class AttentionSpec:
    """Everything the registry knows about one registered name."""

    name: str
    family: str
    module_cls: type[nn.Module]
    config: AttentionConfig
    caps: Capabilities
    description: str
    extra_check: AvailabilityCheck | None = field(default=None, repr=False)

    def unavailable_reason(self, device: torch.device | str = "cpu") -> str | None:
        """None when the variant can run on ``device``, else a human-readable reason."""
        device = torch.device(device)
        reason = _device_check(self.caps)(device)
        if reason is None and self.extra_check is not None:
            reason = self.extra_check(device)
        return reason

    def available(self, device: torch.device | str = "cpu") -> bool:
        return self.unavailable_reason(device) is None

    @property
    def backend(self) -> str:
        return str(getattr(self.config, "backend", ""))


_REGISTRY: dict[str, AttentionSpec] = {}


def _add(entry: AttentionSpec) -> None:
    if entry.name in _REGISTRY:
        raise DuplicateNameError(
            f"attention {entry.name!r} is already registered "
            f"(by {_REGISTRY[entry.name].module_cls.__module__}); pick another name"
        )
    _REGISTRY[entry.name] = entry


def register(
    name: str,
    config_cls: type[AttentionConfig],
    caps: Capabilities,
    *,
    check: AvailabilityCheck | None = None,
) -> Callable[[type[nn.Module]], type[nn.Module]]:
    """Class decorator: register ``cls`` under ``name`` with ``config_cls()`` as its defaults.

    Args:
        name: registry name (the variant family's base name).
        config_cls: frozen dataclass deriving from AttentionConfig; its defaults are the real defaults.
        caps: capabilities of the variant.
        check: optional extra availability check (e.g. an optional package), returning a reason or None.
    """

    def deco(cls: type[nn.Module]) -> type[nn.Module]:
        doc = (cls.__doc__ or "").strip().splitlines()
        _add(AttentionSpec(name, name, cls, config_cls(), caps, doc[0] if doc else "", check))
        return cls

    return deco


def register_preset(
    name: str,
    base: str,
    *,
    description: str = "",
    caps: dict[str, Any] | None = None,
    check: AvailabilityCheck | None = None,
    **overrides: Any,
) -> None:
    """Register ``name`` as ``base`` with fixed config overrides (and optionally changed capabilities)."""
    parent = spec(base)
    cfg = _replace_config(parent.config, overrides, name)
    new_caps = dataclasses.replace(parent.caps, **(caps or {}))
    _add(
        AttentionSpec(
            name,
            parent.family,
            parent.module_cls,
            cfg,
            new_caps,
            description or parent.description,
            check or parent.extra_check,
        )
    )


def list_attentions(pattern: str = "*") -> list[str]:
    """Registered names matching an fnmatch ``pattern`` (e.g. "s3*", "vanilla*"), sorted."""
    return sorted(n for n in _REGISTRY if fnmatch.fnmatchcase(n, pattern))


def spec(name: str) -> AttentionSpec:
    """The spec of a registered name; an unknown name lists close matches and every registered name."""
    try:
        return _REGISTRY[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(_REGISTRY), n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise UnknownAttentionError(
            f"unknown attention {name!r}.{hint} Registered: {', '.join(sorted(_REGISTRY))}"
        ) from None


def config_fields(name: str) -> list[str]:
    """Names of the config fields that ``build(name, ...)`` accepts."""
    return [f.name for f in dataclasses.fields(spec(name).config)]


def _replace_config(cfg: AttentionConfig, overrides: dict[str, Any], name: str) -> AttentionConfig:
    valid = {f.name for f in dataclasses.fields(cfg)}
    unknown = sorted(set(overrides) - valid)
    if unknown:
        raise UnknownConfigKeyError(
            f"{name}: unknown config field(s) {', '.join(unknown)}; valid fields: {', '.join(sorted(valid))}"
        )
    return dataclasses.replace(cfg, **overrides)


def make_config(name: str, **overrides: Any) -> AttentionConfig:
    """The resolved config of ``name`` with ``overrides`` applied (validated by the config itself)."""
    return _replace_config(spec(name).config, overrides, name)


def build(name: str, **overrides: Any) -> nn.Module:
    """Instantiate a registered attention with config overrides; unknown keys are rejected by name."""
    entry = spec(name)
    return entry.module_cls(make_config(name, **overrides))
