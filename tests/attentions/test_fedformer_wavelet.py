"""FEDformer's FEB-w: the Legendre multiwavelet filter bank against properties that define it (orthogonality,
vanishing moments, the two-scale relation by independent integration), perfect reconstruction through the block when
its kernels are the identity, and the layer against a float64 truth with a derived bound."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import attentions
from attentions.fedformer_wavelet import (
    FEBWavelet,
    MultiwaveletBlock,
    MWTConfig,
    decompose,
    legendre_filters,
    levels,
    reconstruct,
)
from tests.tolerance import ErrorTrace, Precision, assert_within

D, N = 16, 96


def _phi(i: int, t: np.ndarray) -> np.ndarray:
    """√(2i+1)·P_i(2t − 1) from the closed-form shifted Legendre coefficients (not numpy's recurrence)."""
    coeffs = [(-1) ** (i + j) * math.comb(i, j) * math.comb(i + j, j) for j in range(i + 1)]  # in powers of t
    return math.sqrt(2 * i + 1) * sum(c * t**j for j, c in enumerate(coeffs))


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_the_filter_bank_is_orthogonal_and_the_wavelets_have_k_vanishing_moments(k: int) -> None:
    m = legendre_filters(k)
    np.testing.assert_allclose(m @ m.T, np.eye(2 * k), atol=1e-12)
    # A polynomial p of degree < k has fine-scale coefficients ⟨p, √2 φ_j(2·)⟩ and ⟨p, √2 φ_j(2· − 1)⟩; its
    # multiwavelet coefficients G0 c0 + G1 c1 must vanish. Integrals by a 4000-point midpoint rule (independent).
    t = (np.arange(4000) + 0.5) / 4000
    for degree in range(k):
        left, right = (t / 2 - 0.3) ** degree, ((t + 1) / 2 - 0.3) ** degree  # p on [0, ½] and [½, 1]
        c0 = np.array([np.mean(left * _phi(j, t)) / np.sqrt(2) for j in range(k)])  # ∫_0^½ p √2 φ_j(2y) dy
        c1 = np.array([np.mean(right * _phi(j, t)) / np.sqrt(2) for j in range(k)])
        details = m[k:, :k] @ c0 + m[k:, k:] @ c1
        np.testing.assert_allclose(details, 0, atol=1e-6)  # the midpoint rule's error at 4000 points, not rounding


@pytest.mark.parametrize("k", [1, 3, 8])
def test_the_scaling_rows_are_the_two_scale_relation(k: int) -> None:
    """H0[i, j] = ∫_0^½ φ_i(y) √2 φ_j(2y) dy, H1 on [½, 1], by the midpoint rule on the closed-form polynomials."""
    m, t = legendre_filters(k), (np.arange(20000) + 0.5) / 20000
    h0 = np.array([[np.mean(_phi(i, t / 2) * _phi(j, t)) / np.sqrt(2) for j in range(k)] for i in range(k)])
    h1 = np.array([[np.mean(_phi(i, (t + 1) / 2) * _phi(j, t)) / np.sqrt(2) for j in range(k)] for i in range(k)])
    np.testing.assert_allclose(m[:k, :k], h0, atol=1e-6)
    np.testing.assert_allclose(m[:k, k:], h1, atol=1e-6)
    if k == 1:  # the Haar pair
        np.testing.assert_allclose(m, np.array([[1, 1], [1, -1]]) / np.sqrt(2), atol=1e-15)


def test_one_step_of_analysis_and_synthesis_is_the_identity() -> None:
    filters = torch.tensor(legendre_filters(8), dtype=torch.float64)
    x = torch.randn(2, 32, 3, 8, dtype=torch.float64)
    d, s = decompose(x, filters)
    assert d.shape == s.shape == (2, 16, 3, 8)
    torch.testing.assert_close(reconstruct(s, d, filters), x, rtol=0, atol=1e-13)
    torch.testing.assert_close(d.square().sum() + s.square().sum(), x.square().sum())  # orthogonal: energy kept


def _identity_block(n: int, skip: int) -> MultiwaveletBlock:
    """A block whose detail kernel A is the identity on every mode and B, C zero, T0 the identity: the block is then
    decomposition followed by reconstruction, which must give its input back."""
    cfg = MWTConfig(dim=D, heads=2, max_seq_len=n, k=4, channels=2, skip_levels=skip, modes=n)  # every mode kept
    block = MultiwaveletBlock(cfg).double()
    with torch.no_grad():
        for kernel in (block.b, block.c):
            kernel.weights.zero_()
        block.a.weights.zero_()
        block.a.weights[..., 0] = torch.eye(8, dtype=torch.float64)[:, :, None]  # real identity for every mode
        block.t0.weight.copy_(torch.eye(4))
        block.t0.bias.zero_()
    return block


@pytest.mark.parametrize(("n", "skip"), [(64, 0), (96, 3), (100, 1), (7, 3)])
def test_with_identity_kernels_the_block_reconstructs_its_input(n: int, skip: int) -> None:
    block = _identity_block(n, skip)
    assert levels(n, skip) == max(math.floor(math.log2(n)) - skip, 0)
    x = torch.randn(3, n, 2, 4, dtype=torch.float64)
    torch.testing.assert_close(block(x), x, rtol=0, atol=1e-12)
    # float32: within the rounding bound traced through the float64 run (tests/tolerance.py)
    with ErrorTrace(Precision.of(torch.float32)) as trace:
        truth = block(x)
    assert_within(block.float()(x.float()), truth, trace.bound(truth), "identity block, float32")


def _layer() -> FEBWavelet:
    torch.manual_seed(0)
    return attentions.build("fedformer_wavelet", dim=D, heads=2, max_seq_len=N, k=4, modes=8)  # type: ignore[return-value]


def test_the_layer_in_float32_is_within_its_rounding_bound_of_float64() -> None:
    layer = _layer()
    x = torch.randn(2, N, D)
    truth_layer = _layer().double()
    with ErrorTrace(Precision.of(torch.float32)) as trace:
        truth = truth_layer(x.double())
    assert_within(layer(x), truth, trace.bound(truth), "FEB-w float32 forward")


def test_defaults_and_width() -> None:
    layer = attentions.build("fedformer_wavelet", dim=512, heads=8, max_seq_len=96)
    cfg = layer.cfg
    assert (cfg.k, cfg.skip_levels, cfg.modes, cfg.c) == (8, 3, 16, 128)  # the released k, --L, alpha; c at 512
    assert attentions.build("fedformer_wavelet", dim=32, channels=5).block.a.weights.shape == (40, 40, 16, 2)
    with pytest.raises(ValueError, match="skip_levels"):
        attentions.build("fedformer_wavelet", skip_levels=-1)


def test_a_level_with_shared_ffts_equals_the_three_kernels_apart() -> None:
    """Ud = A(d) + B(s), Us = C(d) (the authors' three ``sparseKernelFT1d`` calls), computed with the FFTs shared:
    the same function, to float64 rounding, on a length with kept and dropped modes and an odd one."""
    torch.manual_seed(0)
    cfg = MWTConfig(dim=D, heads=2, max_seq_len=64, k=4, channels=3, modes=5)
    block = MultiwaveletBlock(cfg).double()
    for n in (32, 6):
        d, s = torch.randn(2, n, 3, 4, dtype=torch.float64), torch.randn(2, n, 3, 4, dtype=torch.float64)
        ud, us = block.level_kernels(d, s)
        torch.testing.assert_close(ud, block.a(d) + block.b(s), rtol=0, atol=1e-12)
        torch.testing.assert_close(us, block.c(d), rtol=0, atol=1e-12)
