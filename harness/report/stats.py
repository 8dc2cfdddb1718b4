"""The statistics behind every ratio and comparison the reports print: paired ratios of interleaved timings with a
bootstrap confidence interval, and a rank test for two sets of samples. numpy only, deterministic (fixed seed)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
_BOOTSTRAP = 2000
_SEED = 0  # the same samples always give the same interval


@dataclass(frozen=True)
class Ratio:
    """A ratio estimate: ``value`` with a ``CONFIDENCE`` interval [``lo``, ``hi``] from ``n`` paired samples."""

    value: float
    lo: float
    hi: float
    n: int


def _median_ci(values: np.ndarray) -> tuple[float, float, float]:
    """Median and percentile-bootstrap confidence interval of the median."""
    rng = np.random.default_rng(_SEED)
    boots = np.median(rng.choice(values, size=(_BOOTSTRAP, len(values)), replace=True), axis=1)
    tail = 100 * (1 - CONFIDENCE) / 2
    lo, hi = np.percentile(boots, [tail, 100 - tail])
    return float(np.median(values)), float(lo), float(hi)


def paired_ratio(numerator: Sequence[float], denominator: Sequence[float]) -> Ratio | None:
    """Median over rounds of ``numerator[i] / denominator[i]`` (samples of the same interleaved round), with a
    bootstrap CI; None without at least 2 complete pairs.

    Within one round both were timed within a fraction of a second of each other, so a drift of the whole machine
    (5-18% between quiet runs here) cancels in each round's ratio.
    """
    n = min(len(numerator), len(denominator))
    if n < 2:
        return None
    r = np.asarray(numerator[:n], dtype=float) / np.asarray(denominator[:n], dtype=float)
    r = r[np.isfinite(r) & (r > 0)]
    if len(r) < 2:
        return None
    value, lo, hi = _median_ci(r)
    return Ratio(value, lo, hi, len(r))


def ratio_of_medians(b: Sequence[float], a: Sequence[float]) -> Ratio | None:
    """median(b) / median(a) of two unpaired sample sets, with a bootstrap CI (resampling each set)."""
    a_arr, b_arr = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a_arr) < 2 or len(b_arr) < 2 or np.median(a_arr) <= 0:
        return None
    rng = np.random.default_rng(_SEED)
    boots = (np.median(rng.choice(b_arr, size=(_BOOTSTRAP, len(b_arr))), axis=1)
             / np.median(rng.choice(a_arr, size=(_BOOTSTRAP, len(a_arr))), axis=1))
    tail = 100 * (1 - CONFIDENCE) / 2
    lo, hi = np.percentile(boots, [tail, 100 - tail])
    return Ratio(float(np.median(b_arr) / np.median(a_arr)), float(lo), float(hi), min(len(a_arr), len(b_arr)))


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the Mann-Whitney U test (normal approximation with tie correction) that ``a`` and ``b``
    come from the same distribution. 1.0 when either set has fewer than 2 samples."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    n1, n2 = len(x), len(y)
    if n1 < 2 or n2 < 2:
        return 1.0
    both = np.concatenate([x, y])
    order = both.argsort(kind="mergesort")
    ranks = np.empty(len(both))
    sorted_vals = both[order]
    i = 0
    while i < len(both):  # average ranks over ties
        j = i
        while j + 1 < len(both) and sorted_vals[j + 1] == sorted_vals[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    u = ranks[:n1].sum() - n1 * (n1 + 1) / 2
    _, counts = np.unique(both, return_counts=True)
    n = n1 + n2
    sigma = math.sqrt(n1 * n2 / 12 * ((n + 1) - (counts**3 - counts).sum() / (n * (n - 1))))
    if sigma == 0:
        return 1.0
    z = (abs(u - n1 * n2 / 2) - 0.5) / sigma  # continuity correction
    return float(math.erfc(max(z, 0.0) / math.sqrt(2)))


#: Two-sided 95% quantiles of Student's t by degrees of freedom (1-30; the normal 1.96 beyond), so that intervals
#: over a handful of seeds are as wide as they must be without a scipy dependency.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with an integer number of degrees of freedom, in closed form (Abramowitz & Stegun
    26.7.3-4: a finite series in θ = atan(t / √df)), so that no scipy is needed."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be a positive integer, got {df}")
    theta = math.atan(abs(t) / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2:  # odd: (2/π)(θ + sinθ cosθ (1 + (2/3)cos²θ + (2·4)/(3·5)cos⁴θ + ...)), df − 2 terms of cos
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        inside = 2 / math.pi * (theta + s * math.cos(theta) * total)
    else:  # even: sinθ (1 + (1/2)cos²θ + (1·3)/(2·4)cos⁴θ + ...)
        term, total = 1.0, 1.0
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        inside = s * total
    return 0.5 + math.copysign(inside / 2, t)


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on :func:`t_cdf`)."""
    lo, hi = -1e6, 1e6
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


