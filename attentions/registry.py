"""The attention registry: one name per variant or preset, one interface, capabilities as data.

A variant module defines a frozen dataclass config and an ``nn.Module`` and registers the pair::

    @dataclass(frozen=True)
    class MyConfig(AttentionConfig):
        rank: int = 8

    @register("mine", MyConfig, Capabilities(complexity="n"), paper="https://arxiv.org/abs/NNNN.NNNNN")
    class MyAttention(nn.Module):
        def __init__(self, cfg: MyConfig) -> None: ...
        def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor: ...

Presets are further names with fixed hyperparameters (``register_preset("mine_r16", "mine", rank=16)``),
so patterns such as ``mine_*`` in a suite mean something (timm's naming habit); a preset shares its base's
paper and, unless it changes them, its capabilities. ``list_attentions`` sorts names naturally (``mine_r8``
before ``mine_r16``), and ``spec(name).cannot_run(seq_len, padded=...)`` tells a runner, before it builds
anything, why a variant cannot take given inputs.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

__all__ = [
    "BENCHMARK_SET",
    "AttentionConfig",
    "AttentionSpec",
    "Capabilities",
    "DuplicateNameError",
    "GROUPS",
    "NoCausalFormError",
    "RegistryError",
    "UnknownAttentionError",
    "UnknownConfigKeyError",
    "UnsupportedError",
    "build",
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


class NoCausalFormError(RegistryError):
    """``causal=True`` for a variant whose capabilities say it has no causal form."""


class UnsupportedError(NotImplementedError):
    """A call the variant cannot compute in this environment or configuration (e.g. compiled FlexAttention's missing
    backward on the CPU): not a bug and not bad input, so a benchmark cell records it as ``unsupported`` with this
    message (:func:`harness.core.cell.classify_exception`)."""


@dataclass(frozen=True)
class AttentionConfig:
    """Fields every variant shares.

    Attributes:
        dim: model width D; input and output are [B, N, D].
        heads: number of attention heads; ``dim`` must be divisible by it.
        max_seq_len: longest sequence the layer accepts; variants with fixed-size parameters along the
            sequence (Linformer's E/F, S3Attention's Fourier weights and BatchNorm) size them by it.
        dropout: dropout probability on the attention weights (training only).
        causal: the causal form (a decoder's self-attention: position i depends on positions ≤ i only), for a
            variant whose capabilities say ``causal`` (its paper's or its authors' causal form); False is the
            bidirectional (encoder) form every variant has. :func:`make_config` refuses it, with the reason, for a
            variant without one.
    """

    dim: int = 64
    heads: int = 2
    max_seq_len: int = 1024
    dropout: float = 0.1
    causal: bool = False

    def __post_init__(self) -> None:
        self._require_positive_ints("dim", "heads", "max_seq_len")
        if self.dim % self.heads:
            raise ValueError(f"dim={self.dim} must be divisible by heads={self.heads}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if not isinstance(self.causal, bool):
            raise ValueError(f"causal must be true or false, got {self.causal!r}")

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    def _require_positive_ints(self, *names: str) -> None:
        """Raise ValueError naming the first of the fields ``names`` that is not a positive int.

        bool is rejected although it is an int subclass (``heads=True`` is a typo, not 1), and so are floats
        (``dim=64.0`` would reach ``nn.Linear`` and fail there, far from the config).
        """
        for name in names:
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class Capabilities:
    """What a variant can do; the runner and the tests read these (``AttentionSpec.cannot_run``) to skip cleanly.

    Attributes:
        supports_mask: honours a key-padding mask (real positions never depend on padded ones). A variant
            without it cannot run on padded inputs.
        needs_fixed_length: parameters are sized by ``max_seq_len`` (Linformer's E/F, S3Attention's Fourier
            weights and BatchNorm), so the layer cannot run on inputs longer than the ``max_seq_len`` it was
            built with; shorter inputs are handled inside the layer.
        seq_len_multiple_of: the layer computes on whole blocks of this many positions (landmark segments, LSH
            chunks). Inputs must have a length that is a multiple of it, unless ``pads_to_multiple``.
        pads_to_multiple: the layer pads inputs internally to a multiple of ``seq_len_multiple_of`` and masks
            the padding, so any length runs.
        complexity: asymptotic time in the sequence length, e.g. "n^2", "n", "n log n".
        exact: computes softmax attention exactly (only vanilla does).
        approximates_softmax: the layer stands in for softmax attention softmax(QKᵀ/√d)V over its own
            projections, and its module has ``softmax_reference(x, mask)``, that exact attention through the same
            projections (what the approximation suite measures the layer's error against). False for variants
            that compute another function by design (other kernels, Fourier mixing, S3Attention, the controls).
        mixes_tokens: an output position depends on other positions. False only for the ``none`` control, whose
            output is zero.
        devices: device types the variant can run on.
        trains_on: device types where it also has a backward pass (FlexAttention: forward only on the CPU); on the
            others it runs forward only, and a backward raises :class:`UnsupportedError`.
        causal: the variant has a causal form (config ``causal=True``), faithful to its paper or its authors' code.
        decode: the variant decodes: ``prefill(x, mask, capacity=C)`` runs the causal form over a prompt and returns
            the state (KV cache, window ring buffer, recurrent sums, or both), ``step(x_t, state)`` adds one token
            (:mod:`attentions.decoding`). Implies ``causal``.
        causal_note: why there is no causal form (``causal`` False: e.g. Linformer projects the sequence axis), or
            what the causal form follows where it is (the paper's pattern, a choice it leaves open).
        decode_note: why it cannot decode (``decode`` False), or what its state is.
    """

    supports_mask: bool = True
    needs_fixed_length: bool = False
    seq_len_multiple_of: int = 1
    pads_to_multiple: bool = False
    complexity: str = "n^2"
    exact: bool = False
    approximates_softmax: bool = False
    mixes_tokens: bool = True
    devices: tuple[str, ...] = ("cpu", "cuda")
    trains_on: tuple[str, ...] = ("cpu", "cuda")
    causal: bool = False
    decode: bool = False
    causal_note: str = ""
    decode_note: str = ""

    def __post_init__(self) -> None:
        if self.decode and not self.causal:
            raise ValueError("a variant that decodes has a causal form: set causal=True too")
        if not self.causal and not self.causal_note:
            raise ValueError("causal=False needs causal_note: say why the variant has no causal form")
        if self.causal and not self.decode and not self.decode_note:
            raise ValueError("a causal variant that does not decode needs decode_note: say why")


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
    """Everything the registry knows about one registered name.

    Attributes:
        name: the registered name.
        family: the name the variant class was registered under (a preset's base).
        module_cls: the ``nn.Module`` class; ``module_cls(config)`` builds the layer.
        config: the resolved default config (a preset's overrides applied).
        caps: capabilities.
        description: one line for listings (the class docstring's first line unless the preset gives one).
        paper: link to the paper the variant implements (a preset shares its base's).
        extra_check: availability check beyond the device list (e.g. an optional package).
        benchmark: in the default benchmark set (``@benchmark`` in a suite's attention axis): every registered variant
            unless it says otherwise; presets only when they ask to be (they repeat their base with other settings).
        display: the name a paper prints for it (tables and figures show it; CSV files keep the registered name).
        group: its family of methods (:data:`GROUPS`): figures draw one panel per group, tables list the groups in
            that order.
    """

    name: str
    family: str
    module_cls: type[nn.Module]
    config: AttentionConfig
    caps: Capabilities
    description: str
    paper: str
    extra_check: AvailabilityCheck | None = field(default=None, repr=False)
    benchmark: bool = True
    display: str = ""
    group: str = "other"

    def unavailable_reason(self, device: torch.device | str = "cpu") -> str | None:
        """None when the variant can run on ``device``, else a human-readable reason."""
        device = torch.device(device)
        reason = _device_check(self.caps)(device)
        if reason is None and self.extra_check is not None:
            reason = self.extra_check(device)
        return reason

    def available(self, device: torch.device | str = "cpu") -> bool:
        return self.unavailable_reason(device) is None

    def cannot_run(self, seq_len: int, *, padded: bool, max_seq_len: int | None = None, causal: bool = False,
                   decode: bool = False) -> str | None:
        """Why this variant cannot run on inputs of ``seq_len`` tokens (``padded``: they carry a padding mask), or None.

        Reads the capabilities only, so a runner can skip a cell with this reason before building anything.
        Rules: padded inputs need ``supports_mask``; a length off ``seq_len_multiple_of`` needs
        ``pads_to_multiple``; with ``needs_fixed_length``, ``seq_len`` must not exceed ``max_seq_len``; the causal
        form needs ``causal``, decoding ``decode`` (each refusal says the variant's reason).

        Args:
            seq_len: length N of the inputs [B, N, D].
            padded: the inputs come with a key-padding mask that has False entries.
            max_seq_len: the ``max_seq_len`` the layer will be built with; None = not known (not checked).
            causal: the cell runs the causal form.
            decode: the cell decodes (prefill, then one token at a time).

        Returns:
            A human-readable reason naming the variant, or None when the capabilities allow these inputs.
        """
        caps = self.caps
        if (causal or decode) and not caps.causal:
            return f"{self.name} has no causal form: {caps.causal_note}"
        if decode and not caps.decode:
            return f"{self.name} does not decode: {caps.decode_note}"
        if padded and not caps.supports_mask:
            return f"{self.name} does not honour a padding mask, and these inputs are padded"
        if seq_len % caps.seq_len_multiple_of and not caps.pads_to_multiple:
            return f"{self.name} needs seq_len to be a multiple of {caps.seq_len_multiple_of}, got {seq_len}"
        if caps.needs_fixed_length and max_seq_len is not None and seq_len > max_seq_len:
            return (
                f"{self.name} has parameters sized by max_seq_len={max_seq_len} and cannot take "
                f"seq_len={seq_len} > max_seq_len"
            )
        return None

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


#: The families of methods, in the order tables list them and figures draw their panels (the efficient-attention
#: surveys' taxonomy: Tay et al., "Efficient Transformers: A Survey", https://arxiv.org/abs/2009.06732): exact softmax;
#: low rank and landmarks; kernels (feature maps); sparse and local patterns; hashing, clustering and learned routing;
#: Fourier and other token mixing; anything else; the controls last.
GROUPS = ("exact", "low rank", "kernel", "sparse / local", "hashing / learned", "Fourier / mixing", "other", "controls")


def _check_presentation(name: str, display: str, group: str) -> None:
    if group not in GROUPS:
        raise RegistryError(f"attention {name!r}: group {group!r} is not one of {', '.join(GROUPS)}")
    if any(not ch.isprintable() for ch in display):
        raise RegistryError(f"attention {name!r}: display name {display!r} holds a control character")


def register(
    name: str,
    config_cls: type[AttentionConfig],
    caps: Capabilities,
    *,
    paper: str,
    display: str = "",
    group: str = "other",
    check: AvailabilityCheck | None = None,
    benchmark: bool = True,
) -> Callable[[type[nn.Module]], type[nn.Module]]:
    """Class decorator: register ``cls`` under ``name`` with ``config_cls()`` as its defaults.

    Args:
        name: registry name (the variant family's base name).
        config_cls: frozen dataclass deriving from AttentionConfig; its defaults are the real defaults.
        caps: capabilities of the variant.
        paper: http(s) link to the paper the variant implements (its presets share it).
        display: the name its paper prints (tables and figures; default: ``name``).
        group: its family of methods, one of :data:`GROUPS` (default ``other``).
        check: optional extra availability check (e.g. an optional package), returning a reason or None; a check
            of an optional package names it in its ``requires`` attribute (``attnbench list`` shows it).
        benchmark: in the default benchmark set ``@benchmark`` (False for the controls, which mix nothing).

    Raises:
        RegistryError: ``paper`` is not an http(s) link, the group is unknown or the display name holds a control
            character (checked at import, before anything runs).
    """
    if not paper.startswith(("https://", "http://")) or "XXXX" in paper:
        raise RegistryError(f"attention {name!r}: paper must be an http(s) link to the paper, got {paper!r}")
    _check_presentation(name, display, group)

    def deco(cls: type[nn.Module]) -> type[nn.Module]:
        doc = (cls.__doc__ or "").strip().splitlines()
        _add(AttentionSpec(name, name, cls, config_cls(), caps, doc[0] if doc else "", paper, check, benchmark,
                           display or name, group))
        return cls

    return deco


def register_preset(
    name: str,
    base: str,
    *,
    display: str = "",
    description: str = "",
    caps: dict[str, Any] | None = None,
    check: AvailabilityCheck | None = None,
    benchmark: bool = False,
    **overrides: Any,
) -> None:
    """Register ``name`` as ``base`` with fixed config overrides (and optionally changed capabilities); ``display``
    is the name tables print (default ``name``), its group is its base's; ``benchmark`` puts it in the default
    benchmark set ``@benchmark`` (a preset repeats its base, so by default it is not)."""
    parent = spec(base)
    _check_presentation(name, display, parent.group)
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
            parent.paper,
            check or parent.extra_check,
            benchmark,
            display or name,
            parent.group,
        )
    )


def _natural_key(name: str) -> tuple[tuple[str | int, ...], str]:
    """Sort key comparing digit runs as integers: ``performer_m64`` < ``performer_m256``.

    ``re.split`` with a capturing group alternates text and digit runs (text at even indices, possibly ""),
    so two keys compare str with str and int with int at every position. The name itself breaks ties
    between spellings of one number (``m08``, ``m8``).
    """
    parts = re.split(r"(\d+)", name)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts)), name


#: The name of the default benchmark set in a suite's attention axis: every variant registered with ``benchmark``.
BENCHMARK_SET = "@benchmark"


def list_attentions(pattern: str = "*") -> list[str]:
    """Registered names matching an fnmatch ``pattern`` (e.g. "s3*", "vanilla*"), in natural order;
    :data:`BENCHMARK_SET` names the default benchmark set (a variant registered later joins it)."""
    if pattern == BENCHMARK_SET:
        return sorted((n for n, e in _REGISTRY.items() if e.benchmark), key=_natural_key)
    return sorted((n for n in _REGISTRY if fnmatch.fnmatchcase(n, pattern)), key=_natural_key)


def spec(name: str) -> AttentionSpec:
    """The spec of a registered name; an unknown name lists close matches and every registered name."""
    try:
        return _REGISTRY[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(_REGISTRY), n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise UnknownAttentionError(
            f"unknown attention {name!r}.{hint} Registered: {', '.join(list_attentions())}"
        ) from None


def _replace_config(cfg: AttentionConfig, overrides: dict[str, Any], name: str) -> AttentionConfig:
    valid = {f.name for f in dataclasses.fields(cfg)}
    unknown = sorted(set(overrides) - valid)
    if unknown:
        raise UnknownConfigKeyError(
            f"{name}: unknown config field(s) {', '.join(unknown)}; valid fields: {', '.join(sorted(valid))}"
        )
    return dataclasses.replace(cfg, **overrides)


def make_config(name: str, **overrides: Any) -> AttentionConfig:
    """The resolved config of ``name`` with ``overrides`` applied (validated by the config itself); ``causal=True``
    for a variant without a causal form is refused with its reason."""
    entry = spec(name)
    cfg = _replace_config(entry.config, overrides, name)
    if cfg.causal and not entry.caps.causal:
        raise NoCausalFormError(f"{name} has no causal form: {entry.caps.causal_note}")
    return cfg


def build(name: str, **overrides: Any) -> nn.Module:
    """Instantiate a registered attention with config overrides; unknown keys are rejected by name."""
    entry = spec(name)
    return entry.module_cls(make_config(name, **overrides))
