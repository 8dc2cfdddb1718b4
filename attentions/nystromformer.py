"""Nyströmformer: softmax attention approximated by the Nyström method on segment-mean landmarks.

Paper: Xiong et al., "Nyströmformer: A Nyström-Based Algorithm for Approximating Self-Attention", AAAI 2021,
https://arxiv.org/abs/2102.03902 (§3: eq. 14-16, Algorithm 1, the iterative pseudo-inverse of eq. 13).
Authors' code: https://github.com/mlpen/Nystromformer (``NystromAttention``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import ProjectedAttention, masked_fill_value, merge_heads, no_autocast, split_heads, zero_padding
from .registry import AttentionConfig, Capabilities, register, register_preset


@dataclass(frozen=True)
class NystromConfig(AttentionConfig):
    """Config of Nyströmformer; defaults are the paper's LRA setting.

    Attributes:
        num_landmarks: m, the number of landmarks (segment means) of Q and K (paper: 64 on LRA, 32 also run).
        pinv_iterations: iterations of the Moore-Penrose pseudo-inverse iteration (eq. 13; paper: 6).
        conv_kernel: kernel size of the depthwise convolution residual on V along the sequence (authors' code:
            33, their BERT setting; their LRA configs, ``"nystrom-64": {num_landmarks: 64, conv_kernel_size: 35}``,
            use 35: the preset ``nystromformer_lra``); 0 disables it. Must be odd, so the output keeps the sequence
            length.
    """

    num_landmarks: int = 64
    pinv_iterations: int = 6
    conv_kernel: int = 33

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("num_landmarks")
        if int(self.pinv_iterations) < 0:
            raise ValueError(f"pinv_iterations must be >= 0, got {self.pinv_iterations!r}")
        if self.conv_kernel < 0 or (self.conv_kernel and self.conv_kernel % 2 == 0):
            raise ValueError(f"conv_kernel must be 0 (off) or positive and odd, got {self.conv_kernel!r}")


def iterative_pinv(a: Tensor, iterations: int = 6) -> Tensor:
    """Moore-Penrose pseudo-inverse of each [..., m, m] matrix by the paper's iteration (eq. 13).

    Z₀ = Aᵀ / (‖A‖₁ ‖A‖∞), per matrix as in the paper (the authors' code takes the largest column sum over
    the whole batch, which couples the batch rows); then Z ← ¼ Z (13I − AZ (15I − AZ (7I − AZ))).
    An all-zero matrix gives Z = 0.
    """
    norm_1 = a.abs().sum(dim=-2).amax(dim=-1)  # [...]: max column sum
    norm_inf = a.abs().sum(dim=-1).amax(dim=-1)  # [...]: max row sum
    scale = (norm_1 * norm_inf).clamp_min(torch.finfo(a.dtype).tiny)
    z = a.transpose(-1, -2) / scale[..., None, None]  # [..., m, m]
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    for _ in range(iterations):
        az = a @ z
        z = 0.25 * z @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az)))
    return z


def sequence_conv(v: Tensor, weight: Tensor) -> Tensor:
    """Per-head convolution of v [B, H, N, d] along the sequence, zero padded: [B, H, N, d].

    Same function as ``Conv2d(H, H, (K, 1), groups=H, padding=(K // 2, 0), bias=False)`` with ``weight``
    [H, 1, K, 1] (odd K), computed as banded (Toeplitz) products over chunks of C positions: each chunk of C
    outputs reads C + K - 1 inputs through one [C, C+K-1] matrix per head. That is GEMM work, faster
    forward+backward on CPU than the depthwise convolution kernel for K = 33, at (C+K-1)/C times its FLOPs
    (measured in docs/results, "From the code: FSAT's and Nyströmformer's kernels").
    """
    b, h, n, d = v.shape
    k = weight.shape[2]
    c = max(64, k - 1)  # chunk length: at most twice the direct convolution's multiply-adds
    chunks = -(-n // c)
    vp = F.pad(v, (0, 0, k // 2, k // 2 + chunks * c - n))  # [B, H, chunks*C + K - 1, d]
    windows = vp.unfold(2, c + k - 1, c)  # [B, H, chunks, d, C+K-1]: overlapping views, no copy
    pos = torch.arange(c + k - 1, device=v.device)
    offset = pos[None, :] - pos[:c, None]  # [C, C+K-1]: tap index of input j for output i
    band = (offset >= 0) & (offset < k)
    toeplitz = weight.reshape(h, k)[:, offset.clamp(0, k - 1)] * band  # [H, C, C+K-1]
    y = torch.einsum("hij,bhcdj->bhcid", toeplitz.to(v.dtype), windows)  # [B, H, chunks, C, d]
    return y.reshape(b, h, chunks * c, d)[:, :, :n]  # [B, H, N, d]


# pads_to_multiple: a length off the multiple of m runs the masked-landmark path, which is exactly right-padding
# to a multiple of m and masking the padding (see the class docstring).


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = "its segment-mean landmarks average future positions into every row; the paper defines no causal form"


@register(
    "nystromformer",
    NystromConfig,
    Capabilities(approximates_softmax=True, complexity="n", seq_len_multiple_of=64, pads_to_multiple=True,
                 causal_note=CAUSAL_NOTE),
    paper="https://arxiv.org/abs/2102.03902", display="Nyströmformer", group="low rank",
)
class NystromAttention(ProjectedAttention):
    """Nyströmformer attention with segment-mean landmarks and a conv residual on V; arxiv.org/abs/2102.03902.

    out = softmax(Q K̃ᵀ/√d) · Z · softmax(Q̃ Kᵀ/√d) V + DepthwiseConv(V), with Q̃, K̃ the m segment means of
    Q and K (n/m consecutive tokens each) and Z the iterative pseudo-inverse of softmax(Q̃ K̃ᵀ/√d) (eq. 14-16).

    Choices and deviations (the paper leaves these open, or the authors' code decides them):
    - Scaling 1/√d on every product, as the paper (the code divides Q and K by d^(1/4) each: same thing).
    - Lengths that are not a multiple of m, and padding masks: each sequence's *real* tokens, in order, form
      m segments of ⌈n_real/m⌉ consecutive tokens, the last ones short or empty — what right-padding the
      sequence to a multiple of m and masking the padding gives (the paper takes n divisible by m; the code
      requires it), done with an index_add over the real tokens rather than on a padded copy. So padded
      positions enter no landmark, landmarks are means over real tokens only (the code divides by the segment
      length, so its padding dilutes them), and a padded sequence gives what the unpadded one gives. A
      segment with no real token gives no landmark: it is masked out of both softmaxes over landmarks and its
      row of softmax(Q̃ K̃ᵀ) is zeroed, so that matrix is block-diagonal with a zero block, the iteration
      keeps Z's block zero, and the result is exactly Nyström on the non-empty landmarks. Without a mask and
      with n % m == 0, the plain reshape-and-mean path runs and this is the paper's method unchanged.
    - Masked keys get ``masked_fill_value`` in softmax(Q̃ Kᵀ/√d); V and the conv input are zeroed at padded
      positions (the code multiplies V by the mask before the convolution).
    - Pseudo-inverse initialised per matrix, Z₀ = Aᵀ/(‖A‖₁‖A‖∞) (the paper); the code takes the maximum over
      the whole batch. It runs in at least float32, autocast or not.
    - Products are associated as softmax(Q K̃ᵀ) (Z (softmax(Q̃ Kᵀ) V)): O(n·m·d) instead of the code's
      O(n·m²) for (softmax(Q K̃ᵀ) Z); both softmax·V products go through ``scaled_dot_product_attention``,
      which does not materialise the n×m and m×n weights.
    - Conv residual as the code: a Conv2d over (sequence, 1) with groups = heads, no bias, i.e. one length-33
      kernel per head shared by the head's d features, zero padding at both ends. The module keeps that
      Conv2d (same parameter, same init) but evaluates it as banded GEMMs (``sequence_conv``): same function.
    - Dropout: the paper and code apply none inside this attention; as lucidrains' nystrom-attention,
      ``dropout`` is applied to the layer output (after the output projection), in training only.
    """

    cfg: NystromConfig

    def __init__(self, cfg: NystromConfig) -> None:
        super().__init__(cfg)
        self.conv = None
        if cfg.conv_kernel:
            self.conv = nn.Conv2d(
                cfg.heads, cfg.heads, (cfg.conv_kernel, 1), padding=(cfg.conv_kernel // 2, 0),
                groups=cfg.heads, bias=False,
            )

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        cfg = self.cfg
        b, n, d = x.shape
        m = cfg.num_landmarks
        if mask is None and n % m:
            mask = torch.ones(b, n, dtype=torch.bool, device=x.device)  # the last segments are short or empty
        x = zero_padding(x, mask)
        qkv = self.proj.qkv(x)  # [B, N, 3D]
        q, k, v = (split_heads(t, cfg.heads) for t in qkv.chunk(3, dim=-1))  # each [B, H, N, dh]
        if mask is None:
            # n = m * seg: landmark j is the mean of tokens [j*seg, (j+1)*seg) (paper eq. 14-15).
            qk_l = qkv[..., : 2 * d].reshape(b, m, n // m, 2 * d).mean(dim=2)  # [B, m, 2D]
            key_bias = landmark_bias = has_real = None
        else:
            qk_l, has_real = self._masked_landmarks(qkv[..., : 2 * d], mask)  # [B, m, 2D], [B, m]
            v = v * mask[:, None, :, None].to(v.dtype)  # padded values reach neither softmax·V nor the conv
            fill = masked_fill_value(q.dtype)
            key_bias = torch.zeros(b, 1, 1, n, dtype=q.dtype, device=q.device)
            key_bias = key_bias.masked_fill(~mask[:, None, None, :], fill)  # [B, 1, 1, N]
            landmark_bias = torch.zeros(b, 1, 1, m, dtype=q.dtype, device=q.device)
            landmark_bias = landmark_bias.masked_fill(~has_real[:, None, None, :], fill)  # [B, 1, 1, m]
        q_l, k_l = (split_heads(t, cfg.heads) for t in qk_l.chunk(2, dim=-1))  # each [B, H, m, dh]

        # Kernel 2 and its pseudo-inverse: m×m, in at least float32 also under autocast (the iteration
        # amplifies rounding; the authors' code runs the whole attention in float32).
        ft = torch.promote_types(q.dtype, torch.float32)
        with no_autocast(q.device):
            scores = (q_l.to(ft) * q.shape[-1] ** -0.5) @ k_l.to(ft).transpose(-1, -2)  # [B, H, m, m]
            if landmark_bias is not None:
                scores = scores + landmark_bias.to(ft)  # empty landmarks: zero columns
            kernel_2 = scores.softmax(dim=-1)
            if has_real is not None:
                kernel_2 = kernel_2 * has_real[:, None, :, None].to(ft)  # empty landmarks: zero rows
            z = iterative_pinv(kernel_2, cfg.pinv_iterations).to(q.dtype)  # [B, H, m, m]

        y3 = F.scaled_dot_product_attention(q_l, k, v, attn_mask=key_bias)  # [B, H, m, dh]: softmax(Q̃Kᵀ)V
        y = F.scaled_dot_product_attention(q, k_l, z @ y3, attn_mask=landmark_bias)  # [B, H, N, dh]
        if self.conv is not None:
            y = y + sequence_conv(v, self.conv.weight)  # [B, H, N, dh]: = self.conv(v), faster
        y = self.out(merge_heads(y))  # [B, N, D]
        return F.dropout(y, p=cfg.dropout, training=self.training)

    def softmax_reference(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """Exact softmax attention through this layer's projections, plus its depthwise-convolution residual on V
        (the authors' addition, not part of the Nyström approximation): the error against it is the approximation's."""
        if self.conv is None:
            return super().softmax_reference(x, mask)
        x = zero_padding(x, mask)
        q, k, v = (split_heads(t, self.cfg.heads) for t in self.proj.qkv(x).chunk(3, dim=-1))  # each [B, H, N, dh]
        bias = None
        if mask is not None:
            v = v * mask[:, None, :, None].to(v.dtype)
            bias = torch.zeros(x.shape[0], 1, 1, x.shape[1], dtype=q.dtype, device=q.device)
            bias = bias.masked_fill(~mask[:, None, None, :], masked_fill_value(q.dtype))  # [B, 1, 1, N]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias) + sequence_conv(v, self.conv.weight)
        return self.out(merge_heads(y))

    def _masked_landmarks(self, qk: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Segment means over real tokens: ([B, m, 2D] landmarks of [Q, K], [B, m] non-empty flags).

        Sample b's real tokens, in order, form segments of seg_b = ⌈n_b/m⌉ consecutive ones (n_b = its real
        count) — the paper's segments of that sample right-padded to a multiple of m, whatever the positions
        of its padding. One index_add over the batch: padded tokens go to a spare bucket that is dropped.
        """
        b, n, c = qk.shape
        m = self.cfg.num_landmarks
        n_real = mask.sum(dim=1, keepdim=True)  # [B, 1]
        seg = torch.div(n_real + (m - 1), m, rounding_mode="floor").clamp_min(1)  # [B, 1]: ⌈n_b/m⌉
        rank = mask.cumsum(dim=1) - 1  # [B, N]: index of each real token among the real ones
        bucket = torch.where(mask, torch.div(rank, seg, rounding_mode="floor"), m)  # [B, N] in [0, m]
        bucket = bucket + torch.arange(b, device=qk.device)[:, None] * (m + 1)  # [B, N]: one range per sample
        flat = bucket.reshape(-1)  # [B*N]
        sums = qk.new_zeros(b * (m + 1), c).index_add(0, flat, qk.reshape(b * n, c))  # [B*(m+1), 2D]
        count = qk.new_zeros(b * (m + 1)).index_add(0, flat, mask.reshape(-1).to(qk.dtype))  # [B*(m+1)]
        sums, count = sums.view(b, m + 1, c)[:, :m], count.view(b, m + 1)[:, :m]  # drop the padding bucket
        return sums / count.clamp_min(1.0)[..., None], count > 0


register_preset(
    "nystrom_m32",
    "nystromformer", display="Nyströmformer (m = 32)",
    num_landmarks=32,
    caps={"seq_len_multiple_of": 32},
    description="Nyströmformer, m = 32.",
)
register_preset(
    "nystromformer_lra",
    "nystromformer", display="Nyströmformer (LRA)",
    conv_kernel=35,
    description="Nyströmformer with the authors' LRA setting (m = 64, depthwise-conv kernel 35).",
)
