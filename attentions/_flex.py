"""The ``flex`` backend of the pattern variants: their own pattern as a FlexAttention ``BlockMask``.

Not a variant (the leading underscore keeps ``import attentions`` from importing it as one). ``local``,
``longformer``, ``bigbird`` and ``sparse_transformer`` compute their pattern from block gathers by default
(``backend="blocks"``, :mod:`attentions._blocks`). With ``backend="flex"`` the same pattern, written once more as a
predicate ``mask_mod(b, h, q_idx, kv_idx) -> bool`` over positions, runs through torch's FlexAttention
(``torch.nn.attention.flex_attention``, https://pytorch.org/blog/flexattention/): the kernel users would run for a
block-sparse pattern. The two backends compute the same function (a test compares them in float64, padded and
causal, for every pattern).

What FlexAttention is on each path (torch 2.13):
- Under ``torch.compile`` it is one fused kernel that skips the blocks the ``BlockMask`` leaves empty (Triton on
  CUDA; a C++ template on the CPU, which takes float32, float16 and bfloat16 only).
- On the CPU it is forward only, eager or compiled: torch raises "FlexAttention does not support backward on CPU"
  for inputs that require a gradient. These CPU cases raise :class:`UnsupportedError` before torch does, so that a
  cell records ``unsupported`` with the reason, not an error.
- Eagerly it is torch's reference implementation, which materialises the whole n×n score matrix (torch warns once
  that this is "an unfused implementation"): quadratic memory, the price of ``flex`` without compiling.

The ``BlockMask`` is built once per (padded length, device, causal, pattern version) and kept on the module
(:meth:`FlexPattern.build_plan` builds it ahead, so a speed cell times its construction as a one-time cost and not
inside the steady-state call; users report mask construction at more than 10× the attention itself). A key-padding
mask makes the block mask depend on the batch's data, so padded inputs build theirs at every call.

Choices (deviations from ``blocks``):
- No attention-weight dropout (FlexAttention has none): ``flex`` with ``dropout > 0`` in training raises
  :class:`UnsupportedError`; the speed suites time layers with dropout off.
- A query row with no valid key (a padded query) gets zeros; ``blocks`` gives finite weights. Only padded positions
  can have such rows, and their outputs are never read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from .registry import AttentionConfig, UnsupportedError, register_preset

try:  # FlexAttention arrived in torch 2.5; an older torch has no ``flex`` backend (its cells are unsupported)
    from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention
except ImportError:  # pragma: no cover  (torch 2.13 has it)
    BlockMask = Any  # type: ignore[misc,assignment]
    create_block_mask = flex_attention = None  # type: ignore[assignment]

__all__ = ["Backend", "FlexPattern", "MaskMod", "PatternConfig", "compiled_cpu_unsupported", "flex_unavailable",
           "register_flex_preset"]

Backend = Literal["blocks", "flex"]
#: (batch index, head index, query position, key position) -> may the query read the key; vectorised by torch.
MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]


def flex_unavailable(device: torch.device | None = None) -> str | None:
    """Why the ``flex`` backend cannot run in this torch, or None (a registry availability check)."""
    if flex_attention is None:
        return f"torch {torch.__version__} has no FlexAttention (torch.nn.attention.flex_attention, torch >= 2.5)"
    return None


def register_flex_preset(base: str, *, display: str, description: str) -> None:
    """Register ``<base>_flex``: ``base`` on the flex backend, for one run from the command line (``--set
    attention=local_flex``). Dropout off (FlexAttention has none), unavailable on a torch without FlexAttention, and
    forward only on the CPU (``trains_on``: torch has no FlexAttention backward there)."""
    register_preset(f"{base}_flex", base, display=display, description=description, backend="flex", dropout=0.0,
                    check=flex_unavailable, caps={"trains_on": ("cuda",)})


@dataclass(frozen=True)
class PatternConfig(AttentionConfig):
    """The config fields every pattern variant with two backends shares.

    Attributes:
        backend: "blocks" (our block gathers, :mod:`attentions._blocks`) or "flex" (torch's FlexAttention with a
            ``BlockMask`` of the same pattern, :mod:`attentions._flex`).
    """

    backend: Backend = "blocks"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.backend not in ("blocks", "flex"):
            raise ValueError(f"backend must be 'blocks' or 'flex', got {self.backend!r}")


def compiled_cpu_unsupported(dtype: torch.dtype) -> str | None:
    """Why Inductor cannot compile FlexAttention on this CPU for ``dtype``, or None: its C++ template takes float32,
    float16 and bfloat16, and needs AVX2 and vectorised ATen kernels (``ATEN_CPU_CAPABILITY=default`` turns them off;
    Inductor's own check, ``flex_cpu.check_cpu_supported``)."""
    if dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return f"compiled FlexAttention on the CPU takes float32/float16/bfloat16, not {dtype}"
    try:
        from torch._inductor.kernel.flex.flex_cpu import check_cpu_supported
    except ImportError:  # pragma: no cover  (another torch: Inductor decides, and an error is the cell's status)
        return None
    if not check_cpu_supported():
        return ("compiled FlexAttention on the CPU needs AVX2 and ATen's vectorised kernels on Linux or Windows "
                "(torch's check_cpu_supported)")
    return None


class FlexPattern:
    """Mixin of a pattern variant's ``nn.Module``: its pattern as a ``BlockMask``, built once, and the flex call.

    A variant defines :meth:`flex_pattern` (its mask_mod for a padded length) and, where its blocks pad the input,
    :meth:`flex_length`; :meth:`flex_version` changes when a buffer the pattern reads changes (BigBird's random
    scores).
    """

    cfg: PatternConfig
    #: ``flex_pattern(n, device, causal)``: the pattern over a (padded) length n as a mask_mod, the tensors it reads
    #: on ``device``. Every variant defines it (checked when its class is defined).
    flex_pattern: Callable[[int, torch.device, bool], MaskMod]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not callable(getattr(cls, "flex_pattern", None)):
            raise TypeError(f"{cls.__name__} uses FlexPattern but defines no flex_pattern(n, device, causal)")

    def flex_length(self, seq_len: int) -> int:
        """The length the pattern is computed over for inputs of ``seq_len`` tokens (blocks pad it up)."""
        return seq_len

    def flex_heads(self) -> int | None:
        """Heads the pattern differs over (None: the same pattern for every head, one BlockMask row)."""
        return None

    def flex_version(self) -> int:
        """A number that changes whenever the pattern of a given length changes (default: never)."""
        return 0

    def build_plan(self, seq_len: int, batch_size: int) -> bool:
        """Build the ``BlockMask`` of inputs of ``seq_len`` tokens without padding ahead of the first call (a speed
        cell times this as its plan construction, ``plan_ms``); False, building nothing, for ``backend="blocks"``."""
        if self.cfg.backend != "flex":
            return False
        device = next(self.parameters()).device  # type: ignore[attr-defined]
        self._block_mask(self.flex_length(seq_len), device, None, self.cfg.causal, seq_len)
        return True

    def flex_attend(self, q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor | None, *, causal: bool,
                    length: int | None = None) -> Tensor:
        """softmax over the pattern's keys: q, k, v [B, H, N, d] (N the padded length), key_mask [B, N] or None
        (then the keys from ``length`` on are the variant's own padding) -> [B, H, N, d]."""
        self._check_supported(q)
        n = q.shape[2]
        if n == 0:  # an empty prompt: FlexAttention cannot build a BlockMask of no blocks
            return q.new_zeros(*q.shape[:-1], v.shape[-1])
        block_mask = self._block_mask(n, q.device, key_mask, causal, n if length is None else length)
        return flex_attention(q, k, v, block_mask=block_mask)  # type: ignore[misc]

    def _check_supported(self, q: Tensor) -> None:
        """Raise :class:`UnsupportedError` where FlexAttention cannot compute this call (see the module docstring)."""
        reason = flex_unavailable()
        if reason is None and self.cfg.dropout > 0 and self.training:  # type: ignore[attr-defined]
            reason = "FlexAttention has no attention-weight dropout (set dropout: 0.0, or use backend blocks)"
        if reason is None and q.device.type == "cpu":
            if torch.is_grad_enabled() and q.requires_grad:
                reason = f"FlexAttention has no backward on the CPU in torch {torch.__version__} (forward only)"
            elif torch.compiler.is_compiling():
                reason = compiled_cpu_unsupported(q.dtype)
        if reason is not None:
            raise UnsupportedError(reason)

    def _block_mask(self, n: int, device: torch.device, key_mask: Tensor | None, causal: bool, length: int
                    ) -> BlockMask:
        """The BlockMask of padded length n over ``length`` real keys (or ``key_mask``'s): kept per (n, length,
        device, causal, version) without a key mask, since it then depends on the shapes only; else built."""
        key = (n, length, str(device), causal, self.flex_version())
        masks: dict[tuple[Any, ...], BlockMask] = self.__dict__.setdefault("_flex_masks", {})
        if key_mask is None and key in masks:
            return masks[key]
        pattern = self.flex_pattern(n, device, causal)
        if key_mask is None and length == n:
            mask_mod, batch = pattern, None
        elif key_mask is None:  # the keys the variant padded on (a length off its block size)

            def mask_mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
                return pattern(b, h, q_idx, kv_idx) & (kv_idx < length)

            batch = None
        else:
            real = key_mask.to(device)  # [B, N]: True = a real key

            def mask_mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
                return pattern(b, h, q_idx, kv_idx) & real[b, kv_idx]

            batch = key_mask.shape[0]
        block_mask = create_block_mask(mask_mod, batch, self.flex_heads(), n, n, device=device)  # type: ignore[misc]
        if key_mask is None:
            masks.clear()  # one length at a time: a sweep over lengths keeps no stale masks alive
            masks[key] = block_mask
        return block_mask
