"""Every variant's forward under bf16 autocast stays finite and close to its float32 forward.

Parametrised over the registry and over the devices: the CPU always (``torch.autocast("cpu")``, so CI without a GPU
catches a variant that breaks under autocast), CUDA where torch sees a GPU. Autocast runs matmuls, linear layers and
SDPA in bf16 and leaves other ops in their inputs' dtype, so a variant mixes the two: a fill value taken from the
wrong tensor's dtype overflows, an FFT meets a bf16 matmul output, or a discrete choice flips with bf16 rounding.
A variant that cannot run on a device, or whose optional package is missing, is skipped with the registry's reason.
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator

import pytest
import torch

import attentions
from tests.attentions.reference import SMALL_LAYER, small_padded_input
from tests.tolerance import ErrorTrace, Precision, assert_within_norm

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                reason="needs a CUDA device"))]


@contextlib.contextmanager
def _bf16_kernels_exist() -> Iterator[None]:
    """Skip (with torch's reason) where torch has no bf16 kernel for an op under a forced ``ATEN_CPU_CAPABILITY``:
    torch 2.13's CPU flash attention picks AMX/VNNI packing from the CPU it finds, then refuses it under the forced
    capability ("pack_vnni2 is only supported when avx512 is supported"). Nothing else is caught."""
    try:
        yield
    except RuntimeError as exc:
        if "pack_vnni2" in str(exc) and os.environ.get("ATEN_CPU_CAPABILITY"):
            pytest.skip(f"torch has no bf16 kernel here under ATEN_CPU_CAPABILITY="
                        f"{os.environ['ATEN_CPU_CAPABILITY']}: {exc}")
        raise


def _layer_and_input(name: str, device: str, train: bool) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """The float32 layer on ``device`` (skipped where the registry says it cannot run) and
    :func:`small_padded_input` there."""
    reason = attentions.spec(name).unavailable_reason(device)
    if reason is None and train and device not in attentions.spec(name).caps.trains_on:
        reason = f"{name} has no backward on {device} (Capabilities.trains_on)"
    if reason is not None:
        pytest.skip(reason)
    torch.manual_seed(0)
    module = attentions.build(name, **SMALL_LAYER).train(train).to(device)
    x, mask = small_padded_input()
    return module, x.to(device), mask.to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", attentions.list_attentions())
def test_bf16_autocast_forward_stays_close(name: str, device: str) -> None:
    """Under bf16 autocast the output is finite and, on the real positions, within the bf16 rounding bound traced
    through the layer's float64 forward (tests/tolerance.py: every op charged as bf16 storage with float32
    accumulation), in norm: several variants make discrete choices (hash buckets, top-k queries) on rounded values,
    which flip an element here and another in the shadow runs."""
    module, x, mask = _layer_and_input(name, device, train=False)
    truth_module = copy.deepcopy(module)
    if attentions.spec(name).backend == "flex":  # FlexAttention is a higher-order op the error trace has no rule
        # for: the truth is its blocks twin, the same function (tests/attentions/test_flex.py), with its weights
        truth_module = attentions.build(name, **SMALL_LAYER, backend="blocks").to(device)
        truth_module.load_state_dict(module.state_dict())
    truth_module = truth_module.double()
    with torch.no_grad():
        torch.manual_seed(5)  # variants that draw randomness per call see the same draws in both forwards
        with torch.autocast(device, dtype=torch.bfloat16), _bf16_kernels_exist():
            low = module(x, mask)
        torch.manual_seed(5)
        with ErrorTrace(Precision.autocast(torch.bfloat16)) as trace:
            truth = truth_module(x.double(), mask)
    assert torch.isfinite(low).all()
    real = mask[..., None].expand_as(truth)
    assert_within_norm(low[real], truth[real], trace.bound(truth)[real], f"{name} bf16 forward")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", attentions.list_attentions())
def test_bf16_autocast_backward_runs_in_train_mode(name: str, device: str) -> None:
    """A training step under bf16 autocast (forward inside, backward after, as torch's AMP recipe does) runs: the
    input gradient and every parameter gradient the step produces are finite and in their tensor's dtype."""
    module, x, mask = _layer_and_input(name, device, train=True)
    x.requires_grad_(True)
    with _bf16_kernels_exist():
        with torch.autocast(device, dtype=torch.bfloat16):
            y = module(x, mask)
        (y.float() * mask[..., None]).square().mean().backward()
    assert x.grad is not None and x.grad.dtype == x.dtype and torch.isfinite(x.grad).all()
    for pname, p in module.named_parameters():
        if p.grad is not None:
            assert p.grad.dtype == p.dtype, pname
            assert torch.isfinite(p.grad).all(), pname
