"""FMMformer: banded (near-field) softmax attention plus low-rank (far-field) kernelised linear attention.

Paper: Nguyen, Suliafu, Osher, Chen, Wang, "FMMformer: Efficient and Flexible Transformer via Decomposed
Near-field and Far-field Attention", NeurIPS 2021, https://arxiv.org/abs/2108.02347 (§3: V̂ = (w₁ D + w₂ L) V).
Authors' code: ``minhtannguyen/fmmformer-code-submission`` (fast-transformers ``CausalFMMAttention`` for language
modelling; LRA run scripts with ``--diag_size 5 --kernels elu [elu_flip]``).

The near field is the shared banded primitive ``attentions._blocks.sliding_window_attention`` (blocks of k − 1
queries gather their own and both neighbouring key blocks, a band mask keeps |i − j| < k), so no n×n matrix is
built; the far field is linear attention, φ(Q) (φ(K)ᵀ V), O(n·d²).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._blocks import sliding_window_attention
from ._kernels import elu_feature_map, kernel_attention_terms
from .base import ProjectedAttention, merge_heads, zero_padding
from .registry import AttentionConfig, Capabilities, register, register_preset

__all__ = ["FEATURE_MAPS", "FMMformerAttention", "FMMformerConfig", "linear_attention"]


def _elu_flip_feature(x: Tensor) -> Tensor:
    """elu(−x) + 1 (the paper's second kernel, ``elu_flip`` in the authors' LRA scripts): positive as well."""
    return F.elu(-x) + 1.0


# Only positive feature maps: the far field is normalised row-wise by φ(q)ᵀ Σ_j φ(k_j), which must not vanish.
FEATURE_MAPS: dict[str, Callable[[Tensor], Tensor]] = {"elu": elu_feature_map, "elu_flip": _elu_flip_feature}


@dataclass(frozen=True)
class FMMformerConfig(AttentionConfig):
    """Config of FMMformer; defaults are the authors' LRA setting (``--diag_size 5 --kernels elu``).

    Attributes:
        bandwidth: k, the near-field band: query i attends to keys j with |i − j| < k (k − 1 neighbours on each
            side and itself, 2k − 1 diagonals), the bidirectional form of the authors' causal code, which keeps
            the k diagonals j ∈ (i − k, i]. 5 = the LRA ``diag_size``.
        kernels: comma-separated far-field feature maps φ_l (names in ``FEATURE_MAPS``); the far field is
            Σ_l w₂,l L_l with L_l = rownorm(φ_l(Q) φ_l(K)ᵀ), so its rank is at most len(kernels) · head_dim:
            the number of kernels is the paper's rank knob. "elu" = the LRA 1-kernel model, "elu,elu_flip" the
            2-kernel one.
    """

    bandwidth: int = 5
    kernels: str = "elu"

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("bandwidth")
        names = self.kernel_names
        unknown = [k for k in names if k not in FEATURE_MAPS]
        if not names or unknown:
            raise ValueError(
                f"kernels must name one or more of {', '.join(FEATURE_MAPS)} (comma-separated), got {self.kernels!r}"
            )
        if len(set(names)) != len(names):
            raise ValueError(f"kernels lists a feature map twice: {self.kernels!r}")

    @property
    def kernel_names(self) -> tuple[str, ...]:
        return tuple(k.strip() for k in self.kernels.split(",") if k.strip())


def linear_attention(q: Tensor, k: Tensor, v: Tensor, feature: Callable[[Tensor], Tensor],
                     mask: Tensor | None) -> Tensor:
    """Row-normalised kernel attention φ(Q) (φ(K)ᵀ V) / (φ(Q) φ(K)ᵀ 1): [B, H, N, d], O(N·d²).

    Padded keys are left out of both sums (``_kernels.kernel_attention_terms``). A query with no real key at all
    gets 0/0, replaced by 0/1 so outputs and gradients stay finite.
    """
    num, den = kernel_attention_terms(feature(q), feature(k), v, mask)  # [B, H, N, d], [B, H, N, 1]
    return num / torch.where(den > 0, den, torch.ones_like(den))  # [B, H, N, d]


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = "not implemented yet"


@register(
    "fmmformer",
    FMMformerConfig,
    Capabilities(causal_note=CAUSAL_NOTE, complexity="n"),
    paper="https://arxiv.org/abs/2108.02347",
)
class FMMformerAttention(ProjectedAttention):
    """FMMformer: V̂ = w₁ D V + Σ_l w₂,l L_l V (banded softmax + kernel low rank); arxiv.org/abs/2108.02347.

    D = softmax(Q Kᵀ/√d) restricted to the band |i − j| < k and renormalised within it (the near field);
    L_l = diag(φ_l(Q) φ_l(K)ᵀ 1)⁻¹ φ_l(Q) φ_l(K)ᵀ (the far field, linear attention with feature map φ_l);
    w₁ and w₂,l are learnable, one per head.

    Choices and deviations (the paper leaves these open, or the authors' code decides them):
    - Band: |i − j| < k, the bidirectional version of the authors' causal band (k diagonals j ∈ (i − k, i]).
      Computed by ``_blocks.sliding_window_attention`` with radius k − 1 (blocks of k − 1 positions, each reading
      its own and both neighbouring key blocks under a band mask): O(n·k) memory, no n×n matrix; it pads
      internally to a whole number of blocks and masks the padding, so any length runs.
    - D is renormalised over the band (a softmax over the band's keys, as the authors' code: scores outside the
      band are −inf before the softmax), not the band of the full softmax matrix.
    - Far-field kernels: elu(x)+1 and elu(−x)+1, both positive (the authors' code also has a tanh feature map,
      left out because a sign-changing φ can make the normaliser vanish). Each L_l is row-normalised as linear attention
      (Katharopoulos et al.); the authors' causal code additionally divides φ(q) and φ(k) by their own sums,
      which changes L only by a per-key factor and is not in the paper; it is not done here. No 1/√d scaling
      in the far field (the paper's L has none).
    - Blending weights: one learnable scalar per head for D and per head and kernel for each L_l (the paper
      writes scalars w₁, w₂; the authors' causal code has one per head and channel), unconstrained, initialised
      to w₁ = 1/2 and w₂,l = 1/(2·#kernels) so the blended matrix starts row-stochastic (the causal code starts
      with w₁ = 0, i.e. no near field, which would make the band train from zero).
    - Dropout (cfg.dropout) is applied to the near-field weights D in training; the far field has no explicit
      weight matrix to drop from.
    - Padding: padded keys get no weight in D (masked) nor in L (left out of both sums); x is zeroed at padded
      positions first, so padded content reaches nothing.
    """

    cfg: FMMformerConfig

    def __init__(self, cfg: FMMformerConfig) -> None:
        super().__init__(cfg)
        n_kernels = len(cfg.kernel_names)
        self.near_weight = nn.Parameter(torch.full((cfg.heads,), 0.5))  # w₁ per head
        self.far_weight = nn.Parameter(torch.full((n_kernels, cfg.heads), 0.5 / n_kernels))  # w₂,l per head
        self._features = [FEATURE_MAPS[name] for name in cfg.kernel_names]

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        cfg = self.cfg
        x = zero_padding(x, mask)
        q, k, v = self.proj(x)  # each [B, H, N, dh]
        # |i − j| < k is a band of radius k − 1.
        near = sliding_window_attention(
            q, k, v, cfg.bandwidth - 1, key_mask=mask, dropout_p=cfg.dropout, training=self.training
        )  # [B, H, N, dh]
        y = near * self.near_weight.to(q.dtype)[:, None, None]
        for feature, weight in zip(self._features, self.far_weight, strict=True):
            y = y + linear_attention(q, k, v, feature, mask) * weight.to(q.dtype)[:, None, None]
        return self.out(merge_heads(y))  # [B, N, D]


register_preset(
    "fmmformer_2kernels",
    "fmmformer",
    kernels="elu,elu_flip",
    description="FMMformer with two far-field kernels, elu(x)+1 and elu(−x)+1 (the paper's 2-kernel LRA model).",
)
