"""Every variant on CUDA computes what it computes on the CPU (skipped where torch sees no GPU).

Parametrised over the registry. With the same weights and input in float64 (TF32 off), the CUDA forward and every
gradient must match the CPU's to float64 rounding; variants that draw randomness on each call (LSH rotations,
random blocks) draw it from the device's own generator, so for them the test checks instead what must hold on any
device: finite outputs and gradients, determinism under a seed, and padding that never leaks. A variant the registry
says is unavailable on CUDA here (e.g. its optional package is missing) is skipped with the registry's reason. The bf16
autocast forward is checked on both devices in test_autocast.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import attentions
from tests.attentions.reference import SMALL_LAYER, SMALL_REAL, small_padded_input

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CUDA_VARIANTS = [n for n in attentions.list_attentions() if "cuda" in attentions.spec(n).caps.devices]


@pytest.fixture(autouse=True)
def _exact_matmuls() -> Iterator[None]:
    """TF32 off: the comparison is against float64 CPU arithmetic, not against TensorFloat-32's 10-bit mantissa."""
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _pair(name: str, dtype: torch.dtype) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The same layer (same weights and buffers) on the CPU and on CUDA, in eval mode."""
    torch.manual_seed(0)
    cpu = attentions.build(name, **SMALL_LAYER).to(dtype).eval()
    torch.manual_seed(0)
    gpu = attentions.build(name, **SMALL_LAYER).to(dtype).eval()
    gpu.load_state_dict(cpu.state_dict())
    return cpu, gpu.cuda()


def _run(module: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor, seed: int = 123) -> tuple[torch.Tensor, ...]:
    """Output, input gradient and parameter gradients (in parameter order) of one forward+backward."""
    module.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    x = x.clone().requires_grad_(True)
    y = module(x, mask)
    (y * mask[..., None]).square().sum().backward()
    grads = tuple(p.grad if p.grad is not None else torch.zeros_like(p) for p in module.parameters())
    return (y.detach(), x.grad, *grads)


def _draws_per_call(module: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor) -> bool:
    """True when the forward depends on torch's RNG state (so CPU and CUDA generators give different draws)."""
    with torch.no_grad():
        torch.manual_seed(1)
        a = module(x, mask)
        torch.manual_seed(2)
        b = module(x, mask)
    return not torch.equal(a, b)


@pytest.mark.parametrize("name", CUDA_VARIANTS)
def test_cuda_matches_cpu(name: str) -> None:
    reason = attentions.spec(name).unavailable_reason("cuda")
    if reason is not None:
        pytest.skip(reason)
    cpu, gpu = _pair(name, torch.float64)
    x, mask = small_padded_input(torch.float64)
    if _draws_per_call(cpu, x, mask):
        a, b = _run(gpu, x.cuda(), mask.cuda()), _run(gpu, x.cuda(), mask.cuda())
        for u, v in zip(a, b, strict=True):  # deterministic under a seed on the device
            torch.testing.assert_close(u, v, rtol=1e-10, atol=1e-10)
        noisy = x.clone()
        noisy[1, SMALL_REAL:] = 100.0
        c = _run(gpu, noisy.cuda(), mask.cuda())
        real = slice(None, SMALL_REAL)
        torch.testing.assert_close(c[0][:, real], a[0][:, real], rtol=1e-8, atol=1e-8)  # padding never leaks
        assert all(torch.isfinite(t).all() for t in a)
        return
    want = _run(cpu, x, mask)
    got = _run(gpu, x.cuda(), mask.cuda())
    names = ["output", "input grad", *(n for n, _ in cpu.named_parameters())]
    for label, u, v in zip(names, want, got, strict=True):
        torch.testing.assert_close(v.cpu(), u, rtol=1e-7, atol=1e-9, msg=lambda m, label=label: f"{label}: {m}")

