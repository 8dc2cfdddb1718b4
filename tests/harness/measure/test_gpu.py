"""The GPU figures of a speed cell (harness.measure.gpu), checked where a CPU can check them: the busy fraction's
interval arithmetic, the slowdown flag, SDPA pinning and its detection, the suite keys, and that everything degrades
to no figure (never a failed cell) without NVML or CUDA. The GPU check (``make gpu-check``) runs them for real."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from harness.core.errors import SuiteError
from harness.kinds.speed.kind import parse
from harness.measure import gpu
from harness.measure.quiet import noise_flags


def test_busy_fraction_is_the_union_of_kernel_intervals_over_the_wall_time() -> None:
    # two overlapping kernels (0-4, 2-6) and one apart (8-9): busy 7 of a wall from 0 to 10 (the host's last op)
    assert gpu.busy_fraction([(0, 4), (2, 6), (8, 9)], [(0, 1), (9, 10)]) == pytest.approx(0.7)
    # a kernel inside another counts once
    assert gpu.busy_fraction([(0, 10), (2, 3)], []) == pytest.approx(1.0)
    assert gpu.busy_fraction([], [(0, 1)]) != gpu.busy_fraction([], [(0, 1)])  # nan: no kernel, no fraction


def test_a_gpu_slowdown_flags_the_group_and_a_quiet_one_does_not() -> None:
    quiet = {"gpu_sm_clock_mhz": 1980, "gpu_slowdowns": ""}
    hot = {"gpu_sm_clock_mhz": 1410, "gpu_slowdowns": "sw_thermal_slowdown"}
    assert gpu.slowdown_reason(quiet, quiet) == ""
    reason = gpu.slowdown_reason(quiet, hot)
    assert reason == "GPU slowed down (sw_thermal_slowdown)"
    flags = noise_flags({"load_other_cores": 0.0, "steal_fraction": 0.0}, 1.0, reason)
    assert flags["noisy"] and flags["noisy_reason"] == reason
    assert not noise_flags({"load_other_cores": 0.0, "steal_fraction": 0.0}, 1.0, "")["noisy"]


def test_without_nvml_or_cuda_there_are_no_gpu_figures() -> None:
    assert gpu.gpu_state(torch.device("cpu")) == {}


def test_a_call_that_cannot_be_captured_is_a_graph_error_not_a_failure() -> None:
    out = gpu.time_graph(lambda: None, torch.device("cpu"), {"min_run_time_s": 0.01})
    assert set(out) == {"graph_error"} and out["graph_error"]


@pytest.mark.parametrize("backend", ["math", "auto"])
def test_the_sdpa_backend_that_ran_is_read_from_the_profile(backend: str) -> None:
    q = torch.randn(1, 2, 16, 8)

    def call() -> torch.Tensor:
        with gpu.pinned_sdpa(backend):
            return F.scaled_dot_product_attention(q, q, q)

    used = gpu.profile_call(call, torch.device("cpu"), calls=1)["sdpa_backend_used"]
    # pinned to math, math runs; torch's own choice on the CPU is its flash kernel for this shape
    assert used == ("math" if backend == "math" else "flash")
    assert gpu.profile_call(lambda: q @ q.transpose(-1, -2), torch.device("cpu"), calls=1) == {
        "sdpa_backend_used": "none"}


def test_cuda_graph_is_a_timing_switch_that_leaves_other_suites_keys_alone(tmp_path: Path) -> None:
    base = {"axes": {}, "timing": {"min_run_time_s": 0.1}}
    assert "cuda_graph" not in parse(tmp_path / "s.yaml", dict(base)).timing
    on = parse(tmp_path / "s.yaml", {**base, "timing": {"min_run_time_s": 0.1, "cuda_graph": True}})
    assert on.timing["cuda_graph"] is True
    with pytest.raises(SuiteError, match="cuda_graph"):
        parse(tmp_path / "s.yaml", {**base, "timing": {"cuda_graph": "yes"}})
