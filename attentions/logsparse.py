"""LogSparse self-attention with convolutional queries and keys (LogTrans).

Paper: Li, Jin, Xuan, Zhou, Chen, Wang, Yan, "Enhancing the Locality and Breaking the Memory Bottleneck of Transformer
on Time Series Forecasting", NeurIPS 2019, https://arxiv.org/abs/1907.00235 (§3.2 convolutional self-attention,
§3.3 LogSparse, Figure 3 (b)).

The attention is causal by construction (each cell reads itself and cells before it; the queries and keys come from a
causal convolution), so the config's ``causal`` changes nothing: both values build the same layer. Decoding keeps a
KV cache of every token and the convolution's last k − 1 inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._decode import KVCache, check_capacity
from .base import fill_masked, merge_heads, split_heads, zero_padding
from .registry import AttentionConfig, Capabilities, register


@dataclass(frozen=True)
class LogSparseConfig(AttentionConfig):
    """Config of LogSparse attention.

    Attributes:
        kernel: k, the causal convolution producing queries and keys (§3.2; k = 1 is ordinary self-attention's
            pointwise projection). The paper evaluates k = 1 … 9 per dataset and gives no single value; 3 here.
    """

    kernel: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("kernel")


def log_offsets(length: int) -> Tensor:
    """Distances a cell looks back: 0 (itself), then 1, 2, 4, … < length (Figure 3 (b))."""
    return torch.tensor([0] + [2**i for i in range(max(length - 1, 1).bit_length()) if 2**i < length])


#: The causal form and the decoding state, in words (``attnbench list``).
CAUSAL_NOTE = ("causal by design (the paper's pattern: each cell reads itself and the cells 2^0, 2^1, … before it; "
               "causal-convolution queries and keys): causal=False builds the same layer")
DECODE_NOTE = ("a KV cache of every token (the log pattern reads each earlier cell again at later steps) and the "
               "convolution's last k − 1 inputs")


@dataclass
class LogSparseState:
    """The decoding state of LogSparse attention.

    Attributes:
        cache: the convolved keys and the values of every token so far, preallocated for the context.
        recent: [B, k − 1, D], the last k − 1 inputs (zeroed at padding; zeros before the first token, the causal
            convolution's left padding): what the convolution of the next token reads besides it.
    """

    cache: KVCache
    recent: Tensor


@register(
    "logsparse",
    LogSparseConfig,
    Capabilities(complexity="n log n", causal=True, decode=True, causal_note=CAUSAL_NOTE, decode_note=DECODE_NOTE),
    paper="https://arxiv.org/abs/1907.00235", display="LogSparse", group="sparse / local",
)
class LogSparseAttention(nn.Module):
    """LogTrans attention: causal-convolution Q and K, each cell attending to itself and the cells 2^0, 2^1, …
    steps back; arxiv 1907.00235.

    - Q, K = CausalConv_k(X), V = X W_v (§3.2: queries and keys see their local shape, values stay pointwise).
    - Cell l attends, in one softmax with scale 1/√d_h, to cells l − 2^j for j = 0 … ⌊log₂ l⌋ and to itself
      (§3.3), so one layer costs O(L log L); the paper stacks O(log L) layers so information reaches every cell.

    Choices and deviations (the paper is silent, its code is not public):
    - Causal, as the paper's decoder-style forecaster, whatever the config's ``causal`` says (there is no
      bidirectional LogSparse pattern in the paper). The ``local attention`` and ``restart`` variants of §3.3
      (Figure 3 (c), (d)) are not included.
    - Padding: padded positions are zeroed before the convolutions, and padded keys get no weight; a query always
      has itself, so a fully padded row stays finite.
    - Dropout on the attention weights, in training; an output projection W_o as in multi-head attention.
    - Decoding (``prefill``/``step``): a :class:`~attentions._decode.KVCache` of every token's convolved key and
      value (a key l − 2^j is read again by the cells l + 2^j', so no earlier one can be dropped) and the last
      k − 1 inputs, which the next token's convolution reads (:class:`LogSparseState`).
    """

    def __init__(self, cfg: LogSparseConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.dim
        self.qk = nn.Conv1d(d, 2 * d, kernel_size=cfg.kernel)  # causal: fed the k - 1 inputs before the first
        self.v = nn.Linear(d, d)
        self.out = nn.Linear(d, d)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        x = zero_padding(x, mask)
        q, k, v = self._project(x, x.new_zeros(x.shape[0], self.cfg.kernel - 1, x.shape[2]))  # [B, H, N, d_h] each
        return self.out(merge_heads(self._attend(q, k, v, mask, start=0)))  # [B, N, D]

    def prefill(self, x: Tensor, mask: Tensor | None = None, *, capacity: int) -> tuple[Tensor, LogSparseState]:
        """The (causal) layer over a prompt x [B, P, D] and its state for ``capacity`` tokens (see ``_decode``)."""
        cfg = self.cfg
        check_capacity(capacity, x.shape[1])
        x = zero_padding(x, mask)
        before = x.new_zeros(x.shape[0], cfg.kernel - 1, x.shape[2])  # [B, k-1, D]: the convolution's left padding
        q, k, v = self._project(x, before)  # [B, H, P, d_h] each
        state = LogSparseState(KVCache.empty(k, cfg.heads, capacity, cfg.head_dim), before)
        state.cache.append(k, v, mask)
        state.recent.copy_(torch.cat([before, x], dim=1)[:, x.shape[1]:])  # [B, k-1, D]: the last k - 1 inputs
        return self.out(merge_heads(self._attend(q, k, v, mask, start=0))), state

    def step(self, x: Tensor, state: LogSparseState) -> tuple[Tensor, LogSparseState]:
        """One token x [B, 1, D]: its convolution reads the last k − 1 inputs, its query the cached log pattern."""
        q, k, v = self._project(x, state.recent)  # [B, H, 1, d_h] each
        state.cache.append(k, v)
        if self.cfg.kernel > 1:
            state.recent.copy_(torch.cat([state.recent[:, 1:], x], dim=1))  # [B, k-1, D]: shifted by one token
        keys, values, real = state.cache.keys()  # [B, H, L, d_h] twice, [B, L]
        y = self._attend(q, keys, values, real, start=state.cache.length - 1)  # [B, H, 1, d_h]
        return self.out(merge_heads(y)), state

    def _project(self, x: Tensor, before: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Q, K = CausalConv_k(X), V = X W_v for x [B, N, D] (zeroed at padding), ``before`` [B, k − 1, D] the
        inputs preceding it: three [B, H, N, d_h]."""
        cfg = self.cfg
        b, n, d = x.shape
        if n == 0:  # a convolution needs k inputs; an empty prompt has no query or key
            qk = x.new_zeros(b, 0, 2 * d)
        else:
            qk = self.qk(torch.cat([before, x], dim=1).transpose(1, 2)).transpose(1, 2)  # [B, D, k-1+N] -> [B, N, 2D]
        q, k = (split_heads(t, cfg.heads) for t in qk.chunk(2, dim=-1))  # [B, H, N, d_h]
        return q, k, split_heads(self.v(x), cfg.heads)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, real: Tensor | None, *, start: int) -> Tensor:
        """Queries q [B, H, Nq, d_h] at positions start … start + Nq − 1 over keys k, v [B, H, Nk, d_h] at 0 … Nk − 1
        (``real`` [B, Nk]: padded keys get no weight, a query keeps itself): [B, H, Nq, d_h]."""
        cfg = self.cfg
        nq = q.shape[2]
        offsets = log_offsets(start + nq).to(q.device)  # [m]
        keys = torch.arange(start, start + nq, device=q.device)[:, None] - offsets  # [Nq, m]: the cells each query sees
        valid = (keys >= 0)[None]  # [1, Nq, m]
        if real is not None:
            valid = valid & real[:, keys.clamp_min(0)]  # [B, Nq, m]: padded keys get no weight
            valid = valid | (offsets == 0)  # a query keeps itself, so its softmax is never empty
        idx = keys.clamp_min(0)
        k_sel, v_sel = k[:, :, idx], v[:, :, idx]  # [B, H, Nq, m, d_h] each: gathered, m = 1 + ⌊log₂ N⌋
        scores = torch.einsum("bhnd,bhnmd->bhnm", q, k_sel) * cfg.head_dim**-0.5  # [B, H, Nq, m]
        scores = fill_masked(scores, valid.unsqueeze(-3))  # [B or 1, 1, Nq, m]
        attn = F.dropout(scores.softmax(dim=-1), p=cfg.dropout, training=self.training)
        return torch.einsum("bhnm,bhnmd->bhnd", attn, v_sel)  # [B, H, Nq, d_h]
