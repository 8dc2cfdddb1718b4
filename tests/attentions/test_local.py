"""Local attention against a dense masked softmax with the same n×n pattern (forward and backward); its causal forms
against the keys Roy et al.'s local attention (blocks) and a window behind the query (sliding) give each query."""

from __future__ import annotations

import pytest
import torch

import attentions
from attentions._decode import WindowCache
from tests.attentions.causal_reference import causal_softmax
from tests.attentions.reference import assert_matches_reference, masked_softmax_attention, merge_heads, module_qkv
from tests.attentions.test_blocks import decode, influence, step_reads

CFG = {"dim": 12, "heads": 3, "max_seq_len": 64, "dropout": 0.0}


def _build(**overrides: object) -> torch.nn.Module:
    torch.manual_seed(0)
    return attentions.build("local", **{**CFG, **overrides}).double().eval()


def _dense_reference(module, x, pattern, mask=None):
    """softmax(QKᵀ/√d + mask) V with an explicit [N, N] pattern, the module's own projections."""
    allowed = pattern[None, None] if mask is None else pattern[None, None] & mask[:, None, None, :]
    # Most negative finite score: a padded row with no allowed key stays finite (its output is not compared).
    return module.out(merge_heads(masked_softmax_attention(*module_qkv(module, x), allowed)))


def _block_pattern(n: int, w: int) -> torch.Tensor:
    i = torch.arange(n)
    return (i[:, None] // w) == (i[None] // w)


def _band_pattern(n: int, r: int) -> torch.Tensor:
    i = torch.arange(n)
    return (i[:, None] - i[None]).abs() <= r


def _compare(module, x, pattern, mask=None) -> None:
    """Outputs, input gradients and weight gradients equal the dense reference at the real positions."""
    x = x.clone().requires_grad_(True)
    assert_matches_reference(module, x, module(x, mask), _dense_reference(module, x, pattern, mask), mask)


@pytest.mark.parametrize("n", [20, 23, 7])
def test_block_mode_matches_dense_block_diagonal(n: int) -> None:
    module = _build(window=5)
    x = torch.randn(2, n, 12, dtype=torch.float64)
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, n - 3 :] = False
    _compare(module, x, _block_pattern(n, 5), mask)
    _compare(module, x, _block_pattern(n, 5))


