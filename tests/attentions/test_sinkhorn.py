"""Sparse Sinkhorn attention against references written from the paper (Tay et al. 2020, §3): Sinkhorn
normalisation by explicit alternating divisions, block-local attention as a dense block-diagonal masked softmax when
the permutation is the identity, and the full sorted + local attention as a dense masked softmax over [K; K̂]."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import attentions
from attentions.sinkhorn import SinkhornAttention, sinkhorn
from harness.measure.memory import peak_memory_bytes
from tests.attentions.reference import assert_matches_reference, merge_heads, module_qkv

CFG = {"dim": 16, "heads": 2, "max_seq_len": 48, "dropout": 0.0, "block_size": 8, "n_iters": 5}


def _build(seed: int = 0, **overrides: object) -> SinkhornAttention:
    torch.manual_seed(seed)
    return attentions.build("sinkhorn", **{**CFG, **overrides}).double().eval()  # type: ignore[return-value]


def _plain_sinkhorn(logits: torch.Tensor, n_iters: int) -> torch.Tensor:
    """S⁰ = exp(R), then n times: divide by row sums, divide by column sums (no log space)."""
    s = logits.exp()
    for _ in range(n_iters):
        s = s / s.sum(-1, keepdim=True)
        s = s / s.sum(-2, keepdim=True)
    return s


def _dense_attention(module, q, k, v, pattern, extra_k=None, extra_v=None, extra_pattern=None) -> torch.Tensor:
    """softmax over the allowed keys of [K; extra] with explicit dense masks, heads merged, output projection."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # [B, H, N, N]
    scores = scores.masked_fill(~pattern, float("-inf"))
    values = v
    if extra_k is not None:
        es = (q @ extra_k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(~extra_pattern, float("-inf"))
        scores, values = torch.cat([scores, es], -1), torch.cat([v, extra_v], -2)
    y = torch.nan_to_num(scores.softmax(-1)) @ values  # rows with no key (padded queries) -> 0, never compared
    return module.out(merge_heads(y))


def _pad_to_blocks(x: torch.Tensor, mask: torch.Tensor, bs: int) -> tuple[torch.Tensor, torch.Tensor]:
    n = x.shape[1]
    pad = -n % bs
    return F.pad(x, (0, 0, 0, pad)), F.pad(mask, (0, pad), value=False)


def _reference(module: SinkhornAttention, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Paper §3 written out densely: block sums, P = MLP, S = Sinkhorn(R/τ) over real blocks, K̂ = S K (blockwise),
    then one softmax over the own block's real keys and the sorted block's slots that hold real mass."""
    n = x.shape[1]
    bs, cfg = module.cfg.block_size, module.cfg
    x, mask = _pad_to_blocks(x * mask[..., None], mask, bs)
    b, n_pad, _ = x.shape
    nb = n_pad // bs
    q, k, v = module_qkv(module, x)
    m = mask[:, None, :, None].to(x.dtype)
    k, v = k * m, v * m
    h, dh = k.shape[1], k.shape[-1]
    kb, vb = k.reshape(b, h, nb, bs, dh), v.reshape(b, h, nb, bs, dh)
    l1, l2 = module.sort_net[0], module.sort_net[2]
    logits = (torch.relu(kb.sum(3) @ l1.weight.T + l1.bias) @ l2.weight.T + l2.bias)[..., :nb] / cfg.temperature
    real = mask.view(b, nb, bs).any(-1)
    s = torch.zeros(b, h, nb, nb, dtype=x.dtype)
    for bi in range(b):  # Sinkhorn on the real blocks' sub-matrix; padded blocks map to themselves
        r = real[bi].nonzero().flatten()
        sub = _plain_sinkhorn(logits[bi][:, r][:, :, r], cfg.n_iters)
        s[bi] = torch.eye(nb, dtype=x.dtype)
        s[bi][:, r[:, None], r[None, :]] = sub
    k_sorted = torch.einsum("bhuv,bhvtd->bhutd", s, kb).reshape(b, h, n_pad, dh)  # [B, H, N, dh]
    v_sorted = torch.einsum("bhuv,bhvtd->bhutd", s, vb).reshape(b, h, n_pad, dh)
    mass = torch.einsum("bhuv,bvt->bhut", s, mask.view(b, nb, bs).to(x.dtype)).reshape(b, h, 1, n_pad)
    block = torch.arange(n_pad) // bs
    same = block[:, None] == block[None, :]  # [N, N] block-diagonal
    pattern = same[None, None] & mask[:, None, None, :]
    extra_pattern = same[None, None] & (mass > 0)
    return _dense_attention(module, q, k, v, pattern, k_sorted, v_sorted, extra_pattern)[:, :n]


def test_sinkhorn_is_doubly_stochastic_and_matches_plain_iteration() -> None:
    logits = torch.randn(4, 6, 6, dtype=torch.float64)
    s = sinkhorn(logits, 200)
    ones = torch.ones(4, 6, dtype=torch.float64)
    torch.testing.assert_close(s.sum(-1), ones)
    torch.testing.assert_close(s.sum(-2), ones)
    assert (s > 0).all()
    torch.testing.assert_close(sinkhorn(logits, 3), _plain_sinkhorn(logits, 3))
    # a dominant diagonal at low temperature gives (nearly) the identity permutation
    torch.testing.assert_close(sinkhorn(torch.eye(5, dtype=torch.float64) / 0.01, 5), torch.eye(5, dtype=torch.float64))


def test_sinkhorn_keeps_minus_inf_entries_at_zero() -> None:
    logits = torch.randn(5, 5, dtype=torch.float64)
    logits[3:, :] = float("-inf")
    logits[:, 3:] = float("-inf")
    logits[3, 3] = logits[4, 4] = 0.0
    s = sinkhorn(logits, 20)
    torch.testing.assert_close(s[3:, 3:], torch.eye(2, dtype=torch.float64))
    assert torch.count_nonzero(s[:3, 3:]) == 0 and torch.count_nonzero(s[3:, :3]) == 0
    torch.testing.assert_close(s[:3, :3], sinkhorn(logits[:3, :3], 20))


@pytest.mark.parametrize("n", [32, 29])
def test_identity_permutation_reduces_to_block_local_attention(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """With S forced to I, each block attends to [K_u; K_u]: duplicated keys, so exactly block-local attention."""
    module = _build()
    monkeypatch.setattr(module, "sort_matrix",
                        lambda summ, real: torch.eye(summ.shape[-2], dtype=summ.dtype).expand(*summ.shape[:2], -1, -1))
    x = torch.randn(2, n, 16, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, 19:] = False
    q, k, v = module_qkv(module, x * mask[..., None])
    block = torch.arange(n) // module.cfg.block_size
    pattern = (block[:, None] == block[None, :])[None, None] & mask[:, None, None, :]
    out, ref = module(x, mask), _dense_attention(module, q, k, v, pattern)
    assert_matches_reference(module, x, out, ref, mask, allow_unused=True)  # the sort net is unused when S is fixed


@pytest.mark.parametrize(("n", "pad_from"), [(40, 40), (40, 28), (37, 13), (48, 3)])
def test_matches_dense_sorted_plus_local_reference_forward_and_backward(n: int, pad_from: int) -> None:
    module = _build()
    x = torch.randn(2, n, 16, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, pad_from:] = False  # 40/28: the last block fully padded, another partly
    mask[0, 5] = False  # padding need not be a suffix
    assert_matches_reference(module, x, module(x, mask), _reference(module, x, mask), mask, allow_unused=True)


def test_padded_blocks_do_not_change_the_sorting_of_real_blocks() -> None:
    module = _build()
    x = torch.randn(1, 24, 16, dtype=torch.float64)
    mask = torch.ones(1, 40, dtype=torch.bool)
    mask[0, 24:] = False
    padded = torch.cat([x, 100.0 * torch.randn(1, 16, 16, dtype=torch.float64)], 1)
    torch.testing.assert_close(module(padded, mask)[:, :24], module(x))
    assert torch.isfinite(module(padded, torch.zeros_like(mask))).all()  # no real token at all: finite


def test_gumbel_noise_only_in_training_and_seeded() -> None:
    module = _build(dropout=0.0)
    x = torch.randn(1, 40, 16, dtype=torch.float64)
    module.train()
    torch.manual_seed(1)
    a = module(x)
    torch.manual_seed(1)
    b = module(x)
    c = module(x)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.allclose(a, c)
    module.eval()
    torch.testing.assert_close(module(x), module(x), rtol=0, atol=0)
    module.train()
    no_noise = _build(gumbel=False).train()
    torch.testing.assert_close(no_noise(x), _build(gumbel=False)(x))


def test_peak_memory_is_linear_for_fixed_block_size() -> None:
    """Complexity is declared "n^2" (the soft sort costs n²d/b time), but memory stays linear: S is (n/b)²."""

    def peak(n: int) -> int:
        torch.manual_seed(0)
        module = attentions.build("sinkhorn", dim=32, heads=2, max_seq_len=n).eval()
        x = torch.randn(1, n, 32)

        def fwd() -> torch.Tensor:
            with torch.inference_mode():
                return module(x)

        return peak_memory_bytes(fwd, torch.device("cpu"))

    small, large = peak(2048), peak(4096)
    assert large < 2.5 * small, (small, large)


def test_config_defaults_capabilities_and_errors() -> None:
    cfg = attentions.spec("sinkhorn").config
    assert (cfg.block_size, cfg.n_iters, cfg.temperature, cfg.gumbel) == (64, 7, 0.75, True)
    caps = attentions.spec("sinkhorn").caps
    assert caps.needs_fixed_length and caps.pads_to_multiple and caps.seq_len_multiple_of == 64
    assert caps.complexity == "n^2" and not caps.exact
    assert _build().sort_net[2].out_features == 6  # ⌈48 / 8⌉ blocks
    with pytest.raises(ValueError, match="max_seq_len"):
        _build()(torch.randn(1, 49, 16, dtype=torch.float64))
    with pytest.raises(ValueError, match="temperature"):
        attentions.build("sinkhorn", temperature=0.0)
    with pytest.raises(ValueError, match="n_iters"):
        attentions.build("sinkhorn", n_iters=0)
