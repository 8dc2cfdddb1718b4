"""Vanilla softmax attention (Vaswani et al. 2017, https://arxiv.org/abs/1706.03762), three backends.

- ``vanilla`` (backend ``math``): softmax(QKᵀ/√d)V written out, materialising the n×n matrix — what the
  efficient-attention papers call "Transformer" in their speed and memory tables.
- ``vanilla_sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` (fused/flash kernels).
- ``vanilla_xformers``: ``xformers.ops.memory_efficient_attention`` (CUDA only; optional package whose wheel
  is built against one torch version, so availability is checked at run time and reported).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import ProjectedAttention, fill_masked, merge_heads
from .registry import AttentionConfig, Capabilities, register, register_preset

Backend = Literal["math", "sdpa", "xformers"]


@dataclass(frozen=True)
class VanillaConfig(AttentionConfig):
    """Config of softmax attention.

    Attributes:
        backend: "math" (explicit softmax), "sdpa" (torch SDPA) or "xformers" (memory-efficient kernel).
    """

    backend: Backend = "math"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.backend not in ("math", "sdpa", "xformers"):
            raise ValueError(f"backend must be one of math, sdpa, xformers; got {self.backend!r}")


@functools.cache
def _xformers_reason() -> str | None:
    try:
        import xformers.ops  # noqa: F401
    except Exception as exc:  # an ImportError, or a wheel built for another torch/CUDA failing at import
        return f"xformers is not importable ({type(exc).__name__}: {exc}); pip install 'attnbench[xformers]'"
    return None


@functools.cache
def _xformers_kernel_reason(device: str) -> str | None:
    """Why xformers' kernels do not run on ``device``, or None: one tiny call, once per process. A wheel built for
    another torch imports but loads no kernels ("No operator found for `memory_efficient_attention_forward`" in
    every cell); that is found here, before any cell runs."""
    import xformers
    import xformers.ops as xops

    q = torch.zeros(1, 8, 1, 16, device=device, dtype=torch.float16)  # [B, N, H, d]
    try:
        xops.memory_efficient_attention(q, q, q)
    except Exception as exc:  # noqa: BLE001  (whatever its dispatcher raises is the reason)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return (f"xformers {getattr(xformers, '__version__', '?')} loads no working kernel with torch "
                f"{torch.__version__} on {device} ({type(exc).__name__}: {first}); install the xformers wheel "
                f"built for this torch")
    return None


def _xformers_check(device: torch.device) -> str | None:
    if device.type != "cuda":
        return None
    return _xformers_reason() or _xformers_kernel_reason(str(device))


@register(
    "vanilla", VanillaConfig, Capabilities(complexity="n^2", exact=True), paper="https://arxiv.org/abs/1706.03762"
)
class VanillaAttention(ProjectedAttention):
    """Exact multi-head softmax attention with fused Q/K/V and output projections.

    Paper: Attention Is All You Need, https://arxiv.org/abs/1706.03762.
    The key-padding mask fills masked scores with the dtype's most negative finite value rather than −inf,
    so a sequence with no real token still gives finite (uniform) weights instead of NaN.
    """

    cfg: VanillaConfig

    def __init__(self, cfg: VanillaConfig) -> None:
        super().__init__(cfg)
        self.scale = cfg.head_dim**-0.5

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        q, k, v = self.proj(x)  # each [B, H, N, d]
        p = self.cfg.dropout if self.training else 0.0
        backend = self.cfg.backend
        if backend == "math":
            scores = (q * self.scale) @ k.transpose(-1, -2)  # [B, H, N, N]
            if mask is not None:
                scores = fill_masked(scores, mask[:, None, None, :])
            attn = F.dropout(scores.softmax(dim=-1), p=p, training=self.training)
            y = attn @ v  # [B, H, N, d]
        elif backend == "sdpa":
            attn_mask = None if mask is None else mask[:, None, None, :]  # [B, 1, 1, N], True = attend
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p)
        else:
            y = self._xformers(q, k, v, mask, p)
        return self.out(merge_heads(y))

    @staticmethod
    def _xformers(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, p: float) -> Tensor:
        import xformers.ops as xops

        # xformers takes [B, N, H, d]; a key-padding mask becomes an additive bias broadcast over queries.
        bias = None
        if mask is not None:
            b, h, n, _ = q.shape
            bias = torch.zeros(b, 1, 1, n, dtype=q.dtype, device=q.device)
            bias = bias.masked_fill(~mask[:, None, None, :], float("-inf")).expand(b, h, n, n)
        y = xops.memory_efficient_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_bias=bias, p=p
        )  # [B, N, H, d]
        return y.transpose(1, 2)  # [B, H, N, d]


register_preset("vanilla_sdpa", "vanilla", backend="sdpa", description="Softmax attention via torch SDPA.",
                benchmark=True)
register_preset(
    "vanilla_xformers",
    "vanilla",
    backend="xformers",
    description="Softmax attention via xformers memory_efficient_attention (CUDA only).",
    caps={"devices": ("cuda",)},
    check=_xformers_check,
    benchmark=True,
)
