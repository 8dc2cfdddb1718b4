"""FAT, "Fourier Attention for Transformer": FSAT's ablation without the sparsity (§5.6, eq. 5). The same pooled
hidden-state cross as FSAT, Q from X and K, V from the cross C, full softmax attention: O(n²).

Paper: Yimeng Zhuang, Jing Zhang, Mei Tu, "Long-range Sequence Modeling with Predictable Sparse Attention",
ACL 2022, https://aclanthology.org/2022.acl-long.19 (no public code; the choices the paper leaves open are listed in
``attentions.fsat.FSATAttention``'s docstring).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._fsat_ops import central_symmetry_merge, last_real_index, pooled_cross
from .base import masked_fill_value, merge_heads, no_autocast, zero_padding
from .registry import AttentionConfig, Capabilities, register

FeatureMap = Literal["fc", "dconv"]
Activation = Literal["gelu", "relu", "tanh"]
IndexScale = Literal["max_seq_len", "length"]

_ACTIVATIONS: dict[str, type[nn.Module]] = {"gelu": nn.GELU, "relu": nn.ReLU, "tanh": nn.Tanh}


@dataclass(frozen=True)
class FATConfig(AttentionConfig):
    """Config of the pooled hidden-state cross and of FAT (eq. 1–6); FSAT's config extends it.

    Attributes:
        feature_map: the non-linear feature maps f₁, f₂ of eq. 1. "fc" (the paper's default "fully-connected
            structure"): f(x) = act(x W + b), one D→D layer each. "dconv" (the paper's "+DConv-5", used for
            its Text result): f(x) = act(pointwise(depthwise_conv(x))) with kernel ``dconv_kernel``.
        feature_activation: the non-linearity of f₁, f₂ ("gelu", "relu" or "tanh"; the paper names none).
        dconv_kernel: depthwise kernel size for ``feature_map="dconv"`` (paper: 5); odd, same-length padding.
    """

    feature_map: FeatureMap = "fc"
    feature_activation: Activation = "gelu"
    dconv_kernel: int = 5

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.feature_map not in ("fc", "dconv"):
            raise ValueError(f"feature_map must be fc or dconv, got {self.feature_map!r}")
        if self.feature_activation not in _ACTIVATIONS:
            raise ValueError(f"feature_activation must be one of {', '.join(_ACTIVATIONS)}, "
                             f"got {self.feature_activation!r}")
        if int(self.dconv_kernel) <= 0 or self.dconv_kernel % 2 == 0:
            raise ValueError(f"dconv_kernel must be a positive odd integer, got {self.dconv_kernel!r}")


class HiddenStateCross(nn.Module):
    """C = LN(C₁ + C₂ − f₁(X)⊙f₂(X)) (eq. 1–4): pooled anti-diagonal crosses merged around central tokens.

    Padding: f₁(X), f₂(X) are zeroed at padded positions (f(0) ≠ 0 because of the biases), and X is zeroed
    before a depthwise convolution, so the anti-diagonals of real rows only reach real tokens. With the FFT
    sized by ``max_seq_len`` and the anti-diagonals past the last real token set to their exact value 0, every
    real row of C is bitwise that of the unpadded sequence.

    A property of eq. 4 as written, kept: the last real row is identically 0 before LN (its anti-diagonals
    2t and 2t+1 hold only the t–t pair, which is subtracted), so C there is LN's bias β.
    """

    def __init__(self, cfg: FATConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.dim
        if cfg.feature_map == "fc":
            self.fc = nn.Linear(d, 2 * d)  # f₁ and f₂ in one GEMM
        else:
            k = cfg.dconv_kernel
            self.depthwise = nn.ModuleList(nn.Conv1d(d, d, k, padding=k // 2, groups=d) for _ in range(2))
            self.pointwise = nn.ModuleList(nn.Linear(d, d) for _ in range(2))
        self.act = _ACTIVATIONS[cfg.feature_activation]()
        self.norm = nn.LayerNorm(d)

    def features(self, x: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """f₁(X), f₂(X), each [B, N, D], zero at padded positions."""
        if self.cfg.feature_map == "fc":
            f1, f2 = self.act(self.fc(x)).chunk(2, dim=-1)  # 2 x [B, N, D]
        else:
            xt = zero_padding(x, mask).transpose(1, 2)  # [B, D, N]: padded tokens read as the conv's zeros
            f1, f2 = (
                self.act(pw(dw(xt).transpose(1, 2)))  # [B, N, D]
                for dw, pw in zip(self.depthwise, self.pointwise, strict=True)
            )
        return zero_padding(f1, mask), zero_padding(f2, mask)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        f1, f2 = self.features(x, mask)
        n = x.shape[1]
        # FFT sized by max_seq_len: a sequence and its padded copy get bitwise the same C₀ (see pooled_cross).
        c0 = pooled_cross(f1, f2, pad_to=self.cfg.max_seq_len)  # [B, 2N−1, D]
        if mask is not None:
            # Anti-diagonals past 2·last only pair padded (zeroed) features: exactly 0, but the FFT leaves
            # roundoff there. It reaches the last real row t (c_2t + c_2t+1 − f₁⊙f₂ = 0 + ε, which LN maps
            # to β + ε/√eps); zeroing keeps that row what the unpadded sequence gives.
            last = last_real_index(mask, n, x.device).view(-1, 1, 1)  # [B, 1, 1]
            beyond = torch.arange(2 * n - 1, device=x.device).view(1, -1, 1) > 2 * last  # [B, 2N−1, 1]
            c0 = c0.masked_fill(beyond, 0.0)
        return self.norm(central_symmetry_merge(c0, f1, f2))  # [B, N, D]


class _CrossAttentionBase(nn.Module):
    """Shared parts of FAT and FSAT: the cross, Q = X W_Q, [K | V | extra] = C W (eq. 6), W_o."""

    #: Whether C and its GEMM run in float32 with autocast off (FSAT: a bf16 Ī flips ⌊Ī⌋; see its docstring).
    float32_cross = False

    def __init__(self, cfg: FATConfig, extra_out: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.dim
        self.cross = HiddenStateCross(cfg)
        self.q = nn.Linear(d, d)
        # K, V (and FSAT's index logits, eq. 9) all read C: one GEMM.
        self.ckv = nn.Linear(d, 2 * d + extra_out)
        self.out = nn.Linear(d, d)

    def _project(self, x: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Q, K, V token-major [B, N, H, d] (views of the GEMM outputs); C's extra outputs [B, N, extra].

        With ``float32_cross``, C and its GEMM run with autocast off, in the weights' dtype (see FSAT's docstring).
        """
        b, n, _ = x.shape
        d, h = self.cfg.dim, self.cfg.heads
        if self.float32_cross:
            with no_autocast(x.device):
                ckv = self.ckv(self.cross(x.to(self.ckv.weight.dtype), mask))  # [B, N, 2D + extra]
        else:
            ckv = self.ckv(self.cross(x, mask))  # [B, N, 2D + extra]
        # split, not slicing: its backward is one concatenation, not a zero-filled gradient per slice.
        k, v, extra = ckv.split([d, d, ckv.shape[-1] - 2 * d], dim=-1)  # [B, N, D] x 2, [B, N, extra]
        q = self.q(x).view(b, n, h, -1)  # [B, N, H, d]
        return q, k.unflatten(-1, (h, -1)), v.unflatten(-1, (h, -1)), extra  # K, V [B, N, H, d]


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = "its Fourier-pooled keys and values summarise the whole sequence; the FSAT paper defines no causal form"


