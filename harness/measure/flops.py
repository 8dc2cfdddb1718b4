"""FLOP counts of one call, and the achieved GEMM throughput of a device.

FLOPs are counted with ``torch.utils.flop_counter.FlopCounterMode``, which knows matmuls,
convolutions and the CUDA attention kernels, but counts 0 for the fused CPU attention kernel and
for FFTs, and it counts a sparse (CSR/COO) matmul as if its sparse operand were dense. Formulas for
those are registered here: a sparse @ dense product costs 2·nnz·d, a sampled (SDDMM) product 2·nnz·k.

FFT convention (the FFTW benchmark one): a complex FFT of length N costs 5·N·log2(N) real FLOPs,
a real-input (r2c) or real-output (c2r) FFT half of that, 2.5·N·log2(N). For a transform over
several axes N is the product of the transformed sizes. This is a nominal count (the radix-2
Cooley-Tukey count), not what a given library executes, which is why it is the usual yardstick.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from ..core.errors import first_line
from .timing import time_fn
from .traffic import TrafficCounter


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


def count_work(fn: Callable[[], object]) -> tuple[int, int]:
    """(FLOPs, bytes moved) of one call of ``fn``, counted in the same single run (:func:`count_flops`,
    :class:`~harness.measure.traffic.TrafficCounter`)."""
    with _flex_called_directly(), FlopCounterMode(display=False, custom_mapping=_CUSTOM_FLOP_FORMULAS) as flops, \
            TrafficCounter(hop_flops=_flex_formulas()) as moved:
        fn()
    return int(flops.get_total_flops()) + moved.flops, moved.total


@contextlib.contextmanager
def _flex_called_directly() -> Iterator[None]:
    """Eager FlexAttention calls its op through ``torch.compile(fullgraph=True)``, which finds no frame to compile
    under a dispatch mode (the counters), fails, and leaves that code marked as skipped for the rest of the process
    (every later eager FlexAttention call then fails). For the counted call, torch's debug switch calls the op
    directly: the same op and forward output, seen by the counters as one higher-order op."""
    module = sys.modules.get("torch.nn.attention.flex_attention")
    if module is None or not hasattr(module, "_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG"):
        yield
        return
    before = module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG
    module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True
    try:
        yield
    finally:
        module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = before


def work_metrics(fn: Callable[[], object]) -> dict[str, Any]:
    """``gflops``, ``gbytes_moved`` and ``intensity_flop_per_byte`` of one call (:func:`count_work`), or
    ``flops_error`` where the counter cannot trace the call: FLOPs are a derived figure, so a variant the counter
    fails on (torch's module tracker breaks on a Parameter passed to a submodule under ``inference_mode``, as Luna's
    learned context is) keeps its time and memory. Shared by the timed kinds (a speed call, a decoding step)."""
    try:
        flops, moved = count_work(fn)
        return {"gflops": flops / 1e9, "gbytes_moved": moved / 1e9,
                "intensity_flop_per_byte": flops / moved if moved else float("nan")}
    except (torch.cuda.OutOfMemoryError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001  (any tracing failure of the counter; the call itself ran)
        return {"flops_error": f"{type(exc).__name__}: {first_line(exc)}"}


def achieved_rates(gflops: float, gbytes_moved: float, time_ms: float) -> dict[str, float]:
    """``gflops_per_s`` and ``gbytes_per_s`` of a call that performs ``gflops`` and moves ``gbytes_moved`` (its
    counted operator traffic, :mod:`~harness.measure.traffic`) in a median of ``time_ms``."""
    return {"gflops_per_s": gflops / (time_ms / 1e3), "gbytes_per_s": gbytes_moved / (time_ms / 1e3)}


#: Which measured ceiling a "% of peak" is taken against (:func:`peak_fraction`).
GEMM, BANDWIDTH = "gemm", "bandwidth"


def peak_fraction(gflops_per_s: Any, gbytes_per_s: Any, gemm_peak_gflops: Any, bandwidth_gbs: Any
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(fraction of peak, the peak it is against: :data:`GEMM` or :data:`BANDWIDTH`) of achieved rates, elementwise
    over scalars or arrays, as FlashAttention's and tritonbench's tables give "% of peak".

    A compute-bound cell is against the measured GEMM peak P, a memory-bound one (intensity I = FLOPs / bytes below
    the ridge point P / B) against the measured copy bandwidth B. Since I < P / B exactly when FLOP/s / P < (bytes/s) /
    B, the fraction is the larger of the two utilisations, and the ceiling that gives it says which side of the ridge
    the cell is on; it equals the roofline fraction achieved / min(P, B·I). Where one ceiling was not measured (NaN:
    a decode run measures only the bandwidth), the fraction is against the other; where neither was, it is NaN with
    an empty ``against``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        compute = np.asarray(gflops_per_s, dtype=float) / np.asarray(gemm_peak_gflops, dtype=float)
        memory = np.asarray(gbytes_per_s, dtype=float) / np.asarray(bandwidth_gbs, dtype=float)
    memory_bound = (memory > compute) | (np.isnan(compute) & ~np.isnan(memory))
    against = np.where(memory_bound, BANDWIDTH, np.where(np.isnan(compute), "", GEMM))
    return np.fmax(compute, memory), against


#: The achieved rates a report adds to its cells (:func:`rate_columns`).
RATE_COLUMNS = ("tflops_per_s", "gbytes_per_s", "peak_fraction", "peak_against")


def rate_columns(gflops: Any, gbytes_moved: Any, time_ms: Any, gemm_peak_gflops: Any, bandwidth_gbs: Any
                 ) -> dict[str, np.ndarray]:
    """:data:`RATE_COLUMNS` of cells (arrays, NaN where a cell has no time or count): achieved TFLOP/s (GFLOP per
    ms), GB/s, and the fraction of the peak (:func:`peak_fraction`) with the peak it is against (None without one)."""
    time_ms = np.asarray(time_ms, dtype=float)
    time_ms = np.where(time_ms > 0, time_ms, np.nan)
    tflops = np.asarray(gflops, dtype=float) / time_ms
    gbytes_per_s = np.asarray(gbytes_moved, dtype=float) / time_ms * 1e3
    fraction, against = peak_fraction(tflops * 1e3, gbytes_per_s, gemm_peak_gflops, bandwidth_gbs)
    return {"tflops_per_s": tflops, "gbytes_per_s": gbytes_per_s, "peak_fraction": fraction,
            "peak_against": np.where(np.isnan(fraction), None, against)}


#: The square GEMMs whose fastest round is the peak, by device type: a CPU reaches its peak from a few hundred on
#: (and a small GEMM's rounds are short enough to fall between another process's time slices), a GPU needs thousands.
GEMM_SIZES = {"cpu": (256, 512, 1024, 2048), "cuda": (2048, 4096, 8192)}


def measure_gemm_peak_gflops(
    device: torch.device, dtype: torch.dtype = torch.float32, sizes: Sequence[int] | None = None
) -> float:
    """Returns the GEMM peak of ``device``: the GFLOP/s of the fastest round of square matmuls of ``sizes``.

    This is the compute roof that achieved attention FLOP/s are reported against. It runs under the process's
    current thread count and matmul precision settings (e.g. TF32 on CUDA), as the attention calls do. It is the
    fastest round, not the median: a roof bounds what the machine can do, and another process can only slow a
    round, never speed it up. The median of one large GEMM, measured once at the start of a run while other
    processes shared the cores, put the roof under the cells timed later in a quieter moment.

    Args:
        device: Device to measure.
        dtype: Element type of the operands.
        sizes: Sides of the square matrices (each product costs 2·size³ FLOPs); default :data:`GEMM_SIZES`.

    Returns:
        GFLOP/s of the fastest round over the sizes.
    """
    best = 0.0
    for size in sizes or GEMM_SIZES.get(device.type, GEMM_SIZES["cuda"]):
        a = torch.randn(size, size, device=device).to(dtype)
        b = torch.randn(size, size, device=device).to(dtype)
        # Write into a preallocated output so that allocation is not part of the GEMM time.
        out = torch.empty(size, size, device=device, dtype=dtype)
        timing = time_fn(lambda a=a, b=b, out=out: torch.mm(a, b, out=out), device, min_run_time_s=0.25)
        best = max(best, 2 * size**3 / (min(timing.times_ms) * 1e-3) / 1e9)
    return best


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


def _causal_share(query_shape: Sequence[int], key_shape: Sequence[int], is_causal: bool) -> float:
    """The share of the score matrix a causal kernel computes: torch's ``is_causal`` is the lower triangle aligned at
    the top left (query i reads keys j <= i), so Σ_i min(i + 1, Nk) of Nq·Nk scores."""
    nq, nk = int(query_shape[-2]), int(key_shape[-2])
    if not is_causal or not nq or not nk:
        return 1.0
    m = min(nq, nk)
    return (m * (m + 1) / 2 + (nq - m) * nk) / (nq * nk)


def _sdpa_cpu_flop(query_shape, key_shape, value_shape, dropout_p=0.0, is_causal=False, *args, out_shape=None,
                   **kwargs) -> int:
    """aten._scaled_dot_product_flash_attention_for_cpu: QK^T and PV, over the scores the kernel computes (half of them,
    about, with ``is_causal``: its blocks above the diagonal are skipped)."""
    return round(sdpa_flop_count(query_shape, key_shape, value_shape) * _causal_share(query_shape, key_shape,
                                                                                          is_causal))


def _sdpa_cpu_backward_flop(
    grad_out_shape, query_shape, key_shape, value_shape, out_shape_=None, lse_shape=None, dropout_p=0.0,
    is_causal=False, *args, out_shape=None, **kwargs
) -> int:
    """aten._scaled_dot_product_flash_attention_for_cpu_backward (grad_out, query, key, value, out, logsumexp,
    dropout_p, is_causal, ...), over the scores the kernel computes as the forward."""
    full = sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)
    return round(full * _causal_share(query_shape, key_shape, is_causal))


def _raw(formula: Callable[..., int]) -> Callable[..., int]:
    """Mark a formula as taking the op's real arguments (tensors, so layouts and nnz can be read)."""
    formula._get_raw = True  # type: ignore[attr-defined]
    return formula


