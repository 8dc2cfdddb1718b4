"""Causal forms and decoding, registry-wide, in float64: no leakage (outputs and gradients at or before t do not move
when the inputs after t do), each causal variant equals its own quadratic masked form (tests/attentions/
causal_reference.py), and prefill + one step per token equals the causal forward, at several prompt lengths, with
padding in the prompt.

Bounds: float64, first-order, from the reduction lengths the layer runs (the projections' D, the attention's N):
λ·u·√(N·D)·(|reference| + its largest magnitude), as tests/tolerance.py's reduction bound; an error of the size a
wrong mask or a dropped token makes is orders of magnitude above it.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

import attentions
from tests.attentions.causal_reference import reference_of
from tests.attentions.test_vanilla import causal_reference as vanilla_reference
from tests.tolerance import LAMBDA, unit_roundoff

DIM, HEADS, N = 16, 2, 40
CAUSAL = [n for n in attentions.list_attentions() if attentions.spec(n).caps.causal
          and attentions.spec(n).available("cpu")]
DECODING = [n for n in CAUSAL if attentions.spec(n).caps.decode]
#: The causal forms with a backward pass on the CPU (FlexAttention's is CUDA only: ``Capabilities.trains_on``).
CAUSAL_TRAINABLE = [n for n in CAUSAL if "cpu" in attentions.spec(n).caps.trains_on]
NOT_CAUSAL = [n for n in attentions.list_attentions() if not attentions.spec(n).caps.causal]


def _build(name: str, **overrides: object) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = {"dim": DIM, "heads": HEADS, "max_seq_len": N, "dropout": 0.0, "causal": True, **overrides}
    return attentions.build(name, **cfg).double().eval()


def _input(seed: int = 1) -> tuple[Tensor, Tensor]:
    """x [2, N, D] float64 and a padding mask: the second row's first 5 tokens and two more are padding."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, N, DIM, generator=g, dtype=torch.float64)
    mask = torch.ones(2, N, dtype=torch.bool)
    mask[1, :5] = False
    mask[1, 11] = mask[1, 17] = False
    return x, mask


def _bound(reference: Tensor) -> Tensor:
    """λ·u·√(N·D)·(|reference| + max|reference|), elementwise (see the module docstring)."""
    scale = reference.abs() + reference.abs().max()
    return LAMBDA * unit_roundoff(torch.float64) * math.sqrt(N * DIM) * scale


def _assert_close(got: Tensor, want: Tensor, what: str) -> None:
    err = (got - want).abs()
    bound = _bound(want)
    assert bool((err <= bound).all()), f"{what}: error {float(err.max()):.3e} above its bound {float(bound.max()):.3e}"


