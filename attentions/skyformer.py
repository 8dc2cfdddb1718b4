"""Skyformer: Gaussian-kernel attention approximated by the Nyström method on the symmetrised (n+n) kernel matrix.

Paper: Chen et al., "Skyformer: Remodel Self-Attention with Gaussian Kernel and Nyström Method", NeurIPS 2021,
https://arxiv.org/abs/2111.00035 (§3 Kernelized Attention, §4 Nyström on the PSD completion).
Authors' code: https://github.com/pkuzengqi/Skyformer (``models/attention_skyformer.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import ProjectedAttention, merge_heads, no_autocast, zero_padding
from .registry import AttentionConfig, Capabilities, register


@dataclass(frozen=True)
class SkyformerConfig(AttentionConfig):
    """Config of Skyformer; defaults are the paper's LRA setting (authors' ``lra_config``: nb_features = 128).

    Attributes:
        num_landmarks: m, the number of landmarks (columns of the 2n × 2n kernel matrix) sampled per forward:
            the first ⌊m/2⌋ among the queries, the rest among the keys (authors' code).
        ridge: λ added to the diagonal of the m × m landmark kernel matrix before inverting it (authors' code:
            0.1), so duplicate landmarks (sampling is with replacement) cannot make it singular.
        pinv_iterations: iterations of the Newton-Schulz-type pseudo-inverse iteration (authors' code: 6).
        exact_pinv: invert with ``torch.linalg.pinv`` (eigendecomposition, float64) instead of the iteration.
    """

    num_landmarks: int = 128
    ridge: float = 0.1
    pinv_iterations: int = 6
    exact_pinv: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("num_landmarks")
        if int(self.pinv_iterations) < 0:
            raise ValueError(f"pinv_iterations must be >= 0, got {self.pinv_iterations!r}")
        if not self.ridge >= 0.0:
            raise ValueError(f"ridge must be >= 0, got {self.ridge!r}")


def gaussian_kernel(a: Tensor, b: Tensor) -> Tensor:
    """κ(a_i, b_j) = exp(−‖a_i − b_j‖²/2) for rows of a [..., I, d] and b [..., J, d]: [..., I, J].

    Written as exp(a·b − ‖a‖²/2 − ‖b‖²/2) (one GEMM); the exponent is clamped at 0, where rounding can push
    ‖a − b‖² = 0 slightly negative, so no entry exceeds 1.
    """
    sq_a = a.square().sum(-1, keepdim=True) * 0.5  # [..., I, 1]
    sq_b = b.square().sum(-1).unsqueeze(-2) * 0.5  # [..., 1, J]
    return (a @ b.transpose(-1, -2) - sq_a - sq_b).clamp_max(0.0).exp()  # [..., I, J]


def symmetric_iterative_inverse(w: Tensor, iterations: int) -> Tensor:
    """Inverse of each symmetric PSD [..., m, m] matrix by the iteration of the authors' code.

    Z₀ = W / max column sum(W), then Z ← ¼ Z (13I − WZ (15I − WZ (7I − WZ))) (the Nyströmformer iteration).
    The authors' code takes the column-sum maximum over the whole batch; here it is per matrix, so batch rows
    do not interact. An all-zero matrix gives Z = 0.
    """
    scale = w.abs().sum(dim=-2).amax(dim=-1).clamp_min(torch.finfo(w.dtype).tiny)  # [...]
    z = w.transpose(-1, -2) / scale[..., None, None]  # [..., m, m]
    eye = torch.eye(w.shape[-1], dtype=w.dtype, device=w.device)
    for _ in range(iterations):
        wz = w @ z
        z = 0.25 * z @ (13 * eye - wz @ (15 * eye - wz @ (7 * eye - wz)))
    return z


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = (
    "the Nyström landmarks of its Gaussian kernel average over the whole sequence; the paper defines no causal form"
)


@register(
    "skyformer",
    SkyformerConfig,
    Capabilities(causal_note=CAUSAL_NOTE, complexity="n"),
    paper="https://arxiv.org/abs/2111.00035", display="Skyformer", group="low rank",
)
class SkyformerAttention(ProjectedAttention):
    """Skyformer: Nyström-approximated Gaussian-kernel attention κ(Q, K) V; paper arxiv.org/abs/2111.00035.

    Kernelized attention (paper §3): out = κ(Q, K) V with κ(q, k) = exp(−‖q − k‖²/(2√d)), computed as the
    unit-bandwidth kernel of q̂ = d^(-1/4) q, k̂ = d^(-1/4) k. Nyström (§4): the 2n × 2n matrix C̄ = κ(X, X),
    X = [Q̂; K̂], is PSD and has κ(Q̂, K̂) as its upper-right block; with landmarks L (m rows of X),
    C̄ ≈ κ(X, L) (κ(L, L) + λI)⁻¹ κ(L, X), so out ≈ κ(Q̂, L) (κ(L, L) + λI)⁻¹ (κ(L, K̂) V): O(n·m·d), never n × n.

    Choices and deviations (the paper leaves these open, or the authors' code decides them):
    - No row normalisation: the Gaussian kernel is bounded by 1, and the paper's kernelized attention and the
      authors' code use κ(Q, K) V as it is (no D⁻¹ of softmax).
    - Landmarks: m rows sampled uniformly with replacement, afresh at every forward (training and eval), the
      first ⌊m/2⌋ among the real queries and the rest among the real keys, as the authors' ``uniform_sketching``.
      One uniform draw u ∈ [0, 1)^m from torch's global RNG serves the whole batch (as that code), scaled per
      sample by its number of real tokens n_b: landmark j is the ⌊u_j·n_b⌋-th real token in order. The code
      indexes positions ⌊u_j·n_b⌋ directly, which is the same for suffix padding but can pick padding
      elsewhere; here padded positions are never landmarks, whatever the pattern.
    - Inverse: (κ(L, L) + λI) is symmetrically normalised, Ŵ = D^(-1/2) W D^(-1/2) with D its row sums, then
      inverted by 6 iterations, W⁻¹ ≈ D^(-1/2) Ŵ⁻¹ D^(-1/2) (authors' code, λ = 0.1); the iteration's start is
      per matrix (the code's is per batch). ``exact_pinv`` uses the eigendecomposition pseudo-inverse instead
      (with λ = 0 and all 2n positions as landmarks the output is then exactly κ(Q, K) V). The m × m part runs
      in at least float32 also under autocast.
    - Padding: X is zeroed at padded positions; padded keys are dropped by zeroing their columns of κ(L, K̂)
      (the code multiplies them by the mask), and they are never landmarks, so real outputs do not depend on
      them. A sequence with no real token samples padded position 0 (all its keys are dropped: output 0).
    - Scaling: the paper's √d is the head dimension (the authors' code hard-codes 32^(-1/4), their LRA head
      dimension).
    - Dropout: there is no attention matrix to drop from; as this zoo's Nyströmformer, ``dropout`` is applied
      to the layer output (after the output projection) in training.
    """

    cfg: SkyformerConfig

    def sample_landmarks(self, mask: Tensor, n: int) -> Tensor:
        """Landmark indices into the concatenation [Q; K] (0 ≤ i < 2n): [B, m], first ⌊m/2⌋ queries, then keys."""
        m = self.cfg.num_landmarks
        u = torch.rand(m, dtype=torch.float64).to(mask.device)  # [m]: one draw shared by the batch
        n_real = mask.sum(dim=1, keepdim=True)  # [B, 1]
        rank = (u[None, :] * n_real).floor().long().clamp_max((n_real - 1).clamp_min(0))  # [B, m]
        # Real positions first, in order (stable sort of the padding flags): rank r -> the r-th real token.
        real_pos = torch.sort((~mask).to(torch.uint8), dim=1, stable=True).indices  # [B, N]
        pos = real_pos.gather(1, rank)  # [B, m]
        pos[:, m // 2 :] += n  # the second half indexes the keys
        return pos

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        cfg = self.cfg
        b, n, _ = x.shape
        if mask is None:
            mask = torch.ones(b, n, dtype=torch.bool, device=x.device)
        x = zero_padding(x, mask)
        q, k, v = self.proj(x)  # each [B, H, N, dh]
        scale = q.shape[-1] ** -0.25  # κ(q, k) = exp(−‖q − k‖²/(2√d)) = unit-bandwidth kernel of d^(-1/4)·q, k
        q, k = q * scale, k * scale
        index = self.sample_landmarks(mask, n)  # [B, m]
        both = torch.cat([q, k], dim=2)  # [B, H, 2N, dh]
        landmarks = both.gather(2, index[:, None, :, None].expand(-1, both.shape[1], -1, both.shape[-1]))
        # landmarks: [B, H, m, dh]
        kernel_ql = gaussian_kernel(q, landmarks)  # [B, H, N, m]
        kernel_lk = gaussian_kernel(landmarks, k) * mask[:, None, None, :].to(q.dtype)  # [B, H, m, N]
        lkv = kernel_lk @ v  # [B, H, m, dh]
        inverse = self._landmark_inverse(landmarks)  # [B, H, m, m]
        y = kernel_ql @ (inverse @ lkv)  # [B, H, N, dh]
        y = self.out(merge_heads(y))  # [B, N, D]
        return F.dropout(y, p=cfg.dropout, training=self.training)

    def _landmark_inverse(self, landmarks: Tensor) -> Tensor:
        """(κ(L, L) + λI)⁻¹ (or its pseudo-inverse), by the normalised iteration or exactly: [B, H, m, m]."""
        cfg = self.cfg
        ft = torch.promote_types(landmarks.dtype, torch.float32)
        with no_autocast(landmarks.device):
            lm = landmarks.to(ft)
            w = gaussian_kernel(lm, lm)  # [B, H, m, m]
            w = w + cfg.ridge * torch.eye(w.shape[-1], dtype=ft, device=w.device)
            if cfg.exact_pinv:
                return torch.linalg.pinv(w.double(), hermitian=True).to(landmarks.dtype)
            d_inv_sqrt = w.sum(-1).clamp_min(torch.finfo(ft).tiny).rsqrt()  # [B, H, m]: rows sums > 0 (κ > 0)
            w_hat = d_inv_sqrt[..., :, None] * w * d_inv_sqrt[..., None, :]  # [B, H, m, m]
            z = symmetric_iterative_inverse(w_hat, cfg.pinv_iterations)  # [B, H, m, m]
            return (d_inv_sqrt[..., :, None] * z * d_inv_sqrt[..., None, :]).to(landmarks.dtype)
