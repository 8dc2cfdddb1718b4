"""Sparse Transformer: the factorised "fixed" and "strided" attention patterns, in the paper's causal form and in a
non-causal (encoder) relaxation of it.

Paper: Child, Gray, Radford, Sutskever, "Generating Long Sequences with Sparse Transformers",
https://arxiv.org/abs/1904.10509 (§4.2 factorised patterns, §4.3 "merged" heads: one head attends to the union
A(1) ∪ A(2)). LRA's code: ``lra_benchmarks/models/sparse_transformer/sparse_attention.py`` (merged fixed pattern,
block 128, c = 32, the paper's Enwik8 setting). The authors' code: ``openai/sparse_attention``, ``attention.py``
(``get_attn_mask``, ``get_blocksparse_obj``: the causal patterns as dense masks and as block layouts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from ._blocks import attend_slots, block_sparse_attention, gather_blocks, neighbour_blocks, pad_for_blocks
from ._decode import KVCache, check_capacity
from ._flex import FlexPattern, MaskMod, PatternConfig, register_flex_preset
from .base import ProjectedAttention, fill_masked, merge_heads, zero_padding
from .registry import Capabilities, register, register_preset

Pattern = Literal["fixed", "strided"]


@dataclass(frozen=True)
class SparseTransformerConfig(PatternConfig):
    """Config of Sparse Transformer attention (merged heads: every head attends to A(1) ∪ A(2)).

    Attributes:
        pattern: "fixed" (A(1) = the query's block of l, A(2) = the last c positions of every block) or
            "strided" (A(1) = the positions within l of the query, A(2) = every l-th position from it).
        stride: l, the block length (fixed) or stride (strided). 128: the paper's Enwik8 setting and LRA's.
        summary: c, the "summary" positions per block of the fixed pattern (32: Enwik8 and LRA; the paper
            reports c ∈ {8, 16, 32} working for l ∈ {128, 256}). Unused by the strided pattern.
        backend: "blocks" (block gathers) or "flex" (FlexAttention with the same pattern; :mod:`attentions._flex`).
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


#: The causal forms and their decoding state, in words (``attnbench list``).
CAUSAL_NOTE = ("the paper's causal fixed pattern (§4.2), merged: query i reads its own block of l up to itself and "
               "the last c positions of every earlier block")
STRIDED_CAUSAL_NOTE = ("the paper's causal strided pattern (§4.2), merged: query i reads i - l .. i and every "
                       "i - k·l before it")
DECODE_NOTE = ("a KV cache of every token (the summary or strided keys reach every earlier block); a step reads "
               "only its pattern's keys")


@register(
    "sparse_transformer",
    SparseTransformerConfig,
    Capabilities(approximates_softmax=True, complexity="n^2", seq_len_multiple_of=128, pads_to_multiple=True,
                 causal=True, decode=True, causal_note=CAUSAL_NOTE, decode_note=DECODE_NOTE),
    paper="https://arxiv.org/abs/1904.10509", display="Sparse Transformer", group="sparse / local",
)
class SparseTransformerAttention(FlexPattern, ProjectedAttention):
    """Sparse Transformer, fixed or strided factorised pattern, causal or not; arxiv.org/abs/1904.10509.

    y_i = softmax over j ∈ A(1)_i ∪ A(2)_i of q_i·k_j/√d, one softmax per query (the paper's "merged" head), with
    fixed:   A(1)_i = {j : ⌊j/l⌋ = ⌊i/l⌋},  A(2)_i = {j : j mod l ≥ l - c};
    strided: A(1)_i = {j : |i - j| <= l},   A(2)_i = {j : (i - j) mod l = 0}.
    Computed blockwise, never an n×n matrix: fixed = own block + the n·c/l summary keys as extra keys; strided =
    the band from the neighbour blocks + the n/l keys of the query's column of the [n/l, l] grid.

    Causal (``causal=True``): the paper's own patterns (§4.2), merged, only j <= i:
    fixed:   A(1)_i = {j : ⌊j/l⌋ = ⌊i/l⌋, j <= i},  A(2)_i = {j : j mod l ≥ l - c, j <= i};
    strided: A(1)_i = {i - l, ..., i},              A(2)_i = {j : (i - j) mod l = 0, j <= i}.
    Blockwise as above: fixed = own block under the mask j <= i + the summary keys of the earlier blocks (the own
    block's summary positions up to i are in A(1)); strided = the band from the block before and its own + the
    column keys of the blocks two or more before (the column keys of those two are in the band).
    - As the authors' code (``openai/sparse_attention``, ``attention.py``): its fixed layout enables, for query
      block q, the summary block columns and the blocks of q's own l-block, zeroes every block column after q, and
      masks the upper triangle of the diagonal block, which is the set above at the position level; its strided
      mask is ``q >= k`` and ``(q - k) mod l = 0``. Its local mask (the first step of strided attention) reads
      i - l + 1 .. i, the paper's A(1) i - l .. i: in the merged union the two are the same set, since i - l ∈ A(2).
    - Decoding (``prefill``/``step``): a :class:`~attentions._decode.KVCache` of every token, since the strided
      column and the fixed summary keys reach back to the first block; a step gathers only its pattern's keys
      from it (about l + i/l of them strided, i mod l + 1 + c·⌊i/l⌋ fixed), never the whole cache.

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
    - ``backend="flex"``: A(1) ∪ A(2) above (causal: and j <= i) as a FlexAttention mask_mod (:meth:`flex_pattern`),
      over the same padded length; no dropout (see :mod:`attentions._flex`).
    """

    cfg: SparseTransformerConfig

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        y, _, _ = self._heads(x, mask, causal=self.cfg.causal)
        return self.out(merge_heads(y))  # [B, N, D]

    def prefill(self, x: Tensor, mask: Tensor | None = None, *, capacity: int) -> tuple[Tensor, KVCache]:
        """The causal form over a prompt x [B, P, D] and the KV cache for ``capacity`` tokens (see ``_decode``)."""
        check_capacity(capacity, x.shape[1])
        y, k, v = self._heads(x, mask, causal=True)  # [B, H, P, d] each
        cache = KVCache.empty(k, self.cfg.heads, capacity, self.cfg.head_dim)
        cache.append(k, v, mask)
        return self.out(merge_heads(y)), cache

    def step(self, x: Tensor, cache: KVCache) -> tuple[Tensor, KVCache]:
        """One token x [B, 1, D]: its key and value join the cache, its query reads its pattern's keys there."""
        q, k, v = self.proj(x)  # [B, H, 1, d] each
        cache.append(k, v)
        slots = self._causal_keys(cache.length - 1, x.device)  # [K]
        p = self.cfg.dropout if self.training else 0.0
        y = attend_slots(q, cache.k, cache.v, cache.real, slots, dropout_p=p, training=self.training)  # [B, H, 1, d]
        return self.out(merge_heads(y)), cache

    def _causal_keys(self, i: int, device: torch.device) -> Tensor:
        """The positions causal query i reads, A(1)_i ∪ A(2)_i, each once: [K] long."""
        l = self.cfg.stride
        if self.cfg.pattern == "strided":
            band = torch.arange(max(i - l, 0), i + 1, device=device)  # A(1): i - l .. i
            column = torch.arange(i % l, max(i - l, i % l), l, device=device)  # A(2) less i - l, i: i - k·l, k >= 2
            return torch.cat([column, band])
        c, block = self.cfg.summary, i // l
        own = torch.arange(block * l, i + 1, device=device)  # A(1): the own block up to i
        summary = torch.arange(block, device=device)[:, None] * l + torch.arange(l - c, l, device=device)  # [a, c]
        return torch.cat([summary.flatten(), own])  # A(2) of the earlier blocks (the own block's is in A(1))

    def _heads(self, x: Tensor, mask: Tensor | None, *, causal: bool) -> tuple[Tensor, Tensor, Tensor]:
        """The attention of every head over x [B, N, D], with its keys and values: y, k, v, each [B, H, N, d]."""
        cfg = self.cfg
        n = x.shape[1]
        x = zero_padding(x, mask)
        xp, mp = pad_for_blocks(x, mask, cfg.stride)  # [B, N', D], N' = nb·l
        if mp is None:
            mp = torch.ones(xp.shape[:2], dtype=torch.bool, device=x.device)
        q, k, v = self.proj(xp)  # each [B, H, N', d]
        if cfg.backend == "flex":  # without a mask, the BlockMask depends on n only and is kept (see _flex)
            real = None if mask is None else mp
            return self.flex_attend(q, k, v, real, causal=causal, length=n)[:, :, :n], k[:, :, :n], v[:, :, :n]
        attend = self._fixed if cfg.pattern == "fixed" else self._strided
        y = attend(q, k, v, mp, causal)  # [B, H, N', d]
        return y[:, :, :n], k[:, :, :n], v[:, :, :n]

    def flex_length(self, seq_len: int) -> int:
        """Padded to a multiple of l, as the blocks backend."""
        return -(-seq_len // self.cfg.stride) * self.cfg.stride

    def flex_pattern(self, n: int, device: torch.device, causal: bool) -> MaskMod:
        """A(1) ∪ A(2) of the class docstring as a mask_mod (causal: only j <= i)."""
        l, c, strided = self.cfg.stride, self.cfg.summary, self.cfg.pattern == "strided"

        def pattern(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            gap = q_idx - kv_idx
            if strided:
                keys = (gap.abs() <= l) | (gap % l == 0)
            else:
                keys = (q_idx // l == kv_idx // l) | (kv_idx % l >= l - c)
            return (keys & (gap >= 0)) if causal else keys

        return pattern

    def _fixed(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, causal: bool) -> Tensor:
        """Own block (A(1)) + the last c positions of every other block as extra keys (A(2)): [B, H, N', d].
        Causal: the own block up to the query, and the summary keys of the earlier blocks only."""
        cfg = self.cfg
        b, h, n, d = q.shape
        l, c = cfg.stride, cfg.summary
        nb = n // l
        summary_k = k.view(b, h, nb, l, d)[:, :, :, l - c :].reshape(b, h, nb * c, d)  # [B, H, nb·c, d]
        summary_v = v.view(b, h, nb, l, d)[:, :, :, l - c :].reshape(b, h, nb * c, d)  # [B, H, nb·c, d]
        summary_real = mask.view(b, nb, l)[:, :, l - c :].reshape(b, nb * c)  # [B, nb·c]
        # A query block's own summary positions are already in A(1): drop them from the extra keys (causal: and the
        # summary positions of the later blocks, which lie after every query of the block).
        summary_block = torch.arange(nb, device=q.device).repeat_interleave(c)  # [nb·c]
        query_block = torch.arange(nb, device=q.device)[:, None]  # [nb, 1]
        other = summary_block[None, :] < query_block if causal else summary_block[None, :] != query_block  # [nb, nb·c]
        extra_mask = summary_real[:, None, None, None, :] & other[None, None, :, None, :]  # [B, 1, nb, 1, nb·c]
        # causal: j <= i within the own block
        allowed = torch.ones(l, l, dtype=torch.bool, device=q.device).tril() if causal else None  # [l, l]
        p = cfg.dropout if self.training else 0.0
        return block_sparse_attention(
            q, k, v, l, query_block, key_mask=mask, allowed=allowed, extra_k=summary_k, extra_v=summary_v,
            extra_mask=extra_mask, dropout_p=p, training=self.training,
        )

    def _strided(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, causal: bool) -> Tensor:
        """Band |i-j| <= l from blocks i-1, i, i+1 (A(1)) + the query's column of the [nb, l] grid (A(2)).
        Causal: the band 0 <= i-j <= l from blocks i-1, i, and the column's blocks up to i-2."""
        cfg = self.cfg
        b, h, n, d = q.shape
        l = cfg.stride
        nb = n // l
        scale = d**-0.5
        dev = q.device
        qb = q.view(b, h, nb, l, d) * scale  # [B, H, nb, l, d]: query o of block a is position a·l + o
        nbrs = neighbour_blocks(nb, 1, 0 if causal else 1, dev)  # [nb, m], m = 2 (causal) or 3
        m = nbrs.shape[1]
        kg, vg = gather_blocks(k, nbrs, l), gather_blocks(v, nbrs, l)  # [B, H, nb, m·l, d]
        band = torch.matmul(qb, kg.transpose(-1, -2))  # [B, H, nb, l, m·l]
        pos = torch.arange(n, device=dev)
        key_pos = (nbrs[:, :, None] * l + torch.arange(l, device=dev)).flatten(1)  # [nb, m·l]
        slot_listed = (nbrs >= 0).repeat_interleave(l, -1)  # [nb, m·l]: False for the blocks past either end
        offset = pos.view(nb, l, 1) - key_pos[:, None, :]  # [nb, l, m·l]: i - j
        in_band = ((offset >= 0) & (offset <= l)) if causal else offset.abs() <= l  # [nb, l, m·l]
        band_ok = in_band & slot_listed[:, None, :]  # [nb, l, m·l]
        key_real = gather_blocks(mask[:, None, :, None], nbrs, l)[:, :, :, None, :, 0]  # [B, 1, nb, 1, m·l]
        band = fill_masked(band, band_ok & key_real)
        # Column o of the grid: the keys a'·l + o, (i - j) mod l = 0. Blocks a' within 1 of a are in the band
        # (causal: blocks a - 1 and a; the later ones are not read at all).
        kc, vc = k.view(b, h, nb, l, d), v.view(b, h, nb, l, d)  # [B, H, nb, l, d]
        col = torch.einsum("bhaod,bhcod->bhaoc", qb, kc)  # [B, H, nb, l, nb]: query (a, o), key (a', o)
        blocks = torch.arange(nb, device=dev)
        apart = blocks[:, None] - blocks[None]  # [nb, nb]: a - a'
        far = ((apart >= 2) if causal else (apart.abs() > 1))[:, None, :]  # [nb, 1, nb]
        col_real = mask.view(b, nb, l).transpose(1, 2)[:, None, None]  # [B, 1, 1, l, nb]: key (a', o) is real
        col = fill_masked(col, far & col_real)
        attn = torch.cat([band, col], dim=-1).softmax(dim=-1)  # [B, H, nb, l, m·l + nb]
        attn = F.dropout(attn, p=cfg.dropout, training=self.training)
        y = torch.matmul(attn[..., : m * l], vg)  # [B, H, nb, l, d]
        y = y + torch.einsum("bhaoc,bhcod->bhaod", attn[..., m * l :], vc)  # [B, H, nb, l, d]
        return y.reshape(b, h, n, d)  # [B, H, N', d]


register_preset(
    "sparse_transformer_strided",
    "sparse_transformer", display="Sparse Transformer (strided)",
    pattern="strided",
    description="Sparse Transformer, strided pattern (band of ±l + every l-th position; causal: j <= i), l = 128.",
    caps={"causal_note": STRIDED_CAUSAL_NOTE},
)
register_flex_preset(
    "sparse_transformer", display="Sparse Transformer (Flex)",
    description="Sparse Transformer, fixed pattern, through torch's FlexAttention with a BlockMask of the pattern.",
)
register_flex_preset(
    "sparse_transformer_strided", display="Sparse Transformer (strided, Flex)",
    description="Sparse Transformer, strided pattern, through torch's FlexAttention with a BlockMask of the pattern.",
)
