"""Tests of harness.flops against closed-form FLOP counts."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import harness.kinds.speed.cells
import harness.measure.flops
from harness.core.cell import Context
from harness.measure.flops import BANDWIDTH, GEMM, count_flops, measure_gemm_peak_gflops, peak_fraction, rate_columns
from harness.measure.timing import TimingResult
from harness.run.suitefile import load_suite
from tests.conftest import tiny_doc


def test_matmul() -> None:
    m, k, n = 3, 5, 7
    a, b = torch.randn(m, k), torch.randn(k, n)
    assert count_flops(lambda: a @ b) == 2 * m * k * n == 210


def test_sdpa_forward_on_cpu() -> None:
    B, H, N, d = 2, 3, 16, 8
    q, k, v = (torch.randn(B, H, N, d) for _ in range(3))
    assert count_flops(lambda: F.scaled_dot_product_attention(q, k, v)) == 4 * B * H * N**2 * d == 49152


def test_sdpa_forward_and_backward_on_cpu() -> None:
    B, H, N, d = 2, 3, 16, 8
    q, k, v = (torch.randn(B, H, N, d, requires_grad=True) for _ in range(3))
    forward = 4 * B * H * N**2 * d
    # Backward recomputes QK^T and does four more N x N x d products: 2.5x the forward.
    backward = 10 * B * H * N**2 * d
    total = count_flops(lambda: F.scaled_dot_product_attention(q, k, v).sum().backward())
    assert total == forward + backward == 172032


def test_sdpa_causal_is_counted_as_its_kernel_computes() -> None:
    """The causal kernel computes the lower triangle of the scores, j <= i: 32·33/2 of 32² per head, for QKᵀ and PV."""
    q = torch.randn(1, 2, 32, 4)
    assert count_flops(lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True)) == 4 * 2 * (32 * 33 // 2) * 4
    assert count_flops(lambda: F.scaled_dot_product_attention(q, q, q)) == 4 * 2 * 32**2 * 4


@pytest.mark.parametrize(("n", "m"), [(32, 5), (64, 1)])
def test_rfft(n: int, m: int) -> None:
    x = torch.randn(m, n)
    assert count_flops(lambda: torch.fft.rfft(x)) == 2.5 * n * math.log2(n) * m


def test_rfft_exact_value() -> None:
    assert count_flops(lambda: torch.fft.rfft(torch.randn(5, 32))) == 2000  # 2.5 * 32 * 5 * 5


def test_irfft_counts_the_real_output_length() -> None:
    n, m = 32, 5
    spectrum = torch.randn(m, n // 2 + 1, dtype=torch.complex64)
    assert count_flops(lambda: torch.fft.irfft(spectrum, n=n)) == 2.5 * n * math.log2(n) * m == 2000


def test_complex_fft() -> None:
    n, m = 32, 5
    z = torch.randn(m, n, dtype=torch.complex64)
    assert count_flops(lambda: torch.fft.fft(z)) == 5 * n * math.log2(n) * m == 4000
    assert count_flops(lambda: torch.fft.ifft(z)) == 4000


def test_multi_dim_fft_uses_the_product_of_transformed_sizes() -> None:
    x = torch.randn(3, 8, 16)
    n = 8 * 16
    assert count_flops(lambda: torch.fft.rfft2(x)) == 2.5 * n * math.log2(n) * 3 == 6720


def test_fft_of_length_one_is_free() -> None:
    assert count_flops(lambda: torch.fft.fft(torch.randn(4, 1, dtype=torch.complex64))) == 0


def test_non_counted_ops_are_zero() -> None:
    x = torch.randn(100)
    assert count_flops(lambda: torch.relu(x) + 1) == 0


def test_gemm_peak_is_positive() -> None:
    gflops = measure_gemm_peak_gflops(torch.device("cpu"), sizes=(64, 128))
    assert math.isfinite(gflops) and gflops > 0


def test_the_gemm_peak_is_the_fastest_round_of_its_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The roof bounds what the machine can do; another process only slows a round. The median of one GEMM, measured
    once while the machine was busy, put the roof under the cells timed later."""
    rounds = {64: (10.0, 1.0, 10.0, 10.0, 10.0), 128: (8.0, 8.0, 8.0, 8.0, 8.0)}  # ms; one quiet round at 64

    def fake_time_fn(fn: Callable[[], object], device: torch.device, **_kw: object) -> TimingResult:
        size = fn().shape[0]
        return TimingResult(rounds[size], float(np.median(rounds[size])), 0.0, 0.0, 1, 1, "fake")

    monkeypatch.setattr(harness.measure.flops, "time_fn", fake_time_fn)
    gflops = measure_gemm_peak_gflops(torch.device("cpu"), sizes=(64, 128))
    assert gflops == pytest.approx(max(2 * 64**3 / 1e-3, 2 * 128**3 / 8e-3) / 1e9)  # 64's fastest round, not a median


