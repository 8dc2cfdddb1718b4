"""Local attention: softmax attention restricted to non-overlapping blocks (the LRA "Local Attention" baseline)
or to a sliding window around each query; and their causal forms.

Paper: the LRA baseline (Tay et al., "Long Range Arena: A Benchmark for Efficient Transformers", ICLR 2021,
https://arxiv.org/abs/2011.04006, §3.2 "Local Attention"), after the block-local attention of Parmar et al.,
"Image Transformer" (https://arxiv.org/abs/1802.05751) and the sliding windows of Beltagy et al. 2020.
LRA's code: ``lra_benchmarks/models/local`` (``LocalTransformerEncoder(block_size=50)``).
Causal form: the local attention of Roy et al., "Efficient Content-Based Sparse Attention with Routing
Transformers" (https://arxiv.org/abs/2003.05997, §4 local attention), as lucidrains' ``local-attention``
(``local_attention/local_attention.py``, ``LocalAttention(causal=True, look_backward=1, look_forward=0)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from ._blocks import (
    attend_slots,
    block_sparse_attention,
    key_positions,
    neighbour_blocks,
    pad_for_blocks,
    query_positions,
    sliding_window_attention,
)
from ._decode import WindowCache, check_capacity
from ._flex import FlexPattern, MaskMod, PatternConfig, register_flex_preset
from .base import ProjectedAttention, merge_heads, zero_padding
from .registry import Capabilities, register, register_preset

LocalMode = Literal["block", "sliding"]


@dataclass(frozen=True)
class LocalConfig(PatternConfig):
    """Config of local attention.

    Attributes:
        window: ``mode="block"``: the block length (each query attends to the ``window`` positions of its own
            block; causal: its own block up to itself and the block before); ``mode="sliding"``: each query attends
            to the ``window // 2`` positions on either side of it and itself (causal: the ``window`` positions
            before it and itself). 50 is the block size of LRA's local-attention encoder (its attention module's
            own default is 20; the LRA paper gives no number).
        mode: "block" (non-overlapping blocks, the LRA baseline) or "sliding" (a window centred on each query).
        backend: "blocks" (block gathers) or "flex" (FlexAttention with the same pattern; :mod:`attentions._flex`).
    """

    window: int = 50
    mode: LocalMode = "block"

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("window")
        if self.mode not in ("block", "sliding"):
            raise ValueError(f"mode must be 'block' or 'sliding', got {self.mode!r}")


#: The causal forms and their decoding states, in words (``attnbench list``).
CAUSAL_NOTE = ("each query reads its own block up to itself and the whole block before (Roy et al.'s local "
               "attention as lucidrains' local-attention, causal with look_backward=1)")
DECODE_NOTE = "a ring buffer of the last 2·window keys and values (the previous block and the current one)"
SLIDING_CAUSAL_NOTE = ("each query reads the window tokens before it and itself (the window's key budget, moved "
                       "to end at the query; lucidrains' local-attention with exact_windowsize)")
SLIDING_DECODE_NOTE = "a ring buffer of the last window + 1 keys and values"


@register(
    "local",
    LocalConfig,
    Capabilities(approximates_softmax=True, complexity="n", seq_len_multiple_of=50, pads_to_multiple=True,
                 causal=True, decode=True, causal_note=CAUSAL_NOTE, decode_note=DECODE_NOTE),
    paper="https://arxiv.org/abs/2011.04006", display="Local Attention", group="sparse / local",
)
class LocalAttention(FlexPattern, ProjectedAttention):
    """Local attention: softmax within blocks of w positions (or a ±w/2 window); LRA, arxiv.org/abs/2011.04006.

    Block mode: y_i = softmax(q_i K_{B(i)}ᵀ/√d) V_{B(i)}, B(i) = {w⌊i/w⌋, ..., w⌊i/w⌋ + w - 1} (block-diagonal).
    Sliding mode: y_i = softmax(q_i K_{W(i)}ᵀ/√d) V_{W(i)}, W(i) = {j : |i - j| <= ⌊w/2⌋}.
    Both computed blockwise (``attentions._blocks``): O(n·w) time and memory, never an n×n matrix.

    Causal (``causal=True``):
    - Block mode: B(i) = {w(⌊i/w⌋ - 1), ..., i}: the query's own block up to itself and the whole previous block
      (w + 1 to 2w keys). This is the causal local attention of the Routing Transformer (Roy et al. 2020, §4,
      https://arxiv.org/abs/2003.05997) as lucidrains' ``local-attention`` computes it (``causal=True``,
      ``look_backward=1``, ``look_forward=0``, ``exact_windowsize=False``): blocks of w, each reading itself and
      the one before, the keys after the query masked. LRA's code has a ``causal_mask`` flag on its local
      attention, marked untested by its authors, and the LRA paper defines no causal form; without a look back,
      the first query of every block would read nothing but itself. Blockwise: the two blocks (``neighbour_blocks``
      with no block after) and the mask j <= i.
    - Sliding mode: W(i) = {i - w, ..., i}: the w tokens before the query and itself, the w + 1 keys the
      bidirectional window reads for an even w, moved to end at the query (lucidrains' ``exact_windowsize=True``
      window of w behind the query). Blockwise with blocks of w (``sliding_window_attention(causal=True)``).
    - Decoding (``prefill``/``step``): a :class:`~attentions._decode.WindowCache` ring buffer of the keys and
      values a query can read, 2w positions (block; the slot is the position mod 2w, so the previous block and the
      current one are always in it) or w + 1 (sliding), fewer when the capacity is smaller; a step reads only the
      slots of its own pattern (the positions w(⌊i/w⌋ - 1) .. i, or i - w .. i), not the whole buffer.

    Choices and deviations:
    - Block mode pads the sequence to a multiple of w internally (padding masked as keys, output cropped), as
      LRA's code does. LRA's code reshapes [B, N, ...] to [B, w, N/w, ...] and attends over the first axis, which
      groups the positions i, i + N/w, i + 2N/w, ... (a strided, not a contiguous, block); we implement the
      contiguous blocks the LRA paper describes ("a simple non-overlapping blocked local attention").
    - Sliding mode is symmetric (⌊w/2⌋ keys either side plus the query itself) and pads internally to a multiple
      of ⌊w/2⌋; any length runs.
    - With w >= n (block) or ⌊w/2⌋ >= n - 1 (sliding) every query sees every key: exact softmax attention (causal:
      w >= n for both modes gives causal softmax attention).
    - Masked keys get the dtype's most negative finite score (a padded query row stays finite); dropout on
      the attention weights in training. lucidrains' rotary embeddings and shared-QK options are left out: they are
      options of that library, not of the pattern.
    - ``backend="flex"``: the same sets B(i), W(i) as a FlexAttention mask_mod (:meth:`flex_pattern`), over the
      same padded length; no dropout (see :mod:`attentions._flex`).
    """

    cfg: LocalConfig

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        y, _, _ = self._heads(x, mask, causal=self.cfg.causal)
        return self.out(merge_heads(y))  # [B, N, D]

    def prefill(self, x: Tensor, mask: Tensor | None = None, *, capacity: int) -> tuple[Tensor, WindowCache]:
        """The causal form over a prompt x [B, P, D] and the ring buffer later queries read (see ``_decode``)."""
        check_capacity(capacity, x.shape[1])
        y, k, v = self._heads(x, mask, causal=True)  # [B, H, P, d] each
        cache = WindowCache.empty(k, self.cfg.heads, min(self._span, capacity), self.cfg.head_dim)
        cache.append(k, v, mask)
        return self.out(merge_heads(y)), cache

    def step(self, x: Tensor, cache: WindowCache) -> tuple[Tensor, WindowCache]:
        """One token x [B, 1, D]: its key and value join the ring buffer, its query reads its causal window there."""
        q, k, v = self.proj(x)  # [B, H, 1, d] each
        cache.append(k, v)
        i, w = cache.length - 1, self.cfg.window  # i: the new token's position
        first = max(i - w, 0) if self.cfg.mode == "sliding" else max(w * (i // w - 1), 0)
        slots = torch.arange(first, i + 1, device=x.device) % cache.window  # [K]: where its keys sit in the ring
        p = self.cfg.dropout if self.training else 0.0
        y = attend_slots(q, cache.k, cache.v, cache.real, slots, dropout_p=p, training=self.training)  # [B, H, 1, d]
        return self.out(merge_heads(y)), cache

    @property
    def _span(self) -> int:
        """Positions a causal query can read, itself included: the ring buffer's size."""
        return self.cfg.window + 1 if self.cfg.mode == "sliding" else 2 * self.cfg.window

    def _heads(self, x: Tensor, mask: Tensor | None, *, causal: bool) -> tuple[Tensor, Tensor, Tensor]:
        """The attention of every head over x [B, N, D], with its keys and values: y, k, v, each [B, H, N, d]."""
        cfg = self.cfg
        n, w = x.shape[1], cfg.window
        p = cfg.dropout if self.training else 0.0
        x = zero_padding(x, mask)
        if cfg.mode == "sliding":
            q, k, v = self.proj(x)  # each [B, H, N, d]
            if cfg.backend == "flex":
                return self.flex_attend(q, k, v, mask, causal=causal), k, v
            radius = w if causal else w // 2
            y = sliding_window_attention(q, k, v, radius, causal=causal, key_mask=mask, dropout_p=p,
                                         training=self.training)
            return y, k, v
        xp, mp = pad_for_blocks(x, mask, w)  # [B, N', D], N' a multiple of w
        q, k, v = self.proj(xp)  # each [B, H, N', d]
        nb = xp.shape[1] // w
        if cfg.backend == "flex":
            real = None if mask is None else mp  # without a mask, the BlockMask depends on n only and is kept (_flex)
            return self.flex_attend(q, k, v, real, causal=causal, length=n)[:, :, :n], k[:, :, :n], v[:, :, :n]
        allowed = None
        if causal:
            blocks = neighbour_blocks(nb, 1, 0, x.device)  # [nb, 2]: the block before and its own
            # j <= i: the keys after the query in its own block are masked, the whole block before is read
            allowed = key_positions(blocks, w)[:, None, :] <= query_positions(nb, w, x.device)[:, :, None]  # [nb,w,2w]
        else:
            blocks = torch.arange(nb, device=x.device)[:, None]  # [nb, 1]: block i reads only block i
        y = block_sparse_attention(q, k, v, w, blocks, key_mask=mp, allowed=allowed, dropout_p=p,
                                   training=self.training)  # [B, H, N', d]
        return y[:, :, :n], k[:, :, :n], v[:, :, :n]

    def flex_length(self, seq_len: int) -> int:
        """Block mode pads to a multiple of the window (as the blocks backend); sliding mode does not pad."""
        w = self.cfg.window
        return seq_len if self.cfg.mode == "sliding" else -(-seq_len // w) * w

    def flex_pattern(self, n: int, device: torch.device, causal: bool) -> MaskMod:
        """B(i) or W(i) of the class docstring (causal: their causal forms) as a mask_mod."""
        w, sliding = self.cfg.window, self.cfg.mode == "sliding"

        def pattern(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            if sliding:
                gap = q_idx - kv_idx
                return ((gap >= 0) & (gap <= w)) if causal else gap.abs() <= w // 2
            if causal:  # its own block up to itself and the whole block before
                return (kv_idx <= q_idx) & (kv_idx // w >= q_idx // w - 1)
            return q_idx // w == kv_idx // w

        return pattern


register_preset(
    "local_sliding",
    "local", display="Local Attention (sliding)",
    mode="sliding",
    description="Local attention with a sliding window (±25 positions) instead of blocks.",
    caps={"seq_len_multiple_of": 1, "pads_to_multiple": False, "causal_note": SLIDING_CAUSAL_NOTE,
          "decode_note": SLIDING_DECODE_NOTE},
)
register_flex_preset(
    "local", display="Local Attention (Flex)",
    description="Local attention (blocks of 50) through torch's FlexAttention with a BlockMask of the same pattern.",
)
register_flex_preset(
    "local_sliding", display="Local Attention (sliding, Flex)",
    description="Local attention with a sliding window (±25 positions) through torch's FlexAttention.",
)
