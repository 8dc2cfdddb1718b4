"""The shared encoder-decoder pieces (harness.kinds.forecasting.blocks) against direct definitions."""

from __future__ import annotations

import pytest
import torch

from harness.kinds.forecasting.blocks import (
    DistillingLayer,
    ForecastConfig,
    SeasonalLayerNorm,
    decoder_marks,
    distilled_lengths,
    series_decomp,
)


def _moving_average_loop(x: torch.Tensor, kernel: int) -> torch.Tensor:
    """The trend by its definition: at step t, the mean of x over t - front .. t + back, indices clamped to the
    series (the ends repeated), front = k - 1 - floor((k - 1)/2), back = floor((k - 1)/2)."""
    front, back = kernel - 1 - (kernel - 1) // 2, (kernel - 1) // 2
    length = x.shape[1]
    out = torch.empty_like(x)
    for t in range(length):
        idx = [min(max(s, 0), length - 1) for s in range(t - front, t + back + 1)]
        out[:, t] = x[:, idx].mean(dim=1)
    return out


@pytest.mark.parametrize("kernel", [1, 5, 24, 25])
def test_decomposition_is_the_clamped_moving_average(kernel: int) -> None:
    x = torch.randn(2, 60, 3, dtype=torch.float64)
    seasonal, trend = series_decomp(x, kernel)
    torch.testing.assert_close(trend, _moving_average_loop(x, kernel))
    torch.testing.assert_close(seasonal + trend, x)


def test_an_odd_window_keeps_a_straight_line_inside_the_series() -> None:
    line = (3.0 + 0.5 * torch.arange(80, dtype=torch.float64))[None, :, None]  # [1, 80, 1]
    seasonal, trend = series_decomp(line, 25)
    torch.testing.assert_close(trend[:, 12:-12], line[:, 12:-12])
    assert seasonal[:, 12:-12].abs().max() < 1e-12


def test_the_seasonal_norm_leaves_no_time_mean() -> None:
    y = SeasonalLayerNorm(8)(torch.randn(3, 20, 8))
    assert y.mean(dim=1).abs().max() < 1e-6


def test_distilling_halves_the_length_as_the_planned_lengths_say() -> None:
    layer = DistillingLayer(8).eval()
    x = torch.randn(2, 96, 8)
    lengths = distilled_lengths(96, 3)
    assert lengths == [96, 48, 24]
    assert layer(x).shape == (2, 48, 8) and layer(layer(x)).shape == (2, 24, 8)
    assert distilled_lengths(37, 2) == [37, 19] and DistillingLayer(4).eval()(torch.randn(1, 37, 4)).shape[1] == 19


def test_the_decoder_reads_the_history_tail_then_the_horizons_marks() -> None:
    x_mark, y_mark = torch.arange(10.0).reshape(1, 10, 1), torch.arange(10.0, 14.0).reshape(1, 4, 1)
    assert decoder_marks(x_mark, y_mark, 3).flatten().tolist() == [7, 8, 9, 10, 11, 12, 13]
    cfg = ForecastConfig(input_len=96, horizon=24, variables=2)
    assert (cfg.start, cfg.decoder_len) == (48, 72)
