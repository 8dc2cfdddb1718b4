"""FMMformer against a dense reference written from the paper (Nguyen et al. 2021, §3): V̂ = w₁ D V + Σ w₂,l L_l V,
with D the band-restricted softmax and L_l = rownorm(φ_l(Q) φ_l(K)ᵀ), both built as explicit n×n matrices; the
authors' causal form (band j ∈ (i − k, i], L_l over j ≤ i) likewise."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import attentions
from attentions.fmmformer import FMMformerAttention
from tests.attentions.reference import assert_matches_reference, merge_heads, projected_qkv
from tests.attentions.test_linear_transformer import assert_causal_form_holds_across_chunks

CFG = {"dim": 16, "heads": 2, "max_seq_len": 64, "dropout": 0.0}


def _build(seed: int = 0, **overrides: object) -> FMMformerAttention:
    torch.manual_seed(seed)
    module = attentions.build("fmmformer", **{**CFG, **overrides}).double().eval()
    with torch.no_grad():  # blend weights away from their symmetric init, so a swapped weight would show
        module.near_weight.copy_(torch.rand_like(module.near_weight) + 0.2)
        module.far_weight.copy_(torch.rand_like(module.far_weight) + 0.2)
    return module  # type: ignore[return-value]


def _reference(module: FMMformerAttention, x: torch.Tensor, mask: torch.Tensor | None = None, *,
               causal: bool = False) -> torch.Tensor:
    """Dense n×n form of the paper's equations, one head at a time; ``causal``: the authors' causal form, the band
    j ∈ (i − k, i] and every L_l over the keys j <= i."""
    b, n, d = x.shape
    h, dh, k_band = module.cfg.heads, module.cfg.head_dim, module.cfg.bandwidth
    if mask is None:
        mask = torch.ones(b, n, dtype=torch.bool)
    x = x * mask[..., None]
    q, k, v = projected_qkv(module, x)  # [B, N, D] each
    i = torch.arange(n)
    offset = i[:, None] - i[None, :]  # [N, N]: i − j
    band = (offset >= 0) & (offset < k_band) if causal else offset.abs() < k_band  # [N, N]
    seen = mask[:, None, :] & (offset >= 0 if causal else True)  # [B, N, N]: the keys the far field sums
    feats = {"elu": lambda t: F.elu(t) + 1, "elu_flip": lambda t: F.elu(-t) + 1}
    heads = []
    for hh in range(h):
        sl = slice(hh * dh, (hh + 1) * dh)
        qh, kh, vh = q[..., sl], k[..., sl], v[..., sl]  # [B, N, dh]
        allowed = band[None] & mask[:, None, :]  # [B, N, N]
        scores = (qh @ kh.transpose(-1, -2) / math.sqrt(dh)).masked_fill(~allowed, float("-inf"))
        near = torch.nan_to_num(scores.softmax(-1)) @ vh  # [B, N, dh]; rows without a key: 0 (only padded rows)
        y = module.near_weight[hh] * near
        for li, name in enumerate(module.cfg.kernel_names):
            kern = feats[name](qh) @ feats[name](kh).transpose(-1, -2) * seen  # [B, N, N] low rank
            low = kern / kern.sum(-1, keepdim=True).clamp_min(1e-300)
            y = y + module.far_weight[li, hh] * (low @ vh)
        heads.append(y)
    return module.out(torch.cat(heads, -1))


def causal_reference(module: FMMformerAttention, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The causal form's quadratic masked form (``tests/attentions/test_causal.py``)."""
    return _reference(module, x, mask, causal=True)


@pytest.mark.parametrize(("kernels", "bandwidth", "n"), [("elu", 5, 37), ("elu,elu_flip", 3, 40), ("elu", 1, 12),
                                                         ("elu_flip", 9, 64)])
def test_matches_dense_band_plus_kernel_forward_and_backward(kernels: str, bandwidth: int, n: int) -> None:
    module = _build(kernels=kernels, bandwidth=bandwidth)
    x = torch.randn(2, n, 16, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, n - 9 :] = False
    mask[1, 3] = False  # padding need not be a suffix
    assert_matches_reference(module, x, module(x, mask), _reference(module, x, mask), mask)


