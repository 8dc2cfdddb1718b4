"""Fourier extrapolation (Algorithm 4) against closed forms and against the algorithm as printed."""

from __future__ import annotations

import math

import pytest
import torch

from harness.kinds.forecasting.fourier import FourierExtrapolation, kept_bins


def _algorithm_4(x: torch.Tensor, n_harm: int, n_predict: int) -> torch.Tensor:
    """The journal's Algorithm 4 line by line (amplitude and phase; π exact): [B, n, C] -> [B, n + n_predict, C]."""
    n = x.shape[1]
    f = torch.fft.fftfreq(n)
    indexes = sorted(range(n), key=lambda i: torch.absolute(f[i]))[: 1 + n_harm * 2]
    t = torch.arange(0, n + n_predict).unsqueeze(0).unsqueeze(-1).unsqueeze(-1).double()  # [1, T, 1, 1]
    g = f.double().unsqueeze(0).unsqueeze(-1)[:, indexes, :].permute(0, 2, 1).unsqueeze(1)  # [1, 1, 1, K]
    phase_init = 2 * math.pi * g * t
    x_freqdom = torch.fft.fft(x.double(), dim=-2)[:, indexes, :]  # [B, K, C]
    ampli = (torch.absolute(x_freqdom) / n).permute(0, 2, 1).unsqueeze(1)  # [B, 1, C, K]
    phase = torch.angle(x_freqdom).permute(0, 2, 1).unsqueeze(1)
    return torch.sum(ampli * torch.cos(phase_init + phase), dim=-1)  # [B, T, C]


def test_a_sum_of_kept_sinusoids_is_continued_exactly() -> None:
    n, horizon = 96, 192
    t = torch.arange(n + horizon, dtype=torch.float64)
    truth = 0.7 + 1.3 * torch.cos(2 * math.pi * 3 * t / n + 0.4) - 0.5 * torch.sin(2 * math.pi * 5 * t / n)
    out = FourierExtrapolation(n, n_harm=8, n_predict=horizon)(truth[:n].float()[None, :, None])
    torch.testing.assert_close(out[0, :, 0].double(), truth, atol=2e-5, rtol=0)


def test_frequencies_above_n_harm_are_dropped() -> None:
    n = 96
    t = torch.arange(n, dtype=torch.float32)
    x = 2.0 + torch.cos(2 * math.pi * 20 * t / n)  # bin 20 > n_harm = 8: only the mean survives
    out = FourierExtrapolation(n, n_harm=8, n_predict=48)(x[None, :, None])
    torch.testing.assert_close(out, torch.full_like(out, 2.0), atol=1e-5, rtol=0)
    assert kept_bins(8, 2) == [0, 1, 7, 2, 6] and len(kept_bins(8, 10)) == 8


@pytest.mark.parametrize("n", [36, 96])
def test_it_equals_algorithm_4_as_printed(n: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(3, n, 5)
    out = FourierExtrapolation(n, n_harm=8, n_predict=60)(x)
    torch.testing.assert_close(out.double(), _algorithm_4(x, 8, 60), atol=1e-5, rtol=1e-5)


def test_the_gradient_is_the_linear_maps_also_where_a_bin_is_zero() -> None:
    """The extrapolation is linear in the window, so its gradient is the same at every window. Algorithm 4's
    amplitude-and-phase form gets 0 from torch at a zero bin (the gradients of abs and angle there), so at a
    constant window its gradient is wrong; the module's form is not."""
    torch.manual_seed(0)
    weights = torch.randn(2, 36 + 24, 3, dtype=torch.float64)

    def grad(f, x: torch.Tensor) -> torch.Tensor:
        x = x.clone().requires_grad_()
        (f(x).double() * weights).sum().backward()
        return x.grad

    module = FourierExtrapolation(36, n_harm=4, n_predict=24).double()
    constant, noise = torch.full((2, 36, 3), 1.5, dtype=torch.float64), torch.randn(2, 36, 3, dtype=torch.float64)
    torch.testing.assert_close(grad(module, constant), grad(module, noise))
    printed = grad(lambda x: _algorithm_4(x, 4, 24), constant)
    assert not torch.allclose(printed, grad(module, noise))  # why the module does not use the printed form
