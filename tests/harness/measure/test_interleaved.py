"""Interleaved timing (harness.measure.timing.time_interleaved) and the machine-load record (harness.measure.quiet)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import torch

from harness.measure import quiet as load
from harness.measure.timing import MIN_ROUNDS, time_interleaved
from harness.report.stats import paired_ratio

CPU = torch.device("cpu")


def test_rounds_visit_every_function_once_in_a_rotated_order() -> None:
    calls: list[str] = []
    fns = [lambda name=name: calls.append(name) for name in "abc"]
    results = time_interleaved(fns, CPU, min_run_time_s=0.0, min_repeats=3, warmup=1)
    rounds = max(3, MIN_ROUNDS)
    assert all(len(r.times_ms) == rounds for r in results)  # one paired sample per round
    timed = calls[3 * 2:]  # after the warm-up and the one-call estimate of each
    assert len(timed) == 3 * rounds  # one call per block: min_run_time_s 0
    firsts = [timed[3 * r] for r in range(rounds)]
    assert firsts[:3] == ["a", "b", "c"]  # the order rotates by one each round
    for r in range(rounds):
        assert sorted(timed[3 * r: 3 * r + 3]) == ["a", "b", "c"]


def test_page_faults_per_call_count_memory_touched_afresh_by_each_call() -> None:
    """A call that maps 4 MiB and touches every page faults about 1024 times per call; one that reuses a buffer
    does not (the count is the process's, taken around each function's own blocks)."""
    import mmap

    import numpy as np

    size, buffer = 4 * 2**20, torch.zeros(2**20)

    def fresh() -> None:
        region = mmap.mmap(-1, size)
        pages = np.frombuffer(region, dtype=np.uint8)
        pages[:: mmap.PAGESIZE] = 1
        del pages
        region.close()

    fresh_result, reused = time_interleaved([fresh, lambda: buffer.fill_(1.0)], CPU, min_run_time_s=0.0,
                                            min_repeats=3, warmup=1)
    assert 0.9 * size / mmap.PAGESIZE <= fresh_result.page_faults_per_call <= 1.5 * size / mmap.PAGESIZE
    assert reused.page_faults_per_call < 10


def test_a_failing_function_stops_alone_and_the_guard_wraps_each_use() -> None:
    count = {"calls": 0}

    def flaky() -> None:
        count["calls"] += 1
        if count["calls"] > 4:
            raise RuntimeError("broke in round 3")

    guarded: list[int] = []

    @contextlib.contextmanager
    def guard(i: int) -> Iterator[None]:
        guarded.append(i)
        yield

    good, bad = time_interleaved([lambda: None, flaky], CPU, min_run_time_s=0.0, min_repeats=2, warmup=1,
                                 guard=guard)
    assert isinstance(bad, RuntimeError) and "round 3" in str(bad)
    assert not isinstance(good, Exception) and len(good.times_ms) == max(2, MIN_ROUNDS)
    assert guarded.count(1) == 1 + 3  # warm-up/estimate, then rounds until it broke
    assert guarded.count(0) == 1 + max(2, MIN_ROUNDS)


def test_paired_rounds_cancel_a_drifting_machine() -> None:
    """The machine slows down 3x over the run; the medians of each function drift, the per-round ratio does not."""
    calls = {"n": 0}

    def slowdown() -> float:  # 1x at the first call, 3x from the 40th on
        calls["n"] += 1
        return 1 + 2 * min(1.0, calls["n"] / 40)

    fast = lambda: time.sleep(0.001 * slowdown())  # noqa: E731
    slow = lambda: time.sleep(0.0015 * slowdown())  # noqa: E731
    a, b = time_interleaved([fast, slow], CPU, min_run_time_s=0.0, min_repeats=20, warmup=0)
    ratio = paired_ratio(b.times_ms, a.times_ms)
    assert ratio is not None and ratio.lo < 1.5 * 1.15 and ratio.hi > 1.5 * 0.87  # sleep overhead: loose bounds
    assert max(a.times_ms) / min(a.times_ms) > 1.8  # the drift was there


def test_load_between_counts_other_processes_not_this_one() -> None:
    start = load.CpuTimes(wall_s=0.0, busy_ticks=0, steal_ticks=0, own_ticks=0)
    ticks = load._TICKS
    end = load.CpuTimes(wall_s=2.0, busy_ticks=4 * ticks, steal_ticks=0, own_ticks=2 * ticks)
    assert load.load_between(start, end)["load_other_cores"] == pytest.approx(1.0)  # (4 - 2) ticks-s over 2 s
    missing = load.CpuTimes(wall_s=1.0, busy_ticks=None, steal_ticks=None, own_ticks=None)
    assert load.load_between(start, missing) == {"load_other_cores": None, "steal_fraction": None}


@pytest.mark.parametrize(("other", "steal", "calibration", "reason"), [
    (0.0, 0.0, 1.0, ""),
    (1.0, 0.0, 1.0, "other processes used 1.00 cores"),
    (0.0, 0.2, 1.0, "CPU steal 20%"),
    (0.0, 0.0, 1.3, "reference kernel +30% against the run's start"),
    (0.0, 0.0, 0.65, ""),  # faster than at the start is no sign of a busy machine
    (None, None, None, ""),
])
def test_noise_flags(other: float | None, steal: float | None, calibration: float | None, reason: str) -> None:
    flags = load.noise_flags({"load_other_cores": other, "steal_fraction": steal}, calibration)
    assert flags["noisy"] is bool(reason) and flags["noisy_reason"] == reason


def test_a_busy_process_is_seen_and_a_quiet_machine_is_not() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 4: pass"])
    try:
        time.sleep(0.5)  # let it start spinning
        assert (load.other_load(1.0) or 0.0) > 0.7
    finally:
        busy.kill()
        busy.wait()
    assert load.calibrate() > 0
