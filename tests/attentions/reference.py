"""Shared pieces of the attention tests: the module's own Q/K/V written out from its weights, a dense masked
softmax reference, padding masks and noise, and the forward + gradient comparison of a module with a reference.

Not a test module (no ``test_`` prefix); the test files import it as ``tests.attentions.reference``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor


def projected_qkv(module: torch.nn.Module, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Q, K, V = X W + b with the module's fused projection ``module.proj.qkv``: 3 x [B, N, D] (heads merged)."""
    qkv = module.proj.qkv  # type: ignore[union-attr]
    q, k, v = (x @ qkv.weight.T + qkv.bias).chunk(3, dim=-1)
    return q, k, v


def split_heads(t: Tensor, heads: int) -> Tensor:
    """[B, N, H·dh] -> [B, H, N, dh], written out (not ``attentions.base.split_heads``)."""
    b, n, d = t.shape
    return t.reshape(b, n, heads, d // heads).transpose(1, 2)


def merge_heads(t: Tensor) -> Tensor:
    """[B, H, N, dh] -> [B, N, H·dh]."""
    b, h, n, dh = t.shape
    return t.transpose(1, 2).reshape(b, n, h * dh)


def module_qkv(module: torch.nn.Module, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Q, K, V = X W + b with the module's own weights, split into ``module.cfg.heads`` heads: [B, H, N, dh] each."""
    h = module.cfg.heads  # type: ignore[union-attr]
    q, k, v = projected_qkv(module, x)
    return split_heads(q, h), split_heads(k, h), split_heads(v, h)


def masked_softmax_attention(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor) -> Tensor:
    """softmax(q kᵀ/√d) v over the allowed keys only, as an explicit dense matrix: [B, H, N, dh].

    q, k, v: [B, H, N, dh]; allowed: bool, broadcastable to [B, H, N, N]. Disallowed keys get the dtype's most
    negative finite score (the modules' rule), so a row with no allowed key gets uniform weights.
    """
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5  # [B, H, N, N]
    scores = scores.masked_fill(~allowed, torch.finfo(q.dtype).min)
    return scores.softmax(-1) @ v


#: A small layer every variant builds, for the tests that run the whole registry on a device (CUDA, autocast).
SMALL_LAYER = {"dim": 32, "heads": 2, "max_seq_len": 128}
#: Their input's length, and where its second row's padding starts.
SMALL_N, SMALL_REAL = 128, 96


def small_padded_input(dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
    """x [2, SMALL_N, dim] (seeded, on the CPU) and its key mask [2, SMALL_N]: row 1 padded from SMALL_REAL on."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, SMALL_N, SMALL_LAYER["dim"], generator=g, dtype=dtype)
    mask = torch.ones(2, SMALL_N, dtype=torch.bool)
    mask[1, SMALL_REAL:] = False
    return x, mask


def two_row_mask(n: int, suffix_from: int, every: int) -> Tensor:
    """[2, n] key-padding mask (True = real): row 0 padded from ``suffix_from`` on, row 1 at every ``every``-th
    position (0, every, 2·every, ...): a suffix and a scattered padding."""
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[0, suffix_from:] = False
    mask[1, ::every] = False
    return mask


def noisy_padding(x: Tensor, mask: Tensor, scale: float = 1e3) -> Tensor:
    """x with its padded positions replaced by ``scale`` · N(0, 1) noise (drawn from torch's global RNG)."""
    return torch.where(mask[..., None], x, scale * torch.randn_like(x))


def seeded_weight(out: Tensor, rows: Tensor | None = None, seed: int = 5) -> Tensor:
    """A fixed random loss weight shaped like ``out`` [B, N, D] (generator ``seed``), zero on rows not in ``rows``."""
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(out.shape, generator=g, dtype=out.dtype)
    return weight if rows is None else weight * rows[..., None]


def grads(out: Tensor, weight: Tensor, inputs: Sequence[Tensor], allow_unused: bool = False) -> list[Tensor]:
    """Gradients of Σ out·weight w.r.t. ``inputs``; with ``allow_unused``, an input ``out`` does not reach gets a
    0-dim zero (compare it with another 0-dim zero)."""
    got = torch.autograd.grad((out * weight).sum(), list(inputs), allow_unused=allow_unused)
    return [torch.zeros(()) if g is None else g for g in got]


def assert_matches_reference(
    module: torch.nn.Module,
    x: Tensor,
    out: Tensor,
    ref: Tensor,
    rows: Tensor | None = None,
    weight: Tensor | None = None,
    *,
    allow_unused: bool = False,
) -> list[Tensor]:
    """Assert that ``out`` = module(x) and ``ref`` agree forward (on ``rows``, [B, N] bool; None = everywhere) and
    backward: the gradients of Σ out·weight and Σ ref·weight w.r.t. x and every parameter of the module.

    ``weight`` defaults to ``seeded_weight(out, rows)``, a loss over the compared rows only. Returns the module
    side's gradients (x first, then the parameters) for further checks.
    """
    if rows is None:
        torch.testing.assert_close(out, ref)
    else:
        torch.testing.assert_close(out[rows], ref[rows])
    if weight is None:
        weight = seeded_weight(out, rows)
    inputs = [x, *module.parameters()]
    got = grads(out, weight, inputs, allow_unused)
    for a, b in zip(got, grads(ref, weight, inputs, allow_unused), strict=True):
        torch.testing.assert_close(a, b)
    return got


def assert_padded_row_outputs_bias(module: torch.nn.Module, x: Tensor, y: Tensor, row: int) -> None:
    """Batch row ``row`` has no real key: its attention output is 0, so y = module(x, mask) [B, N, D] is the output
    projection's bias there, and no gradient reaches that row's inputs (x requires grad); all gradients finite."""
    torch.testing.assert_close(y[row], module.out.bias.expand(y.shape[1], -1))  # type: ignore[union-attr]
    (gx,) = torch.autograd.grad(y.sum(), [x])
    assert torch.isfinite(gx).all() and torch.count_nonzero(gx[row]) == 0


def assert_dropout_unused(module: torch.nn.Module, x: Tensor) -> None:
    """Training and evaluation mode give bit-identical outputs (the variant has no attention matrix to drop from)."""
    torch.testing.assert_close(module.train()(x), module.eval()(x), rtol=0, atol=0)


def _native_cpu_capability() -> str:
    """The capability ATen picks on this CPU when nothing forces one: "AVX512", "AVX2" or "DEFAULT" (from the CPU
    flags: once ``ATEN_CPU_CAPABILITY`` is set, ``torch.backends.cpu.get_cpu_capability()`` reports the forced one)."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return torch.backends.cpu.get_cpu_capability()
    return "AVX512" if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags else "AVX2" if "avx2" in flags else (
        "DEFAULT")


#: Why Inductor's CPU code cannot be tested here, or None. With ``ATEN_CPU_CAPABILITY`` forcing kernels below the
#: CPU's own, torch 2.13's Inductor still generates code for the CPU it finds: under ``default`` that code fails to
#: compile (``at::vec`` undeclared), under ``avx2`` on an AVX-512 CPU the compiled S3Attention layer aborted the
#: process. The forced capability tests ATen's kernels; Inductor is tested at the CPU's own.
INDUCTOR_CPU_SKIP = (
    f"ATEN_CPU_CAPABILITY={os.environ['ATEN_CPU_CAPABILITY']} forces kernels below this CPU's "
    f"{_native_cpu_capability()}, which torch's Inductor does not follow (it compiles for the CPU it finds)"
    if os.environ.get("ATEN_CPU_CAPABILITY", "").upper() not in ("", _native_cpu_capability()) else None
)
