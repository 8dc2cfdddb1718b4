"""FEDformer's frequency enhanced cross-attention (FEA-f) against its definition with explicit DFT sums."""

from __future__ import annotations

import math

import pytest
import torch

from harness.kinds.forecasting.blocks import ForecastConfig
from harness.kinds.forecasting.fedformer import FourierCrossAttention, frequency_modes


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
