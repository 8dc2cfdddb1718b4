"""cosFormer against the direct quadratic form of its equations (Qin et al. 2022, eq. 9-10): per sequence of real
length M, s_ij = ReLU(Q_i)ᵀReLU(K_j)·cos(π/2·(i−j)/M), O_i = Σ_j s_ij V_j / Σ_j s_ij, with an explicit n×n matrix
built on each sequence's real tokens alone; its causal form (j ≤ i, the horizon M = max_seq_len) likewise."""

from __future__ import annotations

import math

import pytest
import torch

import attentions
from attentions.cosformer import CosformerAttention
from tests.attentions.reference import assert_dropout_unused, assert_padded_row_outputs_bias, merge_heads, module_qkv
from tests.attentions.test_linear_transformer import assert_causal_form_holds_across_chunks

CFG = {"dim": 16, "heads": 2, "max_seq_len": 32, "dropout": 0.0}


def _build(seed: int = 0, **overrides: object) -> CosformerAttention:
    torch.manual_seed(seed)
    return attentions.build("cosformer", **{**CFG, **overrides}).double().eval()  # type: ignore[return-value]


def _reference(module: CosformerAttention, x: torch.Tensor, horizon: int | None = None) -> torch.Tensor:
    """One unpadded sequence x [L, D] -> [L, D], one head at a time, with M = L unless ``horizon`` is given."""
    n, d = x.shape
    h = module.cfg.heads
    dh = d // h
    m = n if horizon is None else horizon
    i = torch.arange(n, dtype=torch.float64)
    reweight = torch.cos(math.pi / 2 * (i[:, None] - i[None, :]) / m)  # [L, L]
    w, bias = module.proj.qkv.weight, module.proj.qkv.bias
    heads = []
    for head in range(h):
        rows = [slice(part * d + head * dh, part * d + (head + 1) * dh) for part in range(3)]
        q, k, v = (x @ w[r].T + bias[r] for r in rows)  # [L, dh] each
        s = torch.relu(q) @ torch.relu(k).T * reweight  # [L, L]
        heads.append(s @ v / s.sum(-1, keepdim=True).clamp_min(module.cfg.eps))
    return torch.cat(heads, -1) @ module.out.weight.T + module.out.bias


def causal_reference(module: CosformerAttention, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The causal form's quadratic masked form (``tests/attentions/test_causal.py``): s_ij = ReLU(Q_i)ᵀReLU(K_j)·
    cos(π/2·(i − j)/M) over the real keys j <= i, with i, j counted among the real tokens and M = max_seq_len;
    O_i = Σ_j s_ij V_j / max(Σ_j s_ij, eps). The cos of the difference, not its decomposition."""
    b, n, _ = x.shape
    real = torch.ones(b, n, dtype=torch.bool) if mask is None else mask
    index = (real.long().cumsum(1) - 1).to(x.dtype)  # [B, N]: among the real tokens
    reweight = torch.cos(math.pi / 2 * (index[:, :, None] - index[:, None, :]) / module.cfg.max_seq_len)  # [B, N, N]
    allowed = torch.ones(n, n, dtype=torch.bool).tril() & real[:, None, :]  # [B, N, N]: j <= i, j real
    q, k, v = module_qkv(module, x)  # [B, H, N, dh] each
    s = torch.relu(q) @ torch.relu(k).transpose(-1, -2) * (reweight * allowed)[:, None]  # [B, H, N, N]
    y = s @ v / s.sum(-1, keepdim=True).clamp_min(module.cfg.eps)
    return module.out(merge_heads(y))


def _masks() -> dict[str, torch.Tensor | None]:
    suffix = torch.ones(3, 20, dtype=torch.bool)
    suffix[1, 11:] = False
    scattered = suffix.clone()
    scattered[0, ::3] = False  # padding need not be a suffix
    scattered[2, :4] = False  # nor start after the real tokens
    return {"none": None, "suffix": suffix, "scattered": scattered}


@pytest.mark.parametrize("case", ["none", "suffix", "scattered"])
def test_matches_quadratic_form_forward_and_backward(case: str) -> None:
    """Each sequence's real outputs equal the O(n²) formula on its real tokens alone (M = real length)."""
    module = _build()
    x = torch.randn(3, 20, 16, dtype=torch.float64, requires_grad=True)
    mask = _masks()[case]
    real = torch.ones(3, 20, dtype=torch.bool) if mask is None else mask
    g = torch.randn(3, 20, 16, dtype=torch.float64)
    params = [x, *module.parameters()]
    y = module(x, mask)
    refs = [_reference(module, x[b, real[b]]) for b in range(3)]
    for b in range(3):
        torch.testing.assert_close(y[b, real[b]], refs[b])
    loss = sum((y[b, real[b]] * g[b, real[b]]).sum() for b in range(3))
    ref_loss = sum((refs[b] * g[b, real[b]]).sum() for b in range(3))
    grads, ref_grads = torch.autograd.grad(loss, params), torch.autograd.grad(ref_loss, params)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want)
    assert torch.count_nonzero(grads[0][~real]) == 0  # padded inputs reach no real output


