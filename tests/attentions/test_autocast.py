"""Every variant's forward under bf16 autocast stays finite and close to its float32 forward.

Parametrised over the registry and over the devices: the CPU always (``torch.autocast("cpu")``, so CI without a GPU
catches a variant that breaks under autocast), CUDA where torch sees a GPU. Autocast runs matmuls, linear layers and
SDPA in bf16 and leaves other ops in their inputs' dtype, so a variant mixes the two: a fill value taken from the
wrong tensor's dtype overflows, an FFT meets a bf16 matmul output, or a discrete choice flips with bf16 rounding.
A variant that cannot run on a device, or whose optional package is missing, is skipped with the registry's reason.
"""

from __future__ import annotations

import pytest
import torch

import attentions
from tests.attentions.reference import SMALL_LAYER, small_padded_input

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                reason="needs a CUDA device"))]
#: Largest relative error of the bf16 forward on the real positions (bf16 keeps 8 significant bits: about 4e-3 per
#: rounding, a few roundings deep).
TOLERANCE = 0.05


def _layer_and_input(name: str, device: str, train: bool) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """The float32 layer on ``device`` (skipped where the registry says it cannot run) and
    :func:`small_padded_input` there."""
    reason = attentions.spec(name).unavailable_reason(device)
    if reason is not None:
        pytest.skip(reason)
    torch.manual_seed(0)
    module = attentions.build(name, **SMALL_LAYER).train(train).to(device)
    x, mask = small_padded_input()
    return module, x.to(device), mask.to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", attentions.list_attentions())
def test_bf16_autocast_forward_stays_close(name: str, device: str) -> None:
    """Under bf16 autocast the output is finite and within bf16's precision of the float32 output."""
    module, x, mask = _layer_and_input(name, device, train=False)
    with torch.no_grad():
        torch.manual_seed(5)  # variants that draw randomness per call see the same draws in both forwards
        ref = module(x, mask)
        torch.manual_seed(5)
        with torch.autocast(device, dtype=torch.bfloat16):
            low = module(x, mask)
    assert torch.isfinite(low).all()
    real = mask[..., None].expand_as(ref)
    err = (low.float() - ref)[real].norm() / ref[real].norm().clamp_min(1e-12)
    assert err < TOLERANCE, f"relative error {err:.3g} of the bf16 forward"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", attentions.list_attentions())
def test_bf16_autocast_backward_runs_in_train_mode(name: str, device: str) -> None:
    """A training step under bf16 autocast (forward inside, backward after, as torch's AMP recipe does) runs: the
    input gradient and every parameter gradient the step produces are finite and in their tensor's dtype."""
    module, x, mask = _layer_and_input(name, device, train=True)
    x.requires_grad_(True)
    with torch.autocast(device, dtype=torch.bfloat16):
        y = module(x, mask)
    (y.float() * mask[..., None]).square().mean().backward()
    assert x.grad is not None and x.grad.dtype == x.dtype and torch.isfinite(x.grad).all()
    for pname, p in module.named_parameters():
        if p.grad is not None:
            assert p.grad.dtype == p.dtype, pname
            assert torch.isfinite(p.grad).all(), pname
