"""FEDformer's cross-attentions against their definitions with explicit DFT sums: FEA-f, and FEA-w (the
multiwavelet cross-attention) with explicit even/odd filter steps."""

from __future__ import annotations

import math

import pytest
import torch

from attentions.fedformer_wavelet import legendre_filters
from harness.kinds.forecasting.blocks import ForecastConfig
from harness.kinds.forecasting.fedformer import (
    WAVELET_CROSS_MODES,
    FourierCrossAttention,
    WaveletCrossAttention,
    frequency_modes,
)


def _dft(x: torch.Tensor, freqs: list[int]) -> torch.Tensor:
    """X_f = Σ_t x_t e^{-2πi f t / L} over axis -2: [B, H, L, E] -> [B, H, F, E] (complex128)."""
    length = x.shape[-2]
    t = torch.arange(length, dtype=torch.float64)
    basis = torch.stack([torch.exp(-2j * math.pi * f * t / length) for f in freqs])  # [F, L]
    return torch.einsum("fl,bhle->bhfe", basis, x.to(torch.complex128))


def _idft_real(spectrum: dict[int, torch.Tensor], length: int) -> torch.Tensor:
    """The real series of a one-sided spectrum holding only the bins given (none at Nyquist):
    x_t = (1/L) [Re X_0 + 2 Σ_{f>0} Re(X_f e^{2πi f t / L})]; bins [B, H, E] -> [B, H, L, E]."""
    t = torch.arange(length, dtype=torch.float64)
    out = 0
    for f, value in spectrum.items():
        wave = torch.exp(2j * math.pi * f * t / length)  # [L]
        term = (value[:, :, None, :] * wave[None, None, :, None]).real
        out = out + (term if f == 0 else 2 * term)
    return out / length


@pytest.mark.parametrize(("len_q", "len_kv", "modes"), [(72, 96, 64), (40, 24, 5)])
def test_fea_f_matches_its_definition(len_q: int, len_kv: int, modes: int) -> None:
    torch.manual_seed(0)
    cfg = ForecastConfig(input_len=len_kv, horizon=len_q // 2, variables=3, d_model=8, heads=2,
                         attention={"modes": modes})
    layer = FourierCrossAttention(cfg, len_q, len_kv).double()
    x, cross = torch.randn(2, len_q, 8, dtype=torch.float64), torch.randn(2, len_kv, 8, dtype=torch.float64)
    q = layer.q(x).reshape(2, len_q, 2, 4).transpose(1, 2)  # [B, H, Lq, E]
    k = layer.k(cross).reshape(2, len_kv, 2, 4).transpose(1, 2)
    iq, ik = layer.index_q.tolist(), layer.index_kv.tolist()
    qf, kf = _dft(q, iq), _dft(k, ik)  # [B, H, Mq, E], [B, H, Mk, E]
    scores = torch.tanh(torch.einsum("bhxe,bhye->bhxy", qf, kf))  # no conjugate, as the authors'
    mixed = torch.einsum("bhxy,bhye->bhxe", scores, kf)
    w = torch.complex(layer.weights[..., 0], layer.weights[..., 1]).to(torch.complex128)  # [H, E, E, Mq]
    mixed = torch.einsum("bhxe,heox->bhxo", mixed, w) / 64  # / (D · D)
    y = _idft_real({f: mixed[:, :, i] for i, f in enumerate(iq)}, len_q)  # [B, H, Lq, E]
    expected = layer.out(y.transpose(1, 2).reshape(2, len_q, 8))
    torch.testing.assert_close(layer(x, cross), expected, rtol=1e-9, atol=1e-12)


def test_modes_are_distinct_sorted_low_frequencies_fixed_by_the_seed() -> None:
    torch.manual_seed(3)
    a = frequency_modes(96, 64).tolist()
    torch.manual_seed(3)
    assert frequency_modes(96, 64).tolist() == a
    assert len(a) == 48 and a == sorted(set(a)) and a[-1] < 48  # min(modes, L // 2) of 0 .. L//2 - 1
    assert len(frequency_modes(200, 16)) == 16 and frequency_modes(200, 16).max() < 100


