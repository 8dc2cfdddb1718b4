"""FEDformer's FEB-f against its definition with explicit DFT sums (O(L²)), and a limit where it is the identity."""

from __future__ import annotations

import math

import torch

import attentions
from attentions.fedformer_fourier import FEBFourier

D, H, N = 8, 2, 24


def _build(**overrides: object) -> FEBFourier:
    torch.manual_seed(0)
    return attentions.build("fedformer_fourier", **{"dim": D, "heads": H, "max_seq_len": N, "modes": 5,  # type: ignore[return-value]
                                                    **overrides}).double()


def _reference(module: FEBFourier, x: torch.Tensor) -> torch.Tensor:
    """Q_f = Σ_t q_t e^{−2πi f t / N} for the selected f; Y_wi = Q_{f_wi} W_wi per head; y_t = (1/N) Σ over the full
    Hermitian spectrum of Y placed at frequencies 0 … M − 1 (real part), by explicit sums."""
    q = module.q(x)  # [B, N, D]
    b, n, _ = q.shape
    e = D // H
    t = torch.arange(n, dtype=torch.float64)
    w = torch.view_as_complex(module.weights)  # [H, E, E, M]
    y = torch.zeros(b, n, D, dtype=torch.float64)
    for head in range(H):
        qh = q[:, :, head * e:(head + 1) * e].to(torch.complex128)  # [B, N, E]
        for wi, f in enumerate(module.index.tolist()):
            qf = torch.einsum("bne,n->be", qh, torch.exp(-2j * math.pi * f * t / n))  # [B, E]
            yf = qf @ w[head, :, :, wi]  # [B, E] at output frequency wi
            weight = 1.0 if wi == 0 or (n % 2 == 0 and wi == n // 2) else 2.0  # its conjugate twin, real output
            wave = torch.exp(2j * math.pi * wi * t / n)[None, :, None]  # [1, N, 1]
            y[:, :, head * e:(head + 1) * e] += weight / n * (yf[:, None, :] * wave).real
    return module.out(y)


def test_the_block_equals_explicit_dft_sums() -> None:
    module = _build()
    x = torch.randn(2, N, D, dtype=torch.float64)
    assert len(module.index) == 5 and (module.index < N // 2).all()
    torch.testing.assert_close(module(x), _reference(module, x))


def test_with_every_low_mode_and_identity_weights_it_passes_low_frequencies_through() -> None:
    module = _build(modes=N, random_modes=False)  # all N/2 lowest modes, placed where they came from
    with torch.no_grad():
        module.q.weight.copy_(torch.eye(D))
        module.q.bias.zero_()
        module.out.weight.copy_(torch.eye(D))
        module.out.bias.zero_()
        module.weights.zero_()
        module.weights[..., 0] = torch.eye(D // H)[None, :, :, None]  # real identity for every mode
    t = torch.arange(N, dtype=torch.float64)
    x = torch.stack([1.0 + torch.cos(2 * math.pi * k * t / N + k) for k in range(1, D + 1)], dim=1)[None]  # k < N/2
    torch.testing.assert_close(module(x), x)


def test_the_modes_are_drawn_once_and_fixed_by_the_seed() -> None:
    a, b = _build(), _build()
    assert torch.equal(a.index, b.index) and a.index.tolist() == sorted(a.index.tolist())
    torch.manual_seed(1)
    c = attentions.build("fedformer_fourier", dim=D, heads=H, max_seq_len=N, modes=5)
    assert "index" in c.state_dict() and not torch.equal(a.index, c.index)
