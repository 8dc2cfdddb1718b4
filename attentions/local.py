"""Local attention: softmax attention restricted to non-overlapping blocks (the LRA "Local Attention" baseline)
or to a sliding window around each query.

Paper: the LRA baseline (Tay et al., "Long Range Arena: A Benchmark for Efficient Transformers", ICLR 2021,
https://arxiv.org/abs/2011.04006, §3.2 "Local Attention"), after the block-local attention of Parmar et al.,
"Image Transformer" (https://arxiv.org/abs/1802.05751) and the sliding windows of Beltagy et al. 2020.
LRA's code: ``lra_benchmarks/models/local`` (``LocalTransformerEncoder(block_size=50)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from ._blocks import block_sparse_attention, pad_for_blocks, sliding_window_attention
from .base import ProjectedAttention, merge_heads, zero_padding
from .registry import AttentionConfig, Capabilities, register, register_preset

LocalMode = Literal["block", "sliding"]


@dataclass(frozen=True)
class LocalConfig(AttentionConfig):
    """Config of local attention.

    Attributes:
        window: ``mode="block"``: the block length (each query attends to the ``window`` positions of its own
            block); ``mode="sliding"``: each query attends to the ``window // 2`` positions on either side of it
            and itself. 50 is the block size of LRA's local-attention encoder (its attention module's own default
            is 20; the LRA paper gives no number).
        mode: "block" (non-overlapping blocks, the LRA baseline) or "sliding" (a window centred on each query).
    """

    window: int = 50
    mode: LocalMode = "block"

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("window")
        if self.mode not in ("block", "sliding"):
            raise ValueError(f"mode must be 'block' or 'sliding', got {self.mode!r}")


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = "not implemented yet"


@register(
    "local",
    LocalConfig,
    Capabilities(approximates_softmax=True, complexity="n", seq_len_multiple_of=50, pads_to_multiple=True,
                 causal_note=CAUSAL_NOTE),
    paper="https://arxiv.org/abs/2011.04006",
)
class LocalAttention(ProjectedAttention):
    """Local attention: softmax within blocks of w positions (or a ±w/2 window); LRA, arxiv.org/abs/2011.04006.

    Block mode: y_i = softmax(q_i K_{B(i)}ᵀ/√d) V_{B(i)}, B(i) = {w⌊i/w⌋, ..., w⌊i/w⌋ + w - 1} (block-diagonal).
    Sliding mode: y_i = softmax(q_i K_{W(i)}ᵀ/√d) V_{W(i)}, W(i) = {j : |i - j| <= ⌊w/2⌋}.
    Both computed blockwise (``attentions._blocks``): O(n·w) time and memory, never an n×n matrix.

    Choices and deviations:
    - Block mode pads the sequence to a multiple of w internally (padding masked as keys, output cropped), as
      LRA's code does. LRA's code reshapes [B, N, ...] to [B, w, N/w, ...] and attends over the first axis, which
      groups the positions i, i + N/w, i + 2N/w, ... (a strided, not a contiguous, block); we implement the
      contiguous blocks the LRA paper describes ("a simple non-overlapping blocked local attention").
    - Sliding mode is symmetric (⌊w/2⌋ keys either side plus the query itself) and pads internally to a multiple
      of ⌊w/2⌋; any length runs.
    - With w >= n (block) or ⌊w/2⌋ >= n - 1 (sliding) every query sees every key: exact softmax attention.
    - Masked keys get the dtype's most negative finite score (a padded query row stays finite); dropout on
      the attention weights in training.
    """

    cfg: LocalConfig

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        cfg = self.cfg
        n = x.shape[1]
        p = cfg.dropout if self.training else 0.0
        x = zero_padding(x, mask)
        if cfg.mode == "sliding":
            q, k, v = self.proj(x)  # each [B, H, N, d]
            y = sliding_window_attention(q, k, v, cfg.window // 2, key_mask=mask, dropout_p=p, training=self.training)
            return self.out(merge_heads(y))
        xp, mp = pad_for_blocks(x, mask, cfg.window)  # [B, N', D], N' a multiple of w
        q, k, v = self.proj(xp)  # each [B, H, N', d]
        nb = xp.shape[1] // cfg.window
        own_block = torch.arange(nb, device=x.device)[:, None]  # [nb, 1]: block i reads only block i
        y = block_sparse_attention(q, k, v, cfg.window, own_block, key_mask=mp, dropout_p=p, training=self.training)
        return self.out(merge_heads(y)[:, :n])  # [B, N, D]


register_preset(
    "local_sliding",
    "local",
    mode="sliding",
    description="Local attention with a sliding window (±25 positions) instead of blocks.",
    caps={"seq_len_multiple_of": 1, "pads_to_multiple": False},
)
