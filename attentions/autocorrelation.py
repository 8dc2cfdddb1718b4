"""Auto-Correlation (Autoformer's token mixer): period-based dependencies found by the FFT, aggregated by time delay.

Paper: Wu, Xu, Wang, Long, "Autoformer: Decomposition Transformers with Auto-Correlation for Long-Term Series
Forecasting", NeurIPS 2021, https://arxiv.org/abs/2106.13008 (§3.2, eq. 5–7). Authors' code: ``thuml/Autoformer``
(``layers/AutoCorrelation.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .base import ProjectedAttention, per_real_length
from .registry import AttentionConfig, Capabilities, register


@dataclass(frozen=True)
class AutoCorrelationConfig(AttentionConfig):
    """Config of Auto-Correlation; ``dropout`` is accepted and unused (the authors' module defines a dropout that
    its forward never applies).

    Attributes:
        factor: c in k = ⌊c · ln L⌋, the number of time delays aggregated (eq. 6). 3 is the ``--factor`` of the
            forecasting scripts (Autoformer's, FEDformer's and S3Attention's); the module's own default is 1.
    """

    factor: float = 3.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.factor > 0:
            raise ValueError(f"factor must be positive, got {self.factor!r}")


def autocorrelation(q: Tensor, k: Tensor) -> Tensor:
    """R(τ) = Σ_t q[(t + τ) mod L] · k[t] for every lag τ and channel, by the FFT (eq. 5; Wiener–Khinchin):
    q, k [R, L, D] -> [R, L, D] (lag on axis 1), in float32 at least."""
    ft = torch.promote_types(q.dtype, torch.float32)
    spectrum = torch.fft.rfft(q.to(ft), dim=1) * torch.fft.rfft(k.to(ft), dim=1).conj()  # [R, L//2+1, D]
    return torch.fft.irfft(spectrum, n=q.shape[1], dim=1)


#: Why this variant has no causal form (``attnbench list``; a causal cell is ``unsupported`` with it).
CAUSAL_NOTE = (
    "Auto-Correlation aggregates time delays found by an FFT over the whole series; Autoformer's decoder passes a "
    "mask flag that the mechanism ignores"
)


@register(
    "autocorrelation",
    AutoCorrelationConfig,
    Capabilities(causal_note=CAUSAL_NOTE, complexity="n log n"),
    paper="https://arxiv.org/abs/2106.13008", display="Auto-Correlation", group="Fourier / mixing",
)
class AutoCorrelationAttention(ProjectedAttention):
    """Auto-Correlation with time-delay aggregation, Autoformer §3.2; arxiv 2106.13008.

    Q, K, V = X W_q, X W_k, X W_v; R(τ) the autocorrelation of Q and K per channel (eq. 5) averaged over heads and
    channels; the k = ⌊c ln L⌋ lags with the largest mean R are kept, their R values softmax-ed into weights, and
    the output is Σ_i w_i · Roll(V, τ_i) (eq. 6–7), then the output projection.

    Choices and deviations:
    - Lags per sample, in training too. The authors' code picks one set of lags for the whole batch in training
      (the batch mean of R: one roll per lag for all rows, a speed shortcut) and per sample at inference; here
      each sample uses its own, so a row's output never depends on the other rows and train and eval compute the
      same function.
    - Padding (the paper has none; forecasting windows are full): each sequence is correlated over its real
      tokens only (:func:`~attentions.base.per_real_length`), since a circular lag wraps at the length; padded
      positions output 0 before the output projection.
    - The heads share their lags and weights, as in the authors' code (the mean runs over heads and channels);
      the head split therefore changes nothing and the layer works on the merged [B, N, D].
    - FFTs in float32 at least (no half-precision FFT kernels on CPU); L = 1 keeps its one lag.
    """

    cfg: AutoCorrelationConfig

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        qkv = self.proj.qkv(x)  # [B, N, 3D]: Q, K, V side by side, so padding is handled once for the three
        return self.out(per_real_length(qkv, mask, self.aggregate))  # [B, N, D]

    def aggregate(self, qkv: Tensor) -> Tensor:
        """[R, L, 3D] (Q, K, V of sequences of one real length) -> [R, L, D], the time-delay aggregation."""
        return time_delay_aggregation(*qkv.chunk(3, dim=-1), factor=self.cfg.factor)


def time_delay_aggregation(q: Tensor, k: Tensor, v: Tensor, factor: float) -> Tensor:
    """Σ_i w_i · Roll(V, τ_i) over the k = ⌊factor · ln L⌋ lags τ_i with the largest autocorrelation of Q and K
    averaged over channels, w = softmax of those correlations (eq. 6–7): q, k, v [R, L, D] -> [R, L, D]."""
    r, length, d = v.shape
    mean_corr = autocorrelation(q, k).mean(dim=-1)  # [R, L]: R(τ) averaged over heads and channels
    top = min(length, max(1, int(factor * math.log(length))))
    weights, lags = torch.topk(mean_corr, top, dim=-1)  # [R, k] each
    weights = weights.softmax(dim=-1).to(v.dtype)
    positions = (torch.arange(length, device=v.device) + lags[..., None]) % length  # [R, k, L]: t + τ_i
    rolled = torch.gather(v[:, None].expand(r, top, length, d), 2, positions[..., None].expand(r, top, length, d))
    return torch.einsum("rk,rkld->rld", weights, rolled)  # [R, L, D]: Σ_i w_i V[(t + τ_i) mod L]
