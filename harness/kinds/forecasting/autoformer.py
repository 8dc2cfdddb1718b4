"""Autoformer for Table 2: Wu, Xu, Wang, Long, "Autoformer: Decomposition Transformers with Auto-Correlation for
Long-Term Series Forecasting", NeurIPS 2021, https://arxiv.org/abs/2106.13008. Authors' code: ``thuml/Autoformer``
(as carried in ``MAZiqing/FEDformer``: ``models/Autoformer.py``, ``layers/AutoCorrelation.py``).

The progressive-decomposition encoder-decoder (:class:`~harness.kinds.forecasting.blocks.DecompositionForecaster`,
moving average 25) with Auto-Correlation as every attention: the zoo's ``autocorrelation`` for self-attention, and
:class:`CrossAutoCorrelation` (the same time-delay aggregation, queries from the decoder) for the cross-attention.

Choices and deviations:
- Lags per sample in training too (the zoo layer's choice; the authors' code uses one set of lags per batch while
  training, as a speed shortcut).
- Cross-attention of a decoder of Lq steps over an encoder of Lk: keys and values cut to Lq steps, or zero-padded to
  Lq, as the authors' ``AutoCorrelation.forward`` does before correlating.
"""

from __future__ import annotations

import dataclasses

import torch.nn.functional as F
from torch import Tensor, nn

from attentions.autocorrelation import AutoCorrelationConfig, time_delay_aggregation

from .blocks import DecompositionForecaster, ForecastConfig, SelfAttention

MOVING_AVG = 25


class CrossAutoCorrelation(nn.Module):
    """Auto-Correlation of the decoder's queries with the encoder's keys, aggregating the encoder's values."""

    def __init__(self, cfg: ForecastConfig) -> None:
        super().__init__()
        self.factor = float(cfg.attention.get("factor", AutoCorrelationConfig.factor))
        self.q, self.kv = nn.Linear(cfg.d_model, cfg.d_model), nn.Linear(cfg.d_model, 2 * cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: Tensor, cross: Tensor) -> Tensor:
        lq, lk = x.shape[1], cross.shape[1]
        kv = self.kv(cross)  # [B, Lk, 2D], then cut or zero-padded to [B, Lq, 2D] (after the projections, as theirs)
        kv = kv[:, :lq] if lk >= lq else F.pad(kv, (0, 0, 0, lq - lk))
        return self.out(time_delay_aggregation(self.q(x), *kv.chunk(2, dim=-1), factor=self.factor))


def build(cfg: ForecastConfig, name: str = "autocorrelation") -> nn.Module:
    """Autoformer with ``cfg``'s sizes (its moving average 25 unless ``cfg`` gives another)."""
    cfg = dataclasses.replace(cfg, moving_avg=cfg.moving_avg or MOVING_AVG)
    return DecompositionForecaster(cfg, lambda n: SelfAttention(name, cfg, n),
                                   lambda lq, lk: CrossAutoCorrelation(cfg))
