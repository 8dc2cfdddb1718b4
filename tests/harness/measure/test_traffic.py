"""Tests of harness.measure.traffic (bytes moved, the roofline's other axis) against closed-form counts."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

import harness.measure.traffic
from harness.measure.flops import count_flops, count_work
from harness.measure.timing import TimingResult
from harness.measure.traffic import count_bytes, measure_memory_bandwidth_gbs, tensor_bytes

F32 = 4


def test_a_matmul_reads_both_operands_and_writes_its_result_once() -> None:
    m, k, n = 6, 5, 7
    a, b = torch.randn(m, k), torch.randn(k, n)
    assert count_bytes(lambda: a @ b) == (m * k + k * n + m * n) * F32


def test_views_move_nothing_and_a_copy_reads_and_writes() -> None:
    x = torch.randn(8, 16)
    assert count_bytes(lambda: x.reshape(2, 64).transpose(0, 1)[:3]) == 0
    assert count_bytes(lambda: x.t().unsqueeze(0).expand(3, 16, 8)) == 0
    assert count_bytes(lambda: x.t().contiguous()) == 2 * x.numel() * F32


def test_a_broadcast_operand_is_read_once_per_distinct_element() -> None:
    x, bias = torch.randn(32, 16), torch.randn(16)
    assert tensor_bytes(bias.expand(32, 16)) == 16 * F32
    assert count_bytes(lambda: x + bias) == (32 * 16 + 16 + 32 * 16) * F32


def test_an_in_place_op_reads_and_writes_its_target() -> None:
    x, y = torch.randn(100), torch.randn(100)
    assert count_bytes(lambda: x.add_(y)) == 3 * 100 * F32


def test_the_backward_pass_is_counted() -> None:
    w = torch.randn(64, 32, requires_grad=True)
    x = torch.randn(16, 64)
    forward = count_bytes(lambda: x @ w)
    assert forward == (16 * 64 + 64 * 32 + 16 * 32) * F32
    both = count_bytes(lambda: (x @ w).backward(torch.ones(16, 32)))
    # backward: grad_w = xᵀ @ grad_out reads x and grad_out, writes grad_w (at least): more than the forward again
    assert both >= forward + (16 * 64 + 16 * 32 + 64 * 32) * F32


def test_count_work_counts_flops_and_bytes_in_one_run() -> None:
    a, b = torch.randn(6, 5), torch.randn(5, 7)
    calls = []

    def fn() -> torch.Tensor:
        calls.append(1)
        return a @ b

    assert count_work(fn) == (count_flops(lambda: a @ b), count_bytes(lambda: a @ b))
    assert len(calls) == 1


def test_memory_bandwidth_is_a_finite_positive_rate() -> None:
    gbs = measure_memory_bandwidth_gbs(torch.device("cpu"))
    assert math.isfinite(gbs) and gbs > 0


def test_the_bandwidth_is_the_fastest_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """As the GEMM peak: a copy slowed by another process does not lower the roof."""
    def fake_time_fn(fn: Callable[[], object], device: torch.device, **_kw: object) -> TimingResult:
        fn()
        return TimingResult((4.0, 2.0, 4.0, 4.0), 4.0, 0.0, 4.0, 4, 1, "fake")

    monkeypatch.setattr(harness.measure.traffic, "time_fn", fake_time_fn)
    monkeypatch.setattr(harness.measure.traffic, "_BANDWIDTH_BYTES", 4 * 2**20)
    # each call copies a quarter of the buffers (1 MiB read + 1 MiB written), the fastest in 2 ms
    assert measure_memory_bandwidth_gbs(torch.device("cpu")) == pytest.approx(2 * 2**20 / 2e-3 / 1e9)
