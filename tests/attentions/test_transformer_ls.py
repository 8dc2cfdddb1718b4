"""Transformer-LS against a dense reference written from the paper (Zhu et al. 2021, §3): one softmax over the
segment window (an explicit n×n mask) and the r dynamically projected keys LN_G(Pᵀ X W_K), P = softmax_n(X W_P); and
its causal form (the authors' autoregressive ChunkedLSAttention) against a dense one written the same way."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import attentions
from attentions.transformer_ls import TransformerLSAttention
from tests.attentions.reference import assert_matches_reference, projected_qkv

CFG = {"dim": 16, "heads": 2, "max_seq_len": 64, "dropout": 0.0, "window": 4, "rank": 3}


def _build(seed: int = 0, **overrides: object) -> TransformerLSAttention:
    torch.manual_seed(seed)
    module = attentions.build("transformer_ls", **{**CFG, **overrides}).double().eval()
    with torch.no_grad():  # non-trivial LayerNorm affine parameters, so a swapped LN_L / LN_G would show
        for ln in (module.ln_local, module.ln_global):
            if isinstance(ln, torch.nn.LayerNorm):
                ln.weight.copy_(1 + 0.5 * torch.randn_like(ln.weight))
                ln.bias.copy_(0.5 * torch.randn_like(ln.bias))
    return module  # type: ignore[return-value]


def _window_mask(n: int, w: int) -> torch.Tensor:
    """[N, N]: query i (segment s = i // w) sees key j iff s·w − w/2 ≤ j < (s+1)·w + w/2 (w/2 at least 1)."""
    margin = max(w // 2, 1)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    start = (i // w) * w
    return (j >= start - margin) & (j < start + w + margin)


def _reference(module: TransformerLSAttention, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    b, n, d = x.shape
    cfg = module.cfg
    h, dh, r = cfg.heads, cfg.head_dim, cfg.rank
    if mask is None:
        mask = torch.ones(b, n, dtype=torch.bool)
    x = x * mask[..., None]
    q, k, v = projected_qkv(module, x)  # [B, N, D] each

    def ln(t: torch.Tensor, mod: torch.nn.Module) -> torch.Tensor:
        return F.layer_norm(t, (d,), mod.weight, mod.bias, mod.eps) if cfg.dual_ln else t

    logits = x @ module.dyn_proj.weight.T + module.dyn_proj.bias  # [B, N, H·r]
    p = logits.masked_fill(~mask[..., None], float("-inf")).softmax(dim=1)  # columns sum to 1 over real tokens
    kg = torch.cat([p[..., hh * r : (hh + 1) * r].transpose(1, 2) @ k[..., hh * dh : (hh + 1) * dh]
                    for hh in range(h)], -1)  # [B, r, D]: head hh's Pᵀ K in its channels
    vg = torch.cat([p[..., hh * r : (hh + 1) * r].transpose(1, 2) @ v[..., hh * dh : (hh + 1) * dh]
                    for hh in range(h)], -1)
    kg, vg = ln(kg, module.ln_global), ln(vg, module.ln_global)
    kl, vl = ln(k, module.ln_local), ln(v, module.ln_local)
    allowed = _window_mask(n, cfg.window)[None] & mask[:, None, :]  # [B, N, N]
    heads = []
    for hh in range(h):
        sl = slice(hh * dh, (hh + 1) * dh)
        s_loc = (q[..., sl] @ kl[..., sl].transpose(-1, -2) / math.sqrt(dh)).masked_fill(~allowed, float("-inf"))
        s_glob = q[..., sl] @ kg[..., sl].transpose(-1, -2) / math.sqrt(dh)  # [B, N, r]
        attn = torch.cat([s_loc, s_glob], -1).softmax(-1)
        heads.append(attn[..., :n] @ vl[..., sl] + attn[..., n:] @ vg[..., sl])
    return module.out(torch.cat(heads, -1))


def causal_reference(module: TransformerLSAttention, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The causal form with dense masks (tests/attentions/test_causal.py): query i sees the real keys i − w < j ≤ i
    and the projections LN_G(P_sᵀ K_s) of every segment s of l tokens with s < ⌊i/l⌋ that holds a real token,
    P_s = softmax over the segment's real tokens of X_s W_P (r columns per head), in one softmax."""
    b, n, d = x.shape
    cfg = module.cfg
    h, dh, r, w, seg = cfg.heads, cfg.head_dim, cfg.segment_rank, cfg.window, cfg.segment
    if mask is None:
        mask = torch.ones(b, n, dtype=torch.bool)
    x = x * mask[..., None]
    q, k, v = projected_qkv(module, x)  # [B, N, D] each

    def ln(t: torch.Tensor, mod: torch.nn.Module) -> torch.Tensor:
        return F.layer_norm(t, (d,), mod.weight, mod.bias, mod.eps) if cfg.dual_ln else t

    low = torch.finfo(x.dtype).min  # finite: a row without an allowed key (padding) stays finite
    assert module.dyn_proj.bias is None  # a constant per column would cancel in each segment's softmax
    logits = x @ module.dyn_proj.weight.T  # [B, N, H·r]
    kgs, vgs, seg_keep = [], [], []
    for s in range(n // seg):
        part = slice(s * seg, (s + 1) * seg)
        p = logits[:, part].masked_fill(~mask[:, part, None], low).softmax(dim=1)  # [B, l, H·r]
        for target, store in ((k, kgs), (v, vgs)):
            per_head = [p[..., hh * r : (hh + 1) * r].transpose(1, 2) @ target[:, part, hh * dh : (hh + 1) * dh]
                        for hh in range(h)]  # [B, r, dh] each: head hh's P_sᵀ K_s
            store.append(ln(torch.cat(per_head, -1), module.ln_global))  # [B, r, D]
        i = torch.arange(n)[:, None]
        seg_keep.append(((s < i // seg) & mask[:, part].any(1)[:, None, None]).expand(b, n, r))  # [B, N, r]
    kg = torch.cat(kgs, 1) if kgs else x.new_zeros(b, 0, d)  # [B, S·r, D]
    vg = torch.cat(vgs, 1) if vgs else x.new_zeros(b, 0, d)
    keep_g = torch.cat(seg_keep, -1) if seg_keep else torch.zeros(b, n, 0, dtype=torch.bool)
    kl, vl = ln(k, module.ln_local), ln(v, module.ln_local)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    keep_l = ((j <= i) & (j > i - w))[None] & mask[:, None, :]  # [B, N, N]
    heads = []
    for hh in range(h):
        sl = slice(hh * dh, (hh + 1) * dh)
        s_loc = (q[..., sl] @ kl[..., sl].transpose(-1, -2) / math.sqrt(dh)).masked_fill(~keep_l, low)
        s_glob = (q[..., sl] @ kg[..., sl].transpose(-1, -2) / math.sqrt(dh)).masked_fill(~keep_g, low)
        attn = torch.cat([s_loc, s_glob], -1).softmax(-1)
        heads.append(attn[..., :n] @ vl[..., sl] + attn[..., n:] @ vg[..., sl])
    return module.out(torch.cat(heads, -1))


@pytest.mark.parametrize(("window", "segment", "segment_rank", "n"), [(4, 5, 2, 37), (8, 16, 1, 64), (3, 4, 3, 23),
                                                                         (1, 2, 1, 9)])
def test_causal_form_matches_its_dense_form(window: int, segment: int, segment_rank: int, n: int) -> None:
    module = _build(window=window, segment=segment, segment_rank=segment_rank, causal=True)
    x = torch.randn(2, n, 16, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, :segment] = False  # a segment of padding only: no key
    mask[0, n - 3] = False
    assert module.dyn_proj.out_features == 2 * segment_rank  # W_P: H·r columns per segment
    assert_matches_reference(module, x, module(x, mask), causal_reference(module, x, mask), mask)


@torch.no_grad()
def test_a_segment_is_read_only_by_the_queries_after_it() -> None:
    """Changing the first segment moves nothing before position l (the window aside, here w = 1), and the query at
    position l is the first to read its projection."""
    module = _build(window=1, segment=4, causal=True)
    x = torch.randn(1, 12, 16, dtype=torch.float64)
    changed = x.clone()
    changed[0, 3] += 3.0  # the first segment's last token
    y, y2 = module(x), module(changed)
    torch.testing.assert_close(y[0, :3], y2[0, :3])
    assert not torch.allclose(y[0, 4], y2[0, 4])


@torch.no_grad()
def test_decoding_writes_each_completed_segment_once() -> None:
    module = _build(window=2, segment=4, segment_rank=2, causal=True)
    x = torch.randn(1, 11, 16, dtype=torch.float64)
    _, state = module.prefill(x[:, :5], None, capacity=11)
    assert state.summary_k.shape == (1, 2, 2 * 2, 8) and state.summary_real.tolist() == [[True, False]]
    for t in range(5, 8):
        _, state = module.step(x[:, t : t + 1], state)
    assert state.summary_real.tolist() == [[True, True]]  # the second segment completed at position 7
    kg = module._causal(x[:, :8], None)[1][3]  # the forward's summaries of the same two segments
    torch.testing.assert_close(state.summary_k, kg)


@pytest.mark.parametrize(("window", "n", "dual_ln"), [(4, 24, True), (4, 23, True), (3, 17, False), (1, 9, True),
                                                      (8, 40, True)])
def test_matches_dense_window_plus_projection_forward_and_backward(window: int, n: int, dual_ln: bool) -> None:
    module = _build(window=window, dual_ln=dual_ln)
    x = torch.randn(2, n, 16, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, n - 6 :] = False
    mask[1, 2] = False  # padding need not be a suffix
    assert_matches_reference(module, x, module(x, mask), _reference(module, x, mask), mask)


def test_unmasked_input_matches_reference() -> None:
    module = _build()
    x = torch.randn(3, 22, 16, dtype=torch.float64)
    torch.testing.assert_close(module(x), _reference(module, x))


def test_projection_is_a_distribution_over_real_positions() -> None:
    module = _build()
    x = torch.randn(2, 16, 16, dtype=torch.float64)
    mask = torch.ones(2, 16, dtype=torch.bool)
    mask[0, 10:] = False
    logits = module.dyn_proj(x).masked_fill(~mask[..., None], torch.finfo(x.dtype).min)
    p = logits.softmax(1)
    torch.testing.assert_close(p.sum(1), torch.ones(2, 6, dtype=x.dtype))
    assert torch.count_nonzero(p[0, 10:]) == 0
    # and the module's global keys use exactly this P: padded content moves nothing
    noisy = x + 50 * torch.randn_like(x) * (~mask[..., None])
    k1 = module.global_keys(x * mask[..., None], *module.proj.qkv(x * mask[..., None]).chunk(3, -1)[1:], mask)
    k2 = module.global_keys(noisy * mask[..., None], *module.proj.qkv(noisy * mask[..., None]).chunk(3, -1)[1:], mask)
    torch.testing.assert_close(k1, k2)


def test_padding_leaks_nowhere_and_short_equals_padded() -> None:
    module = _build()
    x = torch.randn(2, 21, 16, dtype=torch.float64)
    mask = torch.ones(2, 21, dtype=torch.bool)
    mask[0, 13:] = False
    mask[1] = False  # a fully padded row stays finite
    noisy = x + 100.0 * torch.randn_like(x) * (~mask[..., None])
    y, y_noisy = module(x, mask), module(noisy, mask)
    assert torch.isfinite(y).all() and torch.isfinite(y_noisy).all()
    torch.testing.assert_close(y[mask], y_noisy[mask])
    torch.testing.assert_close(y[0, :13], module(x[:1, :13])[0])


def test_config_defaults_and_capabilities() -> None:
    cfg = attentions.spec("transformer_ls").config
    assert (cfg.window, cfg.rank, cfg.dual_ln) == (8, 32, True)  # LRA "Transformer-LS (w, r) = (8, 32)"
    caps = attentions.spec("transformer_ls").caps
    assert caps.complexity == "n" and caps.seq_len_multiple_of == 8 and caps.pads_to_multiple and not caps.exact
    assert isinstance(_build(dual_ln=False).ln_local, torch.nn.Identity)
    with pytest.raises(ValueError, match="window"):
        attentions.build("transformer_ls", window=0)
    with pytest.raises(ValueError, match="rank"):
        attentions.build("transformer_ls", rank=0)