def test_horizon_is_the_real_length_not_the_padded_one() -> None:
    """The reference can fail: M = padded length (the authors' code on a padded batch) gives other outputs."""
    module = _build()
    x = torch.randn(1, 20, 16, dtype=torch.float64)
    mask = torch.ones(1, 20, dtype=torch.bool)
    mask[0, 12:] = False
    y = module(x, mask)[0, :12]
    torch.testing.assert_close(y, _reference(module, x[0, :12]))
    assert not torch.allclose(y, _reference(module, x[0, :12], horizon=20), rtol=1e-4, atol=1e-4)


def test_reweighting_matters() -> None:
    """With M huge the cos weights tend to 1: plain ReLU linear attention, measurably different at M = n."""
    module = _build()
    x = torch.randn(1, 20, 16, dtype=torch.float64)
    plain = _reference(module, x[0], horizon=10**9)
    assert not torch.allclose(module(x)[0], plain, rtol=1e-3, atol=1e-3)


def test_fully_padded_row_and_dead_queries_output_the_bias() -> None:
    """A normaliser of 0 (no real key, or a query with no positive ReLU feature) is clamped: output 0 there."""
    module = _build()
    with torch.no_grad():
        module.proj.qkv.bias[:8] = -1e3  # head 0's queries are all ≤ 0: ReLU(Q) = 0, normaliser 0
    x = torch.randn(2, 10, 16, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[1] = False
    y = module(x, mask)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y[0], _reference(module, x[0]))
    assert_padded_row_outputs_bias(module, x, y, 1)


def test_dropout_is_unused_and_capabilities() -> None:
    module = _build(dropout=0.5)
    assert_dropout_unused(module, torch.randn(1, 12, 16, dtype=torch.float64))
    caps = attentions.spec("cosformer").caps
    assert caps.complexity == "n" and caps.supports_mask and not caps.exact and not caps.needs_fixed_length
    with pytest.raises(ValueError, match="eps"):
        attentions.build("cosformer", eps=-1.0)


def test_causal_form_across_chunks() -> None:
    assert_causal_form_holds_across_chunks(_build(causal=True, max_seq_len=160), causal_reference)


def test_causal_horizon_is_max_seq_len_not_the_batch_length() -> None:
    """The causal form's M is max_seq_len, whatever the input's length: the authors' causal branch (M = N, the batch's
    length) gives other outputs, and would move every output as later tokens arrive."""
    module = _build(causal=True, max_seq_len=32)
    x = torch.randn(1, 20, 16, dtype=torch.float64)
    y = module(x)[0]
    allowed = torch.ones(20, 20, dtype=torch.bool).tril()
    for horizon, equal in ((32, True), (20, False)):
        i = torch.arange(20, dtype=torch.float64)
        reweight = torch.cos(math.pi / 2 * (i[:, None] - i[None, :]) / horizon) * allowed  # [N, N]
        q, k, v = module_qkv(module, x)  # [1, H, N, dh]
        s = torch.relu(q) @ torch.relu(k).transpose(-1, -2) * reweight
        want = module.out(merge_heads(s @ v / s.sum(-1, keepdim=True).clamp_min(module.cfg.eps)))[0]
        assert torch.allclose(y, want, rtol=1e-10, atol=1e-10) == equal


def test_causal_form_refuses_more_tokens_than_its_horizon() -> None:
    """Past M = max_seq_len tokens a cos weight would turn negative: longer inputs and capacities are refused."""
    module = _build(causal=True, max_seq_len=16)
    x = torch.randn(1, 17, 16, dtype=torch.float64)
    with pytest.raises(ValueError, match="max_seq_len=16"):
        module(x)
    with pytest.raises(ValueError, match="max_seq_len=16"):
        module.prefill(x[:, :4], None, capacity=17)
    assert module(x[:, :16]).shape == (1, 16, 16)
