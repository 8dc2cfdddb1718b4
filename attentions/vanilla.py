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

from ._decode import KVCache, check_capacity
from .base import ProjectedAttention, QKVProjection, fill_masked, key_bias_value, merge_heads
from .registry import AttentionConfig, Capabilities, register, register_preset

Backend = Literal["math", "sdpa", "xformers"]


@dataclass(frozen=True)
class VanillaConfig(AttentionConfig):
    """Config of softmax attention.

    Attributes:
        backend: "math" (explicit softmax), "sdpa" (torch SDPA) or "xformers" (memory-efficient kernel).
        kv_heads: key/value heads (grouped-query attention, Ainslie et al. 2023, https://arxiv.org/abs/2305.13245):
            each serves ``heads / kv_heads`` query heads, so a KV cache holds ``kv_heads`` heads; None = ``heads``
            (multi-head attention).
    """

    backend: Backend = "math"
    kv_heads: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.backend not in ("math", "sdpa", "xformers"):
            raise ValueError(f"backend must be one of math, sdpa, xformers; got {self.backend!r}")
        if self.kv_heads is not None:
            self._require_positive_ints("kv_heads")
            if self.heads % self.kv_heads:
                raise ValueError(f"kv_heads={self.kv_heads} must divide heads={self.heads}")


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


_xformers_check.requires = "xformers"  # type: ignore[attr-defined]  (the optional package: `attnbench list`)


#: Scores a ``math`` prefill holds at once (its queries are taken in blocks that fit).
PREFILL_SCORE_BYTES = 2**28

#: The causal form and the decoding state, in words (``attnbench list``).
CAUSAL_NOTE = "each query attends to itself and the keys before it (the decoder's masked self-attention)"
DECODE_NOTE = "a KV cache of every token (kv_heads heads under grouped-query attention)"


