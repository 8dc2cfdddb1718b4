"""μ-incoherence (Definition 1) against matrices whose μ is known in closed form, and the measurement hook."""

from __future__ import annotations

import math

import pytest
import torch

from harness.kinds.accuracy.incoherence import measure_incoherence, mu_incoherence
from harness.models.classifier import Classifier
from harness.models.tasks import Split


def _hadamard(n: int) -> torch.Tensor:
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat((torch.cat((h, h), 1), torch.cat((h, -h), 1)), 0)
    return h


@pytest.mark.parametrize(("n", "d", "r"), [(64, 16, 4), (128, 32, 8), (32, 32, 16)])
def test_coherent_matrix_has_the_largest_mu(n: int, d: int, r: int) -> None:
    """X = Σ_k σ_k e_k e_kᵀ: singular vectors are canonical vectors, so max ‖e_iᵀ W‖² = 1 and μ = max(n, d)/r."""
    x = torch.zeros(n, d, dtype=torch.float64)
    x[torch.arange(r), torch.arange(r)] = torch.arange(r, 0, -1, dtype=torch.float64)  # distinct σ: unique SVD
    assert math.isclose(mu_incoherence(x, r).item(), max(n, d) / r, rel_tol=1e-9)


@pytest.mark.parametrize(("n", "d", "r"), [(64, 16, 4), (128, 32, 8), (32, 32, 16)])
def test_spread_matrix_has_mu_one(n: int, d: int, r: int) -> None:
    """Columns of a normalised Hadamard matrix have every entry ±1/√n: row norms² of W are r/n, so μ = 1."""
    w = _hadamard(n)[:, :r] / math.sqrt(n)  # [n, r], orthonormal, flat rows
    v = _hadamard(d)[:, :r] / math.sqrt(d)  # [d, r]
    x = w @ torch.diag(torch.arange(r, 0, -1, dtype=torch.float64)) @ v.T
    assert math.isclose(mu_incoherence(x, r).item(), 1.0, rel_tol=1e-9)


def test_mu_is_bounded_batched_and_invariant_to_scale() -> None:
    x = torch.randn(5, 40, 12, generator=torch.Generator().manual_seed(0))
    mu = mu_incoherence(x, 6)
    assert mu.shape == (5,)
    assert (mu >= 1 - 1e-12).all() and (mu <= 40 / 6 + 1e-12).all()
    assert torch.allclose(mu_incoherence(3.0 * x, 6), mu)
    assert torch.allclose(mu[2], mu_incoherence(x[2], 6))
    with pytest.raises(ValueError, match="rank 13"):
        mu_incoherence(x, 13)


def test_smoothing_lowers_mu_of_a_spiky_matrix() -> None:
    """A few spiky rows are coherent; a moving average spreads them out (the paper's motivation, §III-B)."""
    x = torch.zeros(64, 8, dtype=torch.float64)
    x[[5, 30, 50]] = torch.randn(3, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    kernel = torch.ones(9, dtype=torch.float64) / 9
    smooth = torch.stack([torch.nn.functional.conv1d(c[None, None], kernel[None, None], padding=4)[0, 0]
                          for c in x.T], dim=1)
    assert mu_incoherence(smooth, 2).item() < mu_incoherence(x, 2).item()


def _model(**overrides: object) -> Classifier:
    torch.manual_seed(0)
    return Classifier("s3attention", num_classes=2, vocab_size=20, max_seq_len=32, dim=16, heads=2, layers=2,
                      mlp_dim=32, dropout=0.0, attention_overrides={"r": 4, "s1": 4, "s2": 4, **overrides})


def test_measure_incoherence_matches_a_direct_computation() -> None:
    model = _model()
    x0 = torch.randint(1, 20, (5, 32), generator=torch.Generator().manual_seed(2))
    x0[3, 20:] = 0  # a padded example: only its 20 real rows count
    split = Split(x0=x0, y=torch.zeros(5, dtype=torch.int64))
    out = measure_incoherence(model, split, [4, 8], batch_size=2)
    assert out["mu_count"] == 5
    # Independent path: the first layer's smoother input, rebuilt from the encoder's own pieces.
    layer = model.encoder.blocks[0]
    with torch.no_grad():
        h = layer.ln1(model.encoder.tok(x0) + model.encoder.pos(torch.arange(32)))
        h = h * (x0 != 0).unsqueeze(-1)
        smooth = layer.attn.smoother.fourier(h)
    for r in (4, 8):
        mus = [mu_incoherence(h[b, x0[b] != 0], r).item() for b in range(5)]
        mus_s = [mu_incoherence(smooth[b, x0[b] != 0], r).item() for b in range(5)]
        assert math.isclose(out[f"mu_x_r{r}_mean"], sum(mus) / 5, rel_tol=1e-5)
        assert math.isclose(out[f"mu_smooth_r{r}_mean"], sum(mus_s) / 5, rel_tol=1e-5)  # float32 FFTs, other batching
        assert math.isclose(out[f"mu_x_r{r}_std"], torch.tensor(mus).std(correction=0).item(), rel_tol=1e-4)
    assert model.training  # restored


def test_measure_incoherence_needs_the_fourier_convolution() -> None:
    split = Split(x0=torch.ones(2, 32, dtype=torch.int64), y=torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ValueError, match="fourier_conv=False"):
        measure_incoherence(_model(fourier_conv=False), split, [4], batch_size=2)
    with pytest.raises(ValueError, match="layer 5"):
        measure_incoherence(_model(), split, [4], batch_size=2, layer=5)
