"""Linear Transformer: softmax replaced by the kernel φ(x) = elu(x) + 1, computed right-to-left in O(n).

Paper: Katharopoulos et al., "Transformers are RNNs: Fast Autoregressive Transformers with Linear Attention",
ICML 2020, https://arxiv.org/abs/2006.16236 (§3.2 eq. 4-6, §3.2.1 the feature map, §3.4 causal masking and the
RNN form). Authors' code: idiap ``fast-transformers`` (``fast_transformers/attention/linear_attention.py``, non-causal
``LinearAttention``; ``causal_linear_attention.py``, ``CausalLinearAttention``; and
``recurrent/attention/self_attention/linear_attention.py``, ``RecurrentLinearAttention``, its decoding form).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from ._decode import RecurrentState, check_capacity
from ._kernels import (
    EpsConfig,
    causal_kernel_attention_terms,
    causal_kernel_step,
    elu_feature_map,
    kernel_attention_terms,
)
from .base import ProjectedAttention, merge_heads, zero_padding
from .registry import Capabilities, register


@dataclass(frozen=True)
class LinearTransformerConfig(EpsConfig):
    """Config of the linear transformer (``causal``: §3.4's causally masked form).

    Attributes:
        eps: added to the normaliser φ(Q_i)ᵀ Σ_j φ(K_j) (the authors' code: ``eps=1e-6``). The normaliser is
            positive whenever a real key exists (φ > 0), so eps only matters for a sequence with no real key,
            where it turns 0/0 into 0/eps = 0; it must be > 0.
        dropout: accepted for the common interface and unused (see the class docstring).
    """


#: The causal form and the decoding state, in words (``attnbench list``).
CAUSAL_NOTE = "the paper's causal masking (§3.4, eq. 8-9): both sums over j ≤ i, as the authors' CausalLinearAttention"
DECODE_NOTE = "the recurrent sums Σ φ(k_j)[v_j, 1]ᵀ, one [d, d+1] matrix per head (§3.4's RNN form)"


@register(
    "linear_transformer",
    LinearTransformerConfig,
    Capabilities(complexity="n", causal=True, decode=True, causal_note=CAUSAL_NOTE, decode_note=DECODE_NOTE),
    paper="https://arxiv.org/abs/2006.16236",
    display="Linear Transformer",
    group="kernel",
)
class LinearTransformerAttention(ProjectedAttention):
    """Linear Transformer: V'_i = φ(Q_i)ᵀ(Σ_j φ(K_j) V_jᵀ) / (φ(Q_i)ᵀ Σ_j φ(K_j) + eps); arxiv.org/abs/2006.16236.

    φ(x) = elu(x) + 1 per head (eq. 6 with the §3.2.1 feature map), the K/V sums taken once per sequence, so
    time is O(n·d²) and memory O(n·d + d²): no n×n matrix exists.

    Choices and deviations (the paper leaves these open, or the authors' code decides them):
    - No 1/√d temperature: φ is applied to the raw projections, as eq. 6 and the authors' ``LinearAttention``.
    - eps = 1e-6 is added to the normaliser, as the authors' code, so a sequence without any real key (fully
      padded) gives 0 instead of 0/0; with at least one real key the normaliser is ≥ Σ_j φ(K_j) > 0 and eps
      shifts the output only by a relative ~eps / normaliser.
    - Padding: X is zeroed at padded positions and φ(K) is zeroed at padded keys, so padded keys are left out
      of both Σ_j φ(K_j) V_jᵀ and Σ_j φ(K_j) (the paper and the authors' non-causal code take no key-padding
      mask; fast-transformers zeroes K through a length mask the same way).
    - Σ_j φ(K_j) V_jᵀ and Σ_j φ(K_j) are one product, with a ones column appended to V (one pass over φ(K)),
      and the numerator and normaliser of every query come out of one product with φ(Q)
      (``_kernels.kernel_attention_terms``, shared with cosFormer and FMMformer's far field).
    - Dropout: there is no attention matrix to drop from, and the authors' ``LinearAttention`` applies none, so
      ``dropout`` is unused (the enclosing block's residual dropout still applies).

    Causal (``causal=True``, §3.4 eq. 8-9): V'_i = φ(Q_i)ᵀ(Σ_{j≤i} φ(K_j) V_jᵀ) / (φ(Q_i)ᵀ Σ_{j≤i} φ(K_j) + eps), over
    the real keys j ≤ i, eps added as in the authors' ``CausalLinearAttention``. Computed in chunks
    (``_kernels.causal_kernel_attention_terms``: quadratic within a chunk, the [d, d+1] sums carried between them)
    where the authors' code calls a CUDA/C++ causal product kernel; the same function up to rounding.
    Decoding: ``prefill`` runs the causal form and keeps S = Σ_j φ(K_j)[V_j, 1]ᵀ (a
    :class:`~attentions._decode.RecurrentState`); ``step`` adds φ(K_t)[V_t, 1]ᵀ to S in place and reads
    φ(Q_t)ᵀS, as the authors' ``RecurrentLinearAttention`` (which keeps Σ φ(K)Vᵀ and Σ φ(K) apart; here they are the
    columns [:d] and d of one matrix). Prompt padding is left out of S.
    """

    cfg: LinearTransformerConfig

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        x = zero_padding(x, mask)
        q, k, v = self.proj(x)  # each [B, H, N, d]
        phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
        if self.cfg.causal:
            num, den, _ = causal_kernel_attention_terms(phi_q, phi_k, v, mask)  # [B, H, N, d | 1]
        else:
            num, den = kernel_attention_terms(phi_q, phi_k, v, mask)  # [B, H, N, d | 1]
        return self._output(num, den)

    def prefill(self, x: Tensor, mask: Tensor | None = None, *, capacity: int) -> tuple[Tensor, RecurrentState]:
        """The causal form over a prompt x [B, P, D] and the sums a step reads (see ``_decode``)."""
        check_capacity(capacity, x.shape[1])
        x = zero_padding(x, mask)
        q, k, v = self.proj(x)  # each [B, H, P, d]
        num, den, kv = causal_kernel_attention_terms(elu_feature_map(q), elu_feature_map(k), v, mask)
        return self._output(num, den), RecurrentState(kv, x.shape[1])

    def step(self, x: Tensor, state: RecurrentState) -> tuple[Tensor, RecurrentState]:
        """One token x [B, 1, D]: φ(k)[v, 1]ᵀ joins the sums in place, φ(q) reads them."""
        q, k, v = self.proj(x)  # each [B, H, 1, d]
        num, den = causal_kernel_step(elu_feature_map(q), elu_feature_map(k), v, state.kv)  # [B, H, 1, d | 1]
        state.length += 1
        return self._output(num, den), state

    def _output(self, num: Tensor, den: Tensor) -> Tensor:
        """out(numerator / (normaliser + eps)): [B, H, N, d] and [B, H, N, 1] -> [B, N, D]."""
        return self.out(merge_heads(num / (den + self.cfg.eps)))
