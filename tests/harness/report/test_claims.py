"""The verdict logic of claims.md: signs, bands, several comparisons, intervals."""

from __future__ import annotations

from pathlib import Path

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


# ---------------------------------------------------------------------------------------------------------------------
# Verdicts that hold up: enough seeds, an interval of some width, multiplicity, words by data


def test_t_distribution_against_its_closed_forms_and_printed_quantiles() -> None:
    import math

    from harness.report.stats import _T975, t_cdf, t_quantile

    for t in (-3.0, -0.4, 0.0, 1.3, 12.706):
        assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)  # Cauchy
        assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
        assert t_cdf(t, 400) == pytest.approx(0.5 * math.erfc(-t / math.sqrt(2)), abs=2e-3)  # → the normal
    for df, printed in enumerate(_T975, start=1):  # the printed table rounds to 3 decimals
        assert t_quantile(0.975, df) == pytest.approx(printed, abs=6e-4)
    assert t_quantile(1 - 0.025 / 2, 2) == pytest.approx(6.205, abs=1e-3)  # a Bonferroni quantile, k = 2


@pytest.mark.parametrize(("values", "why"), [
    ([1.0, 1.2], "2 seeds: a verdict needs 3"),
    ([1.0, 1.0, 1.0], "zero width: identical seeds"),
])
def test_too_few_seeds_or_a_zero_width_interval_never_reproduce(values: list[float], why: str) -> None:
    from harness.report.claims import interval_words

    iv = t_interval(values)
    assert iv.mean > 0 and sign_verdict(iv, above=True) == INCONCLUSIVE
    assert band_verdict(iv, 1.0) == INCONCLUSIVE
    assert why in interval_words(iv)


def test_a_contradiction_among_several_comparisons_is_holm_adjusted() -> None:
    from harness.report.claims import several

    # 3 seeds, 95% interval [-2.0, -0.1]: wholly below 0 on its own, but not at the Holm level of 5 comparisons
    narrow = Interval(-1.05, -2.0, -0.1, 3)
    assert sign_verdict(narrow, above=True) == CONTRADICTED
    assert sign_verdict(narrow, above=True, comparisons=5) == INCONCLUSIVE
    clear = Interval(2.0, 1.0, 3.0, 3)
    verdict, basis = several({"a": clear, "b": narrow, "c": clear, "d": clear, "e": clear}, above=True)
    assert verdict == INCONCLUSIVE and "5 comparisons over 3 seeds" in basis and "Holm-adjusted 99.0%" in basis
    verdict, _ = several({"a": clear, "b": Interval(-5.0, -6.0, -4.0, 3)}, above=True)
    assert verdict == CONTRADICTED  # far enough below at any level
    assert several({"a": clear, "b": clear}, above=True)[0] == REPRODUCED  # every part at 95%: an IUT


def test_verdicts_on_stand_ins_use_their_own_words(tmp_path: Path) -> None:
    from harness.report.claims import Claim, write_claims

    claims = [Claim("Table 5", "x", "m", REPRODUCED), Claim("Table 7", "y", "m", CONTRADICTED),
              Claim("Table 6", "z", "m", INCONCLUSIVE)]
    text = write_claims(tmp_path, claims, suite="s", stand_ins=True)[0].read_text()
    assert "**consistent on stand-ins**" in text and "**inconsistent on stand-ins**" in text
    assert "**reproduced**" not in text and "**contradicted**" not in text and "**inconclusive**" in text
    real = write_claims(tmp_path, claims, suite="s")[0].read_text()
    assert "**reproduced**" in real and "stand-ins" not in real
