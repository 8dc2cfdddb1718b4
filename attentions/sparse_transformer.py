"""Sparse Transformer: the factorised "fixed" and "strided" attention patterns, in their non-causal (encoder) form.

Paper: Child, Gray, Radford, Sutskever, "Generating Long Sequences with Sparse Transformers",
https://arxiv.org/abs/1904.10509 (§4.2 factorised patterns, §4.3 "merged" heads: one head attends to the union
A(1) ∪ A(2)). LRA's code: ``lra_benchmarks/models/sparse_transformer/sparse_attention.py`` (merged fixed pattern,
block 128, c = 32, the paper's Enwik8 setting).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from ._blocks import block_sparse_attention, gather_blocks, neighbour_blocks, pad_for_blocks
from .base import ProjectedAttention, fill_masked, merge_heads, zero_padding
from .registry import AttentionConfig, Capabilities, register, register_preset

Pattern = Literal["fixed", "strided"]


@dataclass(frozen=True)
class SparseTransformerConfig(AttentionConfig):
    """Config of Sparse Transformer attention (merged heads: every head attends to A(1) ∪ A(2)).

    Attributes:
        pattern: "fixed" (A(1) = the query's block of l, A(2) = the last c positions of every block) or
            "strided" (A(1) = the positions within l of the query, A(2) = every l-th position from it).
        stride: l, the block length (fixed) or stride (strided). 128: the paper's Enwik8 setting and LRA's.
        summary: c, the "summary" positions per block of the fixed pattern (32: Enwik8 and LRA; the paper
            reports c ∈ {8, 16, 32} working for l ∈ {128, 256}). Unused by the strided pattern.
    """

    pattern: Pattern = "fixed"
    stride: int = 128
    summary: int = 32

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("stride", "summary")
        if self.pattern not in ("fixed", "strided"):
            raise ValueError(f"pattern must be 'fixed' or 'strided', got {self.pattern!r}")
        if self.summary > self.stride:
            raise ValueError(f"summary c={self.summary} cannot exceed the block length l={self.stride}")


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = "not implemented yet"


@register(
    "sparse_transformer",
    SparseTransformerConfig,
    Capabilities(approximates_softmax=True, complexity="n^2", seq_len_multiple_of=128, pads_to_multiple=True,
                 causal_note=CAUSAL_NOTE),
    paper="https://arxiv.org/abs/1904.10509",
)
class SparseTransformerAttention(ProjectedAttention):
    """Sparse Transformer, fixed or strided factorised pattern, non-causal; arxiv.org/abs/1904.10509.

    y_i = softmax over j ∈ A(1)_i ∪ A(2)_i of q_i·k_j/√d, one softmax per query (the paper's "merged" head), with
    fixed:   A(1)_i = {j : ⌊j/l⌋ = ⌊i/l⌋},  A(2)_i = {j : j mod l ≥ l - c};
    strided: A(1)_i = {j : |i - j| <= l},   A(2)_i = {j : (i - j) mod l = 0}.
    Computed blockwise, never an n×n matrix: fixed = own block + the n·c/l summary keys as extra keys; strided =
    the band from the neighbour blocks + the n/l keys of the query's column of the [n/l, l] grid.

    Choices and deviations:
    - Non-causal (encoder) form: the paper's patterns are causal (A(1) = {i-l, ..., i} and only j <= i in A(2));
      for an encoder we drop causality and make A(1) symmetric. LRA's code keeps the causal mask even in its
      encoders; we do not.
    - Cost: each query attends to l + n/l (strided) or l + c·n/l (fixed) keys, O(n²/l) for a fixed l — linear
      only while n/l stays small, O(n√n) when l ≈ √n as the paper chooses it. ``complexity`` is therefore
      "n^2" (quadratic with a 1/l constant), not "n".
    - Heads: every head attends to the union A(1) ∪ A(2) ("merged", §4.3, as LRA's code); the paper's
      alternatives (interleaving patterns across layers, or splitting the patterns across heads, and distinct
      summary offsets per head) are not implemented. LRA's fixed pattern also adds position j mod l = 0 to A(2);
      we follow the paper's definition.
    - The sequence is padded internally to a multiple of l (padding masked as keys, output cropped); positions
      are absolute, so padding never changes the pattern of the real positions.
    - Masked keys get the dtype's most negative finite score; dropout on the attention weights in training.
    """

    cfg: SparseTransformerConfig

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        cfg = self.cfg
        n = x.shape[1]
        x = zero_padding(x, mask)
        xp, mp = pad_for_blocks(x, mask, cfg.stride)  # [B, N', D], N' = nb·l
        if mp is None:
            mp = torch.ones(xp.shape[:2], dtype=torch.bool, device=x.device)
        q, k, v = self.proj(xp)  # each [B, H, N', d]
        attend = self._fixed if cfg.pattern == "fixed" else self._strided
        y = attend(q, k, v, mp)  # [B, H, N', d]
        return self.out(merge_heads(y)[:, :n])  # [B, N, D]

    def _fixed(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        """Own block (A(1)) + the last c positions of every other block as extra keys (A(2)): [B, H, N', d]."""
        cfg = self.cfg
        b, h, n, d = q.shape
        l, c = cfg.stride, cfg.summary
        nb = n // l
        summary_k = k.view(b, h, nb, l, d)[:, :, :, l - c :].reshape(b, h, nb * c, d)  # [B, H, nb·c, d]
        summary_v = v.view(b, h, nb, l, d)[:, :, :, l - c :].reshape(b, h, nb * c, d)  # [B, H, nb·c, d]
        summary_real = mask.view(b, nb, l)[:, :, l - c :].reshape(b, nb * c)  # [B, nb·c]
        # A query block's own summary positions are already in A(1): drop them from the extra keys.
        summary_block = torch.arange(nb, device=q.device).repeat_interleave(c)  # [nb·c]
        other = summary_block[None, :] != torch.arange(nb, device=q.device)[:, None]  # [nb, nb·c]
        extra_mask = summary_real[:, None, None, None, :] & other[None, None, :, None, :]  # [B, 1, nb, 1, nb·c]
        own = torch.arange(nb, device=q.device)[:, None]  # [nb, 1]
        p = cfg.dropout if self.training else 0.0
        return block_sparse_attention(
            q, k, v, l, own, key_mask=mask, extra_k=summary_k, extra_v=summary_v, extra_mask=extra_mask,
            dropout_p=p, training=self.training,
        )

    def _strided(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        """Band |i-j| <= l from blocks i-1, i, i+1 (A(1)) + the query's column of the [nb, l] grid (A(2))."""
        cfg = self.cfg
        b, h, n, d = q.shape
        l = cfg.stride
        nb = n // l
        scale = d**-0.5
        dev = q.device
        qb = q.view(b, h, nb, l, d) * scale  # [B, H, nb, l, d]: query o of block a is position a·l + o
        nbrs = neighbour_blocks(nb, 1, 1, dev)  # [nb, 3]
        kg, vg = gather_blocks(k, nbrs, l), gather_blocks(v, nbrs, l)  # [B, H, nb, 3l, d]
        band = torch.matmul(qb, kg.transpose(-1, -2))  # [B, H, nb, l, 3l]
        pos = torch.arange(n, device=dev)
        key_pos = (nbrs[:, :, None] * l + torch.arange(l, device=dev)).flatten(1)  # [nb, 3l]
        slot_listed = (nbrs >= 0).repeat_interleave(l, -1)  # [nb, 3l]: False for the blocks past either end
        band_ok = ((pos.view(nb, l, 1) - key_pos[:, None, :]).abs() <= l) & slot_listed[:, None, :]  # [nb, l, 3l]
        key_real = gather_blocks(mask[:, None, :, None], nbrs, l)[:, :, :, None, :, 0]  # [B, 1, nb, 1, 3l]
        band = fill_masked(band, band_ok & key_real)
        # Column o of the grid: the keys a'·l + o, (i - j) mod l = 0. Blocks a' within 1 of a are in the band.
        kc, vc = k.view(b, h, nb, l, d), v.view(b, h, nb, l, d)  # [B, H, nb, l, d]
        col = torch.einsum("bhaod,bhcod->bhaoc", qb, kc)  # [B, H, nb, l, nb]: query (a, o), key (a', o)
        blocks = torch.arange(nb, device=dev)
        far = ((blocks[:, None] - blocks[None]).abs() > 1)[:, None, :]  # [nb, 1, nb]
        col_real = mask.view(b, nb, l).transpose(1, 2)[:, None, None]  # [B, 1, 1, l, nb]: key (a', o) is real
        col = fill_masked(col, far & col_real)
        attn = torch.cat([band, col], dim=-1).softmax(dim=-1)  # [B, H, nb, l, 3l + nb]
        attn = F.dropout(attn, p=cfg.dropout, training=self.training)
        y = torch.matmul(attn[..., : 3 * l], vg)  # [B, H, nb, l, d]
        y = y + torch.einsum("bhaoc,bhcod->bhaod", attn[..., 3 * l :], vc)  # [B, H, nb, l, d]
        return y.reshape(b, h, n, d)  # [B, H, N', d]


register_preset(
    "sparse_transformer_strided",
    "sparse_transformer",
    pattern="strided",
    description="Sparse Transformer, strided pattern (band of ±l + every l-th position), non-causal, l = 128.",
)
