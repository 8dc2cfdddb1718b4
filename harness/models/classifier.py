"""The encoder classifier used for training steps and accuracy: attention picked from the registry by name.

Pre-LN Transformer encoder as in the PyTorch LRA codebases (defaults: embedding 64, MLP 128, 2 heads of 32,
2 layers): token + learned position embedding -> N x [LN -> attention -> residual, LN -> MLP -> residual]
-> final LN -> masked mean pooling (or the first token, or the mean over every position) -> MLP head.
Retrieval-style pairs use a dual-encoder head over [x0, x1, x0*x1, x0-x1].
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor, nn

import attentions


class Block(nn.Module):
    """Pre-LN encoder block: x + Attn(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, attention: str, dim: int, heads: int, mlp_dim: int, max_seq_len: int, dropout: float,
                 attention_overrides: dict[str, Any]) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = attentions.build(attention, **{**attention_overrides, "dim": dim, "heads": heads,
                                                   "max_seq_len": max_seq_len})
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(mlp_dim, dim), nn.Dropout(dropout))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        x = x + self.drop(self.attn(self.ln1(x), mask))
        return x + self.mlp(self.ln2(x))


class Encoder(nn.Module):
    """Token ids [B, N] -> pooled features [B, D]."""

    def __init__(self, attention: str, *, vocab_size: int, max_seq_len: int, dim: int = 64, heads: int = 2,
                 layers: int = 2, mlp_dim: int = 128, dropout: float = 0.1,
                 pooling: Literal["mean", "cls", "mean_all"] = "mean",
                 attention_overrides: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.pooling = pooling
        self.tok = nn.Embedding(vocab_size, dim)
        self.pos = nn.Embedding(max_seq_len, dim)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            Block(attention, dim, heads, mlp_dim, max_seq_len, dropout, attention_overrides or {})
            for _ in range(layers)
        )
        self.ln = nn.LayerNorm(dim)

    def forward(self, tokens: Tensor, mask: Tensor | None = None) -> Tensor:
        n = tokens.shape[1]
        x = self.drop(self.tok(tokens) + self.pos(torch.arange(n, device=tokens.device)))  # [B, N, D]
        for block in self.blocks:
            x = block(x, mask)
        x = self.ln(x)
        if self.pooling == "cls":
            return x[:, 0]
        if mask is None or self.pooling == "mean_all":  # mean_all: padding included, as the released trainer
            return x.mean(dim=1)
        w = mask.to(x.dtype).unsqueeze(-1)  # [B, N, 1]: padded positions excluded from the mean
        return (x * w).sum(1) / w.sum(1).clamp_min(1.0)


class Classifier(nn.Module):
    """Encoder + MLP head; ``dual=True`` classifies a pair from [x0, x1, x0*x1, x0-x1] (LRA Retrieval)."""

    def __init__(self, attention: str, *, num_classes: int, dual: bool = False, **encoder_kwargs: Any) -> None:
        super().__init__()
        self.dual = dual
        self.encoder = Encoder(attention, **encoder_kwargs)
        dim = self.encoder.tok.embedding_dim
        feat = 4 * dim if dual else dim
        mlp_dim = encoder_kwargs.get("mlp_dim", 128)
        self.head = nn.Sequential(nn.Linear(feat, mlp_dim), nn.ReLU(), nn.Linear(mlp_dim, num_classes))

    def forward(self, tokens: Tensor, mask: Tensor | None = None, tokens_1: Tensor | None = None,
                mask_1: Tensor | None = None) -> Tensor:
        x0 = self.encoder(tokens, mask)
        if not self.dual:
            return self.head(x0)
        if tokens_1 is None:
            raise ValueError("a dual classifier needs tokens_1")
        x1 = self.encoder(tokens_1, mask_1)
        return self.head(torch.cat((x0, x1, x0 * x1, x0 - x1), dim=-1))
