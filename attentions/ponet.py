"""PoNet: token mixing by multi-granularity pooling (global aggregation, segment and local max pooling).

Paper: Tan et al., "PoNet: Pooling Network for Efficient Token Mixing in Long Sequences", ICLR 2022,
https://arxiv.org/abs/2110.02442 (§3.1 multi-granularity pooling, §3.2 pooling fusion).
Authors' code: https://github.com/lxchtan/PoNet (``models/modeling_ponet.py``, ``examples/LRA/code``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import masked_fill_value, split_heads, zero_padding
from .registry import AttentionConfig, Capabilities, register


@dataclass(frozen=True)
class PoNetConfig(AttentionConfig):
    """Config of PoNet; defaults are the authors' LRA setting for ListOps and Retrieval.

    Attributes:
        segments: S, the number of segments of segment max pooling (authors' LRA config: 64 for ListOps and
            Retrieval, 32 for Image, 1 for Pathfinder, 2048 for Text). Natural-language runs use sentences.
        local_kernel: window of local max pooling, centred, stride 1 (authors' code: 3). Must be odd.
    """

    segments: int = 64
    local_kernel: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("segments", "local_kernel")
        if self.local_kernel % 2 == 0:
            raise ValueError(f"local_kernel must be odd (a centred window), got {self.local_kernel!r}")


def global_aggregation(q: Tensor, k: Tensor, mask: Tensor | None, dropout_p: float = 0.0) -> Tensor:
    """GA (§3.1): g = mean of the real Q rows, then g' = softmax(g Kᵀ/√d) K over real keys: [B, H, 1, d].

    Keys double as values (V = K), as in the authors' code. q, k: [B, H, N, d]; mask [B, N] (True = real).
    """
    b, _, n, _ = q.shape
    if mask is None:
        g = q.mean(dim=2, keepdim=True)  # [B, H, 1, d]
        bias = None
    else:
        m = mask[:, None, :, None].to(q.dtype)  # [B, 1, N, 1]
        g = (q * m).sum(dim=2, keepdim=True) / m.sum(dim=2, keepdim=True).clamp_min(1.0)  # [B, H, 1, d]
        bias = torch.zeros(b, 1, 1, n, dtype=q.dtype, device=q.device)
        bias = bias.masked_fill(~mask[:, None, None, :], masked_fill_value(q.dtype))  # [B, 1, 1, N]
    return F.scaled_dot_product_attention(g, k, k, attn_mask=bias, dropout_p=dropout_p)  # [B, H, 1, d]


def segment_max_pool(x: Tensor, mask: Tensor, segments: int) -> Tensor:
    """SMP (§3.1): each token gets the feature-wise max over its segment's real tokens: [B, N, D].

    Sample b's real tokens, in order, form ``segments`` segments of ⌈n_b/S⌉ consecutive ones (n_b = its real
    count; the last ones short or empty). Padded tokens join no segment; their output is the max over the
    padded tokens (never read by a real one). One scatter-amax over the batch, then a gather: O(N·D).
    """
    b, n, d = x.shape
    n_real = mask.sum(dim=1, keepdim=True)  # [B, 1]
    seg_len = torch.div(n_real + (segments - 1), segments, rounding_mode="floor").clamp_min(1)  # [B, 1]
    rank = mask.cumsum(dim=1) - 1  # [B, N]: index of each real token among the real ones
    bucket = torch.where(mask, torch.div(rank, seg_len, rounding_mode="floor"), segments)  # [B, N] in [0, S]
    index = bucket[..., None].expand(-1, -1, d)  # [B, N, D]
    pooled = x.new_zeros(b, segments + 1, d).scatter_reduce(1, index, x, reduce="amax", include_self=False)
    # pooled: [B, S+1, D] (bucket S: the padding); empty buckets stay 0 and are never gathered by a real token.
    return pooled.gather(1, index)  # [B, N, D]


def local_max_pool(x: Tensor, mask: Tensor | None, kernel: int) -> Tensor:
    """LMP (§3.1): feature-wise max over the real tokens of the centred window of ``kernel`` tokens: [B, N, D].

    Padded tokens enter as −inf (as beyond both ends), so a real token's window max is over real tokens only
    (it contains the token itself); a padded token whose window is all padding gets −inf (callers zero it).
    """
    if mask is not None:
        x = x.masked_fill(~mask[..., None], float("-inf"))
    pooled = F.max_pool1d(x.transpose(1, 2), kernel, stride=1, padding=kernel // 2)  # [B, D, N]
    return pooled.transpose(1, 2)  # [B, N, D]


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = "its global and segment poolings mix future positions; the paper defines an encoder only"


@register("ponet", PoNetConfig, Capabilities(causal_note=CAUSAL_NOTE, complexity="n"),
          paper="https://arxiv.org/abs/2110.02442", display="PoNet", group="sparse / local")
class PoNetAttention(nn.Module):
    """PoNet multi-granularity pooling mixer (GA, SMP, LMP + pooling fusion); paper arxiv.org/abs/2110.02442.

    From five projections Q, K, O, S, L of X: g' = GA(Q, K) (one vector per head), s = SMP(S), l = LMP(L),
    fused per token as o_i = (g' + s_i) ∘ O_i + l_i (§3.2, authors' code), then the output projection.
    O(n·D) time and memory.

    Choices and deviations (the paper leaves these open, or the authors' code decides them):
    - Values of GA are the keys (V = K), and the fusion is (g' + s) ∘ O + l, both as the authors' code.
    - Segments: LRA has no sentences, so the sequence is cut into S segments of equal length (authors' LRA
      code: S from the task config, length n // S + 1 over the padded length). Here the segments are cut over
      each sample's real tokens, ⌈n_b/S⌉ long, so a padded sequence gives what the unpadded one gives and no
      segment mixes real tokens with padding; with n_b a multiple of S this differs from the code's
      n // S + 1 by one token per segment.
    - Padding is excluded from every pool: from GA's mean and its softmax (``masked_fill_value``), from SMP
      (padded tokens join no segment) and from LMP (−inf, like the code's −10000); padded output rows are
      zeroed before the output projection (as the code), and X is zeroed at padded positions first.
    - Projections: one fused Linear D -> 5D (Q, K, O, S, L; the code's five Linears) and the output projection
      (the code's ``PoNetSelfOutput.dense``); heads only matter for GA's softmax and mean.
    - Dropout ``dropout`` on GA's attention weights in training (the only attention weights; the code has
      none inside the mixer).
    """

    def __init__(self, cfg: PoNetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.proj = nn.Linear(cfg.dim, 5 * cfg.dim)  # Q, K, O, S, L in one GEMM
        self.out = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        cfg = self.cfg
        b, n, d = x.shape
        x = zero_padding(x, mask)
        q, k, o, s, loc = self.proj(x).chunk(5, dim=-1)  # each [B, N, D]
        p = cfg.dropout if self.training else 0.0
        g = global_aggregation(split_heads(q, cfg.heads), split_heads(k, cfg.heads), mask, p)  # [B, H, 1, dh]
        g = g.transpose(1, 2).reshape(b, 1, d)  # [B, 1, D]: heads merged, broadcast over positions
        seg_mask = mask if mask is not None else torch.ones(b, n, dtype=torch.bool, device=x.device)
        s = segment_max_pool(s, seg_mask, cfg.segments)  # [B, N, D]
        loc = local_max_pool(loc, mask, cfg.local_kernel)  # [B, N, D]
        y = (g + s) * o + loc  # [B, N, D]
        if mask is not None:
            # where, not a product: padded rows may hold −inf from LMP, and inf·0 would be NaN.
            y = torch.where(mask[..., None], y, torch.zeros((), dtype=y.dtype, device=y.device))
        return self.out(y)

