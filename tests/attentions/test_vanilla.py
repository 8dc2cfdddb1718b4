"""Vanilla softmax attention: the math backend against an einsum definition, and math == sdpa."""

from __future__ import annotations

import pytest
import torch

import attentions
from tests.attentions.causal_reference import causal_allowed
from tests.attentions.reference import masked_softmax_attention, merge_heads, split_heads


def _reference(module: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """softmax(QKᵀ/√d)V from the definition, with the module's own weights."""
    b, n, d = x.shape
    h = module.cfg.heads
    q, k, v = (x @ module.proj.qkv.weight.T + module.proj.qkv.bias).chunk(3, dim=-1)
    q, k, v = (t.reshape(b, n, h, d // h) for t in (q, k, v))  # [B, N, H, dh]
    scores = torch.einsum("bihd,bjhd->bhij", q, k) / (d // h) ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
    y = torch.einsum("bhij,bjhd->bihd", scores.softmax(-1), v).reshape(b, n, d)
    return module.out(y)


@pytest.mark.parametrize("masked", [False, True])
def test_math_matches_definition(masked: bool) -> None:
    torch.manual_seed(0)
    module = attentions.build("vanilla", dim=32, heads=4).double().eval()
    x = torch.randn(3, 40, 32, dtype=torch.float64)
    mask = None
    if masked:
        mask = torch.ones(3, 40, dtype=torch.bool)
        mask[0, 25:] = False
        mask[2, 1:] = False
    torch.testing.assert_close(module(x, mask), _reference(module, x, mask))


@pytest.mark.parametrize("masked", [False, True])
def test_math_equals_sdpa(masked: bool) -> None:
    torch.manual_seed(0)
    math_ = attentions.build("vanilla", dim=64, heads=2).eval()
    sdpa = attentions.build("vanilla_sdpa", dim=64, heads=2).eval()
    sdpa.load_state_dict(math_.state_dict())
    x = torch.randn(2, 100, 64)
    mask = torch.ones(2, 100, dtype=torch.bool)
    mask[1, 70:] = False
    m = mask if masked else None
    torch.testing.assert_close(math_(x, m), sdpa(x, m), rtol=1e-5, atol=1e-5)


def test_gradients_match_between_backends() -> None:
    torch.manual_seed(0)
    a = attentions.build("vanilla", dim=32, heads=2, dropout=0.0)
    b = attentions.build("vanilla_sdpa", dim=32, heads=2, dropout=0.0)
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 50, 32)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    a(xa).sum().backward()
    b(xb).sum().backward()
    torch.testing.assert_close(xa.grad, xb.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(a.proj.qkv.weight.grad, b.proj.qkv.weight.grad, rtol=1e-4, atol=1e-5)


def causal_reference(module: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The causal form (tests/attentions/test_causal.py): softmax(QKᵀ/√d + causal mask)V written out, each query head
    reading its group's key head under grouped-query attention (``kv_heads``)."""
    cfg = module.cfg
    kv_heads = cfg.kv_heads or cfg.heads
    q, k, v = (x @ module.proj.qkv.weight.T + module.proj.qkv.bias).split(
        (cfg.dim, cfg.head_dim * kv_heads, cfg.head_dim * kv_heads), dim=-1)
    q, k, v = split_heads(q, cfg.heads), split_heads(k, kv_heads), split_heads(v, kv_heads)
    k, v = (t.repeat_interleave(cfg.heads // kv_heads, dim=1) for t in (k, v))  # [B, H, N, d]
    y = masked_softmax_attention(q, k, v, causal_allowed(x.shape[1], mask, x.device))
    return module.out(merge_heads(y))
