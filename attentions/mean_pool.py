"""``mean_pool``: the uniform-mixing control. Every token receives the same vector, a linear map of the mean of the
real (unpadded) tokens: softmax attention with all scores equal, i.e. the sequence's bag of features without any
pairwise comparison.

Not an attention from a paper: a control beside ``none`` (see ``attentions/none.py``), the global form of the
pooling mixer of Yu et al. 2022 (MetaFormer/PoolFormer, https://arxiv.org/abs/2111.11418). Where ``none`` scores at
chance and ``mean_pool`` well above it, the task needs global context but not content-based routing; only a score
above both measures what attention adds. The value and output projections of attention collapse into one ``Linear``
here, since the mean commutes with a linear map: out(mean_j v(x_j)) = (out ∘ v)(mean_j x_j).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ._decode import check_capacity
from .registry import AttentionConfig, Capabilities, register


@dataclass(frozen=True)
class MeanPoolConfig(AttentionConfig):
    """No fields of its own (``heads`` and ``dropout`` are accepted and unused: there are no weights to drop)."""


#: The causal form and the decoding state, in words (``attnbench list``).
CAUSAL_NOTE = "position i gets W·mean(real tokens ≤ i) + b: softmax attention with equal scores, causally masked"
DECODE_NOTE = "the running sum of the real tokens and their count ([B, D] and [B])"


@dataclass
class RunningMean:
    """The decoding state of the causal mean: Σ x_j over the real tokens so far and their number.

    Attributes:
        total: [B, D], the sum of the real tokens (prompt padding left out).
        count: [B] int64, how many real tokens the sum holds.
        length: tokens so far, padding included.
        capacity: tokens the state was sized for.
    """

    total: Tensor
    count: Tensor
    length: int
    capacity: int


@register(
    "mean_pool", MeanPoolConfig,
    Capabilities(complexity="n", causal=True, decode=True, causal_note=CAUSAL_NOTE, decode_note=DECODE_NOTE),
    paper="https://arxiv.org/abs/2111.11418", display="mean pooling (control)", group="controls", benchmark=False,
)
class MeanPool(nn.Module):
    """Uniform token mixing (a control): every position gets W·mean(real tokens) + b.

    Causal (``causal=True``): position i gets W·mean(real tokens j ≤ i) + b, the causal form of softmax attention
    with all scores equal (a cumulative sum over the sequence and a cumulative count of real tokens, O(N·D)); a
    position with no real token at or before it gets W·0 + b. Decoding: the running sum and count
    (:class:`RunningMean`), one [B, D] and one [B] tensor whatever the context.
    """

    def __init__(self, cfg: MeanPoolConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.proj = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        if self.cfg.causal:
            return self._causal(x, mask)
        if mask is None:
            mean = x.mean(dim=1, keepdim=True)  # [B, 1, D]
        else:
            w = mask.to(x.dtype).unsqueeze(-1)  # [B, N, 1]; padded positions weigh nothing
            mean = (x * w).sum(dim=1, keepdim=True) / w.sum(dim=1, keepdim=True).clamp_min(1.0)  # [B, 1, D]
        return self.proj(mean).expand_as(x)  # [B, N, D], one vector for every position

    def _causal(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """W·(Σ_{j≤i} real x_j / #{real j ≤ i}) + b for every i: [B, N, D]."""
        w = torch.ones_like(x[..., :1]) if mask is None else mask.to(x.dtype).unsqueeze(-1)  # [B, N, 1]
        total = (x * w).cumsum(dim=1)  # [B, N, D]: sums of the real tokens up to each position
        return self.proj(total / w.cumsum(dim=1).clamp_min(1.0))  # [B, N, D]

    def prefill(self, x: Tensor, mask: Tensor | None = None, *, capacity: int) -> tuple[Tensor, RunningMean]:
        """The causal form over a prompt x [B, P, D] and the running sum and count after it (see ``_decode``)."""
        check_capacity(capacity, x.shape[1])
        real = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device) if mask is None else mask  # [B, P]
        state = RunningMean((x * real.unsqueeze(-1).to(x.dtype)).sum(dim=1), real.sum(dim=1), x.shape[1], capacity)
        return self._causal(x, mask), state

    def step(self, x: Tensor, state: RunningMean) -> tuple[Tensor, RunningMean]:
        """One (real) token x [B, 1, D] joins the sum; its output is W·(the mean so far) + b."""
        if state.length >= state.capacity:
            raise ValueError(f"the state holds {state.capacity} tokens; {state.length} written, 1 more asked")
        state.total += x[:, 0]
        state.count += 1
        state.length += 1
        return self.proj(state.total / state.count.unsqueeze(-1).to(x.dtype)).unsqueeze(1), state  # [B, 1, D]