def _is_sparse(t: object) -> bool:
    return isinstance(t, torch.Tensor) and t.layout != torch.strided


@_raw
def _mm_flop(a: torch.Tensor, b: torch.Tensor, *args, out_val=None, **kwargs) -> int:
    """aten.mm: 2·m·k·n dense; a sparse operand contributes only its stored entries (2·nnz·other side)."""
    if _is_sparse(a):
        return 2 * a._nnz() * b.shape[-1]
    if _is_sparse(b):
        return 2 * b._nnz() * a.shape[0]
    return 2 * a.shape[0] * a.shape[1] * b.shape[1]


@_raw
def _addmm_flop(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *args, out_val=None, **kwargs) -> int:
    """aten.addmm: the product (as aten.mm) plus the bias add, as torch's own formula counts it."""
    return _mm_flop(a, b)


@_raw
def _sampled_addmm_flop(pattern: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *args, out_val=None,
                        **kwargs) -> int:
    """aten.sparse_sampled_addmm (SDDMM): one length-k dot product per stored entry of the pattern."""
    return 2 * pattern._nnz() * a.shape[-1]


def _computed_fraction(block_mask: tuple[Any, ...]) -> float:
    """The share of a FlexAttention score matrix its BlockMask has the kernel compute: the partial and full blocks
    (``BlockMask.as_tuple``: q_len, kv_len, kv_num_blocks [B', H', q blocks], kv_indices, full_kv_num_blocks, ...,
    Q_BLOCK_SIZE, KV_BLOCK_SIZE, mask_mod) over every block of the (broadcast) batch and heads."""
    kv_len, kv_num, full_num, kv_block = block_mask[1], block_mask[2], block_mask[4], block_mask[-2]
    computed = int(kv_num.sum()) + (0 if full_num is None else int(full_num.sum()))
    return min(1.0, computed / (kv_num.numel() * math.ceil(kv_len / kv_block)))


