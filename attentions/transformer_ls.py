"""Transformer-LS (Long-Short Transformer): segment-wise sliding-window attention plus a dynamic low-rank projection.

Paper: Zhu, Ping, Xiao, Shoeybi, Goldstein, Anandkumar, Catanzaro, "Long-Short Transformer: Efficient Transformers
for Language and Vision", NeurIPS 2021, https://arxiv.org/abs/2107.02192 (§3.1 short-term attention, §3.2
long-range attention via dynamic projection, §3.3 DualLN). Authors' code: ``NVIDIA/transformer-ls``
(``lra/attention_transformer_ls.py``, ``AttentionLS``; LRA scripts ``lms`` = r, ``wsize`` = w).

The short-term part is computed blockwise by the shared primitive ``attentions._blocks.block_sparse_attention``
(segments of w queries gather their own and both neighbouring key segments, a mask keeps the w/2-wide margins),
with the r projected keys passed as extra keys so that one softmax runs over the union of both key sets.

The causal form (``causal=True``) is the paper's "Long-Short Transformer for autoregressive models" as the authors'
``autoregressive/model_lib/layer.py`` (``ChunkedLSAttention``) computes it: a sliding window of the last w tokens,
and a dynamic projection per segment of l tokens, read only by the queries after the segment. It decodes with the
window in a ring buffer, the projected summaries of the completed segments, and the inputs of the current segment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._blocks import block_sparse_attention, key_positions, neighbour_blocks, pad_for_blocks
from ._decode import WindowCache, check_capacity
from .base import ProjectedAttention, fill_masked, merge_heads, split_heads, zero_padding
from .registry import AttentionConfig, Capabilities, register

__all__ = ["LSDecodeState", "TransformerLSAttention", "TransformerLSConfig", "window_margin"]


@dataclass(frozen=True)
class TransformerLSConfig(AttentionConfig):
    """Config of Transformer-LS; defaults are the paper's LRA model "Transformer-LS (w, r) = (8, 32)".

    Attributes:
        window: w, the segment length: the sequence is cut into segments of w queries, each attending to its own
            segment and w/2 keys on either side (2w keys in all). Inputs are padded internally to a multiple of w.
        rank: r, the number of keys and values the dynamic projection compresses the whole sequence to.
        dual_ln: DualLN (§3.3): separate LayerNorms on the local (window) and the global (projected) keys and
            values; False drops both (the paper's "w/o DualLN" ablation).
        segment: l, the causal form only: the dynamic projection compresses each segment of l tokens on its own
            (16: the authors' enwik8 and text8 scripts, ``--chunk-size``).
        segment_rank: r per segment, the causal form only: each segment is compressed to this many keys and values
            (1: the authors' scripts, ``--chunk-rank``). The bidirectional form's ``rank`` is unused there.
    """

    window: int = 8
    rank: int = 32
    dual_ln: bool = True
    segment: int = 16
    segment_rank: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("window", "rank", "segment", "segment_rank")


def window_margin(window: int) -> int:
    """Keys on each side of a segment: w/2, at least 1 (the authors' ``ext_len = max(w // 2, 1)``)."""
    return max(window // 2, 1)


#: The causal form and the decoding state, in words (``attnbench list``).
CAUSAL_NOTE = ("the paper's autoregressive form, as the authors' code: the last w tokens, and the dynamic projections "
               "of the segments of l tokens wholly before the query's own")
DECODE_NOTE = ("the window's last w keys and values (ring buffer), the r projected keys and values of every completed "
               "segment, and the current segment's inputs")


@dataclass
class LSDecodeState:
    """The decoding state of causal Transformer-LS, allocated at prefill for the whole context.

    Attributes:
        window: LN_L-normalised keys and values of the last w tokens (ring buffer).
        summary_k: [B, H, S·r, d], LN_G(P_sᵀ K_s) of every completed segment s (rows s·r … (s+1)·r − 1), for the
            S = ⌊(capacity − 1)/l⌋ segments a later token can read.
        summary_v: [B, H, S·r, d], likewise of the values.
        summary_real: [B, S], the segment holds a real token (a segment of prompt padding only is no key).
        segment_x: [B, l, D], the current segment's inputs so far (slot = position mod l), zeroed at padding.
        segment_real: [B, l], which of them are real.
    """

    window: WindowCache
    summary_k: Tensor
    summary_v: Tensor
    summary_real: Tensor
    segment_x: Tensor
    segment_real: Tensor

    @property
    def length(self) -> int:
        return self.window.length


@register(
    "transformer_ls",
    TransformerLSConfig,
    Capabilities(complexity="n", seq_len_multiple_of=8, pads_to_multiple=True, causal=True, decode=True,
                 causal_note=CAUSAL_NOTE, decode_note=DECODE_NOTE),
    paper="https://arxiv.org/abs/2107.02192", display="Transformer-LS", group="low rank",
)
class TransformerLSAttention(ProjectedAttention):
    """Transformer-LS: one softmax over a sliding segment window and r dynamically projected keys; arxiv 2107.02192.

    Per head: K_L = LN_L(X W_K) (and V_L likewise), P = softmax over the sequence of X W_P ∈ R^{n×r}, the global
    keys K̄ = LN_G(Pᵀ X W_K) and values V̄ = LN_G(Pᵀ X W_V) ∈ R^{r×d}; query i of segment s attends, in one softmax,
    to the window keys K_L[j] for j ∈ [s·w − w/2, (s+1)·w + w/2) and to all r global keys.

    Choices and deviations (the paper leaves these open, or the authors' code decides them):
    - Segment margins w/2 = ``max(w // 2, 1)`` each side (authors' code; the paper: "w/2 consecutive tokens on
      the left and right"), the ends zero-padded, i.e. masked here.
    - W_P acts on the layer input X (the self-attention "K" of the paper's P = softmax(K W_P) is X), with a bias,
      one W_P ∈ R^{D×H·r} for all heads (authors' ``dconv_fc``).
    - DualLN: each LayerNorm normalises the full D = H·d of a key/value vector (authors' code:
      ``LayerNorm(num_head * head_dim)`` on the merged heads); LN_L is shared by window keys and values, LN_G by
      global keys and values (authors' code). The global keys are LN_G(Pᵀ (X W_K)) as the paper's equation; the
      authors' code compresses the already-normalised LN_L(X W_K) before LN_G, a small difference.
    - Sequence lengths off a multiple of w are padded internally (authors' code requires a multiple); padded
      positions are masked out of the window keys and get probability 0 in P (their logits are set to the
      dtype's most negative finite value, so a fully padded sequence stays finite instead of NaN).
    - Dropout (cfg.dropout) on the joint attention weights, in training (authors' ``drop_attn``); the authors'
      optional depth-wise convolution on V (``conv_kernel_size``, off in their LRA scripts) and CLS handling are
      not part of the attention studied here and are left out.

    Causal (``causal=True``): the paper's form for autoregressive models, as the authors' ``ChunkedLSAttention``
    computes it. Query i attends, in one softmax, to
    - the window keys K_L[j] for i − w < j ≤ i (the authors' ``get_diagonals``: the last w tokens, itself
      included; their autoregressive window, not the bidirectional form's segment window cut at i), and
    - the projected keys of every segment s of l = ``segment`` tokens that ends before i's own segment starts
      (s < ⌊i/l⌋, the authors' ``chunk_attn_mask``): K̄_s = LN_G(P_sᵀ K_s), V̄_s = LN_G(P_sᵀ V_s), with
      P_s = softmax over the segment's tokens of X_s W_P ∈ R^{l×r}, r = ``segment_rank`` (``compute_scores``,
      ``compress_chunks``); W_P has H·r outputs, one distribution per head and column, and no bias (the authors'
      ``dconv_1`` has one, which cancels in the softmax over positions: the same function).
    Deviations from the authors' code: their Transformer-XL relative position terms and memory cache are not part
    of this token mixer and are left out (the window and the segments are over this call's tokens); padding (their
    code has none) is masked as in the bidirectional form, and a segment without a real token gives no key.
    Cost: O(n·(w + n·r/l)·d) time and O(n·(w + n·r/l)) memory: every query reads the summaries of all earlier
    segments, as the paper's and the authors' autoregressive form does (up to n·r/l of them, r/l of the n keys
    full attention reads; the bidirectional form's r is a fixed number).

    Decoding (``prefill``/``step``, :class:`LSDecodeState`): the window in a ring buffer, the summaries of the
    completed segments (each computed once, when its last token arrives, and written into a buffer allocated for
    the context), and the current segment's inputs, which its summary needs when it completes.
    """

    cfg: TransformerLSConfig

    def __init__(self, cfg: TransformerLSConfig) -> None:
        super().__init__(cfg)  # proj: read as merged [B, N, D] K/V: DualLN normalises over D
        columns = cfg.segment_rank if cfg.causal else cfg.rank  # per segment (causal) or for the whole sequence
        # W_P: X -> H·r projection logits. The causal form drops its bias: a constant per column cancels in each
        # segment's softmax over positions, so it would be a parameter whose gradient is zero
        self.dyn_proj = nn.Linear(cfg.dim, cfg.heads * columns, bias=not cfg.causal)
        self.ln_local = nn.LayerNorm(cfg.dim) if cfg.dual_ln else nn.Identity()
        self.ln_global = nn.LayerNorm(cfg.dim) if cfg.dual_ln else nn.Identity()

    def window_pattern(self, nb: int, device: torch.device) -> tuple[Tensor, Tensor]:
        """Key blocks [nb, 3] (previous, own, next segment) and which of their 3w keys segment s sees: [nb, 1, 3w]."""
        w, margin = self.cfg.window, window_margin(self.cfg.window)
        key_blocks = neighbour_blocks(nb, 1, 1, device)  # [nb, 3]
        kpos = key_positions(key_blocks, w)  # [nb, 3w]
        start = (torch.arange(nb, device=device) * w)[:, None]  # [nb, 1]: first query of each segment
        allowed = (kpos >= start - margin) & (kpos < start + w + margin)  # [nb, 3w]
        return key_blocks, allowed[:, None, :]  # the same keys for every query of a segment

    def global_keys(self, x: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """Dynamic projection: K̄ = LN_G(Pᵀ K), V̄ = LN_G(Pᵀ V) with P = softmax_n(X W_P): 2 x [B, H, r, d].

        x [B, N, D] (zeroed at padding), k/v [B, N, D] the un-normalised projections X W_K, X W_V.
        """
        cfg = self.cfg
        b, n, _ = x.shape
        logits = self.dyn_proj(x)  # [B, N, H·r]
        if mask is not None:  # padded positions get exactly zero weight in every column of P
            logits = fill_masked(logits, mask[..., None])
        p = logits.softmax(dim=1)  # [B, N, H·r]: softmax over the sequence, one distribution per (head, column)
        p = p.view(b, n, cfg.heads, cfg.rank).permute(0, 2, 3, 1)  # [B, H, r, N]
        kg = torch.matmul(p, split_heads(k, cfg.heads))  # [B, H, r, d]
        vg = torch.matmul(p, split_heads(v, cfg.heads))  # [B, H, r, d]
        # LN_G over the merged heads of each projected key: [B, H, r, d] -> [B, r, D] -> [B, H, r, d].
        kg = split_heads(self.ln_global(merge_heads(kg)), cfg.heads)
        vg = split_heads(self.ln_global(merge_heads(vg)), cfg.heads)
        return kg, vg

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        if self.cfg.causal:
            return self._causal(x, mask)[0]
        cfg = self.cfg
        n = x.shape[1]
        x, mask = pad_for_blocks(x, mask, cfg.window)  # [B, N', D], N' a multiple of w; the padding is masked
        x = zero_padding(x, mask)
        q, k, v = self.proj.qkv(x).chunk(3, dim=-1)  # 3 x [B, N', D]
        kg, vg = self.global_keys(x, k, v, mask)  # 2 x [B, H, r, d]
        k_loc = split_heads(self.ln_local(k), cfg.heads)  # [B, H, N', d]
        v_loc = split_heads(self.ln_local(v), cfg.heads)  # [B, H, N', d]
        key_blocks, allowed = self.window_pattern(x.shape[1] // cfg.window, x.device)
        y = block_sparse_attention(
            split_heads(q, cfg.heads), k_loc, v_loc, cfg.window, key_blocks,
            key_mask=mask, allowed=allowed, extra_k=kg, extra_v=vg,
            dropout_p=cfg.dropout, training=self.training,
        )  # [B, H, N', d]: one softmax over the window keys and the r global keys
        return self.out(merge_heads(y))[:, :n]  # [B, N, D]: internal padding dropped

    def prefill(self, x: Tensor, mask: Tensor | None = None, *, capacity: int) -> tuple[Tensor, LSDecodeState]:
        """The causal form over a prompt x [B, P, D] and the state for ``capacity`` tokens (see ``_decode``)."""
        cfg = self.cfg
        check_capacity(capacity, x.shape[1])
        b, p, _ = x.shape
        l, r = cfg.segment, cfg.segment_rank
        y, (x, k_loc, v_loc, kg, vg, seg_real) = self._causal(x, mask)
        window = WindowCache.empty(x, cfg.heads, cfg.window, cfg.head_dim)
        window.append(k_loc[:, :, :p], v_loc[:, :, :p], mask)
        readable = (capacity - 1) // l  # segments a later token can read
        done = min(p // l, readable)  # the prompt's completed segments among them
        state = LSDecodeState(
            window, kg.new_zeros(b, cfg.heads, readable * r, cfg.head_dim),
            vg.new_zeros(b, cfg.heads, readable * r, cfg.head_dim),
            torch.zeros(b, readable, dtype=torch.bool, device=x.device), x.new_zeros(b, l, cfg.dim),
            torch.zeros(b, l, dtype=torch.bool, device=x.device),
        )
        state.summary_k[:, :, : done * r] = kg[:, :, : done * r]
        state.summary_v[:, :, : done * r] = vg[:, :, : done * r]
        state.summary_real[:, :done] = seg_real[:, :done]
        tail = p - p // l * l  # tokens of the incomplete segment
        state.segment_x[:, :tail] = x[:, p - tail : p]
        state.segment_real[:, :tail] = True if mask is None else mask[:, p - tail :]
        return y, state

    def step(self, x: Tensor, state: LSDecodeState) -> tuple[Tensor, LSDecodeState]:
        """One token x [B, 1, D]: it joins the window and its segment, attends to the window and the summaries of
        the segments before its own, and completes its segment's summary when it is the segment's last token."""
        cfg = self.cfg
        t, l, r = state.length, cfg.segment, cfg.segment_rank
        q, k, v = self.proj.qkv(x).chunk(3, dim=-1)  # 3 x [B, 1, D]
        state.window.append(split_heads(self.ln_local(k), cfg.heads), split_heads(self.ln_local(v), cfg.heads))
        state.segment_x[:, t % l] = x[:, 0]
        state.segment_real[:, t % l] = True
        read = t // l  # the segments before this token's own
        y = self._joint(
            split_heads(q, cfg.heads)[:, :, None], state.window.k[:, :, None], state.window.v[:, :, None],
            state.window.real[:, None, None, None, :], state.summary_k[:, :, None, : read * r],
            state.summary_v[:, :, None, : read * r],
            state.summary_real[:, None, None, None, :read].repeat_interleave(r, dim=-1),
        )  # [B, H, 1, 1, d]
        if (t + 1) % l == 0 and read < state.summary_real.shape[1]:  # the segment is complete and will be read
            seg_x = state.segment_x[:, None]  # [B, 1, l, D]
            _, seg_k, seg_v = self.proj.qkv(seg_x).chunk(3, dim=-1)  # [B, 1, l, D] each
            kg, vg = self._segment_summaries(seg_x, seg_k, seg_v, state.segment_real[:, None])  # [B, H, r, d] each
            state.summary_k[:, :, read * r : (read + 1) * r] = kg
            state.summary_v[:, :, read * r : (read + 1) * r] = vg
            state.summary_real[:, read] = state.segment_real.any(dim=1)
        return self.out(merge_heads(y[:, :, 0])), state

    def _segment_summaries(self, x: Tensor, k: Tensor, v: Tensor, real: Tensor) -> tuple[Tensor, Tensor]:
        """Each segment's dynamic projection: x, k, v [B, S, l, D] (k, v the un-normalised X W_K, X W_V), real
        [B, S, l] -> LN_G(P_sᵀ K_s), LN_G(P_sᵀ V_s), two [B, H, S·r, d] (row s·r + c: segment s, column c)."""
        cfg = self.cfg
        b, s, l, _ = x.shape
        h, r, d = cfg.heads, cfg.segment_rank, cfg.head_dim
        logits = fill_masked(self.dyn_proj(x), real[..., None])  # [B, S, l, H·r]: padded tokens get no weight
        p = logits.view(b, s, l, h, r).softmax(dim=2)  # [B, S, l, H, r]: a distribution over each segment's tokens
        out = []
        for t in (k, v):
            summary = torch.einsum("bslhr,bslhd->bsrhd", p, t.view(b, s, l, h, d))  # [B, S, r, H, d]
            summary = self.ln_global(summary.reshape(b, s * r, h * d))  # [B, S·r, D]: LN_G over the merged heads
            out.append(split_heads(summary, h))  # [B, H, S·r, d]
        return out[0], out[1]

    def _joint(self, q: Tensor, k_win: Tensor, v_win: Tensor, keep_win: Tensor, k_seg: Tensor, v_seg: Tensor,
               keep_seg: Tensor) -> Tensor:
        """One softmax per query over its window keys and the segment summaries it may read.

        q [B, H, nb, c, d] (queries in blocks of c); k_win, v_win [B, H, nb, K, d] (each block's window keys) with
        keep_win broadcastable to [B, H, nb, c, K]; k_seg, v_seg [B, H, 1, G, d] (every summary) with keep_seg
        broadcastable to [B, H, nb, c, G]. Returns [B, H, nb, c, d].
        """
        scale = self.cfg.head_dim**-0.5
        win = fill_masked(q @ k_win.transpose(-1, -2) * scale, keep_win)  # [B, H, nb, c, K]
        seg = fill_masked(q @ k_seg.transpose(-1, -2) * scale, keep_seg)  # [B, H, nb, c, G]
        attn = torch.cat([seg, win], dim=-1).softmax(dim=-1)
        attn = F.dropout(attn, p=self.cfg.dropout, training=self.training)
        g = seg.shape[-1]
        return attn[..., :g] @ v_seg + attn[..., g:] @ v_win  # [B, H, nb, c, d]

    def _causal(self, x: Tensor, mask: Tensor | None) -> tuple[Tensor, tuple[Tensor, ...]]:
        """The causal form over x [B, N, D]: the output [B, N, D], and what a decoding state keeps of it (x zeroed
        at padding, the window keys and values [B, H, N', d], every completed segment's summaries [B, H, S·r, d]
        and which segments hold a real token [B, S])."""
        cfg = self.cfg
        b, n, dim = x.shape
        w, l, r, h = cfg.window, cfg.segment, cfg.segment_rank, cfg.heads
        x = zero_padding(x, mask)
        real = torch.ones(b, n, dtype=torch.bool, device=x.device) if mask is None else mask  # [B, N]
        q, k, v = self.proj.qkv(x).chunk(3, dim=-1)  # 3 x [B, N, D]
        s = n // l  # completed segments
        kg, vg = self._segment_summaries(x[:, : s * l].view(b, s, l, dim), k[:, : s * l].view(b, s, l, dim),
                                         v[:, : s * l].view(b, s, l, dim), real[:, : s * l].view(b, s, l))
        seg_real = real[:, : s * l].view(b, s, l).any(dim=-1)  # [B, S]
        nb = math.ceil(max(n, 1) / w)  # query blocks of w (at least one: an empty prompt too)
        pad = nb * w - n
        k_loc = split_heads(F.pad(self.ln_local(k), (0, 0, w, pad)), h)  # [B, H, w + N', d]: w zeros before
        v_loc = split_heads(F.pad(self.ln_local(v), (0, 0, w, pad)), h)  # [B, H, w + N', d]
        # block i's keys are positions i·w − w … i·w + w − 1: unfold views, no copy
        k_win = k_loc.unfold(2, 2 * w, w).transpose(-1, -2)  # [B, H, nb, 2w, d]
        v_win = v_loc.unfold(2, 2 * w, w).transpose(-1, -2)  # [B, H, nb, 2w, d]
        qpos = torch.arange(nb * w, device=x.device).view(nb, w, 1)  # [nb, w, 1]
        kpos = (torch.arange(nb, device=x.device)[:, None] * w - w + torch.arange(2 * w, device=x.device))[:, None]
        # kpos [nb, 1, 2w]: the position of each block's window keys (negative: before the sequence, masked)
        key_real = F.pad(real, (w, pad), value=False).unfold(1, 2 * w, w)  # [B, nb, 2w]
        keep_win = (kpos <= qpos) & (kpos > qpos - w) & key_real[:, :, None, :]  # [B, nb, w, 2w]
        seg_of_query = qpos // l  # [nb, w, 1]
        readable = torch.arange(s, device=x.device).repeat_interleave(r) < seg_of_query  # [nb, w, S·r]
        keep_seg = readable & seg_real.repeat_interleave(r, dim=1)[:, None, None, :]  # [B, nb, w, S·r]
        y = self._joint(
            split_heads(F.pad(q, (0, 0, 0, pad)), h).view(b, h, nb, w, cfg.head_dim), k_win, v_win,
            keep_win[:, None], kg[:, :, None], vg[:, :, None], keep_seg[:, None],
        )  # [B, H, nb, w, d]
        y = self.out(merge_heads(y.reshape(b, h, nb * w, cfg.head_dim)))[:, :n]  # [B, N, D]
        return y, (x, k_loc[:, :, w:], v_loc[:, :, w:], kg, vg, seg_real)
