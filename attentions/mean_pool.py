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

from torch import Tensor, nn

from .registry import AttentionConfig, Capabilities, register


@dataclass(frozen=True)
class MeanPoolConfig(AttentionConfig):
    """No fields of its own (``heads`` and ``dropout`` are accepted and unused: there are no weights to drop)."""


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = "not implemented yet"


@register("mean_pool", MeanPoolConfig, Capabilities(causal_note=CAUSAL_NOTE, complexity="n"), paper="https://arxiv.org/abs/2111.11418",
          benchmark=False)
class MeanPool(nn.Module):
    """Uniform token mixing (a control): every position gets W·mean(real tokens) + b."""

    def __init__(self, cfg: MeanPoolConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.proj = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        if mask is None:
            mean = x.mean(dim=1, keepdim=True)  # [B, 1, D]
        else:
            w = mask.to(x.dtype).unsqueeze(-1)  # [B, N, 1]; padded positions weigh nothing
            mean = (x * w).sum(dim=1, keepdim=True) / w.sum(dim=1, keepdim=True).clamp_min(1.0)  # [B, 1, D]
        return self.proj(mean).expand_as(x)  # [B, N, D], one vector for every position
