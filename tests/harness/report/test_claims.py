"""The verdict logic of claims.md: signs, bands, several comparisons, intervals."""

from __future__ import annotations

import math
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
from harness.run.suitefile import load_suite

#: Studies per simulated rate in the claims' calibration tests (``test_*calibration*``): enough that three standard
#: errors of a 5% rate are 1.5 points, few enough that each test runs in a second or two.
TRIALS = 2000


def at_most(level: float, trials: int = TRIALS) -> float:
    """What a simulated rate of ``trials`` studies may read when the true rate is at most ``level``: ``level`` plus
    three standard errors of a rate at ``level`` (a false alarm in about 1 of 700 runs of a correct rule)."""
    return level + 3 * math.sqrt(level * (1 - level) / trials)


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


# ---------------------------------------------------------------------------------------------------------------------
# One-sided bands, the verdicts over arrays, Holm's step-down


def test_a_band_with_a_better_side_reads_stronger_beyond_it_and_never_contradicts_there() -> None:
    from harness.report.claims import STRONGER, exact_band_verdict

    beyond = Interval(8.0, 7.5, 8.5, 3)  # about 4: the band is [2, 6]
    assert band_verdict(beyond, 4.0) == CONTRADICTED  # two-sided: "about 4" and nothing more
    assert band_verdict(beyond, 4.0, better="above") == STRONGER
    assert band_verdict(Interval(5.9, 5.0, 6.8, 3), 4.0, better="above") == REPRODUCED  # past the edge, not beyond
    assert band_verdict(Interval(1.0, 0.5, 1.5, 3), 4.0, better="above") == CONTRADICTED
    assert band_verdict(Interval(1.0, 0.5, 1.5, 3), 4.0, better="below") == STRONGER
    assert [exact_band_verdict(v, 0.13, better="below") for v in (0.06, 0.10, 0.20, float("nan"))] == [
        STRONGER, REPRODUCED, CONTRADICTED, NOT_MEASURED]
    assert all_of([REPRODUCED, STRONGER]) == STRONGER and all_of([STRONGER, INCONCLUSIVE]) == INCONCLUSIVE
    assert all_of([STRONGER, CONTRADICTED]) == CONTRADICTED


def test_the_verdicts_over_arrays_are_the_scalar_verdicts() -> None:
    """The calibration tests simulate the array forms; the reports call the scalar ones: they must agree."""
    from harness.report.claims import sign_verdicts
    from harness.report.stats import t_intervals

    rng = np.random.default_rng(0)
    values = rng.normal(0.0, 2.0, size=(300, 1)) + rng.normal(0.0, 1.0, size=(300, 4))  # every verdict occurs
    values[0] = 1.0  # identical seeds: zero width
    values[1, 1:] = np.nan  # one value
    arrays = t_intervals(values)
    for k in (1, 3):
        vector = sign_verdicts(*arrays, above=True, comparisons=k)
        scalar = [sign_verdict(t_interval(row.tolist()), above=True, comparisons=k) for row in values]
        assert vector.tolist() == scalar
        assert {CONTRADICTED, REPRODUCED, INCONCLUSIVE} <= set(scalar)
    for row, mean, lo, hi, n in zip(values, *arrays, strict=True):
        iv = t_interval(row.tolist())
        assert iv.n == n and np.allclose([iv.mean, iv.lo, iv.hi], [mean, lo, hi], equal_nan=True)


def test_holm_steps_down_and_leaves_untested_hypotheses_out() -> None:
    from harness.report.claims import holm, p_values

    # sorted 0.005 <= 0.05/4, 0.01 <= 0.05/3, then 0.03 > 0.05/2: the step-down stops
    assert holm(np.array([0.01, 0.04, 0.03, 0.005])).tolist() == [True, False, False, True]
    # NaN is no test: k = 2, so 0.02 <= 0.05/2 and 0.04 <= 0.05/1
    assert holm(np.array([0.04, np.nan, 0.02])).tolist() == [True, False, True]
    assert not holm(np.array([np.nan, np.nan])).any()
    # the t-test behind [1, 2, 3]: t = 2 / (1 / √3) on 2 degrees of freedom, two-sided p = 0.0742
    iv = t_interval([1.0, 2.0, 3.0])
    assert p_values(iv.mean, iv.lo, iv.hi, iv.n) == pytest.approx(0.0742, abs=1e-4)
    assert np.isnan(p_values(1.0, 1.0, 1.0, 3))  # zero width: no test


def test_the_claims_file_names_every_verdict_word_and_says_when_seeds_are_too_few(tmp_path: Path) -> None:
    from harness.report.claims import STRONGER, Claim, write_claims

    claims = [Claim("Table 4", "x", "m", STRONGER), Claim("Table 5", "y", "m", INCONCLUSIVE)]
    text = write_claims(tmp_path, claims, suite="s", seeds=2)[0].read_text()
    assert "`reproduced` / `consistent, and stronger` / `contradicted`" in text
    assert "**consistent, and stronger**" in text
    assert text.count("These results rest on 2 seeds: a verdict needs 3") == 1 and "`paper` profile" in text
    stand_ins = write_claims(tmp_path, claims, suite="s", stand_ins=True, seeds=5)[0].read_text()
    assert "**consistent on stand-ins, and stronger**" in stand_ins and "These results rest on" not in stand_ins
    smoke = write_claims(tmp_path, claims, suite="s", smoke=True, seeds=2)[0].read_text()
    assert "These results rest on" not in smoke  # a smoke profile assesses nothing anyway


@pytest.mark.parametrize("path", sorted((Path(__file__).parents[3] / "suites").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_suite_writes_a_claims_file(path: Path) -> None:
    """Every suite's run writes claims.md (the smoke tests check the files a kind declares), even a kind whose papers
    make no claim: the file then says so, and which profile or suite can judge one."""
    suite = load_suite(path, "smoke")
    assert "claims.md" in suite.kind.outputs(suite)
