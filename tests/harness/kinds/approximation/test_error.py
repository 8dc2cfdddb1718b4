"""Error metrics against closed forms, and the attention matrix read through identity values against an independent
softmax matrix (and refused where the layer's output is not its matrix times its values)."""

from __future__ import annotations

import math

import pytest
import torch

import attentions
from harness.kinds.approximation.error import attention_matrix, matrix_errors, output_errors
from tests.attentions.reference import module_qkv


def _e(seed: int = 0) -> torch.Tensor:
    return torch.randn(3, 10, 8, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_a_scaled_output_has_its_closed_form_errors() -> None:
    e = _e()
    eps = 0.03
    got = output_errors(e * (1 + eps), e)
    assert got["rel_fro"] == pytest.approx(eps, rel=1e-9)
    assert got["max_abs"] == pytest.approx(eps * float(e.abs().max()), rel=1e-9)
    assert got["cos_mean"] == pytest.approx(1.0, abs=1e-12) and got["cos_min"] == pytest.approx(1.0, abs=1e-12)


def test_an_orthogonal_perturbation_has_its_closed_form_cosine() -> None:
    e = _e()
    r = _e(1)
    u = r - (r * e).sum(-1, keepdim=True) / (e * e).sum(-1, keepdim=True) * e  # per token, u ⟂ e
    t = 0.5
    u = u / u.norm(dim=-1, keepdim=True) * e.norm(dim=-1, keepdim=True) * t  # ‖u_i‖ = t‖e_i‖
    got = output_errors(e + u, e)
    assert got["rel_fro"] == pytest.approx(t, rel=1e-9)
    assert got["cos_mean"] == pytest.approx(1 / math.sqrt(1 + t * t), rel=1e-9)
    assert got["cos_min"] == pytest.approx(1 / math.sqrt(1 + t * t), rel=1e-9)


def test_padded_positions_do_not_count() -> None:
    e = _e()
    mask = torch.ones(3, 10, dtype=torch.bool)
    mask[2, 6:] = False
    y = e.clone()
    y[2, 6:] += 100.0  # garbage at padding
    assert output_errors(y, e, mask) == {"rel_fro": 0.0, "max_abs": 0.0, "cos_mean": pytest.approx(1.0),
                                         "cos_min": pytest.approx(1.0)}
    assert output_errors(y, e)["max_abs"] == pytest.approx(100.0)


def test_matrix_errors_closed_form() -> None:
    p = torch.full((1, 1, 4, 4), 0.25, dtype=torch.float64)
    a = p.clone()
    a[0, 0, 0] = torch.tensor([1.0, 0.0, 0.0, 0.0])  # one row moved all its mass to one key: TV 0.75 on that row
    got = matrix_errors(a, p)
    assert got["attn_tv"] == pytest.approx(0.75 / 4)
    assert got["attn_max_abs"] == pytest.approx(0.75)
    assert got["attn_rel_fro"] == pytest.approx(math.sqrt(0.75**2 + 3 * 0.25**2) / math.sqrt(16 * 0.0625))


def _build(name: str, n: int, **overrides: object) -> torch.nn.Module:
    torch.manual_seed(0)
    return attentions.build(name, dim=16, heads=2, max_seq_len=n, dropout=0.0, **overrides).eval()


@pytest.mark.parametrize("masked", [False, True])
def test_vanilla_matrix_is_the_softmax_matrix(masked: bool) -> None:
    n = 20
    layer = _build("vanilla", n)
    x = torch.randn(2, n, 16)
    mask = None
    if masked:
        mask = torch.ones(2, n, dtype=torch.bool)
        mask[0, 15:] = False
    a = attention_matrix(layer, x, mask)
    q, k, _ = module_qkv(layer, x if mask is None else x * mask[..., None])
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5  # [B, H, N, N]
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
    want = scores.softmax(-1)
    rows = torch.ones(2, 2, n, dtype=torch.bool) if mask is None else mask[:, None, :].expand(2, 2, n)  # real queries
    assert a is not None
    torch.testing.assert_close(a[rows], want[rows], rtol=1e-5, atol=1e-6)
    reference = attention_matrix(layer, x, mask, reference=True)
    assert reference is not None
    torch.testing.assert_close(reference[rows], want[rows], rtol=1e-5, atol=1e-6)


def test_a_padded_layers_matrix_drops_its_padding_columns() -> None:
    layer = _build("local", 70, window=50)  # pads 70 -> 100 internally
    x = torch.randn(1, 70, 16)
    a = attention_matrix(layer, x)
    assert a is not None and a.shape == (1, 2, 70, 70)
    torch.testing.assert_close(a.sum(-1), torch.ones(1, 2, 70))
    assert float(a[0, 0, 0, 50:].abs().max()) == 0.0  # block 0 reads only block 0


@pytest.mark.parametrize("name", ["linformer", "reformer", "nystromformer", "longformer"])
def test_no_matrix_where_the_output_is_not_it_times_the_values(name: str) -> None:
    # Linformer and Nyströmformer read their projection weights directly, Reformer shares Q and K, Longformer's
    # global rows take values from a second projection (caught by the A·V check).
    layer = _build(name, 64, **({"window": 8} if name == "longformer" else {}))
    assert attention_matrix(layer, torch.randn(1, 64, 16)) is None
