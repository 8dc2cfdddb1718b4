"""Helpers of ``attentions.base`` that change a layout, not a function: checked against the layout they replace."""

from __future__ import annotations

import pytest
import torch

import attentions
from attentions import base

CPU_VARIANTS = [n for n in attentions.list_attentions() if attentions.spec(n).available("cpu")]


class _CountingAlign(dict):
    """ONES_COLUMNS_ALIGN that counts its lookups, so a test knows whether a variant appends ones columns at all."""

    lookups = 0

    def get(self, key: object, default: object = None) -> object:
        self.lookups += 1
        return super().get(key, default)


@pytest.mark.parametrize("d, align, width", [(64, 8, 72), (63, 8, 64), (5, 1, 6), (64, 1, 65)])
def test_ones_columns_are_v_then_ones_up_to_the_aligned_width(
        monkeypatch: pytest.MonkeyPatch, d: int, align: int, width: int) -> None:
    monkeypatch.setitem(base.ONES_COLUMNS_ALIGN, "cpu", align)
    v = torch.randn(2, 3, d)
    v1 = base.with_ones_columns(v)
    assert v1.shape == (2, 3, width)
    assert torch.equal(v1[..., :d], v) and (v1[..., d:] == 1).all()


@pytest.mark.parametrize("name", [n for n in CPU_VARIANTS if "cpu" in attentions.spec(n).caps.trains_on])
def test_aligned_ones_columns_compute_the_same_function(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The CUDA layout (rows widened to a multiple of 8) run on the CPU in float64: the same output and gradients as
    the plain [V, 1], to float64 rounding (the widened products add exact copies of the normaliser column)."""

    def run() -> list[torch.Tensor]:
        torch.manual_seed(0)
        module = attentions.build(name, dim=32, heads=2, max_seq_len=64).double().eval()
        x = torch.randn(2, 64, 32, dtype=torch.float64, requires_grad=True)
        mask = torch.ones(2, 64, dtype=torch.bool)
        mask[1, 40:] = False
        torch.manual_seed(1)  # variants that draw per call see the same draws
        y = module(x, mask)
        y.square().sum().backward()
        return [y.detach(), x.grad] + [p.grad for p in module.parameters() if p.grad is not None]

    counting = _CountingAlign(cpu=8)
    monkeypatch.setattr(base, "ONES_COLUMNS_ALIGN", counting)
    aligned = run()
    if not counting.lookups:
        return  # this variant appends no ones columns
    monkeypatch.setattr(base, "ONES_COLUMNS_ALIGN", {})
    plain = run()
    for got, want in zip(aligned, plain, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12 * float(want.abs().max()))
