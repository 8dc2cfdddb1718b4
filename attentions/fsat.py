"""FSAT (Fourier Sparse Attention for Transformer) and its FAT ablation.

Paper: Yimeng Zhuang, Jing Zhang, Mei Tu, "Long-range Sequence Modeling with Predictable Sparse Attention",
ACL 2022 (Volume 1: Long Papers), pp. 234–243, https://aclanthology.org/2022.acl-long.19
(doi:10.18653/v1/2022.acl-long.19; the paper has no arXiv version and no public code: this is the first
implementation, so every choice the paper leaves open is listed, with ours, in ``FSATAttention``'s docstring).

- ``fsat`` (the paper's default M = 4; preset ``fsat_m8``): pooled hidden-state cross by FFT
  (eq. 1–4), Q from X and K, V from the cross C (eq. 6), M predicted dominant query indices per key (eq. 9),
  Gaussian edge confidences (eq. 8, 10) with truncated gradients (§4.2.4), and the sparse attention of eq. 7
  over O(n·M) edges (gathers, a scatter-softmax and CSR products) — never an n×n tensor.
- ``fat`` (``attentions.fat``): the paper's ablation "Fourier Attention for Transformer" (§5.6, eq. 5): the same
  cross, full softmax attention with K, V from C. O(n²). The equations as functions: ``attentions._fsat_ops``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch
from torch import Tensor

from ._fsat_ops import gaussian_confidence, last_real_index, sparse_attention, truncate_positive_grad
from .base import check_seq_len
from .fat import FATConfig, IndexScale, _CrossAttentionBase
from .registry import Capabilities, register, register_preset

#: What a predicted index at or past a sequence's real length becomes (see ``FSATAttention``, "Out-of-range").
OutOfRange = Literal["drop", "clamp"]


@dataclass(frozen=True)
class FSATConfig(FATConfig):
    """Config of FSAT; defaults are the paper's (M = 4, σ² = L_max, predicted ∪ random indices in training).

    Attributes:
        m_per_key: M, predicted dominant query indices per key and head (eq. 9; paper default 4, Table 3
            also 2 and 8).
        n_random: random query indices per key and head drawn in training (exploration, §4.2.3);
            None = M, i.e. I_r has the shape of I_p. Random index r takes its confidence mean from predicted
            column r mod M. 0 = the "Only I_p" ablation of Table 3.
        sigma2: variance σ² of the confidence (eq. 8); None = L_max = ``max_seq_len`` (paper §5.3).
        index_scale: what σ(·) is multiplied by in eq. 9: "max_seq_len" (the paper's L_max; inputs longer
            than max_seq_len are rejected) or "length" (each sequence's real length, so predictions span
            exactly the real tokens whatever max_seq_len is).
        normalized_confidence: ρ is the Gaussian density with its 1/√(2πσ²) factor (paper); False drops it.
        truncate_grad: clamp the confidence gradient to (−∞, 0] (§4.2.4); False = Table 3 "No Trunc.".
        out_of_range: a predicted index ⌊Ī⌋ at or past the sequence's real length: "drop" (default) removes
            the edge, as padded keys' edges are removed; "clamp" moves it onto the last real token (this
            implementation's behaviour before the option, kept for comparison). See the class docstring.
    """

    m_per_key: int = 4
    n_random: int | None = None
    sigma2: float | None = None
    index_scale: IndexScale = "max_seq_len"
    normalized_confidence: bool = True
    truncate_grad: bool = True
    out_of_range: OutOfRange = "drop"

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require_positive_ints("m_per_key")
        if self.n_random is not None and int(self.n_random) < 0:
            raise ValueError(f"n_random must be >= 0 or None (= m_per_key), got {self.n_random!r}")
        if self.sigma2 is not None and not self.sigma2 > 0:
            raise ValueError(f"sigma2 must be positive or None (= max_seq_len), got {self.sigma2!r}")
        if self.index_scale not in ("max_seq_len", "length"):
            raise ValueError(f"index_scale must be max_seq_len or length, got {self.index_scale!r}")
        if self.out_of_range not in ("drop", "clamp"):
            raise ValueError(f"out_of_range must be drop or clamp, got {self.out_of_range!r}")

    @property
    def randoms(self) -> int:
        """Random indices per key and head in training."""
        return self.m_per_key if self.n_random is None else int(self.n_random)

    @property
    def variance(self) -> float:
        """σ² of eq. 8."""
        return float(self.max_seq_len if self.sigma2 is None else self.sigma2)


class FSATEdges(NamedTuple):
    """FSAT's sparse graph for one input (per key j, head h: E = M predicted [+ R random] edges).

    Attributes:
        query_index: [B, N, H, E] int64: for key j in head h, the queries its edges point from (eq. 10's
            I_jm; columns :M are the predicted ⌊Ī⌋, columns M: the random ones in training); the value N
            marks a dropped edge (a padded key's, or with ``out_of_range="drop"`` one whose ⌊Ī⌋ is at or
            past the real length).
        confidence: [B, N, H, E] s = ρ(I | Ī, σ²), carrying the (truncated) gradient to Ī.
        predicted: [B, N, H, M] the continuous predictions Ī of eq. 9.
    """

    query_index: Tensor
    confidence: Tensor
    predicted: Tensor


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = (
    "its Fourier-pooled keys and values summarise the whole sequence and its predicted query indices point "
    "anywhere; the paper defines no causal form"
)


@register("fsat", FSATConfig, Capabilities(causal_note=CAUSAL_NOTE, complexity="n log n"),
          paper="https://aclanthology.org/2022.acl-long.19", display="FSAT", group="hashing / learned")
class FSATAttention(_CrossAttentionBase):
    """FSAT: sparse attention over predicted dominant query→key edges, K and V from the hidden-state cross.

    Paper: Zhuang, Zhang, Tu, "Long-range Sequence Modeling with Predictable Sparse Attention", ACL 2022,
    https://aclanthology.org/2022.acl-long.19 (no arXiv version, no public code) — §3 (eq. 1–6),
    §4 (eq. 7–10), §5.3 (M = 4, σ² = L_max), §5.6 (ablations).

    forward: X → C = LN(C₁ + C₂ − f₁(X)⊙f₂(X)) by FFT (eq. 1–4) → Q = X W_Q, K = C W_K, V = C W_V (eq. 6),
    Ī = σ(C W_I + b_I)·L_max (eq. 9) → edges I_jm → j with confidence ρ(I_jm | Ī_jm, σ²) (eq. 10) → per query,
    softmax over its incoming edges ⊙ confidences, times V (eq. 7) → W_o. Training: I = I_p ∪ I_r; eval: I_p.
    Time O(N·D² + N·D·log N + N·M·D), memory O(N·M·H + N·D) (§4.3). ``edges(x, mask)`` returns the graph.

    Choices where the paper is silent or ambiguous (ours first, then why):
    - f₁, f₂ (eq. 1): one Linear D→D + GELU each (fused into one GEMM); the paper says only "parameterized
      non-linear", "fully-connected structure". ``feature_map="dconv"``: depthwise conv (k = 5) + pointwise
      Linear + activation, the paper's "+DConv-5".
    - Eq. 3 as a linear convolution: FFTs zero-padded to a fast (5-smooth) size >= 2·max(L, max_seq_len)−1,
      ``irfft`` for the real part, float32 at least. Sizing by max_seq_len makes a sequence and its padded
      copy give bitwise the same C — ⌊Ī⌋ is discontinuous, so roundoff must not depend on the padding — and
      anti-diagonals past the last real token are set to their exact value 0 instead of FFT roundoff.
    - Eq. 4 merge: row t = c_{2t} + c_{2t+1} − f₁(x_t)⊙f₂(x_t), C₁'s zero row appended at the end (the
      paper's example sums anti-diagonals 10 and 11 around token 5). LN = nn.LayerNorm(D), affine. Kept as
      written although it makes the last real row 0 before LN (C = LN's bias β there).
    - One graph per head (§4.1: "each head has a graph computed independently"; eq. 7's N_i^h): W_I is
      D×(H·M), not eq. 9's D×M, i.e. M predicted queries per key per head.
    - Biases on all projections (Q, K, V, W_I, W_o); W_K, W_V, W_I share one GEMM over C. PyTorch default
      initialisation everywhere (the paper gives none).
    - L_max = ``max_seq_len`` (a scale, no parameter: no fixed-length requirement); longer inputs raise.
      ``index_scale="length"`` scales by each sequence's real length instead. σ² = L_max (§5.3), ``sigma2``.
    - ρ is the Gaussian density including 1/√(2πσ²), as written ("probability density function");
      ``normalized_confidence=False`` (preset ``fsat_unnormalized``) drops that constant factor, giving
      ρ = exp(−(I − Ī)²/2σ²) ∈ (0, 1], 1 at the predicted index. The paper motivates ρ only by its shape (queries
      far from Ī "have decreasing probabilities of attending"); the factor is a side effect of the literal
      reading, and it scales every attention output by at most 1/√(2πσ²): 0.025 at σ² = L_max = 256, 0.006 at
      the LRA Text length 4096. On the ListOps stand-in at short budgets the literal factor kept FSAT at the
      majority class while the kernel-shaped confidence learned like vanilla (the figures: docs/results/, "the
      confidence's normalising factor"); with Adam, W_o can grow to undo a constant scale over long training,
      which the paper's LRA runs have. The default stays the paper's text (a reader reproducing the paper gets
      what it says); ``fsat_unnormalized`` is the reading we would recommend, and both are registered.
    - Rounding: I_p = ⌊Ī⌋ (§4.2.3). Indices carry no gradient; Ī learns only through the confidences.
    - Out-of-range indices (``out_of_range``): Ī = σ(·)·L_max lies in [0, L_max], so ⌊Ī⌋ can be at or past
      the real length of a shorter or padded sequence (and equals L_max itself where σ saturates to 1). The
      paper is silent on this, but implies it: its inputs are padded to the task's fixed maximum length (§5.2,
      Text: "truncated or padded to a fixed maximum length of 4K") and L_max is that length (§5.3), so
      ⌊Ī⌋ < L_max addresses a position of the padded sequence, and an edge landing past the real tokens
      reaches a padding query: it changes only that padding position's output. Default "drop": such an edge is
      removed (sent to the discarded slot, as a padded key's edges), which is the paper's computation on the
      layer's real positions and leaves the other edges untouched. "clamp" moves it onto the last real token
      instead — an edge the paper does not have; on a padded document many keys' edges pile onto that one query
      (all of them when σ saturates): kept for comparison. Neither changes real outputs with the amount of
      padding. Wrapping (⌊Ī⌋ mod length) or rescaling to the real length (``index_scale="length"``, which keeps
      ⌊Ī⌋ in range except where σ saturates) are the other readings; the first has no support in the paper.
      Dropped edges carry no gradient to Ī; the random edges of training (scored against Ī, below) still
      pull an out-of-range Ī back into the real range, as the paper's exploration intends.
    - Random indices (training): ``n_random`` per key and head (default M: I_r shaped like I_p), uniform
      over [0, real length − 1], drawn fresh each training forward from torch's global RNG. Random column r
      is scored with the mean of predicted column r mod M (eq. 10 pairs I_jm with Ī_jm), so exploring edges
      near Ī pull it.
    - "Union" = concatenation: an edge present twice (two predictions rounding to the same query, or a
      random index hitting a predicted one) is kept as parallel edges, each with its own confidence — eq. 10
      defines a confidence per index-matrix entry and gives no rule to merge two.
    - Eq. 7 order: softmax(q_i·k_j/√d) over query i's incoming edges, then ⊙ confidence, no renormalisation.
      Dropout (``dropout``) acts on the softmax weights, before the confidence.
    - Gradient truncation: a custom autograd Function (identity forward, ``grad.clamp(max=0)`` backward) on
      the confidence tensor right after eq. 10, so dL/ds is truncated to (−∞, 0] and then flows through ρ to
      Ī, W_I, b_I and C. ``truncate_grad=False`` is Table 3's "No Trunc.".
    - A query with no incoming edge outputs the zero vector before W_o (the layer outputs W_o's bias there).
    - Implementation (no effect on the function): eq. 7 runs as CSR sparse products in float32 at least —
      SDDMM for the edge scores, SpMM for the weighted sums — with a scatter-softmax between them and a
      written-out backward (``_EdgeAttention``); the FFT cross also has a written-out backward.
    - Numerical deviation under autocast: the cross C and the one GEMM on it (K, V and the index logits) run in
      float32 with autocast off (the input cast to the weights' dtype), so only W_Q, W_o follow autocast. Why: ⌊Ī⌋
      is discontinuous, and with C and the logits in bf16, bf16's rounding moved Ī across integers, so a share of the
      predicted indices flipped and the bf16 forward differed from the float32 one far beyond bf16's rounding
      (``fsat``'s 1/√(2πσ²) factor hides the same flips under W_o's bias); with them in float32 no index flips and the
      difference is bf16's rounding (measured in docs/results, "From the code: bf16 under autocast"). Eq. 7's sparse
      products run with autocast off too (MKL has no bf16 sparse kernels; see ``_spmm``). A module cast to bf16 as a
      whole (``.to(torch.bfloat16)``, the speed suite's ``dtype: bfloat16`` cells) has bf16 weights, so its cross runs
      in bf16 and its indices flip as above: such a cell times the layer in bf16, not a bf16 copy of the float32 one.
    - Padding: f₁(X), f₂(X) zeroed at padded positions (real rows of C equal the unpadded sequence's); padded
      keys emit no edges (they go to a discarded slot); predicted indices past the real length are dropped or
      clamped (``out_of_range``), random indices are drawn within it. Real outputs never read padded content.
    - Not here: §5.3 halves the FFN width for FSAT (a model choice, outside the token mixer); Table 3's "Only
      I_r" (the paper does not say what inference uses then).
    """

    float32_cross = True  # the cross and the index logits read from it in float32 also under autocast

    def __init__(self, cfg: FSATConfig) -> None:
        super().__init__(cfg, extra_out=cfg.heads * cfg.m_per_key)
        self.cfg: FSATConfig = cfg

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        b, n, _ = x.shape
        q, k, v, logits = self._project(x, mask)  # q, k, v [B, N, H, d]; logits [B, N, H·M]
        graph = self._graph(logits, mask)
        p = self.cfg.dropout if self.training else 0.0
        y = sparse_attention(q, k, v, graph.query_index, graph.confidence, p)  # [B, N, H, d]
        return self.out(y.reshape(b, n, -1))  # [B, N, D]

    def edges(self, x: Tensor, mask: Tensor | None = None) -> FSATEdges:
        """The sparse graph forward would use for x (train mode: predicted ∪ random, a fresh random draw)."""
        return self._graph(self._project(x, mask)[3], mask)

    def _graph(self, logits: Tensor, mask: Tensor | None) -> FSATEdges:
        cfg = self.cfg
        bsz, n, _ = logits.shape
        if cfg.index_scale == "max_seq_len":
            check_seq_len(n, cfg.max_seq_len, "the paper's L_max")
        m, r = cfg.m_per_key, cfg.randoms if self.training else 0
        last = last_real_index(mask, n, logits.device)  # [B, 1, 1, 1] (or [] without a mask)
        # Index math in float32 at least: positions up to L_max must be resolved well below 1.
        ft = torch.promote_types(logits.dtype, torch.float32)
        z = logits.to(ft).view(bsz, n, cfg.heads, m)  # [B, N, H, M]
        scale = float(cfg.max_seq_len) if cfg.index_scale == "max_seq_len" else (last + 1).to(ft)
        ibar = torch.sigmoid(z) * scale  # [B, N, H, M], eq. 9
        index = ibar.detach().floor().long().clamp_(min=0)  # I_p = ⌊Ī⌋, [B, N, H, M]
        if cfg.out_of_range == "clamp":
            index = torch.minimum(index, last)  # onto the last real token
        else:
            index = index.masked_fill(index > last, n)  # past the real tokens: no edge (the discard slot)
        mean = ibar
        if r > 0:
            # I_r ~ U[0, n_b − 1]; the modulo of a 62-bit draw is uniform to within n/2^62.
            rand = torch.randint(0, 2**62, (bsz, n, cfg.heads, r), device=logits.device) % (last + 1)
            index = torch.cat((index, rand), dim=-1)  # [B, N, H, M + R]
            paired = ibar[..., torch.arange(r, device=ibar.device) % m]  # [B, N, H, R]: Ī_{j, r mod M}
            mean = torch.cat((ibar, paired), dim=-1)  # [B, N, H, M + R]
        conf = gaussian_confidence(index, mean, cfg.variance, cfg.normalized_confidence)  # eq. 10
        if cfg.truncate_grad:
            conf = truncate_positive_grad(conf)
        if mask is not None:
            index = index.masked_fill(~mask[:, :, None, None], n)  # padded keys emit no edge (discard row)
        return FSATEdges(index, conf, ibar)


register_preset("fsat_m8", "fsat", display="FSAT (m = 8)",
                m_per_key=8, description="FSAT with M = 8 predicted queries per key.")
register_preset(
    "fsat_unnormalized", "fsat", display="FSAT (unnormalised)", normalized_confidence=False,
    description="FSAT with ρ's 1/√(2πσ²) factor dropped (confidence in (0, 1]); see the FSAT docstring.",
)
