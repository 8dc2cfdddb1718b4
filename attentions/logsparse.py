"""LogSparse self-attention with convolutional queries and keys (LogTrans).

Paper: Li, Jin, Xuan, Zhou, Chen, Wang, Yan, "Enhancing the Locality and Breaking the Memory Bottleneck of Transformer
on Time Series Forecasting", NeurIPS 2019, https://arxiv.org/abs/1907.00235 (§3.2 convolutional self-attention,
§3.3 LogSparse, Figure 3 (b)).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import fill_masked, merge_heads, split_heads, zero_padding
from .registry import AttentionConfig, Capabilities, register


@dataclass(frozen=True)
class LogSparseConfig(AttentionConfig):
    """Config of LogSparse attention.

    Attributes:
        kernel: k, the causal convolution producing queries and keys (§3.2; k = 1 is ordinary self-attention's
            pointwise projection). The paper evaluates k = 1 … 9 per dataset and gives no single value; 3 here.
    """

    kernel: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("kernel")


def log_offsets(length: int) -> Tensor:
    """Distances a cell looks back: 0 (itself), then 1, 2, 4, … < length (Figure 3 (b))."""
    return torch.tensor([0] + [2**i for i in range(max(length - 1, 1).bit_length()) if 2**i < length])


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = "not implemented yet"


@register(
    "logsparse",
    LogSparseConfig,
    Capabilities(causal_note=CAUSAL_NOTE, complexity="n log n"),
    paper="https://arxiv.org/abs/1907.00235",
)
class LogSparseAttention(nn.Module):
    """LogTrans attention: causal-convolution Q and K, each cell attending to itself and the cells 2^0, 2^1, …
    steps back; arxiv 1907.00235.

    - Q, K = CausalConv_k(X), V = X W_v (§3.2: queries and keys see their local shape, values stay pointwise).
    - Cell l attends, in one softmax with scale 1/√d_h, to cells l − 2^j for j = 0 … ⌊log₂ l⌋ and to itself
      (§3.3), so one layer costs O(L log L); the paper stacks O(log L) layers so information reaches every cell.

    Choices and deviations (the paper is silent, its code is not public):
    - Causal, as the paper's decoder-style forecaster. The ``local attention`` and ``restart`` variants of §3.3
      (Figure 3 (c), (d)) are not included.
    - Padding: padded positions are zeroed before the convolutions, and padded keys get no weight; a query always
      has itself, so a fully padded row stays finite.
    - Dropout on the attention weights, in training; an output projection W_o as in multi-head attention.
    """

    def __init__(self, cfg: LogSparseConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.dim
        self.qk = nn.Conv1d(d, 2 * d, kernel_size=cfg.kernel)  # causal: left-padded by kernel - 1 in forward
        self.v = nn.Linear(d, d)
        self.out = nn.Linear(d, d)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        cfg = self.cfg
        b, n, d = x.shape
        x = zero_padding(x, mask)
        qk = self.qk(F.pad(x.transpose(1, 2), (cfg.kernel - 1, 0))).transpose(1, 2)  # [B, D, k-1+N] conv -> [B, N, 2D]
        q, k = (split_heads(t, cfg.heads) for t in qk.chunk(2, dim=-1))  # [B, H, N, d_h]
        v = split_heads(self.v(x), cfg.heads)  # [B, H, N, d_h]
        offsets = log_offsets(n).to(x.device)  # [m]
        keys = torch.arange(n, device=x.device)[:, None] - offsets  # [N, m]: the cells each query sees
        valid = keys >= 0  # [N, m]
        if mask is not None:
            valid = valid & mask[:, keys.clamp_min(0)]  # [B, N, m]: padded keys get no weight
            valid = valid | (offsets == 0)  # a query keeps itself, so its softmax is never empty
        idx = keys.clamp_min(0)
        k_sel, v_sel = k[:, :, idx], v[:, :, idx]  # [B, H, N, m, d_h] each: gathered, m = 1 + ⌊log₂ N⌋
        scores = torch.einsum("bhnd,bhnmd->bhnm", q, k_sel) * cfg.head_dim**-0.5  # [B, H, N, m]
        scores = fill_masked(scores, valid.view(-1, 1, n, len(offsets)))
        attn = F.dropout(scores.softmax(dim=-1), p=cfg.dropout, training=self.training)
        return self.out(merge_heads(torch.einsum("bhnm,bhnmd->bhnd", attn, v_sel)))  # [B, N, D]