def test_unmasked_and_short_inputs_match_reference() -> None:
    module = _build(bandwidth=4)
    x = torch.randn(3, 21, 16, dtype=torch.float64)  # 21 is not a multiple of the band's block size 3
    torch.testing.assert_close(module(x), _reference(module, x))


def test_band_limit_is_local_attention_only() -> None:
    """With the far-field weights zero, an output depends only on inputs within the band."""
    module = _build(bandwidth=3)
    with torch.no_grad():
        module.far_weight.zero_()
    x = torch.randn(1, 30, 16, dtype=torch.float64, requires_grad=True)
    module(x)[0, 10].sum().backward()
    touched = x.grad[0].abs().sum(-1) > 0
    assert touched.nonzero().flatten().tolist() == [8, 9, 10, 11, 12]


def test_far_field_is_global_and_band_covers_everything_when_wide() -> None:
    """A bandwidth ≥ n makes D full softmax attention: the near field equals vanilla attention then."""
    module = _build(bandwidth=40)
    with torch.no_grad():
        module.far_weight.zero_()
        module.near_weight.fill_(1.0)
    x = torch.randn(2, 24, 16, dtype=torch.float64)
    q, k, v = module.proj(x)
    full = F.scaled_dot_product_attention(q, k, v)  # [B, H, N, dh]
    want = module.out(merge_heads(full))
    torch.testing.assert_close(module(x), want)


def test_padding_leaks_nowhere_and_fully_padded_rows_stay_finite() -> None:
    module = _build(kernels="elu,elu_flip")
    x = torch.randn(2, 20, 16, dtype=torch.float64)
    mask = torch.ones(2, 20, dtype=torch.bool)
    mask[0, 13:] = False
    mask[1] = False
    noisy = x + 100.0 * torch.randn_like(x) * (~mask[..., None])
    y, y_noisy = module(x, mask), module(noisy, mask)
    assert torch.isfinite(y).all() and torch.isfinite(y_noisy).all()
    torch.testing.assert_close(y[mask], y_noisy[mask])
    torch.testing.assert_close(y[0, :13], module(x[:1, :13])[0])


def test_config_defaults_presets_and_validation() -> None:
    cfg = attentions.spec("fmmformer").config
    assert cfg.bandwidth == 5 and cfg.kernel_names == ("elu",)
    assert attentions.spec("fmmformer_2kernels").config.kernel_names == ("elu", "elu_flip")
    caps = attentions.spec("fmmformer").caps
    assert caps.complexity == "n" and not caps.exact and caps.seq_len_multiple_of == 1  # any length
    assert attentions.build("fmmformer_2kernels", **CFG).far_weight.shape == (2, 2)
    with pytest.raises(ValueError, match="kernels"):
        attentions.build("fmmformer", kernels="tanh")
    with pytest.raises(ValueError, match="twice"):
        attentions.build("fmmformer", kernels="elu,elu")
    with pytest.raises(ValueError, match="bandwidth"):
        attentions.build("fmmformer", bandwidth=0)


@pytest.mark.parametrize(("kernels", "bandwidth"), [("elu", 5), ("elu,elu_flip", 3)])
def test_causal_form_across_chunks(kernels: str, bandwidth: int) -> None:
    assert_causal_form_holds_across_chunks(_build(causal=True, kernels=kernels, bandwidth=bandwidth, max_seq_len=160),
                                           causal_reference)


def test_causal_band_is_the_authors_k_diagonals() -> None:
    """With the far-field weights zero, a causal output depends on the k inputs j ∈ (i − k, i] only (the authors'
    CausalFMMAttention band), and a decoding step's ring buffer holds exactly those."""
    module = _build(causal=True, bandwidth=3)
    with torch.no_grad():
        module.far_weight.zero_()
    x = torch.randn(1, 30, 16, dtype=torch.float64, requires_grad=True)
    module(x)[0, 10].sum().backward()
    touched = x.grad[0].abs().sum(-1) > 0
    assert touched.nonzero().flatten().tolist() == [8, 9, 10]
    with torch.no_grad():
        _, state = module.prefill(x[:, :4], None, capacity=30)
        assert state.band.window == 3
        for t in range(4, 11):
            module.step(x[:, t : t + 1], state)
        keys = state.band.ordered()[0]  # [1, H, 3, dh], oldest first
        torch.testing.assert_close(keys, module.proj(x[:, 8:11])[1])
