"""The causal language model of Zoology's Figure 2 (MQAR), with any zoo variant's causal form as its sequence mixer.

Arora, Eyuboglu et al., "Zoology", ICLR 2024, https://arxiv.org/abs/2312.04927; the architecture followed is the
authors' ``zoology/model.py`` (``LanguageModel`` with ``TransformerBlock``) as Figure 2's configs build it:

token + learned position embedding -> embedding dropout -> ``layers`` x [residual += mixer(LN(residual));
hidden = state_mixer(LN(residual))] -> residual += hidden -> final LN -> logits with the token embedding (tied).

The state mixer is an identity (``state_mixer = Identity``: no MLP), so each block hands ``LN(residual)`` to the next,
which adds it to the residual stream, as the authors' block does. Weights start as theirs (``_init_weights``): linear
and embedding weights N(0, 0.02), biases 0, and the output projection of each mixer N(0, 0.02/√(2·layers))
(GPT-2's rescaling of the residual branches). Figure 2's attention has one head and attention dropout 0.1; the mixer
here is built with ``heads`` and ``dropout`` as given.

Logits are computed at the positions asked for (MQAR's query positions) only: the loss and the accuracy are counted
there, so the other positions' logits over the 8,192-token vocabulary would be computed for nothing.
"""

from __future__ import annotations

import math
from typing import Any

from torch import Tensor, nn

import attentions


class MixerBlock(nn.Module):
    """One Zoology ``TransformerBlock`` with an identity state mixer: (hidden, residual) -> (hidden, residual)."""

    def __init__(self, attention: str, dim: int, heads: int, max_seq_len: int, dropout: float,
                 attention_overrides: dict[str, Any]) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.mixer = attentions.build(attention, **{**attention_overrides, "dim": dim, "heads": heads,
                                                    "max_seq_len": max_seq_len, "dropout": dropout, "causal": True})
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, hidden: Tensor, residual: Tensor | None) -> tuple[Tensor, Tensor]:
        residual = hidden if residual is None else hidden + residual
        residual = residual + self.mixer(self.norm1(residual), None)
        return self.norm2(residual), residual  # the identity state mixer


class CausalLM(nn.Module):
    """Token ids [B, N] -> logits [M, V] at the M positions a boolean [B, N] selects (all, if none is given)."""

    def __init__(self, attention: str, *, vocab_size: int, max_seq_len: int, dim: int = 64, heads: int = 1,
                 layers: int = 2, dropout: float = 0.1, embed_dropout: float = 0.1,
                 attention_overrides: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab_size, dim)
        self.pos = nn.Embedding(max_seq_len, dim)
        self.drop = nn.Dropout(embed_dropout)
        self.blocks = nn.ModuleList(MixerBlock(attention, dim, heads, max_seq_len, dropout, attention_overrides or {})
                                    for _ in range(layers))
        self.norm_f = nn.LayerNorm(dim)
        self._init_weights(layers)

    def _init_weights(self, layers: int) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        for block in self.blocks:  # the residual branch's last projection, scaled as the authors' (GPT-2's)
            out = getattr(block.mixer, "out", None) or getattr(block.mixer, "out_proj", None)
            if isinstance(out, nn.Linear):
                nn.init.normal_(out.weight, std=0.02 / math.sqrt(2 * layers))

    def forward(self, tokens: Tensor, select: Tensor | None = None) -> Tensor:
        n = tokens.shape[1]
        hidden: Tensor = self.drop(self.tok(tokens) + self.pos.weight[:n])  # [B, N, D]
        residual = None
        for block in self.blocks:
            hidden, residual = block(hidden, residual)
        out = self.norm_f(hidden + residual)  # [B, N, D]
        out = out.reshape(-1, out.shape[-1]) if select is None else out[select]  # [M, D]
        return out @ self.tok.weight.T  # [M, V]: the head tied to the token embedding
