"""Longformer: sliding-window attention (optionally dilated) plus symmetric global attention on a few tokens; and
the one-sided (causal) sliding window of its autoregressive language model.

Paper: Beltagy, Peters, Cohan, "Longformer: The Long-Document Transformer", https://arxiv.org/abs/2004.05150
(§3.1 attention pattern: sliding window, dilated sliding window, global attention, separate global projections;
§4 autoregressive language modelling: dilated sliding windows, no global attention).
LRA's code: ``lra_benchmarks/models/longformer`` (window 512, separate global Q/K/V, no dilation).
The authors' code: ``allenai/longformer``, ``longformer/longformer.py`` and ``longformer/diagonaled_mm_tvm.py``
(``autoregressive=True``: the diagonals above the main one are not computed).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ._blocks import attend_slots, dense_rows, sliding_window_attention
from ._decode import WindowCache, check_capacity
from ._flex import FlexPattern, MaskMod, PatternConfig, register_flex_preset
from .base import QKVProjection, merge_heads, softmax_reference, zero_padding
from .registry import Capabilities, register


@dataclass(frozen=True)
class LongformerConfig(PatternConfig):
    """Config of Longformer attention.

    Attributes:
        window: the paper's window w: each token attends to w/2 tokens on each side (and itself). 512 is the
            paper's pretraining window (and LRA's ``sliding_window_size``).
        dilation: the paper's dilation d: the window keys are i ± k·d, k = 0..w/2 (receptive field d·w/2 on each
            side). The paper uses d > 1 on some heads of autoregressive LM layers only; 1 = undilated (default,
            as LRA and HuggingFace).
        global_tokens: the first ``global_tokens`` positions are global: they attend to every token and every
            token attends to them (the paper makes task tokens global, e.g. [CLS] for classification; LRA's
            classifier puts its CLS token first). 0 = sliding window only (LRA's default ``global_mask=None``).
            The causal form drops them (see the class docstring).
        global_proj: separate Q_g, K_g, V_g projections compute the global tokens' own rows (paper §3.1 "Linear
            Projections for Global Attention", LRA's code); initialised as copies of the sliding-window
            projections, as the paper does. False uses one projection for both.
        backend: "blocks" (block gathers) or "flex" (FlexAttention with the same pattern; :mod:`attentions._flex`).
    """

    window: int = 512
    dilation: int = 1
    global_tokens: int = 1
    global_proj: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("dilation")
        if not (isinstance(self.window, int) and self.window >= 0 and self.window % 2 == 0):
            raise ValueError(f"window must be an even integer >= 0 (w/2 tokens on each side), got {self.window!r}")
        if not (isinstance(self.global_tokens, int) and self.global_tokens >= 0):
            raise ValueError(f"global_tokens must be an integer >= 0, got {self.global_tokens!r}")


#: The causal form and its decoding state, in words (``attnbench list``).
CAUSAL_NOTE = ("the autoregressive LM's one-sided window (paper §4): query i reads i - k·dilation, k = 0..window/2; "
               "global tokens are dropped (a global token would read every later one)")
DECODE_NOTE = "a ring buffer of the last dilation·window/2 + 1 keys and values"


@register("longformer", LongformerConfig,
          Capabilities(approximates_softmax=True, complexity="n", causal=True, decode=True, causal_note=CAUSAL_NOTE,
                       decode_note=DECODE_NOTE),
          paper="https://arxiv.org/abs/2004.05150", display="Longformer", group="sparse / local")
class LongformerAttention(FlexPattern, nn.Module):
    """Longformer: sliding window (w/2 each side, dilation d) + global tokens; arxiv.org/abs/2004.05150.

    Local query i (not global): softmax over keys {j : |i-j| <= d·w/2, d | i-j} ∪ G with Q_s, K_s, V_s.
    Global query i ∈ G: softmax over all keys with Q_g, K_g, V_g (paper §3.1). G = the first ``global_tokens``
    positions. Windows are computed blockwise (``attentions._blocks.sliding_window_attention``), the global
    rows as |G| dense rows: O(n·(w + |G|)) time and memory.

    Choices and deviations (the paper leaves these open):
    - Which tokens are global is task-specific in the paper; here the first ``global_tokens`` positions (the
      CLS position of a classifier). A global position that is padding is masked like any padded key.
    - Separate global projections as the paper and LRA's code: local queries read the global keys through
      K_s, V_s (their own rows), global queries use Q_g, K_g, V_g over all keys (LRA's and HuggingFace's
      reading). Q_g, K_g, V_g start as copies of Q_s, K_s, V_s, as the paper initialises them.
    - The window is symmetric: w/2 keys on each side plus the query itself (LRA's code gives the left side
      one more key when w is even instead); with dilation d the keys are i ± k·d (the paper's "gaps of size
      d"), and the window is computed on each residue class mod d, where it is an undilated window.
    - A global key inside a query's window is counted once (the union of both patterns, as a dense mask).
    - Dropout on the attention weights (window and global rows) in training.
    - ``backend="flex"``: the local rows' key set (window ∪ G) as a FlexAttention mask_mod (:meth:`flex_pattern`);
      the global rows stay |G| dense rows through Q_g, K_g, V_g, which no mask of Q_s K_sᵀ can express. No dropout
      (see :mod:`attentions._flex`).

    Causal (``causal=True``), the autoregressive language model of §4: query i reads the keys
    {i - k·d : k = 0, ..., w/2} (j <= i only: the left half of the window, the query included), with Q_s, K_s, V_s.
    - Window: the authors' code takes a one-sided ``attention_window`` (its docs: "window size = number of attention
      locations on each side", 256 for the effective window of 512 that is our w), and with ``autoregressive=True``
      its kernel computes the diagonals i - k·d, k = 0..attention_window, and none above (``diagonaled_mm_tvm.py``:
      ``w_upper = 0``; the released ``LongformerSelfAttention`` stores the flag but calls the kernel with it off, and
      the language-model training code is not in that repository, so the kernel is what we follow). The same config
      so reads the same w/2 keys behind the query in both forms, and drops the w/2 ahead. Dilation as configured
      (the paper dilates some heads of the upper layers of its LM; here every head has the one ``dilation``).
    - Global tokens: none. The paper's language model uses no global attention, and a global token cannot exist in
      a causal layer (it attends to every token, later ones included). The causal form drops ``global_tokens`` (the
      first positions are ordinary window positions) rather than refusing the config, so the default config has a
      causal form; no global projections are built (``proj_global`` is None).
    - The paper's per-layer window sizes (growing from the lowest layer to the highest) are a model's choice of one
      ``window`` per layer, not part of the layer.
    - Decoding (``prefill``/``step``): a :class:`~attentions._decode.WindowCache` ring buffer of the last
      d·w/2 + 1 keys and values (every residue mod d is needed by some later query); a step reads only its own
      w/2 + 1 slots, i - k·d.
    """

    def __init__(self, cfg: LongformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.proj = QKVProjection(cfg.dim, cfg.heads)
        has_global = cfg.global_proj and cfg.global_tokens > 0 and not cfg.causal
        self.proj_global = copy.deepcopy(self.proj) if has_global else None
        self.out = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        cfg = self.cfg
        if cfg.causal:
            y, _, _ = self._causal(x, mask)
            return self.out(merge_heads(y))
        b, n, _ = x.shape
        p = cfg.dropout if self.training else 0.0
        x = zero_padding(x, mask)
        q, k, v = self.proj(x)  # each [B, H, N, d]
        g = min(cfg.global_tokens, n)
        if cfg.backend == "flex":
            y = self.flex_attend(q, k, v, mask, causal=False)  # [B, H, N, d]: window ∪ G for every row
        elif g == 0:
            y = sliding_window_attention(
                q, k, v, cfg.window // 2, dilation=cfg.dilation, key_mask=mask, dropout_p=p, training=self.training
            )
        else:
            real = torch.ones(b, n, dtype=torch.bool, device=x.device) if mask is None else mask
            # The global keys leave the window (key mask) and join as extra keys, so each is counted once.
            not_global = torch.arange(n, device=x.device) >= g  # [N]
            y = sliding_window_attention(
                q, k, v, cfg.window // 2, dilation=cfg.dilation, key_mask=real & not_global,
                extra_k=k[:, :, :g], extra_v=v[:, :, :g], extra_mask=real[:, :g], dropout_p=p, training=self.training,
            )  # [B, H, N, d]
        if g == 0:
            return self.out(merge_heads(y))
        if self.proj_global is not None:
            qg, kg, vg = self.proj_global(x)  # each [B, H, N, d]; only the first g query rows are used
        else:
            qg, kg, vg = q, k, v
        yg = dense_rows(qg[:, :, :g], kg, vg, key_mask=mask, dropout_p=p, training=self.training)  # [B, H, g, d]
        y = torch.cat([yg, y[:, :, g:]], dim=2)  # [B, H, N, d]: global rows replace their window rows
        return self.out(merge_heads(y))

    def prefill(self, x: Tensor, mask: Tensor | None = None, *, capacity: int) -> tuple[Tensor, WindowCache]:
        """The causal form over a prompt x [B, P, D] and the ring buffer later queries read (see ``_decode``)."""
        check_capacity(capacity, x.shape[1])
        y, k, v = self._causal(x, mask)  # [B, H, P, d] each
        span = self.cfg.dilation * (self.cfg.window // 2) + 1  # i - d·w/2 .. i
        cache = WindowCache.empty(k, self.cfg.heads, min(span, capacity), self.cfg.head_dim)
        cache.append(k, v, mask)
        return self.out(merge_heads(y)), cache

    def step(self, x: Tensor, cache: WindowCache) -> tuple[Tensor, WindowCache]:
        """One token x [B, 1, D]: its key and value join the ring buffer, its query reads i - k·d, k = 0..w/2."""
        d = self.cfg.dilation
        q, k, v = self.proj(x)  # [B, H, 1, d] each
        cache.append(k, v)
        i = cache.length - 1  # the new token's position
        first = i - d * min(self.cfg.window // 2, i // d)
        slots = torch.arange(first, i + 1, d, device=x.device) % cache.window  # [K]: its window's keys in the ring
        p = self.cfg.dropout if self.training else 0.0
        y = attend_slots(q, cache.k, cache.v, cache.real, slots, dropout_p=p, training=self.training)  # [B, H, 1, d]
        return self.out(merge_heads(y)), cache

    def _causal(self, x: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """The one-sided dilated window of every head over x [B, N, D] and its keys and values: y, k, v [B, H, N, d]."""
        p = self.cfg.dropout if self.training else 0.0
        q, k, v = self.proj(zero_padding(x, mask))  # each [B, H, N, d]
        if self.cfg.backend == "flex":
            return self.flex_attend(q, k, v, mask, causal=True), k, v
        y = sliding_window_attention(q, k, v, self.cfg.window // 2, dilation=self.cfg.dilation, causal=True,
                                     key_mask=mask, dropout_p=p, training=self.training)
        return y, k, v

    def flex_pattern(self, n: int, device: torch.device, causal: bool) -> MaskMod:
        """The local rows' keys as a mask_mod: |i - j| <= d·w/2 with d | i - j, or j ∈ G (causal: 0 <= i - j <= d·w/2,
        d | i - j, no global tokens)."""
        d, reach = self.cfg.dilation, self.cfg.dilation * (self.cfg.window // 2)
        g = 0 if causal else self.cfg.global_tokens

        def pattern(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            gap = q_idx - kv_idx
            near = ((gap >= 0) & (gap <= reach)) if causal else gap.abs() <= reach
            return (near & (gap % d == 0)) | (kv_idx < g)

        return pattern

    def softmax_reference(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """Full softmax attention through the local projections Q_s, K_s, V_s (the global rows' Q_g, K_g, V_g
        start as copies of them): what the window and the global tokens together stand in for."""
        return softmax_reference(self.proj, self.out, x, mask)


register_flex_preset(
    "longformer", display="Longformer (Flex)",
    description="Longformer's window and global keys through torch's FlexAttention (global rows as dense rows).",
)
