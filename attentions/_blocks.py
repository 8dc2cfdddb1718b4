"""Blockwise sparse softmax attention: the machinery shared by windowed and block-sparse variants.

Not a variant (the leading underscore keeps ``import attentions`` from importing it as one). It never builds an
n×n matrix: the sequence is cut into ``nb = N / w`` blocks of ``w`` positions, each query block gathers ``m`` key
blocks (plus optional extra keys), and softmax runs over those ``m·w (+ G)`` keys only, inside torch's fused
attention kernel (``F.scaled_dot_product_attention`` on [B·H, nb, w, d+1] blocks), so no score tensor is stored:
memory is O(B·H·N·(m + G/w)·d) for the gathered keys and values, linear in N for fixed w, m, G. (With attention
dropout in training, torch falls back to its unfused kernel, O(B·H·N·(m·w + G)) for the scores.)

API (all tensors are per head, ``[B, H, N, d]``; N must be a multiple of the block size, see ``pad_for_blocks``):

- ``pad_for_blocks(x, mask, multiple) -> (x, mask)``: right-pad x [B, N, D] (zeros) and its key-padding mask
  (False) to the next multiple; when padding is needed and ``mask`` is None, a mask is created. No-op otherwise.
- ``neighbour_blocks(nb, left, right, device) -> [nb, left + 1 + right]`` long: block i's key blocks
  i-left .. i+right, -1 where out of range (sliding windows of blocks).
- ``query_positions(nb, w, device) -> [nb, w]``: the sequence position of every query in its block.
- ``key_positions(key_blocks, w) -> [..., nb, m·w]``: the sequence position of every gathered key (slots of a
  -1 block get negative positions; they are masked anyway). With ``query_positions`` this builds ``allowed``
  patterns (bands, dilations, exclusions) at O(N·m·w) cost.
- ``gather_blocks(x, key_blocks, w) -> [B, H, nb, m·w, d]``: the key (or value) blocks each query block reads.
- ``block_sparse_attention(q, k, v, w, key_blocks, *, key_mask, allowed, extra_k, extra_v, extra_mask, scale,
  dropout_p, training) -> [B, H, N, d]``: for query block i, softmax(q_i [K_{blocks(i)}, K_extra]ᵀ · scale)
  [V_{blocks(i)}, V_extra], where

  * ``key_blocks``: long tensor of block indices, shape [nb, m], [H, nb, m] or [B, H, nb, m] (broadcast to
    [B, H, nb, m]); -1 = empty slot. A block index repeated within a row counts ONCE (later copies are masked),
    so the key set of query block i is the union of its listed blocks: equal to a dense n×n pattern.
  * ``key_mask``: [B, N] bool key-padding mask (True = real key) or None; masked keys get exactly zero weight in
    every row that has at least one unmasked key.
  * ``allowed``: optional bool tensor broadcastable to [B, H, nb, w, m·w] (query-in-block × gathered key slot),
    restricting the gathered keys per query (bands, dilations, excluding keys also passed as extra keys).
  * ``extra_k``/``extra_v``: optional extra keys/values every query of a block also attends to, [B, H, G, d]
    (the same for all query blocks, e.g. global tokens or low-rank projected keys) or [B, H, nb, G, d] (one set
    per query block). The caller must keep them disjoint from the gathered keys (e.g. via ``allowed``),
    otherwise a key counts twice. ``extra_mask``: [B, G] (key padding of the extra keys) or a bool tensor
    broadcastable to [B, H, nb, 1, G] (one key mask per query block); None = all valid.
  * masked keys get the additive bias ``key_bias_value`` (exactly zero weight beside any valid key); a row with
    no valid key (a padded query) gets finite weights instead of NaN; ``dropout_p`` applies dropout to the
    weights in training; ``scale`` defaults to d^-1/2.
- ``dense_rows(q, k, v, *, key_mask, scale, dropout_p, training) -> [B, H, G, d]``: full masked softmax
  attention of a few query rows (global tokens) over all N keys, O(G·N).
- ``sliding_window_attention(q, k, v, radius, *, dilation, causal, key_mask, extra_k, extra_v, extra_mask, scale,
  dropout_p, training) -> [B, H, N, d]``: query i attends to keys j with |i - j| <= radius·dilation and
  (i - j) % dilation == 0 (``causal``: only j <= i, 0 <= i - j <= radius·dilation) (plus the extra keys,
  [B, H, G, d] only), any N (q/k/v are padded internally to a multiple of radius·dilation and the padding masked).
  Computed as blocks of ``radius`` positions with the two neighbour blocks (causal: the one before) and a band
  mask, on each residue class mod ``dilation`` separately: O(N·3·radius) memory (causal: O(N·2·radius)).
- ``attend_slots(q, k, v, real, slots, *, scale, dropout_p, training) -> [B, H, 1, d]``: a decoding step's query
  over the slots ``slots`` of a cache (the keys its pattern reads, and no others), through ``dense_rows``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import fill_masked, key_bias_column, key_bias_value, pad_to_length

__all__ = [
    "attend_slots",
    "block_sparse_attention",
    "dense_rows",
    "gather_blocks",
    "key_positions",
    "neighbour_blocks",
    "pad_for_blocks",
    "query_positions",
    "sliding_window_attention",
]


def pad_for_blocks(x: Tensor, mask: Tensor | None, multiple: int) -> tuple[Tensor, Tensor | None]:
    """Right-pad x [B, N, D] and its mask [B, N] to a multiple of ``multiple`` (padding is masked out).

    Returns x unchanged (and ``mask`` as given, possibly None) when N already is a multiple.
    """
    n = x.shape[1]
    length = math.ceil(max(n, 1) / multiple) * multiple
    return pad_to_length(x, mask, length)


def neighbour_blocks(nb: int, left: int, right: int, device: torch.device | str | None = None) -> Tensor:
    """Key blocks i-left .. i+right of every query block i: [nb, left + 1 + right] long, -1 out of range."""
    offsets = torch.arange(-left, right + 1, device=device)  # [m]
    idx = torch.arange(nb, device=device)[:, None] + offsets  # [nb, m]
    return idx.masked_fill((idx < 0) | (idx >= nb), -1)


def query_positions(nb: int, w: int, device: torch.device | str | None = None) -> Tensor:
    """Sequence position of query j of block i: [nb, w] = i·w + j."""
    return torch.arange(nb * w, device=device).view(nb, w)  # [nb, w]


def key_positions(key_blocks: Tensor, w: int) -> Tensor:
    """Sequence position of every gathered key slot: [..., nb, m·w] (a -1 block gives negative positions)."""
    pos = key_blocks[..., None] * w + torch.arange(w, device=key_blocks.device)  # [..., nb, m, w]
    return pos.flatten(-2)  # [..., nb, m·w]


def _expand_blocks(key_blocks: Tensor, b: int, h: int) -> Tensor:
    """[nb, m] | [H, nb, m] | [B, H, nb, m] -> [B, H, nb, m] (a broadcast view, no copy)."""
    if key_blocks.dim() == 2:
        key_blocks = key_blocks[None, None]
    elif key_blocks.dim() == 3:
        key_blocks = key_blocks[None]
    elif key_blocks.dim() != 4:
        raise ValueError(f"key_blocks must have 2, 3 or 4 dims, got shape {tuple(key_blocks.shape)}")
    return key_blocks.expand(b, h, *key_blocks.shape[-2:])  # [B, H, nb, m]


def _gather(x: Tensor, idx: Tensor, w: int) -> Tensor:
    """x [B, H, N, ...] and idx [B, H, nb, m] (entries >= 0) -> [B, H, nb, m, w, ...]."""
    b, h, n = x.shape[:3]
    xb = x.reshape(b, h, n // w, w, *x.shape[3:])  # [B, H, nb, w, ...]
    bi = torch.arange(b, device=x.device).view(b, 1, 1, 1)
    hi = torch.arange(h, device=x.device).view(1, h, 1, 1)
    return xb[bi, hi, idx]  # [B, H, nb, m, w, ...]


def gather_blocks(x: Tensor, key_blocks: Tensor, w: int) -> Tensor:
    """The blocks of x [B, H, N, d] listed by ``key_blocks`` for each query block: [B, H, nb, m·w, d].

    -1 slots read block 0 (callers mask them; ``block_sparse_attention`` does).
    """
    b, h = x.shape[:2]
    idx = _expand_blocks(key_blocks, b, h).clamp(min=0)  # [B, H, nb, m]
    g = _gather(x, idx, w)  # [B, H, nb, m, w, d]
    return g.flatten(3, 4)  # [B, H, nb, m·w, d]


def _valid_slots(idx: Tensor) -> Tensor:
    """False for -1 slots and for repeats of a block already listed earlier in the row: [..., nb, m]."""
    m = idx.shape[-1]
    same = idx[..., :, None] == idx[..., None, :]  # [..., nb, m, m]: slot j lists the block of slot j'
    earlier = torch.ones(m, m, dtype=torch.bool, device=idx.device).tril(-1)  # j' < j
    repeat = (same & earlier).any(-1)  # [..., nb, m]
    return (idx >= 0) & ~repeat


def _extra_keys(extra_k: Tensor, extra_v: Tensor, extra_mask: Tensor | None,
                lead: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """The extra keys and values [B, H, (nb,) G, d] of every query block as [k, bias] and [v, 0], expanded to
    ``lead`` + [G, d+1] (lead = B, H, nb); the bias column comes from ``extra_mask``: [B, G], or broadcastable to
    [B, H, nb, 1, G] (one key mask per query block)."""
    b, h, nb = lead
    d, g, dt = extra_k.shape[-1], extra_k.shape[-2], extra_k.dtype
    ek = extra_k[:, :, None] if extra_k.dim() == 4 else extra_k  # [B, H, 1|nb, G, d]
    ev = extra_v[:, :, None] if extra_v.dim() == 4 else extra_v  # [B, H, 1|nb, G, d]
    ok = None
    if extra_mask is not None:
        if extra_mask.dim() == 2:  # [B, G]
            ok = extra_mask[:, None, None, :]  # [B, 1, 1, G]
        elif extra_mask.shape[-2] == 1:  # broadcastable to [B, H, nb, 1, G]: one key mask per query block
            ok = extra_mask.squeeze(-2)  # [B|1, H|1, nb|1, G]
        else:
            raise ValueError("extra_mask must be [B, G] or broadcastable to [B, H, nb, 1, G] (per key)")
    eshape = torch.broadcast_shapes(ek.shape[:-1], (1, 1, 1, g) if ok is None else ok.shape)  # [.., G]
    ebias = key_bias_column(None if ok is None else ok[..., None], (*eshape, 1), dt, extra_k.device)  # [.., G, 1]
    ekx = torch.cat([ek.expand(*eshape, d), ebias], dim=-1)  # [.., G, d+1]
    evx = F.pad(ev, (0, 1)).expand(*eshape, d + 1)  # [.., G, d+1]
    return ekx.expand(b, h, nb, g, d + 1), evx.expand(b, h, nb, g, d + 1)


def block_sparse_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    w: int,
    key_blocks: Tensor,
    *,
    key_mask: Tensor | None = None,
    allowed: Tensor | None = None,
    extra_k: Tensor | None = None,
    extra_v: Tensor | None = None,
    extra_mask: Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
    training: bool = False,
) -> Tensor:
    """Softmax attention of each query block over its gathered key blocks (and extra keys): [B, H, N, d].

    See the module docstring for the arguments. Cost: O(B·H·N·(m·w + G)·d) time; memory O(B·H·N·(m + G/w)·d)
    for the gathered keys and values, and no score tensor at all where torch's fused CPU/CUDA attention kernel
    runs (no dropout): the scores of each block are computed and consumed inside
    ``F.scaled_dot_product_attention``, and recomputed in its backward.

    How masks become a fused-kernel call: every per-key condition (a padded key, a -1 slot, a repeated block,
    a masked extra key) is an additive bias carried by one extra key column, against a query column of ones,
    so it costs no [.., w, keys] mask; -1 slots and repeats read a dead block appended after the sequence, whose
    bias is always on. Only the per-query pattern ``allowed`` (bands, dilations) goes in as an additive
    ``attn_mask``, at its own broadcast shape (usually [nb, w, m·w], shared by batch rows and heads). A row whose
    keys are all masked gets finite weights (over the masked keys), as before.
    """
    b, h, n, d = q.shape
    if n % w:
        raise ValueError(f"sequence length {n} is not a multiple of the block size {w}; pad with pad_for_blocks")
    nb = n // w
    if scale is None:
        scale = d**-0.5
    idx = _expand_blocks(key_blocks, b, h)  # [B, H, nb, m]
    if idx.shape[-2] != nb:
        raise ValueError(f"key_blocks lists {idx.shape[-2]} query blocks, the sequence has {nb}")
    dt = q.dtype
    # Unlisted (-1) and repeated slots read block nb, the dead block past the end.
    slot = torch.where(_valid_slots(idx), idx, nb)  # [B, H, nb, m]

    # Queries [q·scale, 1]; keys [k, bias]; values [v, 0] (the fused kernel wants one head size for all three).
    qx = torch.cat([q * scale, q.new_ones(b, h, n, 1)], dim=-1)  # [B, H, N, d+1]
    real = torch.ones(n + w, dtype=torch.bool, device=q.device)
    real[n:] = False  # the dead block
    if key_mask is not None:
        real = real & F.pad(key_mask, (0, w), value=False)[:, None, :]  # [B, 1, N+w]
    bias = key_bias_column(real[..., None], (b, h, n + w, 1), dt, q.device)  # [B, H, N+w, 1]
    kx = torch.cat([F.pad(k, (0, 0, 0, w)), bias], dim=-1)  # [B, H, N+w, d+1]
    vx = F.pad(v, (0, 1, 0, w))  # [B, H, N+w, d+1]
    kg = _gather(kx, slot, w).flatten(3, 4)  # [B, H, nb, m·w, d+1]
    vg = _gather(vx, slot, w).flatten(3, 4)  # [B, H, nb, m·w, d+1]

    attn_mask = None
    if allowed is not None:
        attn_mask = torch.zeros(allowed.shape, dtype=dt, device=q.device).masked_fill(~allowed, key_bias_value(dt))

    if extra_k is not None:
        if extra_v is None:
            raise ValueError("extra_k needs extra_v")
        ekx, evx = _extra_keys(extra_k, extra_v, extra_mask, kg.shape[:3])  # [B, H, nb, G, d+1] each
        # concatenated here, not in the helper: the old kg, vg must be free to go as the new ones are made
        kg = torch.cat([kg, ekx], dim=-2)  # [B, H, nb, m·w + G, d+1]
        vg = torch.cat([vg, evx], dim=-2)  # [B, H, nb, m·w + G, d+1]
        if attn_mask is not None:
            attn_mask = F.pad(attn_mask, (0, ekx.shape[-2]))  # [.., w, m·w + G]: extra keys allowed for every query

    # The fused kernel takes 4-D tensors: (batch·head) × query block × position × feature.
    keys = kg.shape[-2]
    if attn_mask is not None:
        lead = attn_mask.shape[:-3]
        if all(s == 1 for s in lead):
            attn_mask = attn_mask.reshape(1, *attn_mask.shape[-3:])  # [1, nb|1, w|1, keys]
        else:
            attn_mask = attn_mask.expand(b, h, *attn_mask.shape[-3:]).reshape(b * h, *attn_mask.shape[-3:])
    y = F.scaled_dot_product_attention(
        qx.reshape(b * h, nb, w, d + 1),
        kg.reshape(b * h, nb, keys, d + 1),
        vg.reshape(b * h, nb, keys, d + 1),
        attn_mask=attn_mask,
        dropout_p=dropout_p if training else 0.0,
        scale=1.0,
    )  # [B·H, nb, w, d+1]
    return y[..., :d].reshape(b, h, n, d)  # [B, H, N, d]


def dense_rows(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    key_mask: Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
    training: bool = False,
) -> Tensor:
    """Masked softmax attention of a few query rows q [B, H, G, d] over all keys k, v [B, H, N, d]: [B, H, G, d].

    For global tokens (they attend to every key): O(G·N) memory. Same masking rule as
    ``block_sparse_attention`` (finite fill, so a row without real keys stays finite).
    """
    if scale is None:
        scale = q.shape[-1] ** -0.5
    scores = torch.matmul(q * scale, k.transpose(-1, -2))  # [B, H, G, N]
    if key_mask is not None:
        scores = fill_masked(scores, key_mask[:, None, None, :])
    attn = F.dropout(scores.softmax(dim=-1), p=dropout_p, training=training)
    return torch.matmul(attn, v)  # [B, H, G, d]


def attend_slots(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    real: Tensor,
    slots: Tensor,
    *,
    scale: float | None = None,
    dropout_p: float = 0.0,
    training: bool = False,
) -> Tensor:
    """One decoding step: the query q [B, H, 1, d] over the cache slots ``slots`` [K] (long) of k, v [B, H, C, d]
    (``real`` [B, C]: the slots holding a real token): [B, H, 1, d].

    The step reads the K keys its pattern allows and no others (a gather of K slots, O(K·d)); a slot that holds
    prompt padding gets no weight, as in ``dense_rows``.
    """
    return dense_rows(q, k[:, :, slots], v[:, :, slots], key_mask=real[:, slots], scale=scale, dropout_p=dropout_p,
                      training=training)


def sliding_window_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    radius: int,
    *,
    dilation: int = 1,
    causal: bool = False,
    key_mask: Tensor | None = None,
    extra_k: Tensor | None = None,
    extra_v: Tensor | None = None,
    extra_mask: Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
    training: bool = False,
) -> Tensor:
    """Banded (optionally dilated) softmax attention: query i sees j with |i-j| <= radius·dilation, i ≡ j mod dilation.

    Args:
        q, k, v: [B, H, N, d], any N.
        radius: one-sided window in attended keys (radius 0 = each query sees only itself).
        dilation: gap between attended keys; the band is computed on each residue class mod ``dilation`` (a
            dilated window over the sequence is an undilated window over every ``dilation``-th position).
        causal: only the keys before the query and itself, 0 <= i - j <= radius·dilation (the window's left half:
            on a residue class, j <= i there is j <= i in the sequence). Each block then reads its own block and
            the one before, not the one after.
        key_mask: [B, N] bool, True = real key.
        extra_k, extra_v: [B, H, G, d] keys every query also attends to (e.g. global tokens; keep them out of
            the band with ``key_mask`` or they count twice); extra_mask: [B, G] bool.

    Returns:
        [B, H, N, d].
    """
    b, h, n, d = q.shape
    w = max(radius, 1)  # block size: a band of one-sided width `radius` fits in the blocks i-1, i, i+1
    unit = w * dilation
    padded = math.ceil(max(n, 1) / unit) * unit
    if padded != n:
        key_mask = torch.ones(b, n, dtype=torch.bool, device=q.device) if key_mask is None else key_mask
        q, k, v = (F.pad(t, (0, 0, 0, padded - n)) for t in (q, k, v))  # [B, H, padded, d]
        key_mask = F.pad(key_mask, (0, padded - n), value=False)  # [B, padded]: the padding is masked
    m = padded // dilation  # length of one residue class

    def by_residue(t: Tensor) -> Tensor:
        """[B, H, padded, d] -> [B·dilation, H, m, d]: residue class r of batch row b is batch row b·dilation + r."""
        t = t.reshape(b, h, m, dilation, d).permute(0, 3, 1, 2, 4)  # [B, dil, H, m, d]
        return t.reshape(b * dilation, h, m, d)

    qr, kr, vr = by_residue(q), by_residue(k), by_residue(v)  # [B·dil, H, m, d]
    mr = None if key_mask is None else key_mask.reshape(b, m, dilation).transpose(1, 2).reshape(b * dilation, m)
    if extra_k is not None:
        extra_k = extra_k.repeat_interleave(dilation, dim=0)  # [B·dil, H, G, d]
        extra_v = None if extra_v is None else extra_v.repeat_interleave(dilation, dim=0)
        extra_mask = None if extra_mask is None else extra_mask.repeat_interleave(dilation, dim=0)  # [B·dil, G]
    nb = m // w
    kb = neighbour_blocks(nb, 1, 0 if causal else 1, q.device)  # [nb, 2 or 3]
    qp = query_positions(nb, w, q.device)[:, :, None]  # [nb, w, 1]
    kp = key_positions(kb, w)[:, None, :]  # [nb, 1, 2w or 3w]
    band = ((qp - kp) <= radius) & (kp <= qp) if causal else (qp - kp).abs() <= radius  # [nb, w, 2w or 3w]
    y = block_sparse_attention(
        qr, kr, vr, w, kb, key_mask=mr, allowed=band, extra_k=extra_k, extra_v=extra_v, extra_mask=extra_mask,
        scale=scale, dropout_p=dropout_p, training=training,
    )  # [B·dil, H, m, d]
    y = y.reshape(b, dilation, h, m, d).permute(0, 2, 3, 1, 4).reshape(b, h, padded, d)  # [B, H, padded, d]
    return y[:, :, :n]