@pytest.mark.parametrize(("n", "window"), [(20, 6), (23, 4), (9, 1), (17, 9)])
def test_sliding_mode_matches_dense_band(n: int, window: int) -> None:
    module = _build(window=window, mode="sliding")
    x = torch.randn(2, n, 12, dtype=torch.float64)
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[0, 2] = False  # padding need not be a suffix
    mask[1, n - 4 :] = False
    _compare(module, x, _band_pattern(n, window // 2), mask)


@pytest.mark.parametrize("mode", ["block", "sliding"])
def test_window_covering_the_sequence_is_exact_softmax(mode: str) -> None:
    n = 19
    module = _build(window=2 * n, mode=mode)
    x = torch.randn(2, n, 12, dtype=torch.float64)
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, 11:] = False
    _compare(module, x, torch.ones(n, n, dtype=torch.bool), mask)
    vanilla = attentions.build("vanilla", **CFG).double().eval()
    vanilla.load_state_dict(module.state_dict())
    torch.testing.assert_close(module(x, mask)[mask], vanilla(x, mask)[mask])


def test_a_smaller_window_is_not_exact() -> None:
    """The reference test above can fail: a window smaller than the sequence differs from full attention."""
    module = _build(window=5)
    x = torch.randn(1, 20, 12, dtype=torch.float64)
    full = _dense_reference(module, x, torch.ones(20, 20, dtype=torch.bool))
    assert (module(x) - full).abs().max() > 1e-3


def test_defaults_and_capabilities() -> None:
    spec, sliding = attentions.spec("local"), attentions.spec("local_sliding")
    assert spec.config.window == 50 and spec.config.mode == "block"
    assert spec.caps.complexity == "n" and spec.caps.pads_to_multiple and spec.caps.seq_len_multiple_of == 50
    assert sliding.config.mode == "sliding" and sliding.caps.seq_len_multiple_of == 1
    with pytest.raises(ValueError, match="mode"):
        attentions.build("local", mode="dilated")


def _causal_pattern(cfg, n: int) -> torch.Tensor:
    """[N, N]: the keys causal query i reads. Block mode: its own block of w up to itself and the whole block before
    (lucidrains' local-attention, causal, look_backward=1); sliding mode: i - w .. i."""
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    w = cfg.window
    near = (i - j <= w) if cfg.mode == "sliding" else (j // w >= i // w - 1)
    return near & (j <= i)


def causal_reference(module: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The causal form (tests/attentions/test_causal.py): causal softmax attention over the pattern's keys only."""
    return causal_softmax(module, x, mask, _causal_pattern(module.cfg, x.shape[1]))


def _causal(**overrides: object) -> torch.nn.Module:
    return _build(causal=True, **overrides)


CAUSAL_SETTINGS = [{"window": 4}, {"window": 5}, {"window": 1}, {"window": 4, "mode": "sliding"},
                   {"window": 3, "mode": "sliding"}, {"window": 1, "mode": "sliding"}]


def test_causal_patterns_are_the_papers() -> None:
    """The reference patterns, written out for one query: block w = 4, query 9 reads block 1 (4..7) and 8, 9 of its
    own; sliding w = 4, query 9 reads 5..9."""
    assert _causal_pattern(_causal(window=4).cfg, 16)[9].nonzero().flatten().tolist() == [4, 5, 6, 7, 8, 9]
    assert _causal_pattern(_causal(window=4).cfg, 16)[4].nonzero().flatten().tolist() == [0, 1, 2, 3, 4]
    sliding = _causal(window=4, mode="sliding").cfg
    assert _causal_pattern(sliding, 16)[9].nonzero().flatten().tolist() == [5, 6, 7, 8, 9]


@pytest.mark.parametrize("setting", CAUSAL_SETTINGS)
def test_causal_queries_read_exactly_the_pattern(setting: dict) -> None:
    """Brute force: input j moves output i iff j is in i's causal pattern."""
    module = _causal(**setting)
    assert torch.equal(influence(module, 15), _causal_pattern(module.cfg, 15))


@pytest.mark.parametrize("setting", CAUSAL_SETTINGS)
@pytest.mark.parametrize("n", [20, 23, 3])
def test_causal_matches_the_dense_pattern(setting: dict, n: int) -> None:
    module = _causal(**setting)
    x = torch.randn(2, n, 12, dtype=torch.float64).requires_grad_(True)
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[0, 1] = False
    mask[1, n - 2 :] = False
    assert_matches_reference(module, x, module(x, mask), causal_reference(module, x, mask), mask)


@pytest.mark.parametrize("mode", ["block", "sliding"])
def test_causal_window_covering_the_sequence_is_causal_softmax(mode: str) -> None:
    module = _causal(window=24, mode=mode)
    x = torch.randn(2, 19, 12, dtype=torch.float64)
    torch.testing.assert_close(module(x), causal_softmax(module, x, None))


@pytest.mark.parametrize("setting", CAUSAL_SETTINGS)
@pytest.mark.parametrize("prompt", [0, 1, 6, 13, 22])
def test_prefill_then_steps_equal_the_causal_forward(setting: dict, prompt: int) -> None:
    """Windows far shorter than the sequence, so the ring buffer wraps; padding inside the prompt."""
    module = _causal(**setting)
    x = torch.randn(2, 23, 12, dtype=torch.float64)
    mask = torch.ones(2, 23, dtype=torch.bool)
    mask[1, : min(prompt, 3)] = False
    torch.testing.assert_close(decode(module, x, mask, prompt)[mask], module(x, mask)[mask])


@pytest.mark.parametrize("setting", CAUSAL_SETTINGS)
def test_a_step_reads_only_its_window_from_the_ring(setting: dict) -> None:
    """The ring holds 2w (block) or w + 1 (sliding) positions, and a step reads only its pattern's ones."""
    module = _causal(**setting)
    x = torch.randn(1, 14, 12, dtype=torch.float64)
    with torch.no_grad():
        _, state = module.prefill(x[:, :3], None, capacity=14)
    assert isinstance(state, WindowCache)
    w = setting["window"]
    assert state.window == min(w + 1 if setting.get("mode") == "sliding" else 2 * w, 14)
    pattern = _causal_pattern(module.cfg, 14)
    for i in (0, 3, 7, 9, 13):
        assert step_reads(module, x, i) == set(pattern[i].nonzero().flatten().tolist()), i


def test_causal_capabilities() -> None:
    for name in ("local", "local_sliding"):
        caps = attentions.spec(name).caps
        assert caps.causal and caps.decode and caps.causal_note and caps.decode_note
    assert attentions.spec("local").caps.causal_note != attentions.spec("local_sliding").caps.causal_note
    assert attentions.spec("local_sliding").caps.seq_len_multiple_of == 1
