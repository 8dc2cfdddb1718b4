"""Fourier extrapolation, the decoder of S3Attention's forecaster (journal Algorithm 4, arxiv.org/abs/2408.08567).

The input window is transformed along time, its 1 + 2·n_harm lowest-frequency bins are kept (the mean and the
n_harm lowest frequencies with their negative twins), and the sum of their sinusoids is evaluated at t = 0 … n +
n_predict − 1: a reconstruction of the window followed by its continuation.

Choices and deviations:
- Each kept bin X_k contributes Re(X_k e^{2πi f_k t}) / n = (Re X_k cos 2πf_k t − Im X_k sin 2πf_k t) / n. That is
  Algorithm 4's |X_k|/n · cos(2π f_k t + angle X_k) written without abs and angle: the values are the same (a test
  compares the two forms), but at a bin that is zero (a constant window) torch gives abs and angle zero gradients,
  so the printed form's gradient is wrong there although the map is linear in the window; this form's is not.
- π is ``math.pi``; the pseudo-code writes 3.1415, whose error of 9e-5 turns a pure sinusoid's continuation into a
  slowly drifting one (a test checks the continuation is exact).
- Bins are ordered by |frequency| with ties in FFT order (f, then −f), as Algorithm 4's stable sort of
  ``fftfreq``; n_harm ≥ n/2 keeps every bin.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def kept_bins(n: int, n_harm: int) -> list[int]:
    """FFT bins of an n-point window that Algorithm 4 keeps: the 1 + 2·n_harm of lowest |frequency|."""
    freqs = torch.fft.fftfreq(n)
    return sorted(range(n), key=lambda i: abs(float(freqs[i])))[: 1 + 2 * n_harm]


class FourierExtrapolation(nn.Module):
    """[B, n, C] window -> [B, n + n_predict, C]: the sum of its kept sinusoids, reconstructed and continued."""

    def __init__(self, input_len: int, n_harm: int = 8, n_predict: int = 96) -> None:
        super().__init__()
        self.input_len, self.n_harm, self.n_predict = input_len, n_harm, n_predict
        bins = kept_bins(input_len, n_harm)
        f = torch.fft.fftfreq(input_len, dtype=torch.float64)[bins]  # [K] cycles per step
        t = torch.arange(input_len + n_predict, dtype=torch.float64)  # [T]
        angle = 2 * math.pi * t[:, None] * f[None, :]  # [T, K]
        self.register_buffer("bins", torch.tensor(bins), persistent=False)
        self.register_buffer("cos", angle.cos() / input_len, persistent=False)  # [T, K], with the 1/n
        self.register_buffer("sin", angle.sin() / input_len, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        ft = torch.promote_types(x.dtype, torch.float32)  # no half-precision FFTs on the CPU
        spectrum = torch.fft.fft(x.to(ft), dim=1)[:, self.bins]  # [B, K, C] complex
        restored = self.cos.to(ft) @ spectrum.real - self.sin.to(ft) @ spectrum.imag  # [T, K] @ [B, K, C] -> [B, T, C]
        return restored.to(x.dtype)
