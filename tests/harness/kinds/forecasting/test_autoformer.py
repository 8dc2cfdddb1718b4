"""Autoformer's cross Auto-Correlation against the direct O(L²) lag correlation and time-delay aggregation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from harness.kinds.forecasting.autoformer import CrossAutoCorrelation
from harness.kinds.forecasting.blocks import ForecastConfig


def _direct(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, factor: float) -> torch.Tensor:
    """R(τ) = Σ_t q[(t + τ) mod L]·k[t] averaged over channels, the top ⌊c ln L⌋ lags, softmax weights,
    Σ_i w_i v[(t + τ_i) mod L] — loops over lags and steps, one sequence at a time."""
    out = torch.zeros_like(v)
    length = q.shape[1]
    top = max(1, int(factor * math.log(length)))
    for b in range(q.shape[0]):
        corr = torch.stack([sum((q[b, (t + tau) % length] * k[b, t]).mean() for t in range(length))
                            for tau in range(length)])
        weights, lags = torch.topk(corr, top)
        weights = weights.softmax(0)
        for w, tau in zip(weights, lags.tolist(), strict=True):
            out[b] += w * v[b, [(t + tau) % length for t in range(length)]]
    return out


@pytest.mark.parametrize(("len_q", "len_kv"), [(20, 20), (24, 30), (30, 18)])
def test_cross_autocorrelation_matches_the_direct_lag_sums(len_q: int, len_kv: int) -> None:
    torch.manual_seed(0)
    cfg = ForecastConfig(input_len=len_kv, horizon=len_q, variables=2, d_model=6, heads=2, attention={"factor": 2})
    layer = CrossAutoCorrelation(cfg).double()
    x, cross = torch.randn(2, len_q, 6, dtype=torch.float64), torch.randn(2, len_kv, 6, dtype=torch.float64)
    k, v = layer.kv(cross).chunk(2, dim=-1)  # [B, Lk, D]: projected, then cut or zero-padded to Lq (as theirs)
    k = k[:, :len_q] if len_kv >= len_q else F.pad(k, (0, 0, 0, len_q - len_kv))
    v = v[:, :len_q] if len_kv >= len_q else F.pad(v, (0, 0, 0, len_q - len_kv))
    expected = layer.out(_direct(layer.q(x), k, v, factor=2.0))
    torch.testing.assert_close(layer(x, cross), expected, rtol=1e-9, atol=1e-12)