def test_sparse_matmul_counts_stored_entries_only() -> None:
    """FlopCounterMode alone counts a CSR @ dense product as dense; ours counts 2·nnz·d."""
    from harness.measure.flops import count_flops

    sparse = torch.eye(64).to_sparse_csr()  # 64 stored entries of 64 x 64
    dense = torch.randn(64, 8)
    assert count_flops(lambda: sparse @ dense) == 2 * 64 * 8
    assert count_flops(lambda: dense.T @ torch.randn(64, 5)) == 2 * 8 * 64 * 5  # dense mm unchanged
    bias = torch.randn(5)
    assert count_flops(lambda: torch.addmm(bias, dense.T, torch.randn(64, 5))) == 2 * 8 * 64 * 5


def test_sampled_addmm_counts_one_dot_product_per_stored_entry() -> None:
    from harness.measure.flops import count_flops

    pattern = torch.eye(16).to_sparse_csr()  # 16 stored entries
    left, right = torch.randn(16, 7), torch.randn(7, 16)
    assert count_flops(lambda: torch.sparse.sampled_addmm(pattern, left, right, beta=0.0)) == 2 * 16 * 7


def test_a_call_the_counter_cannot_trace_keeps_its_time(monkeypatch: pytest.MonkeyPatch,
                                                        write_yaml: Callable[..., Path]) -> None:
    """FLOPs are derived: a counter failure is the cell's ``flops_error``, not its status (Luna's learned context,
    a Parameter passed to a submodule under inference_mode, breaks torch's module tracker in torch 2.13)."""
    doc = tiny_doc(axes={"attention": ["luna"]}, metrics=["time", "flops"])
    cell = next(c for c in load_suite(write_yaml(doc), "quick").expand("cpu") if c.params["mode"] == "fwd")
    real = harness.kinds.speed.cells.measure_cell(cell, Context(Path(".")))
    assert real.status == "ok" and ("gflops" in real.metrics or "flops_error" in real.metrics)

    def broken(fn: Callable[[], object]) -> tuple[int, int]:
        raise AttributeError("'NoneType' object has no attribute 'next_functions'")

    monkeypatch.setattr(harness.measure.flops, "count_work", broken)
    result = harness.kinds.speed.cells.measure_cell(cell, Context(Path(".")))
    assert result.status == "ok" and result.metrics["time_ms_median"] > 0 and "gflops" not in result.metrics
    assert result.metrics["flops_error"] == "AttributeError: 'NoneType' object has no attribute 'next_functions'"


# peak 100 GFLOP/s, bandwidth 10 GB/s: the ridge point is at 10 FLOP/byte
@pytest.mark.parametrize(("gflops_per_s", "gbytes_per_s", "peak", "bandwidth", "fraction", "against"), [
    (50.0, 1.25, 100.0, 10.0, 0.5, GEMM),  # I = 40, right of the ridge: of the GEMM peak
    (10.0, 5.0, 100.0, 10.0, 0.5, BANDWIDTH),  # I = 2, left of the ridge: of the copy bandwidth
    (10.0, 5.0, float("nan"), 10.0, 0.5, BANDWIDTH),  # no GEMM peak measured (a decode run): the bandwidth
    (50.0, 1.25, 100.0, float("nan"), 0.5, GEMM),
    (50.0, 1.25, float("nan"), float("nan"), float("nan"), ""),
])
def test_the_percent_of_peak_is_against_the_ceiling_on_the_cells_side_of_the_ridge(
        gflops_per_s: float, gbytes_per_s: float, peak: float, bandwidth: float, fraction: float,
        against: str) -> None:
    got, which = peak_fraction(gflops_per_s, gbytes_per_s, peak, bandwidth)
    assert float(got) == pytest.approx(fraction, nan_ok=True) and str(which) == against
    if math.isfinite(fraction) and math.isfinite(peak) and math.isfinite(bandwidth):  # the roofline's fraction
        intensity = gflops_per_s / gbytes_per_s
        assert float(got) == pytest.approx(gflops_per_s / min(peak, bandwidth * intensity))


def test_rates_are_tflops_and_gbytes_per_second_of_the_median_time() -> None:
    """2 GFLOP and 0.5 GB in 4 ms: 0.5 TFLOP/s and 125 GB/s; no time, no rates."""
    rates = rate_columns([2.0, 2.0], [0.5, 0.5], [4.0, float("nan")], 1000.0, 500.0)
    assert rates["tflops_per_s"][0] == pytest.approx(0.5) and rates["gbytes_per_s"][0] == pytest.approx(125.0)
    assert rates["peak_fraction"][0] == pytest.approx(0.5) and rates["peak_against"][0] == GEMM
    assert np.isnan(rates["tflops_per_s"][1]) and rates["peak_against"][1] is None
