"""The verdict logic of claims.md: signs, bands, several comparisons, intervals."""

from __future__ import annotations

import numpy as np
import pytest

from harness.report.claims import (
    CONTRADICTED,
    INCONCLUSIVE,
    NOT_MEASURED,
    REPRODUCED,
    all_of,
    band_verdict,
    sign_verdict,
)
from harness.report.stats import Interval, t_interval


@pytest.mark.parametrize(("iv", "above", "verdict"), [
    (Interval(2.0, 1.0, 3.0, 3), True, REPRODUCED),
    (Interval(2.0, 1.0, 3.0, 3), False, CONTRADICTED),
    (Interval(0.5, -1.0, 2.0, 3), True, INCONCLUSIVE),
    (Interval(2.0, float("nan"), float("nan"), 1), True, INCONCLUSIVE),  # one seed: no interval
    (None, True, NOT_MEASURED),
])
def test_sign_verdict(iv: Interval | None, above: bool, verdict: str) -> None:
    assert sign_verdict(iv, above) == verdict


def test_band_verdict_and_all_of() -> None:
    assert band_verdict(Interval(30, 25, 35, 3), 30) == REPRODUCED
    assert band_verdict(Interval(5, 2, 8, 3), 30) == CONTRADICTED  # wholly below 15%
    assert band_verdict(Interval(20, 5, 35, 3), 30) == INCONCLUSIVE
    assert all_of([REPRODUCED, REPRODUCED]) == REPRODUCED
    assert all_of([REPRODUCED, INCONCLUSIVE]) == INCONCLUSIVE
    assert all_of([REPRODUCED, CONTRADICTED, INCONCLUSIVE]) == CONTRADICTED
    assert all_of([NOT_MEASURED]) == NOT_MEASURED


def test_t_interval_matches_the_closed_form() -> None:
    iv = t_interval([1.0, 2.0, 3.0])  # mean 2, s = 1, t(0.975, 2) = 4.303
    assert iv is not None and iv.mean == 2.0 and np.isclose(iv.hi - 2.0, 4.303 / np.sqrt(3))
    assert t_interval([5.0]).n == 1 and t_interval([]) is None
