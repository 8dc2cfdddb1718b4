"""Synthesizer against its equations written out per head (Tay et al. 2021, §3.1-3.2):
Dense  Y_h = softmax(B_h) V_h, B_h,i = (W_2 ReLU(W_1,h X_i + b_1,h) + b_2)[:n] for each token i;
Random Y_h = softmax(R_h[:n, :n]) V_h; padded keys get weight 0; the causal form masks B_h to j <= i."""

from __future__ import annotations

import pytest
import torch

import attentions
from attentions.synthesizer import SynthesizerAttention
from tests.attentions.reference import assert_matches_reference

CFG = {"dim": 16, "heads": 2, "max_seq_len": 24, "dropout": 0.0}
MODES = [{"mode": "dense"}, {"mode": "random"}, {"mode": "random", "trainable_random": False}]


def _build(seed: int = 0, **overrides: object) -> SynthesizerAttention:
    torch.manual_seed(seed)
    return attentions.build("synthesizer", **{**CFG, **overrides}).double().eval()  # type: ignore[return-value]


def _reference(module: SynthesizerAttention, x: torch.Tensor, mask: torch.Tensor | None = None, *,
               causal: bool = False) -> torch.Tensor:
    """One head at a time; Dense computes all max_seq_len logits of every token and keeps the first n; ``causal``
    drops the logits j > i. Dropped logits get the dtype's most negative finite value rather than −inf, so that a
    padded query with no real key at or before it (causal) stays finite, as in the module."""
    b, n, d = x.shape
    h = module.cfg.heads
    dh = d // h
    heads = []
    for i in range(h):
        r = slice(i * dh, (i + 1) * dh)
        v = x @ module.value.weight[r].T + module.value.bias[r]  # [B, N, dh]
        if module.cfg.mode == "dense":
            hidden = torch.relu(x @ module.dense1.weight[r].T + module.dense1.bias[r])  # [B, N, dh]
            logits = (hidden @ module.dense2.weight.T + module.dense2.bias)[..., :n]  # [B, N, max_seq_len] -> n
        else:
            logits = module.random[i, :n, :n].expand(b, n, n)
        dropped = torch.finfo(x.dtype).min
        if mask is not None:
            logits = logits.masked_fill(~mask[:, None, :], dropped)
        if causal:
            logits = logits.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), dropped)
        heads.append(logits.softmax(-1) @ v)
    return torch.cat(heads, -1) @ module.out.weight.T + module.out.bias


