"""cosFormer: ReLU linear attention with a cos-based re-weighting of distant tokens, decomposed to O(n).

Paper: Qin et al., "cosFormer: Rethinking Softmax in Attention", ICLR 2022, https://arxiv.org/abs/2202.08791
(§3.3-3.4, eq. 9-11). Authors' code: OpenNLPLab ``cosFormer`` (``cosformer.py``, ``CosformerAttention``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ._kernels import EpsConfig, kernel_attention_terms
from .base import ProjectedAttention, merge_heads, zero_padding
from .registry import Capabilities, register


@dataclass(frozen=True)
class CosformerConfig(EpsConfig):
    """Config of (non-causal) cosFormer attention.

    Attributes:
        eps: the normaliser is clamped from below at eps (the authors' code: ``clamp_min(..., eps)``, 1e-6).
            The normaliser is ≥ 0 (ReLU features, cos/sin of angles in [0, π/2)), and is 0 when a query's
            ReLU features miss every real key's (or there is no real key): the output is then 0. Must be > 0.
        dropout: accepted for the common interface and unused (see the class docstring).
    """


def token_angles(mask: Tensor | None, batch: int, n: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    """θ_i = π/2 · i / M per token: [B, N] (or [1, N] without a mask).

    i is the token's index among the real tokens of its sequence (0, 1, ...; padding need not be a suffix) and
    M the sequence's real length, so a padded sequence gets exactly the angles of its unpadded self; padded
    positions get i = 0 (their keys are dropped by the caller, their outputs are never read).
    """
    if mask is None:
        return (math.pi / 2 / n) * torch.arange(n, device=device, dtype=dtype).unsqueeze(0)  # [1, N]
    index = (mask.long().cumsum(dim=1) - 1).clamp_min(0)  # [B, N]: rank among the real tokens
    length = mask.sum(dim=1, keepdim=True).clamp_min(1)  # [B, 1]: M; 1 for a fully padded row (no 0/0)
    return (math.pi / 2) * index.to(dtype) / length.to(dtype)  # [B, N]


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = "not implemented yet"


@register("cosformer", CosformerConfig, Capabilities(causal_note=CAUSAL_NOTE, complexity="n"), paper="https://arxiv.org/abs/2202.08791")
class CosformerAttention(ProjectedAttention):
    """cosFormer: O_i = Σ_j s_ij V_j / Σ_j s_ij, s_ij = ReLU(Q_i)ᵀReLU(K_j)·cos(π/2·(i−j)/M); arxiv 2202.08791.

    With cos(a − b) = cos a cos b + sin a sin b (eq. 10-11), s_ij = Q̃_iᵀ K̃_j where Q̃_i = [ReLU(Q_i) cos θ_i,
    ReLU(Q_i) sin θ_i] and likewise K̃_j (θ_i = π/2 · i/M), so the sums over j are taken once per sequence:
    O(n·d²) time, O(n·d + d²) memory, no n×n matrix.

    Choices and deviations (the paper leaves these open, or the authors' code decides them):
    - M, the re-weighting horizon: the paper's M is the sequence length (the authors' code: max(source, target)
      length = N in self-attention). With padding, M is each sequence's real length and i its index among its
      real tokens, so a padded sequence gives at its real positions exactly what the unpadded sequence gives
      (using the padded length N would make the weights depend on how much padding the batch has). Since
      |i − j| ≤ M − 1 < M, every cos weight lies in (0, 1] and s_ij ≥ 0.
    - Indices start at 0 (the authors' code starts at 1): only i − j enters s_ij, so the outputs are the same.
    - No 1/√d temperature, ReLU on the raw projections (paper eq. 9, authors' code, ``act_fun="relu"``).
    - Normaliser clamped from below at eps = 1e-6 (authors' code), which makes a query whose ReLU features
      meet no real key (normaliser 0) output 0 rather than 0/0.
    - Padding: X is zeroed at padded positions and K̃ is zeroed at padded keys, so padded keys leave both sums
      (the authors' code has no key-padding mask).
    - The numerator and normaliser come from one product, with a ones column appended to V
      (``_kernels.kernel_attention_terms``, shared with the Linear Transformer).
    - Dropout: no attention matrix exists to drop from, and the authors' code applies none (its
      ``dropout_rate`` is stored and never used), so ``dropout`` is unused.
    """

    cfg: CosformerConfig

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        b, n, _ = x.shape
        x = zero_padding(x, mask)
        q, k, v = self.proj(x)  # each [B, H, N, d]
        q, k = F.relu(q), F.relu(k)
        theta = token_angles(mask, b, n, x.device, q.dtype)[:, None, :, None]  # [B or 1, 1, N, 1]
        cos, sin = torch.cos(theta), torch.sin(theta)
        q2 = torch.cat([q * cos, q * sin], dim=-1)  # [B, H, N, 2d]: Q̃
        k2 = torch.cat([k * cos, k * sin], dim=-1)  # [B, H, N, 2d]: K̃
        num, den = kernel_attention_terms(q2, k2, v, mask)  # [B, H, N, d], [B, H, N, 1]; padded keys left out
        y = num / den.clamp_min(self.cfg.eps)  # [B, H, N, d]
        return self.out(merge_heads(y))
