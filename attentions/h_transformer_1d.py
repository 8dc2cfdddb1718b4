"""H-Transformer-1D: hierarchical (H-matrix) attention, exact near the diagonal and coarsened far from it.

Paper: Zhu & Soricut, "H-Transformer-1D: Fast One-Dimensional Hierarchical Attention for Sequences", ACL 2021,
https://arxiv.org/abs/2107.11906 (§5 hierarchical attention: coarsening, block structure, interpolation). The authors'
code: google ``flaxformer`` (``flaxformer/architectures/h_transformer/h_attention.py`` and ``token_hierarchy.py``),
whose decoder form (``causal_mask=True``) this module's causal form follows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ._decode import KVCache, check_capacity
from .base import ProjectedAttention, fill_masked, masked_fill_value, merge_heads, pad_to_length, zero_padding
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


def _block_partial(q: Tensor, k: Tensor, v: Tensor, count: Tensor, dropout_p: float, *,
                   causal: bool = False) -> Partial:
    """Partial sums of blockwise attention: q [B, H, nb, Nq, d], k, v [B, H, nb, Nr, d], count [B, 1, nb, Nr] (real
    tokens per key); ``causal``: key j of a block is read by its queries i >= j only (a diagonal block, Nq = Nr).

    Entry (i, j) of a block stands for count_j fine keys with equal scores: it adds e^(s_ij) ṽ_j (ṽ: the sum of
    their values) to the numerator and e^(s_ij)·count_j to the denominator; keys with count 0 get nothing.
    """
    valid = (count > 0).unsqueeze(-2)  # [B, 1, nb, 1, Nr]
    if causal:
        nr = k.shape[-2]
        valid = valid & torch.ones(nr, nr, dtype=torch.bool, device=q.device).tril()  # [B, 1, nb, Nr, Nr]: j <= i
    s = fill_masked(q @ k.transpose(-1, -2), valid)  # [B, H, nb, Nq, Nr]
    m = s.amax(dim=-1)  # [B, H, nb, Nq]
    a = torch.exp(s - m[..., None]) * valid  # [B, H, nb, Nq, Nr]: exactly 0 at invalid keys
    den = (a * count.unsqueeze(-2)).sum(-1)  # [B, H, nb, Nq]
    num = F.dropout(a, p=dropout_p, training=dropout_p > 0.0) @ v  # [B, H, nb, Nq, d]
    return m, num, den


def _sibling(t: Tensor) -> Tensor:
    """Swap blocks 2i and 2i+1 of t [B, H, nb, ...]: each block faces its sibling (the off-diagonal block)."""
    b, h, nb = t.shape[:3]
    pairs = t.reshape(b, h, nb // 2, 2, *t.shape[3:])  # [B, H, nb/2, 2, ...]
    return pairs.flip(3).reshape(t.shape)


def _left_sibling_partial(q: Tensor, k: Tensor, v: Tensor, count: Tensor, dropout_p: float) -> Partial:
    """The causal off-diagonal blocks of one level: block 2i+1 reads its left sibling 2i, block 2i reads nothing (its
    sibling is after it). q, k, v [B, H, nb, Nr, d], count [B, 1, nb, Nr]; the partial sums of every block's rows,
    those of the even blocks empty (row max ``masked_fill_value``, sums 0, so a merge takes nothing from them)."""
    m, num, den = _block_partial(q[:, :, 1::2], k[:, :, 0::2], v[:, :, 0::2], count[:, :, 0::2], dropout_p)
    # [B, H, nb/2, Nr(, d)] each -> interleave an empty partial before each: [B, H, nb, Nr(, d)]
    m = torch.stack((torch.full_like(m, masked_fill_value(m.dtype)), m), dim=3).flatten(2, 3)
    num = torch.stack((torch.zeros_like(num), num), dim=3).flatten(2, 3)
    den = torch.stack((torch.zeros_like(den), den), dim=3).flatten(2, 3)
    return m, num, den


def _first_real(t: Tensor, count: Tensor) -> Tensor:
    """Each pair of groups' sampled row: t [B, H, L, d] one row per group, count [B, 1, L] real tokens per group ->
    [B, H, L/2, d], the first group's row where it holds a real token, else the second's. Applied level after level
    from the tokens, it gives each group of 2^l tokens the row of its first real token."""
    pairs = t.unflatten(2, (-1, 2))  # [B, H, L/2, 2, d]
    first_real = (count.unflatten(2, (-1, 2))[..., 0] > 0)[..., None]  # [B, 1, L/2, 1]
    return torch.where(first_real, pairs[..., 0, :], pairs[..., 1, :])  # [B, H, L/2, d]


@dataclass
class HierarchicalState:
    """Decoding state of the causal hierarchical attention.

    Attributes:
        cache: every token's key and value (the fine keys of the current and previous block, and the groups whose
            sums are a coarse level's keys and values).
        m, num, den: per coarse level l = 1.., the partial sums of the current level-l group's sampled query over
            its left sibling block ([B, H, levels], [B, H, levels, d], [B, H, levels]): every row of a group reads
            the same coarse entries, so they are computed once, when the group's first real token arrives.
        sampled: [B, levels] bool, the current group of each level has had its first real token.
        pending: per level, whether a row may still lack its group's sampled query (a group begun in the prompt
            without a real token in some row): the next step samples its own query there.
    """

    cache: KVCache
    m: Tensor
    num: Tensor
    den: Tensor
    sampled: Tensor
    pending: list[bool]


#: The causal form and the decoding state, in words (``attnbench list``).
CAUSAL_NOTE = ("the authors' decoder form (flaxformer h_attention, causal_mask): the diagonal blocks lower "
               "triangular, each level's blocks reading their left sibling only, coarse queries sampled at the first "
               "token of each group")
DECODE_NOTE = ("every token's key and value (the blocks and groups the hierarchy reads), and per level the partial "
               "sums of the current group's sampled query")


@register(
    "h_transformer_1d",
    HTransformer1DConfig,
    Capabilities(approximates_softmax=True, complexity="n", seq_len_multiple_of=16, pads_to_multiple=True,
                 causal=True, decode=True, causal_note=CAUSAL_NOTE, decode_note=DECODE_NOTE),
    paper="https://arxiv.org/abs/2107.11906", display="H-Transformer-1D", group="low rank",
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

    Causal (``causal=True``), as the authors' decoder (flaxformer ``h_attention.py``/``token_hierarchy.py`` with
    ``causal_mask=True``), on this module's sibling blocks: the diagonal blocks of level 0 are lower triangular
    (flaxformer's causal mask on the anchor blocks); at every level only the blocks before the query's are read, so
    block 2i+1 reads its left sibling 2i and block 2i reads nothing at that level (flaxformer keeps its LEFT blocks
    and drops the RIGHT ones); and a coarse query is not the mean of its group, which would mix in later tokens, but
    the query of the group's first token, interpolated (copied) to the group's rows, all at or after it (flaxformer
    "only sample[s] the first position of each coarsening cluster. This avoids the leakage from future
    positions"). Coarse keys and values are the left sibling's group means and sums, all before every row that
    reads them. So Ã_ij (j <= i) is exp(q_i·k_j/√d) in a diagonal block and between sibling blocks of level 0, and
    exp(q_{f_l(i)}·k̄_{G_l(j)}/√d) at level l >= 1, f_l(i) the first (real) token of i's group of 2^l: each row
    depends on its own and earlier tokens only, whatever the padded length. Choice: the sampled token is the
    group's first *real* token (flaxformer samples the first position, padding or not), so that, as in the
    bidirectional form, padding enters no coarse quantity; for a real row it is at or before the row.
    Decoding (``prefill``/``step``): a :class:`~attentions._decode.KVCache` of every token (a step reads its own
    block up to itself, the left sibling block, and at each coarse level the group sums of the left sibling
    block), plus per coarse level the partial sums of the current group's sampled query, computed once per group
    (:class:`HierarchicalState`): O(N_r·d) per step and level, amortised.
    """

    cfg: HTransformer1DConfig

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        q, k, v, count = self._project(x, mask)
        y = self._attend(q, k, v, count, causal=self.cfg.causal)  # [B, H, L, dh]
        return self.out(merge_heads(y[:, :, : x.shape[1]]))  # [B, N, D]

    def prefill(self, x: Tensor, mask: Tensor | None = None, *,
                capacity: int) -> tuple[Tensor, HierarchicalState]:
        """The causal form over a prompt x [B, P, D] and the decoding state for ``capacity`` tokens (see
        ``_decode``)."""
        b, n, _ = x.shape
        check_capacity(capacity, n)
        nr = self.cfg.block_size
        q, k, v, count = self._project(x, mask)  # [B, H, L, dh] x3, [B, 1, L]
        y = self._attend(q, k, v, count, causal=True)[:, :, :n]  # [B, H, P, dh]
        cache = KVCache.empty(k, self.cfg.heads, capacity, self.cfg.head_dim)
        cache.append(k[:, :, :n], v[:, :, :n], mask)
        levels = max(0, ((capacity - 1) // nr).bit_length() - 1)  # coarse levels l >= 1 with N_r·2^l < capacity
        h, dh = q.shape[1], q.shape[-1]
        state = HierarchicalState(cache, q.new_full((b, h, levels), masked_fill_value(q.dtype)),
                                  q.new_zeros(b, h, levels, dh), q.new_zeros(b, h, levels),
                                  torch.zeros(b, levels, dtype=torch.bool, device=x.device), [False] * levels)
        real = count[:, 0, :n] > 0  # [B, P]
        for level in range(1, levels + 1):
            g = 1 << level
            start = n - n % g  # the group of the next token began in the prompt where start < n
            if start == n or (n // (nr * g)) % 2 == 0:
                continue  # a new group, or a group of a left block (it reads nothing at this level)
            in_group = real[:, start:]  # [B, n - start]
            first = start + in_group.to(torch.int8).argmax(dim=1)  # [B]: its first real token (any, where none)
            q_first = q.gather(2, first[:, None, None, None].expand(b, h, 1, dh))  # [B, H, 1, dh]
            has_real = in_group.any(dim=1)  # [B]
            self._keep_group_partial(state, level, q_first, n, has_real)
            state.pending[level - 1] = not bool(has_real.all())  # a row still waits for its group's first token
        return self.out(merge_heads(y)), state

    def step(self, x: Tensor, state: HierarchicalState) -> tuple[Tensor, HierarchicalState]:
        """One token x [B, 1, D]: its key and value join the cache, its query reads the hierarchy over the past."""
        nr = self.cfg.block_size
        q, k, v = self.proj(x)  # [B, H, 1, dh] each
        q = q * q.shape[-1] ** -0.5
        cache = state.cache
        cache.append(k, v)
        t = cache.length - 1  # the new token's position
        keys, values, real = cache.keys()  # [B, H, t+1, dh] x2, [B, t+1]
        count = real[:, None, None, :].to(q.dtype)  # [B, 1, 1, t+1]: 1 per real token
        p = self.cfg.dropout if self.training else 0.0

        def fine(lo: int, hi: int) -> Partial:
            """q over the fine keys lo..hi-1."""
            m, num, den = _block_partial(q[:, :, None], keys[:, :, None, lo:hi], values[:, :, None, lo:hi],
                                         count[..., lo:hi], p)  # [B, H, 1, 1(, dh)]
            return m[:, :, 0], num[:, :, 0], den[:, :, 0]  # [B, H, 1(, dh)]

        start = t - t % nr
        result = fine(start, t + 1)  # level 0: its own block up to itself, exact
        if (t // nr) % 2:
            result = _merge(result, fine(start - nr, start))  # and the whole left sibling block, exact
        for level in range(1, state.m.shape[2] + 1):
            g = 1 << level
            if (t // (nr * g)) % 2 == 0:
                continue  # a left block of this level: its sibling is after it
            if t % g == 0:  # a new group: this token is its first, for every row
                state.sampled[:, level - 1] = False
                self._keep_group_partial(state, level, q, t, None)
            elif state.pending[level - 1]:  # rows whose group had no real prompt token: this one is its first
                self._keep_group_partial(state, level, q, t, None)
            state.pending[level - 1] = False
            result = _merge(result, (state.m[:, :, level - 1, None], state.num[:, :, level - 1, None],
                                     state.den[:, :, level - 1, None]))
        _, num, den = result  # [B, H, 1, dh], [B, H, 1]: den > 0, the token itself is real
        return self.out(merge_heads(num / den[..., None])), state

    def _keep_group_partial(self, state: HierarchicalState, level: int, q: Tensor, t: int,
                            real: Tensor | None) -> None:
        """Keep, in ``state``, the partial sums of q [B, H, 1, dh] over the groups of the left sibling block of
        position t's level-``level`` block, for the rows whose current group has no sampled query yet and where
        ``real`` [B] (None: every row) says q is its first real token's."""
        need = ~state.sampled[:, level - 1] if real is None else ~state.sampled[:, level - 1] & real  # [B]
        nr, g = self.cfg.block_size, 1 << level
        lo = (t // (nr * g) - 1) * nr * g  # the left sibling block: N_r groups of g tokens
        hi = lo + nr * g
        weight = state.cache.real[:, lo:hi].to(q.dtype).unflatten(1, (nr, g))[:, None, :, :, None]  # [B,1,Nr,g,1]
        k_sum = (state.cache.k[:, :, lo:hi].unflatten(2, (nr, g)) * weight).sum(3)  # [B, H, Nr, dh]
        v_sum = (state.cache.v[:, :, lo:hi].unflatten(2, (nr, g)) * weight).sum(3)  # [B, H, Nr, dh]
        counts = weight.sum(3)[..., 0]  # [B, 1, Nr]: real tokens per group
        k_mean = k_sum / counts.clamp_min(1.0)[..., None]  # [B, H, Nr, dh]: the mean of each group's real keys
        p = self.cfg.dropout if self.training else 0.0
        m, num, den = _block_partial(q[:, :, None], k_mean[:, :, None], v_sum[:, :, None], counts[:, :, None], p)
        keep = need[:, None]  # [B, 1]
        state.m[:, :, level - 1] = torch.where(keep, m[:, :, 0, 0], state.m[:, :, level - 1])
        state.num[:, :, level - 1] = torch.where(keep[..., None], num[:, :, 0, 0], state.num[:, :, level - 1])
        state.den[:, :, level - 1] = torch.where(keep, den[:, :, 0, 0], state.den[:, :, level - 1])
        state.sampled[:, level - 1] |= need

    def _project(self, x: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Q (scaled by 1/√d), K, V [B, H, L, dh] of x right-padded to L = N_r·2^k, and the real-token count
        [B, 1, L] (1 real, 0 padding)."""
        b, n, _ = x.shape
        nr = self.cfg.block_size
        blocks = 1 << max(0, -(-n // nr) - 1).bit_length()  # smallest power of two >= ⌈n / N_r⌉
        if mask is None and n < blocks * nr:
            mask = torch.ones(b, n, dtype=torch.bool, device=x.device)
        x, mask = pad_to_length(x, mask, blocks * nr)  # [B, L, D], L = N_r·2^k
        x = zero_padding(x, mask)
        q, k, v = self.proj(x)  # each [B, H, L, dh]
        count = torch.ones_like(x[:, None, :, 0]) if mask is None else mask[:, None, :].to(x.dtype)  # [B, 1, L]
        return q * q.shape[-1] ** -0.5, k, v, count

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, count: Tensor, *, causal: bool) -> Tensor:
        """The hierarchical attention of q over k, v ([B, H, L, dh], L = N_r·2^k; count [B, 1, L]) -> [B, H, L, dh]."""
        nr = self.cfg.block_size
        p = self.cfg.dropout if self.training else 0.0
        # Coarsened (sum, count) per level: level l has L / 2^l tokens. Sums of Q and K over real tokens (X is
        # zeroed at padding, but the Q/K biases are not), sums of V, and the real-token counts. Causal: each group's
        # query is its first real token's (``_first_real``), not a mean.
        qs, ks, vs, cs = [q * count[..., None]], [k * count[..., None]], [v * count[..., None]], [count]
        while qs[-1].shape[2] > 2 * nr:  # one more level while a level has more than one sibling pair
            qs.append(_first_real(qs[-1], cs[-1]) if causal else qs[-1].unflatten(2, (-1, 2)).sum(3))  # [B,H,L/2^l,dh]
            ks.append(ks[-1].unflatten(2, (-1, 2)).sum(3))
            vs.append(vs[-1].unflatten(2, (-1, 2)).sum(3))
            cs.append(cs[-1].unflatten(2, (-1, 2)).sum(3))  # [B, 1, L/2^l]

        result: Partial | None = None
        for level in range(len(qs) - 1, -1, -1):  # coarsest first, interpolating down to the tokens
            c = cs[level].clamp_min(1.0)[..., None]  # [B, 1, L_l, 1]
            q_level = qs[level] if causal else qs[level] / c  # the sampled query, or the mean of the real ones
            qb = q_level.unflatten(2, (-1, nr))  # [B, H, nb_l, Nr, dh]
            kb = (ks[level] / c).unflatten(2, (-1, nr))  # [B, H, nb_l, Nr, dh]: mean of the real keys
            vb = vs[level].unflatten(2, (-1, nr))  # [B, H, nb_l, Nr, dh]
            cb = cs[level].unflatten(2, (-1, nr))  # [B, 1, nb_l, Nr]
            part = None
            if qb.shape[2] >= 2:  # sibling (off-diagonal) blocks of this level
                if causal:
                    part = _left_sibling_partial(qb, kb, vb, cb, p)
                else:
                    part = _block_partial(qb, _sibling(kb), _sibling(vb), _sibling(cb), p)
            if level == 0:  # diagonal blocks, exact
                diag = _block_partial(qb, kb, vb, cb, p, causal=causal)
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
        return torch.where(has_key, num / torch.where(has_key, den[..., None], torch.ones_like(num[..., :1])), 0.0)