@pytest.mark.parametrize("n", [24, 17])
@pytest.mark.parametrize("mode", MODES)
def test_matches_reference_forward_and_backward(mode: dict, n: int) -> None:
    module = _build(**mode)
    x = torch.randn(3, n, 16, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(3, n, dtype=torch.bool)
    mask[1, 10:] = False
    mask[2, ::3] = False  # padding need not be a suffix
    g = torch.randn(3, n, 16, dtype=torch.float64) * mask[..., None]  # a loss over real positions only
    for m in (None, mask):
        real = torch.ones_like(mask) if m is None else m
        grads = assert_matches_reference(module, x, module(x, m), _reference(module, x, m), real, g)
        assert torch.count_nonzero(grads[0][~real]) == 0


@pytest.mark.parametrize("mode", MODES)
def test_padding_gets_no_weight(mode: dict) -> None:
    """The reference can fail: attending to padded keys (no mask) changes the real outputs."""
    module = _build(**mode)
    x = torch.randn(1, 24, 16, dtype=torch.float64)
    mask = torch.ones(1, 24, dtype=torch.bool)
    mask[0, 15:] = False
    y = module(x, mask)[0, :15]
    torch.testing.assert_close(y, module(x[:, :15])[0])
    assert not torch.allclose(y, _reference(module, x)[0, :15], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", MODES)
def test_only_the_leading_block_is_read(mode: dict) -> None:
    module = _build(**mode)
    x = torch.randn(2, 15, 16, dtype=torch.float64)
    y = module(x)
    with torch.no_grad():
        if module.cfg.mode == "dense":
            module.dense2.weight[15:] = 1e3 * torch.randn_like(module.dense2.weight[15:])
            module.dense2.bias[15:] = 1e3
        else:
            module.random[:, 15:] = 1e3
            module.random[:, :, 15:] = 1e3
    torch.testing.assert_close(module(x), y)


def test_random_matrix_is_learned_or_fixed_and_initialised() -> None:
    learned, fixed = _build(mode="random"), _build(mode="random", trainable_random=False)
    assert isinstance(learned.random, torch.nn.Parameter)
    assert "random" in dict(fixed.named_buffers()) and "random" not in dict(fixed.named_parameters())
    assert "random" in fixed.state_dict()
    assert learned.random.shape == (2, 24, 24)
    std = float(_build(mode="random", max_seq_len=256).random.detach().std())
    assert std == pytest.approx((2 * 256) ** -0.5, rel=0.05)  # N(0, 1/(H·max_seq_len))
    learned(torch.randn(1, 10, 16, dtype=torch.float64)).sum().backward()
    assert learned.random.grad is not None and torch.count_nonzero(learned.random.grad[:, 10:]) == 0


def test_fully_padded_row_is_finite_and_longer_input_is_an_error() -> None:
    module = _build().train()
    x = torch.randn(2, 20, 16, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(2, 20, dtype=torch.bool)
    mask[1] = False
    module(x, mask).sum().backward()
    assert torch.isfinite(x.grad).all()
    with pytest.raises(ValueError, match="max_seq_len"):
        module(torch.randn(1, 25, 16, dtype=torch.float64))


def test_dropout_on_the_weights_in_training_only() -> None:
    module = _build(dropout=0.5)
    x = torch.randn(1, 20, 16, dtype=torch.float64)
    eval_out = module(x)
    torch.testing.assert_close(module(x), eval_out, rtol=0, atol=0)
    assert not torch.allclose(module.train()(x), eval_out)


def test_presets_capabilities_and_validation() -> None:
    assert attentions.spec("synthesizer").config.mode == "dense"
    assert attentions.spec("synthesizer_random").config.mode == "random"
    assert attentions.spec("synthesizer_random").config.trainable_random
    for name in ("synthesizer", "synthesizer_random"):
        caps = attentions.spec(name).caps
        assert caps.complexity == "n^2" and caps.needs_fixed_length and caps.supports_mask and not caps.exact
    with pytest.raises(ValueError, match="mode"):
        attentions.build("synthesizer", mode="factorized")


def causal_reference(module: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The causal form (tests/attentions/test_causal.py): each head's synthesised logits masked to j <= i, written
    out per head."""
    return _reference(module, x, mask, causal=True)  # type: ignore[arg-type]


def _mask(n: int) -> torch.Tensor:
    mask = torch.ones(3, n, dtype=torch.bool)
    mask[1, 10:] = False
    mask[2, ::3] = False  # the first token padded: a padded query with no real key before it
    return mask


@pytest.mark.parametrize("mode", MODES)
def test_causal_form_matches_its_reference_in_every_mode(mode: dict) -> None:
    """test_causal.py checks the registered names; this covers the fixed random matrix too, and n < max_seq_len."""
    module = _build(causal=True, **mode)
    x = torch.randn(3, 17, 16, dtype=torch.float64, requires_grad=True)
    mask = _mask(17)
    g = torch.randn(3, 17, 16, dtype=torch.float64) * mask[..., None]
    for m in (None, mask):
        real = torch.ones_like(mask) if m is None else m
        assert_matches_reference(module, x, module(x, m), _reference(module, x, m, causal=True), real, g)


@pytest.mark.parametrize("mode", MODES)
def test_a_token_reads_only_itself_and_earlier_tokens(mode: dict) -> None:
    """Only the entries j > i of the synthesised logits are dropped: the first token's output is its own value, and
    raising R's entries above the diagonal changes nothing."""
    module = _build(causal=True, **mode)
    x = torch.randn(2, 12, 16, dtype=torch.float64)
    y = module(x)
    own = module.out(module.value(x[:, :1]))  # [B, 1, D]: softmax over one key is 1
    torch.testing.assert_close(y[:, :1], own)
    if module.cfg.mode == "random":
        with torch.no_grad():
            module.random[:, :12, :12] += 1e3 * torch.ones(12, 12, dtype=torch.float64).triu(1)  # entries j > i
        torch.testing.assert_close(module(x), y)


@pytest.mark.parametrize("mode", [{"mode": "dense"}, {"mode": "random"}])
def test_decoding_reads_the_new_tokens_row_with_a_value_cache(mode: dict) -> None:
    """A step's state is the values (keys of width 0); prefill + steps equal the causal forward past a padded
    prompt, and a capacity above max_seq_len is refused."""
    module = _build(causal=True, **mode)
    x = torch.randn(2, 20, 16, dtype=torch.float64)
    mask = torch.ones(2, 20, dtype=torch.bool)
    mask[1, :3] = False
    with torch.no_grad():
        y = module(x, mask)
        out, cache = module.prefill(x[:, :6], mask[:, :6], capacity=20)
        assert cache.k.shape == (2, 2, 20, 0) and cache.v.shape == (2, 2, 20, 8)
        pieces = [out] + [module.step(x[:, t : t + 1], cache)[0] for t in range(6, 20)]
    torch.testing.assert_close(torch.cat(pieces, dim=1)[mask], y[mask])
    with pytest.raises(ValueError, match="max_seq_len"):
        module.prefill(x[:, :6], None, capacity=25)
