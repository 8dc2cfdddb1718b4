"""``none``: the no-mixing control. Its output is zero, so a pre-LN block ``x + Attn(LN(x))`` reduces to its MLP
path and every token is classified from its own embedding, position and the pooling alone.

Not an attention from a paper: a control, the "FF-only" model of Lee-Thorp et al. 2021 (FNet,
https://arxiv.org/abs/2105.03824), which asks the same question of its mixers. A task on which a model without token
mixing does as well as one with attention does not measure attention; accuracy tables mark rows that do not beat
it.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from .registry import AttentionConfig, Capabilities, register


@dataclass(frozen=True)
class NoneConfig(AttentionConfig):
    """No fields of its own: ``dim``, ``heads``, ``max_seq_len`` and ``dropout`` are accepted and unused, so the
    control drops into every suite beside the attentions."""


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = "not implemented yet"


@register("none", NoneConfig, Capabilities(complexity="n", mixes_tokens=False, causal_note=CAUSAL_NOTE),
          benchmark=False, paper="https://arxiv.org/abs/2105.03824")
class NoMixing(nn.Module):
    """No token mixing (the control): the output is zero, the block keeps its residual and MLP paths."""

    def __init__(self, cfg: NoneConfig) -> None:
        super().__init__()
        self.cfg = cfg

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        # [B, N, D] zeros that stay in the autograd graph (a zero gradient), so the layer alone can run fwd+bwd
        # like every other variant (the speed suite, the registry's tests); a fresh zeros tensor could not
        return x * 0.0
