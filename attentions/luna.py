"""Luna: linear unified nested attention — pack the sequence into a fixed-length context, then unpack it.

Paper: Ma et al., "Luna: Linear Unified Nested Attention", NeurIPS 2021, https://arxiv.org/abs/2106.01540
(§3.1 pack and unpack attention, §3.3 the Luna layer). Authors' code: fairseq-apollo
``fairseq/modules/luna_layer.py`` / ``luna_attention.py`` (``LunarMultiheadAttention``; the causal form
``LunarCausalAttention`` with ``efficient_causal_attention`` and ``incremental_causal_attention``).

The paper also defines a causal Luna for autoregressive models (the issue listing the causal forms to add left it
out); ``causal=True`` builds it, as the authors' ``LunarCausalAttention`` computes it, and it decodes with a bounded
state: two running sums over the l packed rows and a token count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._decode import RecurrentState, check_capacity
from ._kernels import CAUSAL_CHUNK, causal_kernel_attention_terms
from .base import masked_fill_value, merge_heads, split_heads, with_ones_columns, zero_padding
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


#: The causal form and the decoding state, in words (``attnbench list``).
CAUSAL_NOTE = ("the paper's causal Luna as the authors' LunarCausalAttention: softplus packing weights, position t "
               "unpacks the running average over tokens ≤ t of the packed keys and values")
DECODE_NOTE = ("two running sums over the l packed rows ([d_h, l + 1] and [l, d_h + 1] per head) and the count of "
               "real tokens: bounded, whatever the context")


@dataclass
class LunaState:
    """The decoding state of causal Luna: the sums both causal products read, and the number of real tokens.

    Attributes:
        pack: Σ_j k_j [a_j, 1]ᵀ [B, H, d_h, w] (a_j the packing weights of token j, w ≥ l + 1): the packed keys.
        unpack: Σ_j a_j [v_j, 1]ᵀ [B, H, l, w'] (w' ≥ d_h + 1): the packed values.
        count: [B] int64, real tokens so far (prompt padding left out), the average's divisor.
    """

    pack: RecurrentState
    unpack: RecurrentState
    count: Tensor


@register(
    "luna", LunaConfig,
    Capabilities(complexity="n", causal=True, decode=True, causal_note=CAUSAL_NOTE, decode_note=DECODE_NOTE),
    paper="https://arxiv.org/abs/2106.01540", display="Luna", group="low rank",
)
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

    Causal (``causal=True``), the authors' ``LunarCausalAttention``: a softmax over all n tokens would read the
    future, so each token j gets non-negative packing weights a_j = softplus_β(P W_pq · X_j W_pc / √d_h) ∈ R^l
    (β = ln 2, so that softplus(0) = 1), and position t unpacks the running average over the tokens ≤ t:

        A_t = (1/n_t) Σ_{j≤t} (q_t · k_j / √d_h) a_j ∈ R^l,   Y_t = (1/n_t) Σ_{j≤t} (softmax(A_t) · a_j) v_j,

    with q = X W_q, k = X W_k, v = X W_v (one projection of X for k = v with ``tie_kv``) and n_t the number of
    tokens ≤ t. Both are causal linear-attention products (``attentions._kernels.causal_kernel_attention_terms``:
    chunked, O(n·l·d_h) time, never an [n, d_h, l] prefix sum as the authors' parallel form builds).
    - Parameters: the layer's own, in the causal layer's roles: ``x_proj`` gives q and the packing keys X W_pc (no
      packing values: the causal pack and unpack read X through W_k, W_v), ``p_query`` the packing queries,
      ``c_proj`` k and v, now from X (its weights keep the bidirectional shapes; ``x_proj`` has 2D outputs, since
      only the bidirectional form with separate K and V uses a third); the same initialisation.
    - Padding (the authors' causal code has none: it takes no key mask): x is zeroed at padded positions, a padded
      token adds nothing to either sum, and n_t counts the real tokens ≤ t (the authors' 1/t where nothing is
      padded); a position with no real token at or before it gets zero.
    - Dropout on the packing weights a and on softmax(A_t), in training (authors' code).
    - Decoding: :class:`LunaState`, the two sums after the last token and the real-token count; a step adds one
      token to both and reads them (the authors' ``incremental_causal_attention``).
    """

    def __init__(self, cfg: LunaConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.dim
        kv = 1 if cfg.tie_kv else 2
        packing = 1 if cfg.tie_kv or cfg.causal else 2  # the causal pack has keys only (X W_pc)
        self.x_proj = nn.Linear(d, (1 + packing) * d)  # X -> [unpack queries, pack keys (and values)]: one GEMM
        self.p_query = nn.Linear(d, d)  # P -> pack queries
        self.c_proj = nn.Linear(d, kv * d)  # P' (causal: X) -> unpack keys (and values)
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
        if self.cfg.causal:
            return self._causal(x, mask)[0]
        cfg = self.cfg
        b, n, d = x.shape
        p_drop = cfg.dropout if self.training else 0.0
        x = zero_padding(x, mask)
        xp = self.x_proj(x)  # [B, N, (1+kv)·D]
        q = split_heads(xp[..., :d], cfg.heads)  # [B, H, N, dh]
        pk = split_heads(xp[..., d : 2 * d], cfg.heads)  # [B, H, N, dh]
        pv = pk if cfg.tie_kv else split_heads(xp[..., 2 * d :], cfg.heads)
        pq = self._pack_queries().expand(b, -1, -1, -1)  # [B, H, l, dh]: a view, the l×D projection computed once
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

    def prefill(self, x: Tensor, mask: Tensor | None = None, *, capacity: int) -> tuple[Tensor, LunaState]:
        """The causal form over a prompt x [B, P, D] and the sums after it (see ``_decode``; the state is bounded,
        ``capacity`` only checked)."""
        check_capacity(capacity, x.shape[1])
        return self._causal(x, mask)

    def step(self, x: Tensor, state: LunaState) -> tuple[Tensor, LunaState]:
        """One (real) token x [B, 1, D] joins both sums (in place); its output reads them."""
        state.count += 1
        y, after = self._causal(x, None, state)
        for held, new in ((state.pack, after.pack), (state.unpack, after.unpack)):
            held.kv.copy_(new.kv)  # in place: the state's tensors stay the ones prefill allocated
            held.length = new.length
        return y, state

    def _pack_queries(self) -> Tensor:
        """P W_pq split into heads: [1, H, l, dh]."""
        # F.linear on p_query's weights rather than calling the submodule with the Parameter P: torch's module
        # tracker (FlopCounterMode) cannot hook a Parameter given to a submodule under inference_mode
        pq = F.linear(self.context, self.p_query.weight, self.p_query.bias)  # [l, D]
        return split_heads(pq.unsqueeze(0), self.cfg.heads)  # [1, H, l, dh]

    def _causal(self, x: Tensor, mask: Tensor | None, state: LunaState | None = None) -> tuple[Tensor, LunaState]:
        """Causal Luna over x [B, N, D] following the tokens ``state`` holds (None: x is the start; a step's state
        already counts its token): the output [B, N, D] and the state after the last token (new sums)."""
        cfg = self.cfg
        b, n, d = x.shape
        scale = cfg.head_dim**-0.5
        p_drop = cfg.dropout if self.training else 0.0
        x = zero_padding(x, mask)
        q, pc = (split_heads(t, cfg.heads) for t in self.x_proj(x).chunk(2, dim=-1))  # [B, H, N, dh] each
        c = self.c_proj(x)  # [B, N, kv·D]
        k = split_heads(c[..., :d], cfg.heads)  # [B, H, N, dh]
        v = k if cfg.tie_kv else split_heads(c[..., d:], cfg.heads)
        # packing weights a_j: softplus with β = ln 2 (softplus(0) = 1), the authors' _compute_pattention
        a = F.softplus(pc @ (self._pack_queries() * scale).transpose(-1, -2), beta=math.log(2.0))  # [B, H, N, l]
        a = F.dropout(a, p=p_drop, training=self.training)
        if state is None:
            real = torch.ones(b, n, dtype=torch.bool, device=x.device) if mask is None else mask  # [B, N]
            count = real.cumsum(dim=1)  # [B, N]: real tokens at or before each position
            total, pack, unpack, seen = real.sum(dim=1), None, None, 0
        else:  # decoding: every token real, the last of them the state's count-th
            count = state.count[:, None] + torch.arange(1 - n, 1, device=x.device)  # [B, N]
            total, pack, unpack, seen = state.count, state.pack.kv, state.unpack.kv, state.pack.length
        if n == 0:  # an empty prompt: no output, zero sums of the widths the products give
            pack_sum = k.new_zeros(b, cfg.heads, cfg.head_dim, with_ones_columns(a).shape[-1])
            unpack_sum = k.new_zeros(b, cfg.heads, cfg.proj_len, with_ones_columns(v).shape[-1])
            return self.out(x), LunaState(RecurrentState(pack_sum), RecurrentState(unpack_sum), total)
        divisor = count.clamp_min(1).to(x.dtype)[:, None, :, None]  # [B, 1, N, 1]: n_t
        chunk = min(CAUSAL_CHUNK, n)  # a decoding step is one token: no chunk of padding
        # A_t = (1/n_t) Σ_{j≤t} (q_t·k_j/√d) a_j: a causal linear-attention product with a as the values
        scores, _, pack_sum = causal_kernel_attention_terms(q * scale, k, a, mask, state=pack, chunk=chunk)
        probs = F.dropout((scores / divisor).softmax(dim=-1), p=p_drop, training=self.training)  # [B, H, N, l]
        # Y_t = (1/n_t) Σ_{j≤t} (softmax(A_t)·a_j) v_j: the same product with a as the keys and v as the values
        y, _, unpack_sum = causal_kernel_attention_terms(probs, a, v, mask, state=unpack, chunk=chunk)
        state_after = LunaState(RecurrentState(pack_sum, seen + n), RecurrentState(unpack_sum, seen + n), total)
        return self.out(merge_heads(y / divisor)), state_after


register_preset("luna_l16", "luna", display="Luna (l = 16)", proj_len=16, description="Luna, packed length l = 16.")
register_preset("luna_l128", "luna", display="Luna (l = 128)", proj_len=128, description="Luna, packed length l = 128.")