@register("fat", FATConfig, Capabilities(causal_note=CAUSAL_NOTE, complexity="n^2"),
          paper="https://aclanthology.org/2022.acl-long.19", display="FAT", group="hashing / learned")
class FATAttention(_CrossAttentionBase):
    """FAT: softmax attention with K, V projected from the pooled hidden-state cross (FSAT paper eq. 5).

    Paper: Zhuang et al., ACL 2022, https://aclanthology.org/2022.acl-long.19, §3 and the §5.6 ablation
    ("Fourier Attention for Transformer", FSAT without the sparse attention module). Q = X W_Q, K = C W_K,
    V = C W_V with C from ``HiddenStateCross``; full softmax(QKᵀ/√d)V via torch SDPA, O(n²).
    Padded keys get the dtype's most negative finite score (an additive float mask, as ``vanilla``), so a
    sequence with no real token stays finite. See ``FSATAttention`` for the choices shared with FSAT.
    """

    def __init__(self, cfg: FATConfig) -> None:
        super().__init__(cfg)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        q, k, v, _ = self._project(x, mask)  # each [B, N, H, d]
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # each [B, H, N, d], SDPA's layout
        bias = None
        if mask is not None:
            bias = torch.zeros(mask.shape[0], 1, 1, mask.shape[1], dtype=q.dtype, device=q.device)
            bias = bias.masked_fill(~mask[:, None, None, :], masked_fill_value(q.dtype))  # [B, 1, 1, N]
        p = self.cfg.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p)  # [B, H, N, d]
        return self.out(merge_heads(y))