def _cross_w(q: torch.Tensor, k: torch.Tensor, modes: int, scale: float) -> torch.Tensor:
    """FEA-w's weightless Fourier step on q, k [B, n, c, kk], by DFT sums: per coefficient index h, with Q_f, K_f the
    lowest min(n/2, modes) DFT bins (over time) of the c channels: out_f = Σ_y tanh(Σ_c Q_f K_y) K_y, real series."""
    n = q.shape[1]
    m = min(n // 2, modes)
    if m == 0:
        return torch.zeros_like(q)
    to_heads = lambda t: t.permute(0, 3, 1, 2)  # noqa: E731  [B, kk, n, c]: DFT over axis -2
    qf, kf = _dft(to_heads(q), list(range(m))), _dft(to_heads(k), list(range(m)))  # [B, kk, m, c]
    scores = torch.tanh(torch.einsum("bhxe,bhye->bhxy", qf, kf))
    mixed = torch.einsum("bhxy,bhye->bhxe", scores, kf) * scale  # [B, kk, m, c]
    return _idft_real({f: mixed[:, :, f] for f in range(m)}, n).permute(0, 2, 3, 1)  # [B, n, c, kk]


def _fea_w_reference(layer: WaveletCrossAttention, x: torch.Tensor, cross: torch.Tensor) -> torch.Tensor:
    b, n, _ = x.shape
    kk = 8
    m = torch.tensor(legendre_filters(kk))  # [[H0, H1], [G0, G1]]
    h0, h1, g0, g1 = m[:kk, :kk], m[:kk, kk:], m[kk:, :kk], m[kk:, kk:]
    q = layer.lift_q(layer.q(x)).reshape(b, n, -1, kk)
    k = layer.lift_k(layer.k(cross))
    k = torch.cat([k, k.new_zeros(b, max(n - k.shape[1], 0), k.shape[2])], dim=1)[:, :n].reshape(b, n, -1, kk)
    size = 2 ** math.ceil(math.log2(n))
    q, k = torch.cat([q, q[:, : size - n]], 1), torch.cat([k, k[:, : size - n]], 1)  # wrap to a power of two
    ud, us = [], []
    for _ in range(int(math.floor(math.log2(n)))):  # L = 0: every level
        dq, sq = q[:, 0::2] @ g0.T + q[:, 1::2] @ g1.T, q[:, 0::2] @ h0.T + q[:, 1::2] @ h1.T
        dk, sk = k[:, 0::2] @ g0.T + k[:, 1::2] @ g1.T, k[:, 0::2] @ h0.T + k[:, 1::2] @ h1.T
        ud.append(_cross_w(dq, dk, WAVELET_CROSS_MODES, layer.scale) + _cross_w(sq, sk, WAVELET_CROSS_MODES,
                                                                                 layer.scale))
        us.append(_cross_w(dq, dk, WAVELET_CROSS_MODES, layer.scale))
        q, k = sq, sk
    v = _cross_w(q, k, WAVELET_CROSS_MODES, layer.scale)
    for d, s in zip(reversed(ud), reversed(us), strict=True):
        s = v + s
        even, odd = s @ h0 + d @ g0, s @ h1 + d @ g1
        v = torch.stack([even, odd], dim=2).reshape(b, 2 * even.shape[1], *even.shape[2:])
    return layer.out(layer.lower(v[:, :n].reshape(b, n, -1)))


@pytest.mark.parametrize(("len_q", "len_kv"), [(72, 96), (64, 40), (16, 16)])
def test_fea_w_matches_its_definition(len_q: int, len_kv: int) -> None:
    torch.manual_seed(0)
    cfg = ForecastConfig(input_len=len_kv, horizon=len_q // 2, variables=3, d_model=16, heads=2)
    layer = WaveletCrossAttention(cfg, len_q, len_kv).double()
    x, cross = torch.randn(2, len_q, 16, dtype=torch.float64), torch.randn(2, len_kv, 16, dtype=torch.float64)
    with torch.no_grad():  # scores large enough that tanh is not linear: D² = 256 would make them tiny
        for lin in (layer.lift_q, layer.lift_k):
            lin.weight.mul_(4.0)
    torch.testing.assert_close(layer(x, cross), _fea_w_reference(layer, x, cross), rtol=1e-9, atol=1e-12)