#: Fewer values than this never establish a sign or a verdict: two seeds give an interval, but one too unstable to
#: rest a conclusion on (and two identical seeds a zero-width one).
MIN_SEEDS = 3


@dataclass(frozen=True)
class Interval:
    """A mean with its 95% t-interval from ``n`` values (``lo``/``hi`` NaN below two values)."""

    mean: float
    lo: float
    hi: float
    n: int

    @property
    def contains_zero(self) -> bool:
        """True where the interval reaches 0 or is unknown."""
        return not (self.lo > 0 or self.hi < 0)

    @property
    def sign_established(self) -> bool:
        """Whether the interval establishes the sign: it excludes 0, rests on at least :data:`MIN_SEEDS` values and
        has some width (identical seeds give a zero-width "interval" that establishes nothing)."""
        return self.n >= MIN_SEEDS and self.has_width and not self.contains_zero

    @property
    def has_width(self) -> bool:
        """Whether the interval is wider than the rounding of identical values (which leaves ~1e-15 of width)."""
        return self.hi - self.lo > 1e-9 * max(1.0, abs(self.mean))


def t_interval(values: Sequence[float]) -> Interval | None:
    """Mean and two-sided 95% Student-t interval of ``values`` (e.g. per-seed paired differences); None if empty."""
    x = np.asarray([v for v in values if np.isfinite(v)], dtype=float)
    if len(x) == 0:
        return None
    mean, lo, hi, n = t_intervals(x)
    return Interval(float(mean), float(lo), float(hi), int(n))


def t_intervals(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`t_interval` over the last axis of ``values`` for every other index at once (the claims' calibration
    simulates thousands of studies): the mean, the interval's ends and the count of finite values, each of the shape
    of ``values`` without its last axis. Non-finite values are left out; the ends are NaN below two values, and the
    mean too where there are none."""
    x = np.asarray(values, dtype=float)
    finite = np.isfinite(x)
    n = finite.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(finite, x, 0.0).sum(axis=-1) / n
        spread = np.where(finite, x - mean[..., None], 0.0)
        std = np.sqrt((spread**2).sum(axis=-1) / (n - 1))
        by_count = np.array([np.nan, np.nan, *_T975])  # t(0.975, n − 1) by n; the normal's 1.96 beyond the table
        t = np.where(n < len(by_count), by_count[np.minimum(n, len(by_count) - 1)], 1.96)
        half = np.where(n >= 2, t * std / np.sqrt(n), np.nan)
    return mean, mean - half, mean + half, n


def fit_loglog_slope(seq_len: Sequence[float], values: Sequence[float]) -> float:
    """Least-squares slope of log(values) against log(seq_len), i.e. the empirical scaling exponent.

    Args:
        seq_len: Sequence lengths (positive, at least two distinct).
        values: Measured values at those lengths (positive).

    Returns:
        The exponent k of the best fit ``values ≈ c · seq_len**k``.

    Raises:
        ValueError: On mismatched lengths, non-positive inputs or fewer than two distinct lengths.
    """
    x = np.asarray(seq_len, dtype=float)
    y = np.asarray(values, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"seq_len and values must be 1-D of equal length, got {x.shape} and {y.shape}")
    if not (np.all(x > 0) and np.all(y > 0)):
        raise ValueError("log-log fit needs positive seq_len and values")
    if np.unique(x).size < 2:
        raise ValueError("log-log fit needs at least two distinct sequence lengths")
    slope, _intercept = np.polyfit(np.log(x), np.log(y), deg=1)
    return float(slope)


def slope_fit(seq_len: Sequence[float], values: Sequence[float]) -> tuple[float, float, float, float]:
    """(slope, 95% low, 95% high, R²) of the log-log least-squares fit; the interval is the t-interval of the slope
    (NaN with two points: no residual to estimate it from), R² that of the log-log line (1 with two points)."""
    slope = fit_loglog_slope(seq_len, values)
    x, y = np.log(np.asarray(seq_len, dtype=float)), np.log(np.asarray(values, dtype=float))
    intercept = float(np.mean(y) - slope * np.mean(x))
    residual = y - (intercept + slope * x)
    total = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(residual**2)) / total if total > 0 else 1.0
    if len(x) < 3:
        return slope, float("nan"), float("nan"), r2
    se = math.sqrt(float(np.sum(residual**2)) / (len(x) - 2) / float(np.sum((x - x.mean()) ** 2)))
    half = t_quantile(0.975, len(x) - 2) * se
    return slope, slope - half, slope + half, r2