@pytest.mark.parametrize("name", NOT_CAUSAL)
def test_a_variant_without_a_causal_form_says_why_and_refuses_it(name: str) -> None:
    spec = attentions.spec(name)
    assert spec.caps.causal_note and not spec.caps.decode
    assert spec.cannot_run(64, padded=False, causal=True) == f"{name} has no causal form: {spec.caps.causal_note}"
    with pytest.raises(attentions.NoCausalFormError, match="has no causal form"):
        attentions.make_config(name, causal=True)


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
@pytest.mark.parametrize("name", CAUSAL_TRAINABLE)
def test_no_output_or_gradient_depends_on_a_later_input(name: str, padded: bool) -> None:
    module = _build(name)
    x, mask = _input()
    mask = mask if padded else None
    y = module(x, mask)
    for t in (0, 9, N - 2):
        later = x.clone()
        later[:, t + 1:] += torch.randn_like(later[:, t + 1:])
        moved = module(later, mask)
        rows = torch.zeros(2, N, dtype=torch.bool)
        rows[:, : t + 1] = True
        if mask is not None:
            rows &= mask  # a padded position's output is unspecified
        _assert_close(moved[rows], y[rows], f"{name}: outputs at or before {t} after changing inputs after it")
        xg = x.clone().requires_grad_(True)
        loss = (module(xg, mask)[rows] * torch.randn(int(rows.sum()), DIM, dtype=torch.float64)).sum()
        (grad,) = torch.autograd.grad(loss, [xg])
        assert bool((grad[:, t + 1:] == 0).all()), f"{name}: a gradient reaches an input after {t}"


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
@pytest.mark.parametrize("name", CAUSAL_TRAINABLE)
def test_the_causal_form_is_its_quadratic_masked_form(name: str, padded: bool) -> None:
    family = attentions.spec(name).family
    reference = reference_of(family)
    assert reference is not None, f"{name}: tests/attentions/test_{family}.py defines no causal_reference"
    module = _build(name)
    x, mask = _input()
    mask = mask if padded else None
    xg = x.clone().requires_grad_(True)
    y, ref = module(xg, mask), reference(module, xg, mask)
    rows = torch.ones(2, N, dtype=torch.bool) if mask is None else mask
    _assert_close(y[rows], ref[rows], f"{name}: causal form against its quadratic masked form")
    weight = torch.randn(int(rows.sum()), DIM, dtype=torch.float64)
    got = torch.autograd.grad((y[rows] * weight).sum(), [xg, *module.parameters()], allow_unused=True)
    want = torch.autograd.grad((ref[rows] * weight).sum(), [xg, *module.parameters()], allow_unused=True)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        if a is None or b is None:
            assert a is None or not a.any(), f"{name}: gradient {i} only on one side"
            continue
        _assert_close(a, b, f"{name}: gradient {i} against the quadratic form's")


@pytest.mark.parametrize("prompt", [0, 1, 13, N - 1])
@pytest.mark.parametrize("name", DECODING)
def test_prefill_then_steps_equal_the_causal_forward(name: str, prompt: int) -> None:
    """Prompt padding only (the tokens a step adds are real): the second row's padding lies in its first 18 tokens,
    so it is in the prompt from a prompt of 18 on and the mask is cut to real tokens after the prompt otherwise."""
    module = _build(name)
    x, mask = _input()
    mask[:, prompt:] = True  # every token after the prompt is real
    with torch.no_grad():
        y = module(x, mask)
        out, state = module.prefill(x[:, :prompt], mask[:, :prompt], capacity=N)
        pieces = [out]
        for t in range(prompt, N):
            y_t, state = module.step(x[:, t : t + 1], state)
            pieces.append(y_t)
    got = torch.cat(pieces, dim=1)
    assert got.shape == y.shape
    _assert_close(got[mask], y[mask], f"{name}: prefill of {prompt} + steps against the causal forward")


@pytest.mark.parametrize("name", DECODING)
def test_a_steps_state_is_allocated_once(name: str) -> None:
    """The state is sized for the whole capacity at prefill: a step writes into it, its bytes do not grow."""
    module = _build(name)
    x, _ = _input()
    with torch.no_grad():
        _, state = module.prefill(x[:, :4], None, capacity=N)
        before = attentions.state_bytes(state)
        for t in range(4, 10):
            _, state = module.step(x[:, t : t + 1], state)
    mixes = attentions.spec(name).caps.mixes_tokens  # the no-mixing control keeps nothing: its state is empty
    assert (before > 0) == mixes and attentions.state_bytes(state) == before


def test_grouped_query_attention_shares_each_key_head_among_its_queries() -> None:
    module = _build("vanilla", heads=4, kv_heads=2)
    assert module.proj.qkv.weight.shape == (DIM + 2 * DIM // 2, DIM)  # [Q; K; V] with half the key/value heads
    with pytest.raises(ValueError, match="kv_heads=3 must divide heads=4"):
        attentions.make_config("vanilla", heads=4, kv_heads=3)
    x, mask = _input()
    _assert_close(module(x, mask)[mask], vanilla_reference(module, x, mask)[mask], "GQA against its reference")
