"""The statistics behind ratios and comparisons: paired ratios, ratios of medians, the rank test."""

from __future__ import annotations

import numpy as np
import pytest

from harness.report.stats import mann_whitney_p, paired_ratio, ratio_of_medians


def test_paired_ratio_is_exact_for_proportional_samples_and_deterministic() -> None:
    base = [10.0, 12.0, 9.0, 30.0, 11.0]  # a drifting machine: round 4 is 3x slower for both
    r = paired_ratio([2 * v for v in base], base)
    assert r is not None and (r.value, r.lo, r.hi, r.n) == (2.0, 2.0, 2.0, 5)
    noisy = np.random.default_rng(3).normal(1.0, 0.05, 30)
    a, b = paired_ratio(noisy * 1.4, np.ones(30)), paired_ratio(noisy * 1.4, np.ones(30))
    assert a == b and a is not None and a.lo < 1.4 < a.hi
    assert paired_ratio([1.0], [1.0]) is None


def test_ratio_of_medians_interval_covers_the_truth() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.normal(10, 0.3, 40), rng.normal(13, 0.3, 40)
    r = ratio_of_medians(b, a)
    assert r is not None and r.lo < 1.3 < r.hi and r.hi - r.lo < 0.05


@pytest.mark.parametrize(("shift", "significant"), [(0.0, False), (0.5, True)])
def test_mann_whitney(shift: float, significant: bool) -> None:
    rng = np.random.default_rng(1)
    a, b = rng.normal(10, 0.2, 20), rng.normal(10 + shift, 0.2, 20)
    assert (mann_whitney_p(a, b) < 0.01) is significant
    assert mann_whitney_p(a, a) == pytest.approx(1.0)
    assert mann_whitney_p([1.0], [2.0, 3.0]) == 1.0