@register(
    "vanilla", VanillaConfig,
    Capabilities(complexity="n^2", exact=True, causal=True, decode=True, causal_note=CAUSAL_NOTE,
                 decode_note=DECODE_NOTE),
    paper="https://arxiv.org/abs/1706.03762", display="Transformer", group="exact",
)
class VanillaAttention(ProjectedAttention):
    """Exact multi-head softmax attention with fused Q/K/V and output projections.

    Paper: Attention Is All You Need, https://arxiv.org/abs/1706.03762.
    The key-padding mask fills masked scores with the dtype's most negative finite value rather than −inf,
    so a sequence with no real token still gives finite (uniform) weights instead of NaN.

    Causal (``causal=True``): query i attends to keys j ≤ i (§3.2.3's masked decoder self-attention): ``math``
    fills the upper triangle of the scores, ``sdpa`` passes ``is_causal`` (or, with a padding mask, the mask's
    lower triangle), ``xformers`` a lower-triangular bias. Decoding: ``prefill`` runs the causal form over the prompt
    and fills a :class:`~attentions._decode.KVCache` preallocated for the whole context; ``step`` writes one token's
    key and value in place and attends over the cache. Grouped-query attention (``kv_heads``): a query head reads the
    keys of its group, broadcast, never copied.
    """

    cfg: VanillaConfig

    def __init__(self, cfg: VanillaConfig) -> None:
        super().__init__(cfg)
        if cfg.kv_heads is not None:
            self.proj = QKVProjection(cfg.dim, cfg.heads, kv_heads=cfg.kv_heads)
        self.scale = cfg.head_dim**-0.5

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        q, k, v = self.proj(x)  # [B, H, N, d], [B, H_kv, N, d] twice
        y = self._attend(q, k, v, mask, causal=self.cfg.causal, offset=0)
        return self.out(merge_heads(y))

    def prefill(self, x: Tensor, mask: Tensor | None = None, *, capacity: int) -> tuple[Tensor, KVCache]:
        """The causal form over a prompt x [B, P, D] and the KV cache for ``capacity`` tokens (see ``_decode``).

        The ``math`` backend takes the prompt's queries in blocks (each block's scores against the keys up to its
        last query), so that a long prompt's scores need not exist at once: the same function, with the memory of
        :data:`PREFILL_SCORE_BYTES` instead of P² scores per head (a 32K-token prompt's would be gigabytes)."""
        check_capacity(capacity, x.shape[1])
        q, k, v = self.proj(x)  # [B, H, P, d], [B, H_kv, P, d] twice
        cache = KVCache.empty(k, self.proj.kv_heads, capacity, self.cfg.head_dim)
        cache.append(k, v, mask)
        b, h, n, _ = q.shape
        rows = max(1, n)  # the fused backends hold no score matrix: every query at once
        if self.cfg.backend == "math":
            rows = max(1, PREFILL_SCORE_BYTES // max(1, b * h * n * q.element_size()))
        y = torch.cat([self._attend(q[:, :, s : s + rows], k[:, :, : s + rows], v[:, :, : s + rows],
                                    None if mask is None else mask[:, : s + rows], causal=True, offset=s)
                       for s in range(0, n, rows)] or [q], dim=2)  # [B, H, P, d]
        return self.out(merge_heads(y)), cache

    def step(self, x: Tensor, cache: KVCache) -> tuple[Tensor, KVCache]:
        """One token x [B, 1, D]: its key and value join the cache, its query attends over every token in it."""
        q, k, v = self.proj(x)  # [B, H, 1, d], [B, H_kv, 1, d] twice
        cache.append(k, v)
        keys, values, real = cache.keys()  # [B, H_kv, L, d] twice, [B, L]
        y = self._attend(q, keys, values, real, causal=False, offset=cache.length - 1)  # the cache is the past
        return self.out(merge_heads(y)), cache

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, *, causal: bool, offset: int) -> Tensor:
        """softmax(QKᵀ/√d)V per head over the keys ``mask`` allows (and j ≤ i where ``causal``) -> [B, H, Nq, d];
        ``offset``: the queries' position past the first key (a decoding step's query is the last token)."""
        p = self.cfg.dropout if self.training else 0.0
        groups = q.shape[1] // k.shape[1]
        backend = self.cfg.backend
        if backend == "xformers":
            return self._xformers(q, k, v, mask, p, causal)
        allowed = None if mask is None else mask[:, None, None, :]  # [B, 1, 1, Nk]
        if causal and q.shape[2] > 1:
            nq, nk = q.shape[2], k.shape[2]
            tril = torch.ones(1, 1, nq, nk, dtype=torch.bool, device=q.device).tril(offset)  # [1, 1, Nq, Nk]: j <= i
            allowed = tril if allowed is None else allowed & tril  # [B or 1, 1, Nq, Nk]
        if backend == "sdpa":
            plain_causal = causal and mask is None and q.shape[2] > 1 and offset == 0
            gqa = {"enable_gqa": True} if groups > 1 else {}  # torch >= 2.5; multi-head attention needs none
            return F.scaled_dot_product_attention(q, k, v, attn_mask=None if plain_causal else allowed,
                                                  dropout_p=p, is_causal=plain_causal, **gqa)
        b, h, nq, d = q.shape
        qg = q.view(b, k.shape[1], groups, nq, d)  # [B, H_kv, G, Nq, d]: each group's queries
        scores = (qg * self.scale) @ k[:, :, None].transpose(-1, -2)  # [B, H_kv, G, Nq, Nk]
        if allowed is not None:
            scores = fill_masked(scores, allowed.unsqueeze(1))  # [B or 1, 1, 1, Nq or 1, Nk]
        attn = F.dropout(scores.softmax(dim=-1), p=p, training=self.training)
        return (attn @ v[:, :, None]).view(b, h, nq, d)  # [B, H, Nq, d]

    @staticmethod
    def _xformers(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, p: float, causal: bool) -> Tensor:
        import xformers.ops as xops

        b, h, nq, _ = q.shape
        nk = k.shape[2]
        if k.shape[1] != h:  # grouped-query attention: each key head repeated for its group's queries
            k, v = (t.repeat_interleave(h // t.shape[1], dim=1) for t in (k, v))  # [B, H, Nk, d]
        # xformers takes [B, N, H, d]; a key-padding mask (and the causal triangle with it) becomes an additive bias
        bias: object = None
        if mask is not None:
            keep = mask[:, None, None, :].expand(b, h, nq, nk)  # [B, H, Nq, Nk]
            if causal:
                keep = keep & torch.ones(nq, nk, dtype=torch.bool, device=q.device).tril()
            # finite: a padded query whose keys are all padding stays finite instead of NaN
            bias = torch.zeros(b, h, nq, nk, dtype=q.dtype, device=q.device).masked_fill(
                ~keep, key_bias_value(q.dtype))
        elif causal:
            bias = xops.LowerTriangularMask()
        y = xops.memory_efficient_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_bias=bias, p=p
        )  # [B, N, H, d]
        return y.transpose(1, 2)  # [B, H, N, d]


register_preset("vanilla_sdpa", "vanilla", display="Transformer (SDPA)", backend="sdpa",
                description="Softmax attention via torch SDPA.", benchmark=True)
register_preset(
    "vanilla_xformers",
    "vanilla",
    display="Transformer (xFormers)",
    backend="xformers",
    description="Softmax attention via xformers memory_efficient_attention (CUDA only).",
    caps={"devices": ("cuda",)},
    check=_xformers_check,
    benchmark=True,
)
