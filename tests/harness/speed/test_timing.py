"""Tests of harness.timing (structure and units only; nothing here asserts a speed)."""

from __future__ import annotations

import time

import pytest
import torch

from harness.speed.timing import GLIBC_TUNABLES_TIMING, TimingResult, time_fn, timing_env_active

CPU = torch.device("cpu")


def test_cpu_result_is_consistent() -> None:
    x = torch.randn(64, 64)
    result = time_fn(lambda: x @ x, CPU, min_run_time_s=0.05, min_repeats=7)
    assert isinstance(result, TimingResult)
    assert len(result.times_ms) >= 7
    assert result.n_calls >= len(result.times_ms)
    assert min(result.times_ms) <= result.median_ms <= max(result.times_ms)
    assert min(result.times_ms) <= result.mean_ms <= max(result.times_ms)
    assert result.iqr_ms >= 0
    assert result.threads == torch.get_num_threads()
    assert result.method == "torch.utils.benchmark.blocked_autorange"


def test_slow_call_is_topped_up_to_min_repeats() -> None:
    # One call outlasts min_run_time_s, so blocked_autorange alone yields a single sample.
    result = time_fn(lambda: time.sleep(0.02), CPU, min_run_time_s=0.01, min_repeats=4, warmup=0)
    assert len(result.times_ms) == 4
    assert result.n_calls == 4


def test_sleep_is_reported_in_milliseconds() -> None:
    result = time_fn(lambda: time.sleep(0.01), CPU, min_run_time_s=0.05, min_repeats=3, warmup=1)
    assert 9.0 <= result.median_ms <= 60.0


def test_warmup_calls_are_made_and_not_counted() -> None:
    calls = []
    result = time_fn(lambda: calls.append(1), CPU, min_run_time_s=0.01, min_repeats=5, warmup=3)
    # blocked_autorange also calls fn while sizing its blocks, so only a lower bound is exact.
    assert len(calls) >= 3 + result.n_calls


def test_result_is_immutable() -> None:
    result = time_fn(lambda: None, CPU, min_run_time_s=0.01)
    with pytest.raises(AttributeError):
        result.median_ms = 0.0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("value", "active"),
    [
        (None, False),
        ("", False),
        ("glibc.malloc.mmap_threshold=33554432", False),
        (GLIBC_TUNABLES_TIMING, True),
        ("glibc.pthread.rseq=0:" + GLIBC_TUNABLES_TIMING, True),
    ],
)
def test_timing_env_active(monkeypatch: pytest.MonkeyPatch, value: str | None, active: bool) -> None:
    if value is None:
        monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    else:
        monkeypatch.setenv("GLIBC_TUNABLES", value)
    assert timing_env_active() is active
