"""Luna against its two dense softmax attentions written out (Ma et al. 2021, §3.1: pack P' = Attn(P, X),
unpack Y = Attn(X, P')), and causal Luna against its quadratic form (the authors' LunarCausalAttention with dense
[N, N] masks)."""

from __future__ import annotations

import math

import pytest
import torch

import attentions
from attentions.luna import LunaAttention
from tests.attentions.causal_reference import causal_allowed
from tests.attentions.reference import assert_matches_reference, noisy_padding, two_row_mask

CFG = {"dim": 32, "heads": 2, "max_seq_len": 64, "dropout": 0.0, "proj_len": 8}


def _build(seed: int = 0, **overrides: object) -> LunaAttention:
    torch.manual_seed(seed)
    return attentions.build("luna", **{**CFG, **overrides}).double().eval()  # type: ignore[return-value]


def _heads(t: torch.Tensor, h: int) -> torch.Tensor:
    b, n, d = t.shape
    return t.reshape(b, n, h, d // h).transpose(1, 2)  # [B, H, N, dh]


def _softmax_attention(q, k, v, key_mask=None) -> torch.Tensor:
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if key_mask is not None:
        scores = scores.masked_fill(~key_mask[:, None, None, :], float("-inf"))
    return scores.softmax(-1) @ v


def _reference(module: LunaAttention, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Pack then unpack, each a plain multi-head softmax attention with the module's weights."""
    d, h = module.cfg.dim, module.cfg.heads
    b = x.shape[0]
    w, bias = module.x_proj.weight, module.x_proj.bias
    q = x @ w[:d].T + bias[:d]
    pk = x @ w[d : 2 * d].T + bias[d : 2 * d]
    pv = pk if module.cfg.tie_kv else x @ w[2 * d :].T + bias[2 * d :]
    pq = (module.context @ module.p_query.weight.T + module.p_query.bias).expand(b, -1, -1)
    packed = _softmax_attention(_heads(pq, h), _heads(pk, h), _heads(pv, h), mask)  # [B, H, l, dh]
    packed = packed.transpose(1, 2).reshape(b, -1, d)  # P': [B, l, D]
    c = packed @ module.c_proj.weight.T + module.c_proj.bias
    uk = c[..., :d]
    uv = uk if module.cfg.tie_kv else c[..., d:]
    y = _softmax_attention(_heads(q, h), _heads(uk, h), _heads(uv, h))  # [B, H, N, dh]
    return module.out(y.transpose(1, 2).reshape(b, -1, d))


def causal_reference(module: LunaAttention, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Causal Luna written out with dense [N, N] masks (tests/attentions/test_causal.py): packing weights
    a_j = softplus_{ln 2}(p_s·pc_j/√d) per packed row s, A_t = Σ_{j≤t real} (q_t·k_j/√d) a_j / n_t,
    Y_t = Σ_{j≤t real} (softmax(A_t)·a_j) v_j / n_t, n_t the real tokens ≤ t."""
    cfg = module.cfg
    d, h = cfg.dim, cfg.heads
    b, n, _ = x.shape
    if mask is not None:
        x = x * mask[..., None]
    w, bias = module.x_proj.weight, module.x_proj.bias
    q, pc = _heads(x @ w[:d].T + bias[:d], h), _heads(x @ w[d:].T + bias[d:], h)  # [B, H, N, dh]
    c = x @ module.c_proj.weight.T + module.c_proj.bias
    k = _heads(c[..., :d], h)
    v = k if cfg.tie_kv else _heads(c[..., d:], h)
    pq = _heads((module.context @ module.p_query.weight.T + module.p_query.bias)[None], h)  # [1, H, l, dh]
    dh = d // h
    a = torch.nn.functional.softplus(pc @ pq.transpose(-1, -2) / math.sqrt(dh), beta=math.log(2.0))  # [B, H, N, l]
    keep = causal_allowed(n, mask, x.device).to(x.dtype)  # [B or 1, 1, N, N]
    count = keep.sum(-1, keepdim=True).clamp_min(1.0)  # [B or 1, 1, N, 1]
    scores = (q @ k.transpose(-1, -2) / math.sqrt(dh) * keep) @ a / count  # [B, H, N, l]
    weights = scores.softmax(-1) @ a.transpose(-1, -2) * keep  # [B, H, N, N]
    y = weights @ v / count
    return module.out(y.transpose(1, 2).reshape(b, n, d))


@pytest.mark.parametrize("tie_kv", [True, False])
def test_causal_form_equals_its_dense_form_with_long_chunks(tie_kv: bool) -> None:
    """Beyond one chunk of the chunked products (64 tokens), padding inside the sequence, K and V tied or not."""
    module = _build(tie_kv=tie_kv, causal=True, max_seq_len=150)
    x = torch.randn(2, 150, 32, dtype=torch.float64, requires_grad=True)
    mask = two_row_mask(150, 130, 7)
    assert module.x_proj.out_features == 2 * 32  # q and the packing keys only
    assert_matches_reference(module, x, module(x, mask), causal_reference(module, x, mask), mask)


@torch.no_grad()
def test_causal_decoding_state_is_bounded_by_the_packed_length() -> None:
    module = _build(causal=True, proj_len=4)
    x = torch.randn(2, 30, 32, dtype=torch.float64)
    _, state = module.prefill(x[:, :10], None, capacity=1000)
    assert state.pack.kv.shape == (2, 2, 16, 5) and state.unpack.kv.shape == (2, 2, 4, 17)
    assert state.count.tolist() == [10, 10] and state.pack.length == 10


@pytest.mark.parametrize("tie_kv", [True, False])
@pytest.mark.parametrize("padded", [False, True])
def test_matches_pack_and_unpack_softmax_attentions_forward_and_backward(tie_kv: bool, padded: bool) -> None:
    module = _build(tie_kv=tie_kv)
    x = torch.randn(2, 24, 32, dtype=torch.float64, requires_grad=True)
    mask = None
    if padded:
        mask = two_row_mask(24, 17, 3)
    y = module(x, mask)
    ref = _reference(module, x * mask[..., None] if padded else x, mask)
    assert_matches_reference(module, x, y, ref, weight=torch.randn_like(y))
    assert module.context.shape == (8, 32)


@torch.no_grad()
def test_padding_never_leaks_and_short_equals_padded() -> None:
    module = _build()
    x = torch.randn(2, 30, 32, dtype=torch.float64)
    mask = torch.ones(2, 30, dtype=torch.bool)
    mask[0, 21:] = False
    mask[1, 5:12] = False
    noisy = noisy_padding(x, mask)
    y, y_noisy = module(x, mask), module(noisy, mask)
    torch.testing.assert_close(y[mask], y_noisy[mask], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(y[0, :21], module(x[:1, :21])[0])
    everything_padded = module(x, torch.zeros(2, 30, dtype=torch.bool))
    assert torch.isfinite(everything_padded).all()


@torch.no_grad()
def test_context_is_learned_and_used() -> None:
    """The output depends on P (a learned parameter), and one packed context serves every position."""
    module = _build()
    x = torch.randn(1, 16, 32, dtype=torch.float64)
    y = module(x)
    module.context.mul_(3.0)
    assert not torch.allclose(module(x), y)


def test_dropout_on_both_attention_weights_in_training_only() -> None:
    module = _build(dropout=0.5)
    x = torch.randn(1, 16, 32, dtype=torch.float64)
    with torch.no_grad():
        ref = _reference(module, x)
        torch.testing.assert_close(module(x), ref)  # eval: no dropout
        module.train()
        torch.manual_seed(0)
        a = module(x)
        torch.manual_seed(1)
        b = module(x)
    assert not torch.allclose(a, ref) and not torch.allclose(a, b)


def test_defaults_presets_and_validation() -> None:
    assert attentions.spec("luna").config.proj_len == 256 and attentions.spec("luna").config.tie_kv
    assert attentions.spec("luna_l16").config.proj_len == 16
    assert attentions.spec("luna_l128").config.proj_len == 128
    assert attentions.spec("luna").caps.complexity == "n"
    with pytest.raises(ValueError, match="proj_len"):
        attentions.make_config("luna", proj_len=0)
