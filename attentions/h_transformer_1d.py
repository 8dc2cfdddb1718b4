"""H-Transformer-1D: hierarchical (H-matrix) attention, exact near the diagonal and coarsened far from it.

Paper: Zhu & Soricut, "H-Transformer-1D: Fast One-Dimensional Hierarchical Attention for Sequences", ACL 2021,
https://arxiv.org/abs/2107.11906 (§5 hierarchical attention: coarsening, block structure, interpolation).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import ProjectedAttention, fill_masked, merge_heads, pad_to_length, zero_padding
from .registry import AttentionConfig, Capabilities, register

# One level's partial softmax sums for a set of query rows: (row max m, Σ e^(s−m) v, Σ e^(s−m)·count).
Partial = tuple[Tensor, Tensor, Tensor]


@dataclass(frozen=True)
class HTransformer1DConfig(AttentionConfig):
    """Config of H-Transformer-1D.

    Attributes:
        block_size: N_r, the block size (numerical rank) of every level: diagonal blocks of N_r tokens are
            exact, and each coarser level uses N_r × N_r blocks of coarsened tokens. 16 is taken as the paper's
            setting without a check of its experiment section in this implementation's review (lucidrains'
            h-transformer-1d defaults to 128); set it explicitly for a paper reproduction.
    """

    block_size: int = 16

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("block_size")


def _merge(a: Partial, b: Partial) -> Partial:
    """Sum of two partial softmax sums over disjoint key sets, rescaled to their common row max."""
    m = torch.maximum(a[0], b[0])
    ea, eb = torch.exp(a[0] - m), torch.exp(b[0] - m)  # [..., rows]: <= 1
    return m, ea[..., None] * a[1] + eb[..., None] * b[1], ea * a[2] + eb * b[2]


def _block_partial(q: Tensor, k: Tensor, v: Tensor, count: Tensor, dropout_p: float) -> Partial:
    """Partial sums of blockwise attention: q, k, v [B, H, nb, Nr, d], count [B, 1, nb, Nr] (real tokens per key).

    Entry (i, j) of a block stands for count_j fine keys with equal scores: it adds e^(s_ij) ṽ_j (ṽ: the sum of
    their values) to the numerator and e^(s_ij)·count_j to the denominator; keys with count 0 get nothing.
    """
    valid = (count > 0).unsqueeze(-2)  # [B, 1, nb, 1, Nr]
    s = fill_masked(q @ k.transpose(-1, -2), valid)  # [B, H, nb, Nr, Nr]
    m = s.amax(dim=-1)  # [B, H, nb, Nr]
    a = torch.exp(s - m[..., None]) * valid  # [B, H, nb, Nr, Nr]: exactly 0 at invalid keys
    den = (a * count.unsqueeze(-2)).sum(-1)  # [B, H, nb, Nr]
    num = F.dropout(a, p=dropout_p, training=dropout_p > 0.0) @ v  # [B, H, nb, Nr, d]
    return m, num, den


def _sibling(t: Tensor) -> Tensor:
    """Swap blocks 2i and 2i+1 of t [B, H, nb, ...]: each block faces its sibling (the off-diagonal block)."""
    b, h, nb = t.shape[:3]
    pairs = t.reshape(b, h, nb // 2, 2, *t.shape[3:])  # [B, H, nb/2, 2, ...]
    return pairs.flip(3).reshape(t.shape)


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = "not implemented yet"


@register(
    "h_transformer_1d",
    HTransformer1DConfig,
    Capabilities(approximates_softmax=True, complexity="n", seq_len_multiple_of=16, pads_to_multiple=True,
                 causal_note=CAUSAL_NOTE),
    paper="https://arxiv.org/abs/2107.11906",
)
class HTransformer1DAttention(ProjectedAttention):
    """H-Transformer-1D hierarchical attention, O(n·N_r·d); paper arxiv.org/abs/2107.11906.

    The sequence (padded to N_r·2^k) is split into blocks of N_r tokens, and the blocks into a binary tree.
    Level 0: exact scores exp(q_i·k_j/√d) inside each diagonal block and between each block and its sibling.
    Level l ≥ 1: Q and K coarsened by averaging groups of 2^l tokens (V by summing them), and each coarse block
    of N_r coarse tokens attends to its sibling coarse block; each coarse entry stands for the 2^l × 2^l fine
    entries of its groups. The levels partition the n × n matrix (a pair (i, j) of different blocks is
    handled at the level where their blocks are siblings); row sums come from the same hierarchy, and every
    level's result is interpolated (copied) to the fine rows: y_i = Σ_j Ã_ij v_j / Σ_j Ã_ij.

    Choices and deviations (the paper leaves these open, or differs):
    - Block structure: the super- and sub-diagonal blocks of level l are taken between siblings of the binary
      tree (blocks 2i, 2i+1 of that level), so each entry is computed at exactly one level (the nested
      H-matrix layout; lucidrains' h-transformer-1d pairs blocks the same way, ``flip_every_two``). Levels are
      added until one sibling pair spans the whole (padded) sequence.
    - Coarsening Q and K averages (restriction ½[1 1] per level), V sums (so a coarse entry weighs the values of
      all its fine keys), as the paper; the hierarchy is combined from the coarsest level down, rescaling
      partial sums to a common row max (a streaming softmax), so nothing overflows.
    - Lengths and padding: the input is right-padded to N_r·2^k with masked positions. Padded tokens enter no
      coarse average (means over real tokens; a group with none is a masked key) and no value sum, so a
      padded sequence gives what the unpadded one gives. The paper does not treat masks in the hierarchy.
    - Dropout ``dropout`` on the (unnormalised) hierarchical weights of the numerator in training; a coarse
      entry is dropped as a unit, for all the fine entries it stands for.
    - Bidirectional (encoder) attention only; the paper's causal variant is not implemented.
    """

    cfg: HTransformer1DConfig

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        cfg = self.cfg
        b, n, _ = x.shape
        nr = cfg.block_size
        blocks = 1 << max(0, -(-n // nr) - 1).bit_length()  # smallest power of two >= ⌈n / N_r⌉
        if mask is None and n < blocks * nr:
            mask = torch.ones(b, n, dtype=torch.bool, device=x.device)
        x, mask = pad_to_length(x, mask, blocks * nr)  # [B, L, D], L = N_r·2^k
        x = zero_padding(x, mask)
        q, k, v = self.proj(x)  # each [B, H, L, dh]
        q = q * q.shape[-1] ** -0.5
        count = torch.ones_like(x[:, None, :, 0]) if mask is None else mask[:, None, :].to(x.dtype)  # [B, 1, L]
        p = cfg.dropout if self.training else 0.0

        # Coarsened (sum, count) per level: level l has L / 2^l tokens. Sums of Q and K over real tokens (X is
        # zeroed at padding, but the Q/K biases are not), sums of V, and the real-token counts.
        qs, ks, vs, cs = [q * count[..., None]], [k * count[..., None]], [v * count[..., None]], [count]
        while qs[-1].shape[2] > 2 * nr:  # one more level while a level has more than one sibling pair
            qs.append(qs[-1].unflatten(2, (-1, 2)).sum(3))  # [B, H, L/2^l, dh]
            ks.append(ks[-1].unflatten(2, (-1, 2)).sum(3))
            vs.append(vs[-1].unflatten(2, (-1, 2)).sum(3))
            cs.append(cs[-1].unflatten(2, (-1, 2)).sum(3))  # [B, 1, L/2^l]

        result: Partial | None = None
        for level in range(len(qs) - 1, -1, -1):  # coarsest first, interpolating down to the tokens
            c = cs[level].clamp_min(1.0)[..., None]  # [B, 1, L_l, 1]
            qb = (qs[level] / c).unflatten(2, (-1, nr))  # [B, H, nb_l, Nr, dh]: mean of the real queries
            kb = (ks[level] / c).unflatten(2, (-1, nr))  # [B, H, nb_l, Nr, dh]
            vb = vs[level].unflatten(2, (-1, nr))  # [B, H, nb_l, Nr, dh]
            cb = cs[level].unflatten(2, (-1, nr))  # [B, 1, nb_l, Nr]
            part = None
            if qb.shape[2] >= 2:  # sibling (off-diagonal) blocks of this level
                part = _block_partial(qb, _sibling(kb), _sibling(vb), _sibling(cb), p)
            if level == 0:  # diagonal blocks, exact
                diag = _block_partial(qb, kb, vb, cb, p)
                part = diag if part is None else _merge(part, diag)
            assert part is not None
            flat: Partial = (part[0].flatten(2, 3), part[1].flatten(2, 3), part[2].flatten(2, 3))  # rows: L_l
            if result is not None:  # interpolate the coarser result to this level's rows: each row twice
                result = _merge(tuple(t.repeat_interleave(2, dim=2) for t in result), flat)  # type: ignore[arg-type]
            else:
                result = flat
        assert result is not None
        _, num, den = result  # [B, H, L, dh], [B, H, L]
        # A row with no real key (num = den = 0) gives 0; where, not a clamp, so its gradient is 0, not 1/tiny.
        has_key = (den > 0)[..., None]  # [B, H, L, 1]
        y = torch.where(has_key, num / torch.where(has_key, den[..., None], torch.ones_like(num[..., :1])), 0.0)
        return self.out(merge_heads(y[:, :, :n]))  # [B, N, D]
