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

import torch.nn.functional as F
from torch import Tensor

from .base import with_ones_columns
from .registry import AttentionConfig

__all__ = ["EpsConfig", "elu_feature_map", "kernel_attention_terms"]


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
