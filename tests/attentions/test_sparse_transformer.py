"""Sparse Transformer (fixed and strided patterns, non-causal and the paper's causal ones) against a dense masked
softmax with the same n×n pattern written from the paper's definitions of A(1) and A(2) (forward and backward)."""

from __future__ import annotations

import pytest
import torch

import attentions
from attentions._decode import KVCache
from tests.attentions.causal_reference import causal_softmax
from tests.attentions.reference import assert_matches_reference, masked_softmax_attention, merge_heads, module_qkv
from tests.attentions.test_blocks import decode, influence, step_reads

CFG = {"dim": 12, "heads": 3, "max_seq_len": 64, "dropout": 0.0, "stride": 4, "summary": 2}


def _build(**overrides: object) -> torch.nn.Module:
    torch.manual_seed(0)
    return attentions.build("sparse_transformer", **{**CFG, **overrides}).double().eval()


def _pattern(cfg, n: int) -> torch.Tensor:
    """[N, N]: query i may attend to key j iff j ∈ A(1)_i ∪ A(2)_i (non-causal)."""
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    l = cfg.stride
    if cfg.pattern == "fixed":
        return (i // l == j // l) | (j % l >= l - cfg.summary)
    return ((i - j).abs() <= l) | ((i - j) % l == 0)


def _reference(module, x, mask=None):
    b, n, _ = x.shape
    real = torch.ones(b, n, dtype=torch.bool) if mask is None else mask
    allowed = _pattern(module.cfg, n)[None, None] & real[:, None, None, :]  # [B, 1, N, N]
    return module.out(merge_heads(masked_softmax_attention(*module_qkv(module, x), allowed)))


def _compare(module, x, mask=None) -> None:
    """Outputs at the real positions, input and parameter gradients equal the dense reference's."""
    x = x.clone().requires_grad_(True)
    assert_matches_reference(module, x, module(x, mask), _reference(module, x, mask), mask)


@pytest.mark.parametrize("pattern", ["fixed", "strided"])
@pytest.mark.parametrize("n", [32, 29, 6, 3])
@pytest.mark.parametrize(("stride", "summary"), [(4, 2), (5, 1), (3, 3)])
def test_matches_dense_pattern(pattern: str, n: int, stride: int, summary: int) -> None:
    module = _build(pattern=pattern, stride=stride, summary=summary)
    x = torch.randn(2, n, 12, dtype=torch.float64)
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, max(n // 2, 1) :] = False
    if n > 4:
        mask[0, 2] = False  # padding need not be a suffix
    _compare(module, x, mask)
    _compare(module, x)


def test_patterns_are_sparse_and_differ() -> None:
    """The reference patterns are what the paper describes (and the dense test can fail on the wrong one)."""
    fixed, strided = _build().cfg, _build(pattern="strided").cfg
    pf, ps = _pattern(fixed, 32), _pattern(strided, 32)
    assert pf[5].nonzero().flatten().tolist() == [2, 3, 4, 5, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31]
    assert ps[5].nonzero().flatten().tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 17, 21, 25, 29]
    x = torch.randn(1, 32, 12, dtype=torch.float64)
    module = _build()
    wrong = _build(pattern="strided")
    assert (module(x) - _reference(wrong, x)).abs().max() > 1e-3


def test_defaults_and_capabilities() -> None:
    spec, strided = attentions.spec("sparse_transformer"), attentions.spec("sparse_transformer_strided")
    assert (spec.config.pattern, spec.config.stride, spec.config.summary) == ("fixed", 128, 32)
    assert strided.config.pattern == "strided"
    assert spec.caps.pads_to_multiple and spec.caps.seq_len_multiple_of == 128
    with pytest.raises(ValueError, match="summary"):
        attentions.build("sparse_transformer", stride=4, summary=5)


def _causal_pattern(cfg, n: int) -> torch.Tensor:
    """[N, N]: the paper's causal patterns (§4.2), merged: query i reads j ∈ A(1)_i ∪ A(2)_i, with
    fixed: A(1) = {j : ⌊j/l⌋ = ⌊i/l⌋, j <= i}, A(2) = {j : j mod l ∈ {l - c, ..., l - 1}, j <= i};
    strided: A(1) = {max(0, i - l), ..., i}, A(2) = {j : (i - j) mod l = 0, j <= i}."""
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    l = cfg.stride
    if cfg.pattern == "fixed":
        a1, a2 = (i // l == j // l) & (j <= i), (j % l >= l - cfg.summary) & (j <= i)
    else:
        a1, a2 = (j >= i - l) & (j <= i), ((i - j) % l == 0) & (j <= i)
    return a1 | a2


def causal_reference(module: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The causal form (tests/attentions/test_causal.py): causal softmax attention over A(1) ∪ A(2) only."""
    return causal_softmax(module, x, mask, _causal_pattern(module.cfg, x.shape[1]))


CAUSAL_SETTINGS = [
    {"pattern": "fixed", "stride": 4, "summary": 2},
    {"pattern": "fixed", "stride": 5, "summary": 1},
    {"pattern": "fixed", "stride": 3, "summary": 3},
    {"pattern": "strided", "stride": 4, "summary": 1},
    {"pattern": "strided", "stride": 3, "summary": 1},
    {"pattern": "strided", "stride": 1, "summary": 1},
]


def _causal(**overrides: object) -> torch.nn.Module:
    return _build(causal=True, **overrides)


def test_causal_patterns_are_the_papers() -> None:
    """l = 4, c = 2, query 13: fixed reads 12, 13 of its block and the last two of blocks 0..2; strided reads
    9..13 and 5, 1."""
    fixed, strided = _causal().cfg, _causal(pattern="strided").cfg
    assert _causal_pattern(fixed, 32)[13].nonzero().flatten().tolist() == [2, 3, 6, 7, 10, 11, 12, 13]
    assert _causal_pattern(strided, 32)[13].nonzero().flatten().tolist() == [1, 5, 9, 10, 11, 12, 13]
    assert _causal_pattern(strided, 32)[2].nonzero().flatten().tolist() == [0, 1, 2]


@pytest.mark.parametrize("setting", CAUSAL_SETTINGS)
def test_causal_queries_read_exactly_the_pattern(setting: dict) -> None:
    """Brute force: input j moves output i iff j ∈ A(1)_i ∪ A(2)_i."""
    module = _causal(**setting)
    assert torch.equal(influence(module, 17), _causal_pattern(module.cfg, 17))


@pytest.mark.parametrize("setting", CAUSAL_SETTINGS)
@pytest.mark.parametrize("n", [32, 29, 3])
def test_causal_matches_the_dense_pattern(setting: dict, n: int) -> None:
    module = _causal(**setting)
    x = torch.randn(2, n, 12, dtype=torch.float64).requires_grad_(True)
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[0, 1] = False
    mask[1, n - 2 :] = False
    assert_matches_reference(module, x, module(x, mask), causal_reference(module, x, mask), mask)


@pytest.mark.parametrize("setting", CAUSAL_SETTINGS)
@pytest.mark.parametrize("prompt", [0, 1, 9, 22])
def test_prefill_then_steps_equal_the_causal_forward(setting: dict, prompt: int) -> None:
    """Strides far shorter than the sequence; padding inside the prompt."""
    module = _causal(**setting)
    x = torch.randn(2, 23, 12, dtype=torch.float64)
    mask = torch.ones(2, 23, dtype=torch.bool)
    mask[1, : min(prompt, 3)] = False
    torch.testing.assert_close(decode(module, x, mask, prompt)[mask], module(x, mask)[mask])


@pytest.mark.parametrize("setting", CAUSAL_SETTINGS[:4])
def test_a_step_reads_only_its_pattern_from_the_cache(setting: dict) -> None:
    """A KV cache of every token, of which a step reads only A(1) ∪ A(2) of its own position."""
    module = _causal(**setting)
    x = torch.randn(1, 15, 12, dtype=torch.float64)
    with torch.no_grad():
        _, state = module.prefill(x[:, :2], None, capacity=15)
    assert isinstance(state, KVCache) and state.capacity == 15
    pattern = _causal_pattern(module.cfg, 15)
    for i in (0, 3, 9, 14):
        assert step_reads(module, x, i) == set(pattern[i].nonzero().flatten().tolist()), i


def test_causal_capabilities() -> None:
    fixed, strided = attentions.spec("sparse_transformer").caps, attentions.spec("sparse_transformer_strided").caps
    assert fixed.causal and fixed.decode and strided.causal and strided.decode
    assert "fixed" in fixed.causal_note and "strided" in strided.causal_note
