"""ProbSparse self-attention (Informer's encoder): full attention for the few queries whose scores are far from
uniform, the mean of the values for the rest.

Paper: Zhou, Zhang, Peng, Zhang, Li, Xiong, Zhang, "Informer: Beyond Efficient Transformer for Long Sequence
Time-Series Forecasting", AAAI 2021, https://arxiv.org/abs/2012.07436 (§3.1, eq. 3–4, Lemma 1). Authors' code:
``zhouhaoyi/Informer2020`` (``models/attn.py``, ``ProbAttention``).

The causal form (``causal=True``) is Informer's masked ProbSparse attention (its decoder's, ``mask_flag=True``) made
leak-free: the authors' form picks the top-u queries of the whole sequence, so whether query i gets attention reads
the later inputs. Here query i is active when its measure is among the u largest of the queries ≤ i, computed from
keys ≤ i, so that an output never moves with a later input, and a decoder can decide it when the token arrives.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ._decode import check_capacity
from .base import ProjectedAttention, check_seq_len, fill_masked, merge_heads, per_real_length, split_heads
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


def prefix_rank(m: Tensor) -> Tensor:
    """#{j < i : m_j > m_i} for every i along the last dimension: [..., L] -> [..., L] (int64).

    Merge-sort style, O(L log² L): at each level the sequence is cut into blocks of 2·h, and every element of a
    block's right half counts the elements of its left half above it (a sort of the left halves and a
    ``searchsorted``); over the levels each earlier element is counted once, in the block where the two first meet.
    """
    length = m.shape[-1]
    size = 1 << max(length - 1, 0).bit_length()  # a power of two >= L; the padding sits after every real element
    m = F.pad(m, (0, size - length))
    rank = torch.zeros_like(m, dtype=torch.long)
    half = 1
    while half < size:
        pairs = m.view(*m.shape[:-1], size // (2 * half), 2, half)  # [..., blocks, 2, h]: left and right halves
        left = pairs[..., 0, :].sort(dim=-1).values
        not_above = torch.searchsorted(left, pairs[..., 1, :].contiguous(), right=True)  # left ones <= each right one
        rank.view(*rank.shape[:-1], size // (2 * half), 2, half)[..., 1, :] += half - not_above
        half *= 2
    return rank[..., :length]


#: The causal form and the decoding state, in words (``attnbench list``).
CAUSAL_NOTE = ("Informer's masked ProbSparse (its decoder's) made leak-free: query i is active when its measure, from "
               "keys ≤ i, ranks among the u largest of queries ≤ i (the authors rank all L); lazy ones get the mean of "
               "the values ≤ i")
DECODE_NOTE = ("a cache of the real tokens' keys and values, every query's measure M̄ (a new query is ranked against "
               "them) and the running sum of the values")


@dataclass
class ProbSparseState:
    """The decoding state of causal ProbSparse, allocated at prefill for the whole context. Row b's real tokens
    sit in slots 0 … count[b] − 1, in order (prompt padding is left out, as the forward's compaction does).

    Attributes:
        k: [B, H, C, d], the real tokens' keys.
        v: [B, H, C, d], their values.
        measure: [B, H, C], each real query's M̄ (what a later query is ranked against).
        v_sum: [B, H, d], Σ v over the real tokens (the lazy queries' mean).
        padding: [B] int64, the prompt's padded tokens per row.
        length: tokens so far, padding included (row b holds length − padding[b] real ones).
    """

    k: Tensor
    v: Tensor
    measure: Tensor
    v_sum: Tensor
    padding: Tensor
    length: int

    @property
    def count(self) -> Tensor:
        """[B] int64: the real tokens of each row."""
        return self.length - self.padding


@register(
    "probsparse",
    ProbSparseConfig,
    Capabilities(complexity="n log n", approximates_softmax=True, causal=True, decode=True, causal_note=CAUSAL_NOTE,
                 decode_note=DECODE_NOTE),
    paper="https://arxiv.org/abs/2012.07436", display="ProbSparse", group="sparse / local",
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
    - Dropout on the active queries' attention weights, in training (the authors' ``attention_dropout``).
    - With u ≥ L every query is active and the layer is exact softmax attention (tested).

    Causal (``causal=True``): Informer's masked ProbSparse self-attention (the authors' ``ProbAttention`` with
    ``mask_flag=True``: the active queries attend to keys j ≤ i, ``ProbMask``; the lazy ones get a cumulative
    statistic of V), with the selection changed so that it does not leak. The authors' selection reads the future
    twice: each query's sampled keys are drawn from all L keys, and the top-u is taken over all L queries, so a
    later input can move query i into or out of the active set. Here, for the query at position i (counting real
    tokens only, as the bidirectional form's compaction):
    - M̄_i = max_s q_i·k_{j_s} − Σ_s q_i·k_{j_s} / (i + 1) over u_i = c·⌈ln(i + 1)⌉ keys j_s ≤ i (at most i + 1):
      eq. 4 over the prefix, the sample size and the divisor those of the prefix's length, as the authors' code
      takes them from L for the whole sequence.
    - Query i is active when fewer than u_i earlier queries have a larger M̄: it would be among the top-u_i
      queries of the prefix ending at it. The first queries (u_i ≥ i + 1) are all active; past them about
      u·ln(L/u) are, for measures in random order (at worst all: then the cost is that of full causal attention).
    - An active query gets softmax(q_i K_{≤i}ᵀ/√d) V_{≤i}, a lazy one the mean of V_{≤i}: the paper's mean(V)
      over the past. The authors' masked code gives lazy queries ``V.cumsum``, undivided (a sum that grows with
      i); we take the paper's mean.
    - The sampled keys are drawn once, at construction (a buffer of [max_seq_len, u] indices from torch's RNG),
      not at every call as in the bidirectional form: an output must not change between two calls on the same
      prefix, and a decoding step must see the same draws as the forward. Hence inputs up to ``max_seq_len``.
    Cost O(L·u·d) for the measures, O(L log² L) for the ranks, O(A·L·d) for the A active queries.

    Decoding (``prefill``/``step``, :class:`ProbSparseState`): the real tokens' keys and values, every query's M̄
    and the running sum of V; a step computes its M̄ from its sampled keys, ranks it against the stored ones, and
    attends over the cache if active, else returns the running mean.
    """

    cfg: ProbSparseConfig

    def __init__(self, cfg: ProbSparseConfig) -> None:
        super().__init__(cfg)
        if cfg.causal:
            lengths = range(1, cfg.max_seq_len + 1)  # the prefix lengths i + 1 of the positions i
            u = torch.tensor([active_count(cfg.factor, n) for n in lengths])  # [max_seq_len]: u_i
            draws = torch.rand(cfg.max_seq_len, int(u.max()), dtype=torch.float64)  # [max_seq_len, u_max]
            prefix = torch.arange(1, cfg.max_seq_len + 1)[:, None]  # [max_seq_len, 1]: i + 1
            sample = torch.minimum((draws * prefix).long(), prefix - 1)  # [max_seq_len, u_max]: j_s uniform in 0 … i
            self.register_buffer("sample", sample.int())
            self.register_buffer("active_counts", u, persistent=False)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        qkv = self.proj.qkv(x)  # [B, N, 3D]
        if self.cfg.causal:
            return self._causal(qkv, mask)[0]
        return self.out(per_real_length(qkv, mask, self.attend))  # [B, N, D]

    def prefill(self, x: Tensor, mask: Tensor | None = None, *, capacity: int) -> tuple[Tensor, ProbSparseState]:
        """The causal form over a prompt x [B, P, D] and the state for ``capacity`` tokens (see ``_decode``)."""
        cfg = self.cfg
        check_capacity(capacity, x.shape[1])
        check_seq_len(capacity, cfg.max_seq_len, "the sampled key indices are drawn for max_seq_len positions")
        b, p, _ = x.shape
        y, (k, v, measure, real) = self._causal(self.proj.qkv(x), mask)  # compact: row b's real tokens first
        state = ProbSparseState(
            k.new_zeros(b, cfg.heads, capacity, cfg.head_dim), v.new_zeros(b, cfg.heads, capacity, cfg.head_dim),
            measure.new_zeros(b, cfg.heads, capacity), (v * real[:, None, :, None]).sum(dim=2), p - real.sum(dim=1), p,
        )
        state.k[:, :, :p] = k  # slots past a row's count hold its padding: never read, overwritten by its steps
        state.v[:, :, :p] = v
        state.measure[:, :, :p] = measure
        return y, state

    def step(self, x: Tensor, state: ProbSparseState) -> tuple[Tensor, ProbSparseState]:
        """One (real) token x [B, 1, D] at slot count[b] of each row: its measure is ranked against the earlier
        queries'; it attends over the cache if active, else gets the running mean of the values."""
        cfg = self.cfg
        b = x.shape[0]
        q, k, v = (split_heads(t, cfg.heads) for t in self.proj.qkv(x).chunk(3, dim=-1))  # [B, H, 1, d] each
        pos = state.count  # [B]: this token's slot
        if int(pos.max()) >= state.k.shape[2]:
            raise ValueError(f"the state holds {state.k.shape[2]} tokens; a row has {int(pos.max())} already")
        slot = pos.view(b, 1, 1, 1).expand(b, cfg.heads, 1, cfg.head_dim)  # [B, H, 1, d]
        state.k.scatter_(2, slot, k)
        state.v.scatter_(2, slot, v)
        state.v_sum += v[:, :, 0]
        state.length += 1
        used = int(pos.max()) + 1  # slots any row has filled: the cache read is cut there
        keys, values = state.k[:, :, :used], state.v[:, :, :used]  # [B, H, used, d]
        slots = torch.arange(used, device=x.device)  # [used]
        before = slots < pos[:, None]  # [B, used]: the earlier queries' slots
        measure = self._measure(q, keys, pos[:, None])  # [B, H, 1]
        above = (state.measure[:, :, :used] > measure) & before[:, None, :]  # [B, H, used]
        active = above.sum(dim=-1, keepdim=True) < self.active_counts[pos].view(b, 1, 1)  # [B, H, 1]
        state.measure.scatter_(2, pos.view(b, 1, 1).expand(b, cfg.heads, 1), measure)
        upto = (slots <= pos[:, None])[:, None, None, :]  # [B, 1, 1, used]: the earlier slots and its own
        scores = fill_masked(q @ keys.transpose(-1, -2) * cfg.head_dim**-0.5, upto)  # [B, H, 1, used]
        attn = F.dropout(scores.softmax(dim=-1), p=cfg.dropout, training=self.training)
        lazy = (state.v_sum / state.count.view(b, 1, 1).to(x.dtype))[:, :, None]  # [B, H, 1, d]
        y = torch.where(active[..., None], attn @ values, lazy)  # [B, H, 1, d]
        return self.out(merge_heads(y)), state

    def _measure(self, q: Tensor, k: Tensor, pos: Tensor) -> Tensor:
        """M̄ of queries q [B, H, Lq, d] at positions ``pos`` [B or 1, Lq] over their sampled keys among k
        [B, H, Lk, d] (slots ≤ pos): max − sum / (pos + 1) over u_pos samples -> [B, H, Lq]. Not differentiated:
        it only selects."""
        b, h, lq, d = q.shape
        with torch.no_grad():
            idx = self.sample[pos].long()  # [B|1, Lq, u_max]: the keys each query samples
            u_max = idx.shape[-1]
            valid = torch.arange(u_max, device=q.device) < self.active_counts[pos][..., None]  # [B|1, Lq, u_max]
            flat = idx.reshape(idx.shape[0], 1, lq * u_max, 1).expand(b, h, lq * u_max, d)  # [B, H, Lq·u, d]
            sampled = k.gather(2, flat).view(b, h, lq, u_max, d)  # [B, H, Lq, u_max, d]
            scores = torch.einsum("bhld,bhlsd->bhls", q, sampled)  # [B, H, Lq, u_max]
            top = scores.masked_fill(~valid[:, None], float("-inf")).amax(dim=-1)  # [B, H, Lq]
            total = scores.masked_fill(~valid[:, None], 0.0).sum(dim=-1)  # [B, H, Lq]
            return top - total / (pos + 1).to(q.dtype)[:, None]

    def _causal(self, qkv: Tensor, mask: Tensor | None) -> tuple[Tensor, tuple[Tensor, ...]]:
        """Causal ProbSparse over qkv [B, N, 3D]: the output [B, N, D], and (keys, values [B, H, N, d], measures
        [B, H, N], real [B, N]) with each row's real tokens moved first, in order (what a decoding state keeps).

        Each row's real tokens are moved to the front (a stable sort of the padding flags) and the causal form runs
        on them; padding then sits after every real token, where no real position reads it, and the outputs go
        back to their positions (padded ones get whatever the tail computed: unspecified, finite).
        """
        cfg = self.cfg
        b, n, _ = qkv.shape
        check_seq_len(n, cfg.max_seq_len, "the sampled key indices are drawn for max_seq_len positions")
        real = torch.ones(b, n, dtype=torch.bool, device=qkv.device) if mask is None else mask  # [B, N]
        order = None
        if mask is not None:
            order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)  # [B, N]: real tokens first
            qkv = qkv.gather(1, order[..., None].expand_as(qkv))  # [B, N, 3D]
            real = real.gather(1, order)
        q, k, v = (split_heads(t, cfg.heads) for t in qkv.chunk(3, dim=-1))  # [B, H, N, d] each
        positions = torch.arange(n, device=qkv.device)  # [N]
        measure = self._measure(q, k, positions[None])  # [B, H, N]
        active = prefix_rank(measure) < self.active_counts[:n]  # [B, H, N]
        lazy = v.cumsum(dim=2) / (positions + 1).to(v.dtype)[:, None]  # [B, H, N, d]: the mean of V_{≤i}
        # the active queries, first in each row (and some lazy ones where rows have fewer): [B, H, A]
        chosen = torch.argsort((~active).to(torch.int8), dim=-1, stable=True)[..., : int(active.sum(-1).max())]
        q_a = q.gather(2, chosen[..., None].expand(*chosen.shape, cfg.head_dim))  # [B, H, A, d]
        scores = fill_masked(q_a @ k.transpose(-1, -2) * cfg.head_dim**-0.5, positions <= chosen[..., None])
        attn = F.dropout(scores.softmax(dim=-1), p=cfg.dropout, training=self.training)  # [B, H, A, N]
        picked = active.gather(-1, chosen)[..., None]  # [B, H, A, 1]: False where a lazy query fills a row
        at = chosen[..., None].expand(*chosen.shape, cfg.head_dim)  # [B, H, A, d]
        y = torch.scatter(lazy, 2, at, torch.where(picked, attn @ v, lazy.gather(2, at)))  # [B, H, N, d]
        y = merge_heads(y)  # [B, N, D]
        if order is not None:
            y = y.gather(1, torch.argsort(order, dim=1)[..., None].expand_as(y))  # back to the input's positions
        return self.out(y), (k, v, measure, real)

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
