"""FLOP counts of one call, and the achieved GEMM throughput of a device.

FLOPs are counted with ``torch.utils.flop_counter.FlopCounterMode``, which knows matmuls,
convolutions and the CUDA attention kernels, but counts 0 for the fused CPU attention kernel and
for FFTs. Formulas for those are registered here.

FFT convention (the FFTW benchmark one): a complex FFT of length N costs 5·N·log2(N) real FLOPs,
a real-input (r2c) or real-output (c2r) FFT half of that, 2.5·N·log2(N). For a transform over
several axes N is the product of the transformed sizes. This is a nominal count (the radix-2
Cooley-Tukey count), not what a given library executes, which is why it is the usual yardstick.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from harness.timing import time_fn


def count_flops(fn: Callable[[], object]) -> int:
    """Returns the FLOPs of one call of ``fn`` (a multiply-add counts as 2).

    Counts every op the call dispatches, including a backward pass if ``fn`` runs one. Like
    PyTorch's own formulas for SDPA, attention is counted dense: a causal mask does not halve it.

    Args:
        fn: The call to count; takes no arguments. It is run exactly once.

    Returns:
        Total FLOPs.
    """
    with FlopCounterMode(display=False, custom_mapping=_CUSTOM_FLOP_FORMULAS) as counter:
        fn()
    return int(counter.get_total_flops())


def measure_gemm_peak_gflops(
    device: torch.device, dtype: torch.dtype = torch.float32, size: int = 2048
) -> float:
    """Returns the achieved GFLOP/s of a square ``size`` x ``size`` matmul on ``device``.

    This is the practical peak that achieved attention FLOP/s are reported against. It runs under
    the process's current matmul precision settings (e.g. TF32 on CUDA), as the attention calls do.

    Args:
        device: Device to measure.
        dtype: Element type of the operands.
        size: Side of the square matrices; the product costs 2·size³ FLOPs.

    Returns:
        GFLOP/s from the median call time.
    """
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    # Write into a preallocated output so that allocation is not part of the GEMM time.
    out = torch.empty(size, size, device=device, dtype=dtype)
    timing = time_fn(lambda: torch.mm(a, b, out=out), device, min_run_time_s=0.5)
    return 2 * size**3 / (timing.median_ms * 1e-3) / 1e9


def _fft_flops(n: int, n_signals: int, per_point: float) -> int:
    """``per_point``·N·log2(N) FLOPs for each of ``n_signals`` transforms of N points."""
    if n <= 1:
        return 0
    return round(per_point * n * math.log2(n) * n_signals)


def _transform_sizes(shape: Sequence[int], dims: Sequence[int]) -> tuple[int, int]:
    """Returns (points per transform, number of transforms) for a transform of ``dims``."""
    n = math.prod(shape[d] for d in dims)
    return n, math.prod(shape) // n if n else 0


def _fft_r2c_flop(self_shape, dim, *args, out_shape=None, **kwargs) -> int:
    """aten._fft_r2c: real input of ``self_shape`` transformed over ``dim``."""
    n, n_signals = _transform_sizes(self_shape, dim)
    return _fft_flops(n, n_signals, 2.5)


def _fft_c2r_flop(self_shape, dim, normalization, last_dim_size, *args, out_shape=None, **kwargs) -> int:
    """aten._fft_c2r: the transform length is that of the real output (``last_dim_size`` on the last axis)."""
    real_shape = list(self_shape)
    real_shape[dim[-1]] = last_dim_size
    n, n_signals = _transform_sizes(real_shape, dim)
    return _fft_flops(n, n_signals, 2.5)


def _fft_c2c_flop(self_shape, dim, *args, out_shape=None, **kwargs) -> int:
    """aten._fft_c2c: complex input of ``self_shape`` transformed over ``dim``."""
    n, n_signals = _transform_sizes(self_shape, dim)
    return _fft_flops(n, n_signals, 5.0)


def _sdpa_cpu_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """aten._scaled_dot_product_flash_attention_for_cpu: QK^T and PV."""
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _sdpa_cpu_backward_flop(
    grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs
) -> int:
    """aten._scaled_dot_product_flash_attention_for_cpu_backward (grad_out, query, key, value, ...)."""
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


# FlopCounterMode wraps these with its shape_wrapper: tensor arguments arrive as shapes and the
# output shape as the ``out_shape`` keyword.
_CUSTOM_FLOP_FORMULAS = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_cpu_flop,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_cpu_backward_flop,
    torch.ops.aten._fft_r2c: _fft_r2c_flop,
    torch.ops.aten._fft_c2r: _fft_c2r_flop,
    torch.ops.aten._fft_c2c: _fft_c2c_flop,
}