@_raw
def _flex_flop(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, score_mod: Any, block_mask: tuple,
               *args, out_val=None, **kwargs) -> int:
    """FlexAttention's forward: SDPA's count over the blocks its BlockMask computes, the fused kernel's work (a
    block-sparse pattern's, not the n×n its eager reference path materialises; torch's own formula counts the dense
    n×n unless given a hint)."""
    return int(sdpa_flop_count(query.shape, key.shape, value.shape) * _computed_fraction(block_mask))


@_raw
def _flex_backward_flop(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, out: torch.Tensor,
                        logsumexp: torch.Tensor, grad_out: torch.Tensor, grad_logsumexp: Any, fw_graph: Any,
                        joint_graph: Any, block_mask: tuple, *args, out_val=None, **kwargs) -> int:
    """FlexAttention's backward (CUDA): SDPA's backward count over the computed blocks, as the forward."""
    shape = (grad_out if grad_out is not None else out).shape
    return int(sdpa_backward_flop_count(shape, query.shape, key.shape, value.shape) * _computed_fraction(block_mask))


def _flex_formulas() -> dict[Any, Callable[..., int]]:
    """The FlexAttention higher-order ops' formulas, where this torch has them: the TrafficCounter, which sees these
    ops (torch's FlopCounterMode refuses them in eager mode), counts them (:func:`count_work`)."""
    try:
        from torch._higher_order_ops.flex_attention import flex_attention, flex_attention_backward
    except ImportError:  # pragma: no cover  (torch >= 2.5 has them)
        return {}
    return {flex_attention: _flex_flop, flex_attention_backward: _flex_backward_flop}


# FlopCounterMode wraps the non-raw formulas with its shape_wrapper: tensor arguments arrive as shapes and
# the output shape as the ``out_shape`` keyword; raw ones (``_get_raw``) get the tensors themselves.
_CUSTOM_FLOP_FORMULAS = {
    torch.ops.aten.mm: _mm_flop,
    torch.ops.aten.addmm: _addmm_flop,
    torch.ops.aten.sparse_sampled_addmm: _sampled_addmm_flop,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_cpu_flop,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_cpu_backward_flop,
    torch.ops.aten._fft_r2c: _fft_r2c_flop,
    torch.ops.aten._fft_c2r: _fft_c2r_flop,
    torch.ops.aten._fft_c2c: _fft_c2c_flop,
}
