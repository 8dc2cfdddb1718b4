"""Luna: linear unified nested attention — pack the sequence into a fixed-length context, then unpack it.

Paper: Ma et al., "Luna: Linear Unified Nested Attention", NeurIPS 2021, https://arxiv.org/abs/2106.01540
(§3.1 pack and unpack attention, §3.3 the Luna layer). Authors' code: fairseq-apollo
``fairseq/modules/luna_layer.py`` / ``lunar_multihead_attention.py`` (``LunarMultiheadAttention``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import masked_fill_value, merge_heads, split_heads, zero_padding
from .registry import AttentionConfig, Capabilities, register, register_preset


@dataclass(frozen=True)
class LunaConfig(AttentionConfig):
    """Config of Luna; defaults are the paper's main LRA setting (Luna-256).

    Attributes:
        proj_len: l, the length of the packed context P (paper's LRA runs: 16, 128 and 256).
        tie_kv: one projection gives both keys and values in each of the two attentions (the authors'
            ``LunarMultiheadAttention`` default, ``tie_kv=True``); False gives separate K and V projections.
    """

    proj_len: int = 256
    tie_kv: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("proj_len")


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = "not implemented yet"


@register("luna", LunaConfig, Capabilities(causal_note=CAUSAL_NOTE, complexity="n"), paper="https://arxiv.org/abs/2106.01540")
class LunaAttention(nn.Module):
    """Luna pack-and-unpack attention with a learned context P of length l; paper arxiv.org/abs/2106.01540.

    Pack: P' = Attn(P W_pq, X W_pk, X W_pv) = softmax(P W_pq (X W_pk)ᵀ/√d) X W_pv  (l × n weights, padded keys
    masked). Unpack: Y = softmax(X W_q (P' W_k)ᵀ/√d) P' W_v  (n × l weights), then the output projection.
    O(n·l·d) time and O(n·l) memory.

    Choices and deviations (the paper leaves these open, or the authors' code decides them):
    - Carried context: in the paper the packed P' goes on, through LayerNorm(P' + P), to be the next layer's
      P. This interface has one layer and one input, so each layer owns a learned P ∈ R^{l×D} (initialised
      N(0, D^(-1/2)), as the authors' projected embeddings), and P' only feeds this layer's unpack. A model
      built from these layers therefore has a fresh learned P per layer instead of the carried one.
    - Keys and values tied (``tie_kv``, authors' default): K = V = X W_pc in the pack step and K = V = P' W_c in
      the unpack step; both attentions use this layer's number of heads (the code allows a different number
      for the pack step).
    - Initialisation as the authors' code: Xavier-uniform with gain 1/√2 and zero biases for the input
      projections, Xavier-uniform for the output projection.
    - Pack attention output has no projection of its own (authors' code): P' is the heads of the pack
      attention merged.
    - Padding: X is zeroed at padded positions and padded keys get ``masked_fill_value`` in the pack softmax
      (weight exactly 0 when any key is real); the unpack step has no padded keys (the l packed positions).
      A sequence with no real token packs uniformly over its (zeroed) positions: finite, and it has no
      real output to affect.
    - Dropout ``dropout`` on both attention weight matrices in training (authors' code).
    """

    def __init__(self, cfg: LunaConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.dim
        kv = 1 if cfg.tie_kv else 2
        self.x_proj = nn.Linear(d, (1 + kv) * d)  # X -> [unpack queries, pack keys (and values)]: one GEMM
        self.p_query = nn.Linear(d, d)  # P -> pack queries
        self.c_proj = nn.Linear(d, kv * d)  # P' -> unpack keys (and values)
        self.out = nn.Linear(d, d)
        self.context = nn.Parameter(torch.randn(cfg.proj_len, d) * d**-0.5)  # P: [l, D]
        gain = 2**-0.5
        for lin in (self.x_proj, self.p_query, self.c_proj):
            # Xavier bounds per d×d projection (as the code's separate Linears), not per fused matrix.
            for w in lin.weight.split(d, dim=0):
                nn.init.xavier_uniform_(w, gain=gain)
            nn.init.zeros_(lin.bias)
        nn.init.xavier_uniform_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        cfg = self.cfg
        b, n, d = x.shape
        p_drop = cfg.dropout if self.training else 0.0
        x = zero_padding(x, mask)
        xp = self.x_proj(x)  # [B, N, (1+kv)·D]
        q = split_heads(xp[..., :d], cfg.heads)  # [B, H, N, dh]
        pk = split_heads(xp[..., d : 2 * d], cfg.heads)  # [B, H, N, dh]
        pv = pk if cfg.tie_kv else split_heads(xp[..., 2 * d :], cfg.heads)
        # F.linear on p_query's weights rather than calling the submodule with the Parameter P: torch's module
        # tracker (FlopCounterMode) cannot hook a Parameter given to a submodule under inference_mode
        pq = F.linear(self.context, self.p_query.weight, self.p_query.bias)  # [l, D]
        pq = split_heads(pq.unsqueeze(0), cfg.heads)  # [1, H, l, dh]
        pq = pq.expand(b, -1, -1, -1)  # [B, H, l, dh]: a view, the l×D projection is computed once
        key_bias = None
        if mask is not None:
            key_bias = torch.zeros(b, 1, 1, n, dtype=x.dtype, device=x.device)
            key_bias = key_bias.masked_fill(~mask[:, None, None, :], masked_fill_value(x.dtype))  # [B, 1, 1, N]
        packed = F.scaled_dot_product_attention(pq, pk, pv, attn_mask=key_bias, dropout_p=p_drop)  # [B, H, l, dh]
        c = self.c_proj(merge_heads(packed))  # [B, l, kv·D]
        uk = split_heads(c[..., :d], cfg.heads)  # [B, H, l, dh]
        uv = uk if cfg.tie_kv else split_heads(c[..., d:], cfg.heads)
        y = F.scaled_dot_product_attention(q, uk, uv, dropout_p=p_drop)  # [B, H, N, dh]
        return self.out(merge_heads(y))


register_preset("luna_l16", "luna", proj_len=16, description="Luna, packed length l = 16.")
register_preset("luna_l128", "luna", proj_len=128, description="Luna, packed length l = 128.")
