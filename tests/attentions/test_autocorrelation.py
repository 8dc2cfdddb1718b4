"""Auto-Correlation (Autoformer) against its definition: the direct O(L²) lag correlation and the time-delay sum."""

from __future__ import annotations

import math

import pytest
import torch

import attentions
from attentions.autocorrelation import AutoCorrelationAttention, autocorrelation


def _build(**overrides: object) -> AutoCorrelationAttention:
    torch.manual_seed(0)
    return attentions.build("autocorrelation", **{"dim": 16, "heads": 2, "max_seq_len": 64, **overrides})  # type: ignore[return-value]


def _reference(module: AutoCorrelationAttention, x: torch.Tensor) -> torch.Tensor:
    """Eq. 5–7 with loops: R(τ) = Σ_t Q[t+τ]·K[t] over every channel, mean over channels, top ⌊c ln L⌋ lags,
    softmax of their R, Σ_i w_i V[t+τ_i] (indices mod L), output projection. Float64."""
    q, k, v = (t.double() for t in module.proj.qkv(x).chunk(3, dim=-1))  # [B, L, D]
    b, length, d = q.shape
    out = torch.zeros(b, length, d, dtype=torch.float64)
    top = int(module.cfg.factor * math.log(length))
    for row in range(b):
        corr = torch.stack([sum(q[row, (t + tau) % length] * k[row, t] for t in range(length))
                            for tau in range(length)])  # [L, D]
        mean = corr.mean(dim=1)
        lags = torch.argsort(mean, descending=True)[:top]
        w = torch.softmax(mean[lags], dim=0)
        for i, tau in enumerate(lags.tolist()):
            out[row] += w[i] * v[row, (torch.arange(length) + tau) % length]
    return out @ module.out.weight.double().T + module.out.bias.double()


def test_the_fft_correlation_is_the_direct_lag_sum() -> None:
    torch.manual_seed(0)
    q, k = torch.randn(2, 20, 3, dtype=torch.float64), torch.randn(2, 20, 3, dtype=torch.float64)
    direct = torch.stack([(torch.roll(q, -tau, dims=1) * k).sum(dim=1) for tau in range(20)], dim=1)  # [B, L, D]
    torch.testing.assert_close(autocorrelation(q, k), direct)


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_the_layer_equals_equations_5_to_7(train: bool) -> None:
    module = _build().train(train)
    x = torch.randn(3, 40, 16)
    torch.testing.assert_close(module(x).double(), _reference(module, x), atol=1e-5, rtol=1e-4)


def test_a_periodic_input_is_aggregated_at_its_period() -> None:
    """With Q = K = V = a period-8 signal (identity projections), the strongest lags are multiples of 8 and the
    aggregate of the rolled copies is the signal itself."""
    module = _build(dim=4, heads=1, factor=1.0)
    with torch.no_grad():
        module.proj.qkv.weight.copy_(torch.eye(4).repeat(3, 1))
        module.proj.qkv.bias.zero_()
        module.out.weight.copy_(torch.eye(4))
        module.out.bias.zero_()
    t = torch.arange(64, dtype=torch.float32)
    x = torch.stack([torch.sin(2 * math.pi * t / 8 + p) for p in (0.0, 0.5, 1.0, 1.5)], dim=1)[None]  # [1, 64, 4]
    q, k, _ = module.proj.qkv(x).chunk(3, dim=-1)
    top = torch.topk(autocorrelation(q, k).mean(-1), int(math.log(64)), dim=-1).indices
    assert (top % 8 == 0).all()
    torch.testing.assert_close(module(x), x, atol=1e-5, rtol=1e-5)
