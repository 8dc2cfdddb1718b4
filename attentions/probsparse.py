"""ProbSparse self-attention (Informer's encoder): full attention for the few queries whose scores are far from
uniform, the mean of the values for the rest.

Paper: Zhou, Zhang, Peng, Zhang, Li, Xiong, Zhang, "Informer: Beyond Efficient Transformer for Long Sequence
Time-Series Forecasting", AAAI 2021, https://arxiv.org/abs/2012.07436 (§3.1, eq. 3–4, Lemma 1). Authors' code:
``zhouhaoyi/Informer2020`` (``models/attn.py``, ``ProbAttention``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import ProjectedAttention, merge_heads, per_real_length, split_heads
from .registry import AttentionConfig, Capabilities, register


@dataclass(frozen=True)
class ProbSparseConfig(AttentionConfig):
    """Config of ProbSparse attention.

    Attributes:
        factor: c in u = c · ⌈ln L⌉, both the number of keys sampled per query to measure sparsity and the number of
            active queries (the authors' code uses one factor for both). 3 is the ``--factor`` of the forecasting
            scripts that produced the S3Attention paper's Table 2 (Informer's own default is 5).
    """

    factor: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("factor")


def active_count(factor: int, length: int) -> int:
    """u = min(L, c · ⌈ln L⌉): active queries, and keys sampled per query (at least one)."""
    return min(length, max(1, factor * math.ceil(math.log(length)))) if length > 1 else 1


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = "not implemented yet"


@register(
    "probsparse",
    ProbSparseConfig,
    Capabilities(causal_note=CAUSAL_NOTE, complexity="n log n", approximates_softmax=True),
    paper="https://arxiv.org/abs/2012.07436",
)
class ProbSparseAttention(ProjectedAttention):
    """Informer's ProbSparse self-attention (non-causal, the encoder's); arxiv 2012.07436.

    Per head: sample u keys per query, measure each query's sparsity M̄(q, K) = max_j q·k_j − Σ_j q·k_j / L over
    its sampled keys (eq. 4), give the u queries with the largest M̄ full softmax(q Kᵀ/√d) V, and every other query
    the mean of V (the "lazy" queries' output for non-causal attention). u = c ⌈ln L⌉ keeps the cost O(L ln L).

    Choices and deviations:
    - As the authors' code: one set of sampled key indices per call, shared by the batch and the heads (drawn from
      torch's global RNG on every call, so the layer is random per call like Reformer); the sampled sum is divided
      by L, not by the sample size (a constant shift of M̄ for all queries of a sequence: the choice is the same).
    - Padding (the paper has none): each sequence is processed over its real tokens only
      (:func:`~attentions.base.per_real_length`): u, the samples, the softmax and the mean of V see its real length.
    - Causal ProbSparse (Informer's decoder: lazy queries get the cumulative mean of V) belongs to the forecaster's
      decoder, not to this token mixer.
    - Dropout on the active queries' attention weights, in training (the authors' ``attention_dropout``).
    - With u ≥ L every query is active and the layer is exact softmax attention (tested).
    """

    cfg: ProbSparseConfig

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        qkv = self.proj.qkv(x)  # [B, N, 3D]
        return self.out(per_real_length(qkv, mask, self.attend))  # [B, N, D]

    def attend(self, qkv: Tensor) -> Tensor:
        """[R, L, 3D] (Q, K, V of sequences of one real length) -> [R, L, D]."""
        q, k, v = (split_heads(t, self.cfg.heads) for t in qkv.chunk(3, dim=-1))  # [R, H, L, d] each
        r, h, length, d = q.shape
        u = active_count(self.cfg.factor, length)
        sample = torch.randint(length, (length, u), device=q.device)  # [L, u]: keys sampled for each query
        scores_sample = torch.einsum("rhld,rhlsd->rhls", q, k[:, :, sample])  # [R, H, L, u]
        sparsity = scores_sample.amax(dim=-1) - scores_sample.sum(dim=-1) / length  # [R, H, L]: M̄ of eq. 4
        top = sparsity.topk(u, dim=-1).indices  # [R, H, u]: the active queries
        q_top = torch.gather(q, 2, top[..., None].expand(r, h, u, d))  # [R, H, u, d]
        attn = (q_top @ k.transpose(-1, -2) * d**-0.5).softmax(dim=-1)  # [R, H, u, L]
        attn = F.dropout(attn, p=self.cfg.dropout, training=self.training)
        lazy = v.mean(dim=2, keepdim=True).expand(r, h, length, d)  # [R, H, L, d]: the mean of V for every query
        out = torch.scatter(lazy, 2, top[..., None].expand(r, h, u, d), attn @ v)  # active queries' rows replaced
        return merge_heads(out)  # [R, L, D]
