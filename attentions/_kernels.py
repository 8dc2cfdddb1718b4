"""Kernelised (linear) attention: the φ(K)ᵀ[V, 1] product shared by the linear-attention variants.

Not a variant (the leading underscore keeps ``import attentions`` from importing it as one). For a positive
feature map φ, softmax(QKᵀ) is replaced by φ(Q)φ(K)ᵀ, and the row-normalised product
φ(Q)(φ(K)ᵀV) / φ(Q)(φ(K)ᵀ1) is computed right to left in O(N·d·d_φ), never an N×N matrix. Used by
``linear_transformer`` (φ = elu + 1), ``fmmformer``'s far field (elu + 1, elu(−x) + 1) and ``cosformer``
(ReLU features re-weighted by cos/sin of the token angles). Each variant keeps its own rule for a vanishing
normaliser (eps added, clamped, or 0/0 replaced), so this module returns numerator and normaliser separately.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import with_ones_columns
from .registry import AttentionConfig

__all__ = ["CAUSAL_CHUNK", "EpsConfig", "causal_kernel_attention_terms", "elu_feature_map", "kernel_attention_terms"]

#: Tokens per chunk of the causal form: the products within a chunk are quadratic in it, the state between chunks is
#: one [f, w] sum per head. With head widths and feature counts of about 64, a chunk of 64 makes the [C, C] products
#: within a chunk cost about what the [f, w] ones between chunks do.
CAUSAL_CHUNK = 64


@dataclass(frozen=True)
class EpsConfig(AttentionConfig):
    """Config with a positive ``eps`` guarding the normaliser of kernelised attention (subclasses say how).

    Attributes:
        eps: must be > 0 (1e-6, the authors' code of the Linear Transformer and of cosFormer).
    """

    eps: float = 1e-6

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.eps > 0.0:
            raise ValueError(f"eps must be > 0, got {self.eps!r}")


def elu_feature_map(x: Tensor) -> Tensor:
    """φ(x) = elu(x) + 1 (Katharopoulos et al. 2020, §3.2.1): positive everywhere, so every normaliser term is > 0."""
    return F.elu(x) + 1.0


def kernel_attention_terms(phi_q: Tensor, phi_k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """Numerator φ(Q)(φ(K)ᵀV) and normaliser φ(Q)(φ(K)ᵀ1) of kernelised attention, without dividing.

    Args:
        phi_q: query features [B, H, N, f].
        phi_k: key features [B, H, N, f].
        v: values [B, H, N, d].
        mask: [B, N] bool, True = real key, or None; padded keys are left out of both sums.

    Returns:
        numerator [B, H, N, d] and normaliser [B, H, N, 1]. Both come out of one product: a ones column is
        appended to V (``with_ones_columns``), so Σ_j φ(K_j)[V_j, 1]ᵀ is one [f, d+1] matrix per head.
    """
    if mask is not None:
        phi_k = phi_k * mask[:, None, :, None].to(phi_k.dtype)  # padded keys leave both sums
    d = v.shape[-1]
    v1 = with_ones_columns(v)  # [B, H, N, w]: [V, 1], w >= d + 1
    kv = phi_k.transpose(-1, -2) @ v1  # [B, H, f, w]: [Σ φ(K_j) V_jᵀ, Σ φ(K_j)]
    y1 = phi_q @ kv  # [B, H, N, w]: [numerator, normaliser]
    return y1[..., :d], y1[..., d : d + 1]


def causal_kernel_attention_terms(
    phi_q: Tensor, phi_k: Tensor, v: Tensor, mask: Tensor | None, *, state: Tensor | None = None,
    chunk: int = CAUSAL_CHUNK,
) -> tuple[Tensor, Tensor, Tensor]:
    """The causal numerator Σ_{j≤i} φ(Q_i)ᵀφ(K_j) V_j and normaliser Σ_{j≤i} φ(Q_i)ᵀφ(K_j), chunked.

    The sequence is cut into chunks of ``chunk`` tokens. Within a chunk the masked products are quadratic
    (φ(Q_c)φ(K_c)ᵀ with its upper triangle zeroed, times [V_c, 1]); between chunks, each chunk's queries read the sum
    Σ φ(K_j)[V_j, 1]ᵀ over every earlier chunk, an [f, w] matrix per head, from an exclusive prefix sum over the chunks'
    own sums. Time O(N·C·(f + w) + N·f·w), memory O(N·(C + f) + (N/C)·f·w): never a prefix sum over [N, f, w]
    (what a token-by-token cumulative sum would hold), never an N×N matrix.

    Args:
        phi_q: query features [B, H, N, f].
        phi_k: key features [B, H, N, f].
        v: values [B, H, N, d].
        mask: [B, N] bool, True = real key, or None; padded keys are left out of every sum.
        state: Σ φ(K_j)[V_j, 1]ᵀ of the tokens before these ([B, H, f, w], a decoding state), or None.
        chunk: tokens per chunk.

    Returns:
        numerator [B, H, N, d], normaliser [B, H, N, 1] and the state after the last token ([B, H, f, w]).
    """
    if mask is not None:
        phi_k = phi_k * mask[:, None, :, None].to(phi_k.dtype)  # padded keys leave every sum
    b, h, n, f = phi_q.shape
    d = v.shape[-1]
    v1 = with_ones_columns(v)  # [B, H, N, w]: [V, 1], w >= d + 1
    w = v1.shape[-1]
    pad = -n % chunk
    if pad:  # zero features and values: the padded tail adds nothing to any sum and its outputs are cut
        phi_q, phi_k, v1 = (F.pad(t, (0, 0, 0, pad)) for t in (phi_q, phi_k, v1))
    c = (n + pad) // chunk
    qc = phi_q.view(b, h, c, chunk, f)  # [B, H, C#, C, f]
    kc = phi_k.view(b, h, c, chunk, f)  # [B, H, C#, C, f]
    vc = v1.view(b, h, c, chunk, w)  # [B, H, C#, C, w]
    scores = qc @ kc.transpose(-1, -2)  # [B, H, C#, C, C]: φ(Q_i)ᵀφ(K_j) within each chunk
    within = torch.ones(chunk, chunk, dtype=torch.bool, device=phi_q.device).tril()  # j <= i
    y = scores.masked_fill(~within, 0.0) @ vc  # [B, H, C#, C, w]
    sums = kc.transpose(-1, -2) @ vc  # [B, H, C#, f, w]: each chunk's own Σ φ(K_j)[V_j, 1]ᵀ
    running = sums.cumsum(dim=2)  # [B, H, C#, f, w]: through the end of each chunk
    before = torch.cat([torch.zeros_like(running[:, :, :1]), running[:, :, :-1]], dim=2)  # exclusive: earlier chunks
    if state is not None:
        before = before + state[:, :, None]
        last = running[:, :, -1] + state
    else:
        last = running[:, :, -1]
    y = y + qc @ before  # [B, H, C#, C, w]
    y = y.reshape(b, h, c * chunk, w)[:, :, :n]  # [B, H, N, w]
    return y[..., :d], y[..., d : d + 1], last
