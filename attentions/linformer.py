"""Linformer: self-attention with keys and values projected to a fixed length k along the sequence.

Paper: Wang et al., "Linformer: Self-Attention with Linear Complexity", https://arxiv.org/abs/2006.04768 (§4).
Authors' code: fairseq ``examples/linformer`` (``MultiheadLinearAttention``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import ProjectedAttention, check_seq_len, merge_heads, split_heads, zero_padding
from .registry import AttentionConfig, Capabilities, register, register_preset


@dataclass(frozen=True)
class LinformerConfig(AttentionConfig):
    """Config of Linformer; defaults are the paper's main setting (k = 256, one E/F shared by all heads).

    Attributes:
        k: projected length: keys and values are compressed from n positions to k (the paper pretrains
            with k = 128 and 256).
        share_kv: key-value sharing (paper §4 "Key-value sharing"): F = E, one projection for both.
        headwise: a separate E_i (and F_i) per head, as in the paper's eq. (7); False (default) is the
            paper's "headwise sharing" (one E and one F for all heads of the layer), the setting the
            authors' code implements.
    """

    k: int = 256
    share_kv: bool = False
    headwise: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("k")


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = (
    "E and F project the whole sequence axis, so every projected key mixes all positions; the paper defines no "
    "causal form"
)


@register(
    "linformer",
    LinformerConfig,
    Capabilities(causal_note=CAUSAL_NOTE, approximates_softmax=True, complexity="n", needs_fixed_length=True),
    paper="https://arxiv.org/abs/2006.04768", display="Linformer", group="low rank",
)
class LinformerAttention(ProjectedAttention):
    """Linformer: softmax(Q (E K)ᵀ / √d) (F V), E, F ∈ R^{k×max_seq_len}; paper arxiv.org/abs/2006.04768.

    head_i = softmax(X W_i^Q (E_i X W_i^K)ᵀ / √d) · F_i X W_i^V (eq. 7), then the output projection.

    Choices and deviations (the paper leaves these open, or the authors' fairseq code decides them):
    - E and F compress the layer input X before the K/V projections, and the K/V biases are added after
      compression, exactly as the authors' code (``k_proj(compress_k(X))``): K̄ = (E X) W_K + b_K. The paper's
      eq. (7) has no biases, so this is the same function; it is also the cheaper order (k·n·D for E X
      instead of a full n·D·D K/V projection) when E is shared across heads. Headwise E_i are applied to
      X W_i^K (each head has its own E_i, so compressing X first would cost H times more) and b_K is added
      after, so both modes compute the same function of E, W and b.
    - Initialisation of E and F: Xavier-uniform with gain 1/√2 over a (k, max_seq_len) matrix, as the
      authors' code (the paper gives none; its analysis draws E from N(0, 1/k)).
    - Inputs shorter than max_seq_len use the first n columns of E and F (authors' code: ``weight[:, :n]``),
      so no padding is needed; longer inputs are an error.
    - Padding: padded positions of X are zeroed before compression, so they add nothing to E X and F X
      (the authors' code ignores the padding mask here). A padded sequence therefore gives, at its real
      positions, exactly what the unpadded shorter sequence gives.
    - Dropout is applied to the n×k attention weights (authors' code); the softmax·V product runs through
      ``scaled_dot_product_attention``, which computes exactly that without materialising the weights
      when it can.
    """

    cfg: LinformerConfig

    def __init__(self, cfg: LinformerConfig) -> None:
        super().__init__(cfg)  # proj: read by slices: Q at full length, K/V compressed
        shape = (cfg.heads, cfg.k, cfg.max_seq_len) if cfg.headwise else (cfg.k, cfg.max_seq_len)
        # xavier_uniform_(gain=1/√2) on a (k, max_seq_len) weight, written out so it also holds per head.
        bound = math.sqrt(3.0 / (cfg.k + cfg.max_seq_len))
        self.proj_k = nn.Parameter(torch.empty(shape).uniform_(-bound, bound))  # E
        self.proj_v = None if cfg.share_kv else nn.Parameter(torch.empty(shape).uniform_(-bound, bound))  # F

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        cfg = self.cfg
        n = x.shape[1]
        check_seq_len(n, cfg.max_seq_len, "E, F are k × it")
        x = zero_padding(x, mask)
        d = cfg.dim
        w, b = self.proj.qkv.weight, self.proj.qkv.bias
        q = split_heads(F.linear(x, w[:d], b[:d]), cfg.heads)  # [B, H, N, dh]
        e = self.proj_k[..., :n]  # first n columns: [k, N] or [H, k, N]
        f = e if self.proj_v is None else self.proj_v[..., :n]
        if cfg.headwise:
            k, v = self._compress_headwise(x, e, f)
        else:
            k, v = self._compress_shared(x, e, f)
        p = cfg.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p)  # [B, H, N, dh]
        return self.out(merge_heads(y))

    def _compress_shared(self, x: Tensor, e: Tensor, f: Tensor) -> tuple[Tensor, Tensor]:
        """K̄ = (E X) W_K + b_K and V̄ = (F X) W_V + b_V with one E, F for all heads: 2 x [B, H, k, dh]."""
        cfg, d = self.cfg, self.cfg.dim
        w, b = self.proj.qkv.weight, self.proj.qkv.bias
        ex = torch.matmul(e, x)  # [k, N] @ [B, N, D] -> [B, k, D]: one GEMM, E is not broadcast
        if self.proj_v is None:  # E = F: one compression, one fused K/V projection
            k, v = F.linear(ex, w[d:], b[d:]).chunk(2, dim=-1)  # 2 x [B, k, D]
        else:
            k = F.linear(ex, w[d : 2 * d], b[d : 2 * d])  # [B, k, D]
            v = F.linear(torch.matmul(f, x), w[2 * d :], b[2 * d :])  # [B, k, D]
        return split_heads(k, cfg.heads), split_heads(v, cfg.heads)

    def _compress_headwise(self, x: Tensor, e: Tensor, f: Tensor) -> tuple[Tensor, Tensor]:
        """K̄_i = E_i (X W_i^K) + b_i^K and V̄_i likewise with F_i: 2 x [B, H, k, dh]."""
        cfg, d = self.cfg, self.cfg.dim
        w, b = self.proj.qkv.weight, self.proj.qkv.bias
        k, v = (split_heads(t, cfg.heads) for t in F.linear(x, w[d:]).chunk(2, dim=-1))  # [B, H, N, dh]
        bk, bv = (t.view(cfg.heads, 1, cfg.head_dim) for t in b[d:].chunk(2))  # [H, 1, dh]
        # einsum runs one bmm over heads ([H, k, N] @ [H, N, B*dh], copying K once); matmul would broadcast
        # E to [B, H, k, N] first, a B-fold copy of the projection.
        k = torch.einsum("hkn,bhnd->bhkd", e, k) + bk  # [B, H, k, dh]
        v = torch.einsum("hkn,bhnd->bhkd", f, v) + bv  # [B, H, k, dh]
        return k, v


register_preset("linformer_k128", "linformer", display="Linformer (k = 128)", k=128, description="Linformer, k = 128.")
