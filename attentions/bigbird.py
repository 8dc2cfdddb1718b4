"""BigBird (ITC): block-sparse attention with a 3-block window, global blocks and random blocks per query block.

Paper: Zaheer et al., "Big Bird: Transformers for Longer Sequences", NeurIPS 2020, https://arxiv.org/abs/2007.14062
(§2 the generalised attention mechanism, App. D "blockified" implementation, Tab. 8 hyperparameters of BigBird-ITC:
block b = 64, window 3 blocks, g = 2 global blocks, r = 3 random blocks). LRA's code:
``lra_benchmarks/models/bigbird/bigbird_attention.py`` (the same block size, r = 3, first and last block global).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ._blocks import block_sparse_attention, dense_rows, neighbour_blocks, pad_for_blocks
from ._flex import FlexPattern, MaskMod, PatternConfig, register_flex_preset
from .base import ProjectedAttention, merge_heads, zero_padding
from .registry import Capabilities, register


@dataclass(frozen=True)
class BigBirdConfig(PatternConfig):
    """Config of BigBird-ITC (paper Tab. 8 and LRA: block 64, 3 random blocks, first and last block global).

    Attributes:
        block_size: b, positions per block.
        num_random_blocks: r, random key blocks per query block (distinct, outside its window and the global blocks).
        global_blocks: g, global blocks: the first ⌈g/2⌉ and the last ⌊g/2⌋ blocks (g = 2: the first and the
            last, as BigBird's and LRA's code). Global blocks attend to every key and every query attends to them.
        window_blocks: w, the sliding window in blocks (odd): query block i reads blocks i - w//2 .. i + w//2.
        backend: "blocks" (block gathers) or "flex" (FlexAttention with the same pattern; :mod:`attentions._flex`).
    """

    block_size: int = 64
    num_random_blocks: int = 3
    global_blocks: int = 2
    window_blocks: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("block_size", "window_blocks")
        if self.window_blocks % 2 == 0:
            raise ValueError(f"window_blocks must be odd (centred on the query block), got {self.window_blocks}")
        for name in ("num_random_blocks", "global_blocks"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 0):
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = (
    "its global tokens attend to every position and are attended by every position; the paper uses the sparse "
    "pattern in encoders"
)


@register(
    "bigbird",
    BigBirdConfig,
    Capabilities(causal_note=CAUSAL_NOTE,
        approximates_softmax=True, complexity="n", needs_fixed_length=True,
        seq_len_multiple_of=64, pads_to_multiple=True
    ),
    paper="https://arxiv.org/abs/2007.14062", display="BigBird", group="sparse / local",
)
class BigBirdAttention(FlexPattern, ProjectedAttention):
    """BigBird-ITC: window + global + random blocks, blockwise softmax; arxiv.org/abs/2007.14062.

    Query block i (not global) attends, with one softmax, to the union of its window blocks i-1, i, i+1, the
    global blocks and r random blocks R_h(i) (per head h); a global query block attends to every key. Computed
    blockwise (``attentions._blocks``): O(n·b·(3 + g + r)) time and memory, never an n×n matrix.

    Choices and deviations (the paper leaves these open, or BigBird's/LRA's code decides them):
    - Random blocks are fixed per layer: a buffer of uniform scores [H, nb_max, nb_max] (nb_max = ⌈max_seq_len /
      b⌉) is drawn at construction from torch's global RNG (so a seed fixes it and the state dict carries it);
      for an input of nb blocks, R_h(i) = the r highest-scoring blocks among blocks 0..nb-1 outside i's window
      and the global blocks (distinct; fewer when fewer candidates exist). BigBird's code draws one pattern per
      head from a seeded numpy RNG for the current length; LRA restricts candidates to the first 1024 tokens,
      we do not. Inputs longer than max_seq_len are refused (``needs_fixed_length``).
    - The sequence is padded internally to a multiple of b (padding masked as keys, output cropped). The "last"
      global block is the last block of the padded input, so a sequence and the same sequence right-padded to a
      different number of blocks see different last-global and random blocks (equal outputs need equal block
      counts). BigBird's code asks for lengths that are multiples of b instead.
    - A block that is both in the window and global is attended once: the union of the patterns, i.e. a
      dense n×n block mask (BigBird's code lays out the first two and last two query blocks by hand to the
      same effect).
    - Global rows use the same projections as the others (BigBird-ITC has no separate global projections).
    - Masked keys get the dtype's most negative finite score (BigBird's code adds -10000); dropout on the
      attention weights in training (the reference code has no attention dropout in the sparse path).
    - ``backend="flex"``: the same union (window, global and random blocks, global rows reading every key) as one
      FlexAttention mask_mod per head (:meth:`flex_pattern`), over the same padded length; its BlockMask is rebuilt
      when ``rand_scores`` changes. No dropout (see :mod:`attentions._flex`).
    """

    cfg: BigBirdConfig

    def __init__(self, cfg: BigBirdConfig) -> None:
        super().__init__(cfg)
        nb_max = math.ceil(cfg.max_seq_len / cfg.block_size)
        # Fixed random pattern of this layer: one score per (head, query block, key block).
        self.register_buffer("rand_scores", torch.rand(cfg.heads, nb_max, nb_max))

    def global_block_ids(self, nb: int) -> Tensor:
        """Sorted distinct indices of the global blocks of an input of ``nb`` blocks: [G] long."""
        g = self.cfg.global_blocks
        first = torch.arange(min(math.ceil(g / 2), nb))
        last = torch.arange(max(nb - g // 2, 0), nb)
        return torch.unique(torch.cat([first, last]))  # [G]

    def random_blocks(self, nb: int) -> Tensor:
        """R_h(i) for an input of nb blocks: [H, nb, r] long, -1 where fewer than r candidates exist."""
        cfg = self.cfg
        if nb > self.rand_scores.shape[-1]:
            raise ValueError(
                f"{nb} blocks of {cfg.block_size} exceed max_seq_len={cfg.max_seq_len}: the random pattern has "
                f"{self.rand_scores.shape[-1]} blocks"
            )
        r = min(cfg.num_random_blocks, nb)
        dev = self.rand_scores.device
        scores = self.rand_scores[:, :nb, :nb].float()  # [H, nb, nb]
        blocks = torch.arange(nb, device=dev)
        excluded = (blocks[:, None] - blocks[None]).abs() <= cfg.window_blocks // 2  # [nb, nb]: the window
        excluded[:, self.global_block_ids(nb).to(dev)] = True  # and the global blocks
        scores = scores.masked_fill(excluded, -1.0)  # rand() is in [0, 1): excluded blocks rank last
        top, idx = scores.topk(r, dim=-1)  # [H, nb, r]
        return idx.masked_fill(top < 0, -1)

    def flex_length(self, seq_len: int) -> int:
        """Padded to a multiple of the block size, as the blocks backend."""
        return -(-seq_len // self.cfg.block_size) * self.cfg.block_size

    def flex_heads(self) -> int | None:
        """The random blocks differ per head."""
        return self.cfg.heads

    def flex_version(self) -> int:
        """The random pattern's buffer changes in place (``load_state_dict``) without changing its length."""
        return self.rand_scores._version

    def flex_pattern(self, n: int, device: torch.device, causal: bool) -> MaskMod:
        """Key block kb is read by query block qb when either is global, |qb - kb| <= w//2, or kb ∈ R_h(qb)."""
        w, nb, half = self.cfg.block_size, n // self.cfg.block_size, self.cfg.window_blocks // 2
        is_global = torch.zeros(nb, dtype=torch.bool, device=device)
        is_global[self.global_block_ids(nb).to(device)] = True  # [nb]
        rand = self.random_blocks(nb).to(device)  # [H, nb, r], -1 = none
        chosen = torch.zeros(self.cfg.heads, nb, nb + 1, dtype=torch.bool, device=device)  # column nb: the -1s
        chosen.scatter_(2, rand.masked_fill(rand < 0, nb), True)
        chosen = chosen[..., :nb]  # [H, nb, nb]: R_h(qb) as a block mask

        def pattern(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            qb, kb = q_idx // w, kv_idx // w
            return is_global[qb] | is_global[kb] | ((qb - kb).abs() <= half) | chosen[h, qb, kb]

        return pattern

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        cfg = self.cfg
        b, n, _ = x.shape
        w = cfg.block_size
        p = cfg.dropout if self.training else 0.0
        x = zero_padding(x, mask)
        xp, mp = pad_for_blocks(x, mask, w)  # [B, N', D], N' = nb·w
        q, k, v = self.proj(xp)  # each [B, H, N', d]
        nb = xp.shape[1] // w
        if cfg.backend == "flex":
            real = None if mask is None else mp  # without a mask, the BlockMask depends on n only and is kept (_flex)
            y = self.flex_attend(q, k, v, real, causal=False, length=n)  # [B, H, N', d]
            return self.out(merge_heads(y)[:, :n])  # [B, N, D]
        h = cfg.heads
        glob = self.global_block_ids(nb).to(x.device)  # [G]
        half = cfg.window_blocks // 2
        key_blocks = torch.cat(
            [
                glob.expand(h, nb, -1),  # [H, nb, G]: every query block reads the global blocks
                neighbour_blocks(nb, half, half, x.device).expand(h, nb, -1),  # [H, nb, w]
                self.random_blocks(nb),  # [H, nb, r]
            ],
            dim=-1,
        )  # [H, nb, G + w + r]; repeats are attended once (block_sparse_attention)
        y = block_sparse_attention(q, k, v, w, key_blocks, key_mask=mp, dropout_p=p, training=self.training)
        if glob.numel():
            pos = (glob[:, None] * w + torch.arange(w, device=x.device)).flatten()  # [G·w] global query positions
            yg = dense_rows(q[:, :, pos], k, v, key_mask=mp, dropout_p=p, training=self.training)  # [B, H, G·w, d]
            y = y.index_copy(2, pos, yg)  # [B, H, N', d]: global rows attend to everything
        return self.out(merge_heads(y)[:, :n])  # [B, N, D]


register_flex_preset(
    "bigbird", display="BigBird (Flex)",
    description="BigBird-ITC's window, global and random blocks through torch's FlexAttention.",
)
