"""Linear Transformer: softmax replaced by the kernel φ(x) = elu(x) + 1, computed right-to-left in O(n).

Paper: Katharopoulos et al., "Transformers are RNNs: Fast Autoregressive Transformers with Linear Attention",
ICML 2020, https://arxiv.org/abs/2006.16236 (§3.2 eq. 4-6, §3.2.1 the feature map). Authors' code:
idiap ``fast-transformers`` (``fast_transformers/attention/linear_attention.py``, non-causal ``LinearAttention``).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from ._kernels import EpsConfig, elu_feature_map, kernel_attention_terms
from .base import ProjectedAttention, merge_heads, zero_padding
from .registry import Capabilities, register


@dataclass(frozen=True)
class LinearTransformerConfig(EpsConfig):
    """Config of the (non-causal) linear transformer.

    Attributes:
        eps: added to the normaliser φ(Q_i)ᵀ Σ_j φ(K_j) (the authors' code: ``eps=1e-6``). The normaliser is
            positive whenever a real key exists (φ > 0), so eps only matters for a sequence with no real key,
            where it turns 0/0 into 0/eps = 0; it must be > 0.
        dropout: accepted for the common interface and unused (see the class docstring).
    """


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = "not implemented yet"


@register(
    "linear_transformer",
    LinearTransformerConfig,
    Capabilities(causal_note=CAUSAL_NOTE, complexity="n"),
    paper="https://arxiv.org/abs/2006.16236",
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
    """

    cfg: LinearTransformerConfig

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        x = zero_padding(x, mask)
        q, k, v = self.proj(x)  # each [B, H, N, d]
        num, den = kernel_attention_terms(elu_feature_map(q), elu_feature_map(k), v, mask)  # [B, H, N, d | 1]
        y = num / (den + self.cfg.eps)  # [B, H, N, d]
        return self.out(merge_heads(y))
