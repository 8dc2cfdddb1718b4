"""Longformer against a dense masked softmax with the paper's pattern (§3.1), forward and backward; its causal form
against the one-sided dilated window of the paper's autoregressive language model (§4)."""

from __future__ import annotations

import pytest
import torch

import attentions
from attentions._decode import WindowCache
from tests.attentions.causal_reference import causal_softmax
from tests.attentions.reference import assert_matches_reference, masked_softmax_attention, merge_heads, split_heads
from tests.attentions.test_blocks import decode, influence, step_reads

CFG = {"dim": 12, "heads": 3, "max_seq_len": 64, "dropout": 0.0}


def _build(perturb_global: bool = True, **overrides: object) -> torch.nn.Module:
    torch.manual_seed(0)
    module = attentions.build("longformer", **{**CFG, **overrides}).double().eval()
    if perturb_global and module.proj_global is not None:  # make Q_g, K_g, V_g differ from Q_s, K_s, V_s
        with torch.no_grad():
            module.proj_global.qkv.weight.add_(0.3 * torch.randn_like(module.proj_global.qkv.weight))
    return module


def _reference(module, x, mask=None):
    """Dense Longformer: rows i ∉ G over {|i-j| <= d·w/2, d | i-j} ∪ G with Q_s/K_s/V_s; rows i ∈ G over all j
    with Q_g/K_g/V_g. Written per the paper, with an explicit [N, N] pattern."""
    cfg = module.cfg
    b, n, d = x.shape
    h = cfg.heads
    if mask is None:
        mask = torch.ones(b, n, dtype=torch.bool)
    x = x * mask[..., None]
    pos = torch.arange(n)
    diff = pos[:, None] - pos[None]
    is_global = pos < cfg.global_tokens
    pattern = (diff.abs() <= cfg.dilation * cfg.window // 2) & (diff % cfg.dilation == 0)
    pattern = pattern | is_global[None, :]  # everyone attends to the global tokens

    def attend(proj, allowed):
        q, k, v = (split_heads(t, h) for t in (x @ proj.qkv.weight.T + proj.qkv.bias).chunk(3, dim=-1))
        return masked_softmax_attention(q, k, v, allowed[None, None] & mask[:, None, None, :])  # [B, H, N, dh]

    y = attend(module.proj, pattern)
    if cfg.global_tokens:
        gproj = module.proj_global if module.proj_global is not None else module.proj
        yg = attend(gproj, torch.ones(n, n, dtype=torch.bool))  # global rows attend to everything
        y = torch.where(is_global[None, None, :, None], yg, y)
    return module.out(merge_heads(y))


def _compare(module, x, mask=None) -> None:
    x = x.clone().requires_grad_(True)
    assert_matches_reference(module, x, module(x, mask), _reference(module, x, mask), mask, allow_unused=True)


SETTINGS = [
    {"window": 4, "dilation": 1, "global_tokens": 1},
    {"window": 6, "dilation": 2, "global_tokens": 1},
    {"window": 4, "dilation": 3, "global_tokens": 2},
    {"window": 2, "dilation": 1, "global_tokens": 0},
    {"window": 4, "dilation": 1, "global_tokens": 2, "global_proj": False},
    {"window": 0, "dilation": 1, "global_tokens": 1},
]


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("n", [21, 16])
def test_matches_dense_pattern_forward_and_backward(setting: dict, n: int) -> None:
    module = _build(**setting)
    x = torch.randn(2, n, 12, dtype=torch.float64)
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, n - 5 :] = False
    mask[0, 3] = False
    _compare(module, x, mask)
    _compare(module, x)


def test_padded_global_token_and_short_sequences() -> None:
    module = _build(window=4, global_tokens=3)
    x = torch.randn(2, 9, 12, dtype=torch.float64)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[0, 1] = False  # a global position that is padding
    _compare(module, x, mask)
    _compare(module, x[:, :2])  # fewer tokens than global tokens: everything is global


def test_global_projection_starts_as_a_copy_and_is_used() -> None:
    module = _build(perturb_global=False, window=4)
    assert torch.equal(module.proj_global.qkv.weight, module.proj.qkv.weight)
    assert module.proj_global.qkv.weight is not module.proj.qkv.weight
    x = torch.randn(1, 12, 12, dtype=torch.float64)
    before = module(x)
    with torch.no_grad():
        module.proj_global.qkv.weight.add_(1.0)
    after = module(x)
    assert (after[0, 0] - before[0, 0]).abs().max() > 1e-3  # the global row reads Q_g/K_g/V_g
    torch.testing.assert_close(after[0, 1:], before[0, 1:])  # local rows never do


def test_wide_window_with_one_projection_is_exact_softmax() -> None:
    module = _build(window=64, global_proj=False)
    vanilla = attentions.build("vanilla", **CFG).double().eval()
    vanilla.load_state_dict(module.state_dict())
    x = torch.randn(2, 20, 12, dtype=torch.float64)
    torch.testing.assert_close(module(x), vanilla(x))


