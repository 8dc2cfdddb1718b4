"""Synthesizer: attention weights synthesised without token-token dot products (Dense and Random).

Paper: Tay et al., "Synthesizer: Rethinking Self-Attention for Transformer Models", ICML 2021,
https://arxiv.org/abs/2005.00743 (§3.1 Dense Synthesizer, §3.2 Random Synthesizer). The authors' LRA code:
google-research ``long-range-arena`` (``lra_benchmarks/models/synthesizer/synthesizer_attention.py``), whose
``SynthesizerAttention`` also has the causal form (``causal_mask``: the synthesised logits masked to j <= i).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._decode import KVCache, check_capacity
from .base import check_seq_len, fill_masked, key_bias_column, merge_heads, split_heads, zero_padding
from .registry import AttentionConfig, Capabilities, register, register_preset

Mode = Literal["dense", "random"]


@dataclass(frozen=True)
class SynthesizerConfig(AttentionConfig):
    """Config of the Synthesizer.

    Attributes:
        mode: "dense" (B = F(X), a two-layer MLP per token giving max_seq_len logits per head) or "random"
            (a [max_seq_len, max_seq_len] logit matrix R per head, independent of the input).
        trainable_random: random mode only: True learns R (the paper's Random Synthesizer, "R"), False keeps
            the initial draw fixed (the paper's Fixed Random, "R (fixed)"), stored as a buffer.
    """

    mode: Mode = "dense"
    trainable_random: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mode not in ("dense", "random"):
            raise ValueError(f"mode must be 'dense' or 'random', got {self.mode!r}")


#: The causal form and the decoding state, in words (``attnbench list``).
CAUSAL_NOTE = ("the synthesised logits of token i (its Dense row, or row i of R) masked to j <= i before the "
               "softmax, as the paper's decoders and the authors' LRA code (causal_mask)")
DECODE_NOTE = ("a cache of every token's value (the logits' keys are positions, W_2 rows or R columns: nothing to "
               "cache)")


@register(
    "synthesizer",
    SynthesizerConfig,
    Capabilities(causal=True, decode=True, causal_note=CAUSAL_NOTE, decode_note=DECODE_NOTE, complexity="n^2",
                 needs_fixed_length=True),
    paper="https://arxiv.org/abs/2005.00743", display="Synthesizer", group="hashing / learned",
)
class SynthesizerAttention(nn.Module):
    """Synthesizer: Y_h = softmax(B_h[:n, :n]) G_h(X), B = F(X) (Dense) or a learned R_h (Random); arxiv 2005.00743.

    Dense: B_h,i = W_2 ReLU(W_1,h X_i + b_1,h) + b_2 ∈ R^{max_seq_len} per token and head (§3.1, eq. 1), of which
    the first n logits are used; Random: B_h = R_h[:n, :n] (§3.2). G(X) = X W_V + b_V split into heads (the
    value projection), then the heads are merged and go through the output projection. O(n²) time, as in the
    paper. Memory: Dense is run as the dot-product attention it is (query [ReLU(W_1,h X_i + b_1,h), 1], key
    [W_2[j], b_2[j]]) in torch's fused kernel, so its n×n logits are never stored (O(n) memory without attention
    dropout); Random's R_h is an n×n parameter, materialised as in the paper.

    Choices and deviations (the paper leaves these open, or the authors' LRA code decides them):
    - Heads (Dense): W_1 maps D -> D, split into H heads of D/H hidden units each (W_1,h), and one
      W_2 ∈ R^{(D/H)×max_seq_len} is shared by all heads, as the LRA code (``dense_syn`` with features
      (heads, head_dim), then ``dense_syn2`` over the head_dim axis). The LRA code then reshapes
      [B, N, H, L] to [B, H, N, L] without a transpose (a bug that a comment in that code itself questions);
      here the axes are transposed, so B_h,i really is token i's logits for head h.
    - Only the first n of the max_seq_len outputs of W_2 are computed (rows :n of W_2 and b_2): the same logits
      as computing all and slicing (LRA code), without the wasted (max_seq_len − n) columns.
    - Inputs shorter than max_seq_len use the leading n×n block (LRA code); longer ones are an error.
    - Random R init: N(0, 1/(H·max_seq_len)), the LRA code's flax default kernel init (Lecun normal, whose
      fan-in for an [H, L, L] parameter is H·L) without its truncation; R is near-uniform at init, as there.
      Dense layers use PyTorch's nn.Linear init (the LRA code: Lecun normal, zero biases).
    - No Q or K projections (the paper's Dense and Random synthesizers have none; LRA ``ignore_dot_product``).
    - Padding: padded keys get a large negative additive logit (weight exactly 0), and X is zeroed at padded
      positions. A sequence with no real key gets finite weights over its (zeroed) positions.
    - Dropout on the synthesised attention weights (LRA code), in training only.

    Causal (``causal=True``): token i's synthesised logits B_h,i (its Dense row, or row i of R_h) are masked to
    j <= i before the softmax, the decoder use the paper evaluates (machine translation, language modelling) and
    the LRA code's ``causal_mask``. Row i of either logit matrix is already a function of token i alone (Dense)
    or of nothing (Random), so the mask is the whole causal form. Dense passes ``is_causal`` to the fused kernel
    (the padding still rides in the bias column); Random masks the upper triangle of R_h[:n, :n].
    Decoding (``prefill``/``step``): the logits' keys are positions (W_2's rows, R_h's columns), parameters rather
    than per-token state, so the cache holds values only: a :class:`~attentions._decode.KVCache` whose keys have
    width 0. A step synthesises the new token's row over the positions written so far (Dense: W_2[:L] of its hidden
    units; Random: row L−1 of R_h) and reads the cached values; the capacity is at most max_seq_len. (The LRA code's
    cached decoding slices the synthesised logits to the one-token input's length, reading R_h[:1, :1] or the first
    Dense logit rather than the new token's row over the cache; not followed.)
    """

    def __init__(self, cfg: SynthesizerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.value = nn.Linear(cfg.dim, cfg.dim)  # G(X)
        self.out = nn.Linear(cfg.dim, cfg.dim)
        self.dense1: nn.Linear | None = None
        self.dense2: nn.Linear | None = None
        if cfg.mode == "dense":
            self.dense1 = nn.Linear(cfg.dim, cfg.dim)  # W_1: H heads of head_dim hidden units
            self.dense2 = nn.Linear(cfg.head_dim, cfg.max_seq_len)  # W_2, shared by the heads
        else:
            std = 1.0 / math.sqrt(cfg.heads * cfg.max_seq_len)
            r = torch.randn(cfg.heads, cfg.max_seq_len, cfg.max_seq_len) * std  # [H, L, L]
            if cfg.trainable_random:
                self.random = nn.Parameter(r)
            else:
                self.register_buffer("random", r)

    def logits(self, x: Tensor) -> Tensor:
        """The synthesised logits B[:, :, :n, :n] for x [B, N, D]: [B, H, N, N] (Dense) or [1, H, N, N] (Random)."""
        n = x.shape[1]
        if self.dense1 is None or self.dense2 is None:
            return self.random[:, :n, :n].unsqueeze(0)  # [1, H, N, N]
        hidden = F.relu(split_heads(self.dense1(x), self.cfg.heads))  # [B, H, N, dh]
        return F.linear(hidden, self.dense2.weight[:n], self.dense2.bias[:n])  # [B, H, N, N]

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        y, _ = self._heads(x, mask, causal=self.cfg.causal)
        return self.out(merge_heads(y))  # [B, N, D]

    def prefill(self, x: Tensor, mask: Tensor | None = None, *, capacity: int) -> tuple[Tensor, KVCache]:
        """The causal form over a prompt x [B, P, D] and the value cache for ``capacity`` tokens (see ``_decode``)."""
        check_capacity(capacity, x.shape[1])
        check_seq_len(capacity, self.cfg.max_seq_len, "logits are sized by it")
        y, v = self._heads(x, mask, causal=True)  # [B, H, P, dh] each
        b, h, _, dh = v.shape
        # Keys of width 0: the synthesised logits need no per-token key, only the values and which tokens are real.
        cache = KVCache(v.new_zeros(b, h, capacity, 0), v.new_zeros(b, h, capacity, dh),
                        torch.zeros(b, capacity, dtype=torch.bool, device=x.device))
        cache.append(v[..., :0], v, mask)
        return self.out(merge_heads(y)), cache

    def step(self, x: Tensor, cache: KVCache) -> tuple[Tensor, KVCache]:
        """One token x [B, 1, D]: its value joins the cache, its synthesised row weighs every cached value."""
        v = split_heads(self.value(x), self.cfg.heads)  # [B, H, 1, dh]
        cache.append(v[..., :0], v)
        n = cache.length  # the new token is position n - 1
        _, values, real = cache.keys()  # [B, H, n, dh], [B, n]
        if self.dense1 is None or self.dense2 is None:
            logits = self.random[:, n - 1 : n, :n].unsqueeze(0)  # [1, H, 1, n]: row n - 1 of R
        else:
            hidden = F.relu(split_heads(self.dense1(x), self.cfg.heads))  # [B, H, 1, dh]
            logits = F.linear(hidden, self.dense2.weight[:n], self.dense2.bias[:n])  # [B, H, 1, n]
        weights = fill_masked(logits, real[:, None, None, :]).softmax(dim=-1)  # [B, H, 1, n]
        weights = F.dropout(weights, p=self.cfg.dropout, training=self.training)
        return self.out(merge_heads(weights @ values)), cache

    def _heads(self, x: Tensor, mask: Tensor | None, *, causal: bool) -> tuple[Tensor, Tensor]:
        """softmax(B_h)V_h of every head over x [B, N, D] (B masked to j <= i where ``causal``), with the values:
        y, v, each [B, H, N, dh]."""
        cfg = self.cfg
        n = x.shape[1]
        check_seq_len(n, cfg.max_seq_len, "logits are sized by it")
        x = zero_padding(x, mask)
        v = split_heads(self.value(x), cfg.heads)  # [B, H, N, dh]
        p = cfg.dropout if self.training else 0.0
        if self.dense1 is None or self.dense2 is None:  # Random: R is an [H, N, N] parameter, materialised anyway
            scores = self.logits(x)  # [1, H, N, N]
            keep = None if mask is None else mask[:, None, None, :]  # [B, 1, 1, N]
            if causal:
                tril = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()  # [N, N]: j <= i
                keep = tril if keep is None else keep & tril  # [N, N] or [B, 1, N, N]
            if keep is not None:
                scores = fill_masked(scores, keep)  # [B or 1, H, N, N]
            return F.dropout(scores.softmax(dim=-1), p=p, training=self.training) @ v, v  # [B, H, N, dh]
        # Dense: B_ij = ReLU(W_1 x_i + b_1)·W_2[j] + b_2[j] is a dot product of [hidden_i, 1] with the learned
        # "key" [W_2[j], b_2[j]] of position j, so softmax(B)V runs in the fused attention kernel (scale 1) and the
        # n×n logits are never stored. A padded key's bias column also gets key_bias_value (weight exactly 0); the
        # causal triangle is the kernel's own ``is_causal``.
        b, h = v.shape[:2]
        hidden = F.relu(split_heads(self.dense1(x), cfg.heads))  # [B, H, N, dh]
        qx = F.pad(hidden, (0, 1), value=1.0)  # [B, H, N, dh+1]: [hidden, 1]
        w2, b2 = self.dense2.weight[:n], self.dense2.bias[:n, None]  # [N, dh], [N, 1]
        valid = None if mask is None else mask[:, None, :, None]  # [B, 1, N, 1]
        bias = b2 + key_bias_column(valid, (b, 1, n, 1), b2.dtype, b2.device)  # [B, 1, N, 1]
        keys = torch.cat([w2.expand(b, 1, n, w2.shape[-1]), bias], dim=-1).expand(b, h, n, -1)  # [B, H, N, dh+1]
        vx = F.pad(v, (0, 1))  # [B, H, N, dh+1]: the fused kernel wants one head size for q, k and v
        y = F.scaled_dot_product_attention(qx, keys, vx, dropout_p=p, is_causal=causal, scale=1.0)  # [B,H,N,dh+1]
        return y[..., :-1], v


register_preset(
    "synthesizer_random",
    "synthesizer", display="Synthesizer (random)",
    mode="random",
    description="Random Synthesizer: a learned [max_seq_len, max_seq_len] logit matrix per head.",
)