def test_the_reference_can_fail() -> None:
    """A narrower window in the reference (w = 2 instead of 4) gives a different function."""
    module = _build(window=4)
    x = torch.randn(1, 16, 12, dtype=torch.float64)
    other = _build(window=2)
    assert (module(x) - _reference(other, x)).abs().max() > 1e-3


def test_defaults() -> None:
    spec = attentions.spec("longformer")
    cfg = spec.config
    assert (cfg.window, cfg.dilation, cfg.global_tokens, cfg.global_proj) == (512, 1, 1, True)
    assert spec.caps.complexity == "n" and not spec.caps.exact
    with pytest.raises(ValueError, match="even"):
        attentions.build("longformer", window=5)


def _causal_pattern(cfg, n: int) -> torch.Tensor:
    """[N, N]: causal query i reads i - k·d for k = 0 .. w/2 (the window's left half, dilated; no global tokens)."""
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    back = i - j
    return (back >= 0) & (back <= cfg.dilation * (cfg.window // 2)) & (back % cfg.dilation == 0)


def causal_reference(module: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The causal form (tests/attentions/test_causal.py): causal softmax attention over the one-sided window only,
    through the window projections Q_s, K_s, V_s."""
    return causal_softmax(module, x, mask, _causal_pattern(module.cfg, x.shape[1]))


CAUSAL_SETTINGS = [
    {"window": 4, "dilation": 1},
    {"window": 6, "dilation": 2},
    {"window": 4, "dilation": 3},
    {"window": 0, "dilation": 1},
    {"window": 2, "dilation": 1, "global_tokens": 3},
]


def _causal(**overrides: object) -> torch.nn.Module:
    return _build(perturb_global=False, causal=True, **overrides)


def test_causal_pattern_is_the_papers() -> None:
    """w = 6, d = 2: query 9 reads 9, 7, 5, 3 (w/2 = 3 steps of 2 back); query 3 reads 3, 1."""
    pattern = _causal_pattern(_causal(window=6, dilation=2).cfg, 12)
    assert pattern[9].nonzero().flatten().tolist() == [3, 5, 7, 9]
    assert pattern[3].nonzero().flatten().tolist() == [1, 3]


@pytest.mark.parametrize("setting", CAUSAL_SETTINGS)
def test_causal_queries_read_exactly_the_pattern(setting: dict) -> None:
    """Brute force: input j moves output i iff j is in i's one-sided window (global tokens included: none)."""
    module = _causal(**setting)
    assert torch.equal(influence(module, 15), _causal_pattern(module.cfg, 15))


@pytest.mark.parametrize("setting", CAUSAL_SETTINGS)
@pytest.mark.parametrize("n", [21, 16, 2])
def test_causal_matches_the_dense_pattern(setting: dict, n: int) -> None:
    module = _causal(**setting)
    x = torch.randn(2, n, 12, dtype=torch.float64).requires_grad_(True)
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[0, 1] = False
    mask[1, n - 1 :] = False
    assert_matches_reference(module, x, module(x, mask), causal_reference(module, x, mask), mask)


def test_causal_form_drops_the_global_tokens() -> None:
    """No global projections, and the same function as the config without global tokens."""
    module = _causal(window=4, global_tokens=2)
    assert module.proj_global is None
    plain = _causal(window=4, global_tokens=0)
    plain.load_state_dict(module.state_dict())
    x = torch.randn(2, 11, 12, dtype=torch.float64)
    torch.testing.assert_close(module(x), plain(x))
    assert attentions.spec("longformer").config.global_tokens == 1  # the default config still has a causal form
    assert "global tokens are dropped" in attentions.spec("longformer").caps.causal_note


@pytest.mark.parametrize("setting", CAUSAL_SETTINGS)
@pytest.mark.parametrize("prompt", [0, 1, 8, 20])
def test_prefill_then_steps_equal_the_causal_forward(setting: dict, prompt: int) -> None:
    """Windows far shorter than the sequence (the ring buffer wraps), with dilation; padding inside the prompt."""
    module = _causal(**setting)
    x = torch.randn(2, 21, 12, dtype=torch.float64)
    mask = torch.ones(2, 21, dtype=torch.bool)
    mask[1, : min(prompt, 3)] = False
    torch.testing.assert_close(decode(module, x, mask, prompt)[mask], module(x, mask)[mask])


@pytest.mark.parametrize("setting", CAUSAL_SETTINGS[:3])
def test_a_step_reads_only_its_window_from_the_ring(setting: dict) -> None:
    """The ring holds d·w/2 + 1 positions (every residue mod d), and a step reads only i - k·d."""
    module = _causal(**setting)
    x = torch.randn(1, 14, 12, dtype=torch.float64)
    with torch.no_grad():
        _, state = module.prefill(x[:, :2], None, capacity=14)
    assert isinstance(state, WindowCache)
    assert state.window == setting["dilation"] * (setting["window"] // 2) + 1
    pattern = _causal_pattern(module.cfg, 14)
    for i in (0, 2, 7, 13):
        assert step_reads(module, x, i) == set(pattern[i].nonzero().flatten().tolist()), i
