"""The papers' claims checked against a study's results: the verdict machinery every kind's claims use, and
``claims.md`` with, per claim, the measured figure, its 95% interval and a verdict.

A claim is a sign: a quantity (a paired-by-seed difference, a relative change, a ratio between lengths) is claimed
to be above or below a bound. Its verdict is ``reproduced`` when the whole interval lies on the claimed side,
``contradicted`` when the whole interval lies on the other side, and ``inconclusive`` otherwise — an interval too
wide to tell, fewer than :data:`MIN_SEEDS` seeds, an interval of zero width (identical seeds), or a figure sitting on
the bound. A claim made of several comparisons ("S3Attention's average is the highest": against each other model)
is reproduced when every comparison is (an intersection–union test: no correction needed), and contradicted when
any one lies outside its Holm-adjusted interval (level 1 − α/k for k comparisons, Holm's first step); the line says
how many comparisons and seeds it rests on. A claim "about X%" is reproduced when the interval lies within
[X/2, 3X/2] and contradicted when it lies wholly outside that band; where the paper counts one side as better (a
larger speed-up, less memory), a result wholly beyond the band on that side is ``consistent, and stronger``
(:data:`STRONGER`), never contradicted. On generated stand-ins the words are ``consistent on stand-ins`` and
``inconsistent on stand-ins``: a verdict about the stand-ins, not about the paper's data. A verdict computed from
timings flagged noisy (†, a busy machine) or refaulting (§) is ``inconclusive (noisy)``: the figure moved with the
machine, not the layer. A smoke profile's claims are ``not assessed (smoke)``: its sizes and step counts only check
that the pipeline runs.

Every rule is a statistical test, and each kind's tests simulate it (``test_*calibration*``): at the claim's
boundary it reads ``contradicted`` at most 5% of the time, and on the paper's own numbers, with seed noise as this
project's runs measure it, how often it reads ``reproduced``. So that those simulations run the very code the
reports run, the verdicts are computed over arrays (:func:`sign_verdicts`, :func:`band_verdicts`,
:func:`all_of_verdicts`, :func:`holm`); the scalar forms wrap them.

Each kind states its own claims with these: Tables 1, 5, 6, 7 and S7 in :mod:`harness.kinds.accuracy.claims`,
Table 4 in :mod:`harness.kinds.speed.claims`, Table 2 in :mod:`harness.kinds.forecasting.table2`.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from ..core.files import atomic_write_text
from .stats import MIN_SEEDS, Interval, t_cdf, t_interval, t_quantile

REPRODUCED, CONTRADICTED, INCONCLUSIVE, NOT_MEASURED = "reproduced", "contradicted", "inconclusive", "not measured"
#: A result beyond the paper's on the side the paper counts as better: the claim holds, and more.
STRONGER = "consistent, and stronger"
#: The words of a verdict measured on generated stand-ins: a verdict about the stand-ins, not about the paper's data.
ON_STAND_INS = {REPRODUCED: "consistent on stand-ins", CONTRADICTED: "inconsistent on stand-ins",
                STRONGER: "consistent on stand-ins, and stronger"}
NOISY = "inconclusive (noisy)"  # a verdict resting on timings of a busy machine (†) or of refaulting memory (§)
SMOKE = "not assessed (smoke)"  # any verdict of a smoke profile: it checks the pipeline, not a claim
S3 = "s3attention"
ALPHA = 0.05  # two-sided; every interval is a 95% one
Side = Literal["above", "below"]


@dataclass(frozen=True)
class Claim:
    """One claim of the paper and what this study measured of it."""

    table: str
    claim: str
    measured: str
    verdict: str


# ---------------------------------------------------------------------------------------------------------------------
# Verdicts over arrays: one element per interval (or per simulated study); n = 0 marks an interval not measured.


@functools.cache
def _t_at(p: float, n: int) -> float:
    """The ``p`` quantile of Student's t for an interval over ``n`` values (n − 1 degrees of freedom)."""
    return t_quantile(p, n - 1)


def _quantiles(p: object, n: np.ndarray) -> np.ndarray:
    """:func:`_t_at` for every element of ``p`` and ``n`` (broadcast together; NaN below two values), each distinct
    pair computed once."""
    p, n = np.broadcast_arrays(np.asarray(p, dtype=float), np.asarray(n, dtype=float))
    out = np.full(n.shape, np.nan)
    valid = n >= 2
    for q, count in set(zip(p[valid].tolist(), n[valid].tolist(), strict=True)):
        out[(p == q) & (n == count)] = _t_at(q, int(count))
    return out


def _arrays(mean: object, lo: object, hi: object, n: object) -> tuple[np.ndarray, ...]:
    return tuple(np.asarray(a, dtype=float) for a in np.broadcast_arrays(mean, lo, hi, n))


def _judgeable(mean: np.ndarray, lo: np.ndarray, hi: np.ndarray, n: np.ndarray, min_n: int) -> np.ndarray:
    """Intervals a verdict may rest on: at least ``min_n`` values and some width (identical seeds leave ~1e-15)."""
    with np.errstate(invalid="ignore"):
        return (n >= min_n) & (hi - lo > 1e-9 * np.maximum(1.0, np.abs(mean)))


def _widened(lo: np.ndarray, hi: np.ndarray, n: np.ndarray, k: object) -> tuple[np.ndarray, np.ndarray]:
    """Intervals over ``n`` values at the Holm/Bonferroni level 1 − α/k instead of 1 − α (``k`` broadcasts)."""
    k = np.broadcast_to(np.asarray(k, dtype=float), lo.shape)
    if not (k > 1).any():
        return lo, hi
    scale = np.where(k > 1, _quantiles(1 - ALPHA / (2 * np.maximum(k, 1)), n) / _quantiles(1 - ALPHA / 2, n), 1.0)
    centre, half = (lo + hi) / 2, (hi - lo) / 2
    return centre - scale * half, centre + scale * half


def sign_verdicts(mean: object, lo: object, hi: object, n: object, *, above: bool, bound: object = 0.0,
                  comparisons: object = 1, min_n: int = MIN_SEEDS) -> np.ndarray:
    """:func:`sign_verdict` of every interval (``mean``, ``lo``, ``hi`` over ``n`` values; arrays broadcast
    together, ``bound`` and ``comparisons`` too); an object array of verdict words."""
    mean, lo, hi, n = _arrays(mean, lo, hi, n)
    bound = np.broadcast_to(np.asarray(bound, dtype=float), mean.shape)
    out = np.full(mean.shape, INCONCLUSIVE, dtype=object)
    out[n == 0] = NOT_MEASURED
    ok = _judgeable(mean, lo, hi, n, min_n)
    wide_lo, wide_hi = _widened(lo, hi, n, comparisons)
    with np.errstate(invalid="ignore"):
        holds, against = (lo > bound, wide_hi < bound) if above else (hi < bound, wide_lo > bound)
    out[ok & against] = CONTRADICTED
    out[ok & holds] = REPRODUCED
    return out


def sign_verdict(iv: Interval | None, above: bool, bound: float = 0.0, *, comparisons: int = 1,
                 min_n: int = MIN_SEEDS) -> str:
    """The verdict on "the quantity is above ``bound``" (``above``) or below it, from its interval.

    ``reproduced`` needs the whole 95% interval on the claimed side. ``contradicted`` needs the whole interval on the
    other side, at the Holm level 1 − α/k when the claim is one of ``comparisons`` = k parts that must all hold: "any
    part contradicted" is then the union of k tests, whose Holm step-down rejects anything only if its smallest p
    clears α/k. (All parts reproduced is an intersection–union test: each part at α is already a level-α test.)
    Fewer than ``min_n`` values, or a zero-width interval, are ``inconclusive``.
    """
    if iv is None:
        return NOT_MEASURED
    return str(sign_verdicts(iv.mean, iv.lo, iv.hi, iv.n, above=above, bound=bound, comparisons=comparisons,
                             min_n=min_n)[()])


def band_verdicts(mean: object, lo: object, hi: object, n: object, target: float, *, better: Side | None = None,
                  comparisons: object = 1, min_n: int = MIN_SEEDS) -> np.ndarray:
    """:func:`band_verdict` of every interval (arrays broadcast together, ``comparisons`` too); an object array of
    verdict words."""
    mean, lo, hi, n = _arrays(mean, lo, hi, n)
    low, high = sorted((target / 2, 3 * target / 2))
    out = np.full(mean.shape, INCONCLUSIVE, dtype=object)
    out[n == 0] = NOT_MEASURED
    ok = _judgeable(mean, lo, hi, n, min_n)
    wide_lo, wide_hi = _widened(lo, hi, n, comparisons)
    with np.errstate(invalid="ignore"):
        if better == "above":  # "at least about X": the upper edge bounds nothing
            holds, stronger, against = lo >= low, lo > high, wide_hi < low
        elif better == "below":
            holds, stronger, against = hi <= high, hi < low, wide_lo > high
        else:
            holds, stronger, against = (low <= lo) & (hi <= high), np.zeros(mean.shape, bool), \
                (wide_hi < low) | (wide_lo > high)
    out[ok & against] = CONTRADICTED
    out[ok & holds] = REPRODUCED
    out[ok & stronger] = STRONGER
    return out


def band_verdict(iv: Interval | None, target: float, *, better: Side | None = None, comparisons: int = 1,
                 min_n: int = MIN_SEEDS) -> str:
    """The verdict on "the quantity is about ``target``": inside [target/2, 3·target/2] or wholly outside it.

    ``better``: the side of the band the paper counts as better ("above" for a speed-up). A result wholly beyond the
    band on that side is :data:`STRONGER`, and one reaching past that edge but not below the other is reproduced:
    the claim is then one-sided, "at least about ``target``". ``comparisons``: as :func:`sign_verdict`'s.
    """
    if iv is None:
        return NOT_MEASURED
    return str(band_verdicts(iv.mean, iv.lo, iv.hi, iv.n, target, better=better, comparisons=comparisons,
                             min_n=min_n)[()])


def exact_band_verdict(value: float | None, target: float, *, better: Side | None = None) -> str:
    """:func:`band_verdict` of an exact quantity (peak memory from allocator counts: no interval, no noise), compared
    directly with the band [target/2, 3·target/2]."""
    if value is None or not np.isfinite(value):
        return NOT_MEASURED
    low, high = sorted((target / 2, 3 * target / 2))
    if value > high:
        return STRONGER if better == "above" else CONTRADICTED
    if value < low:
        return STRONGER if better == "below" else CONTRADICTED
    return REPRODUCED


def all_of_verdicts(verdicts: np.ndarray) -> np.ndarray:
    """:func:`all_of` along the last axis of an array of verdict words."""
    v = np.asarray(verdicts, dtype=object)
    measured = v != NOT_MEASURED
    out = np.full(v.shape[:-1], INCONCLUSIVE, dtype=object)
    holds = np.isin(v, [REPRODUCED, STRONGER]).all(axis=-1)
    out[holds] = REPRODUCED
    out[holds & (v == STRONGER).any(axis=-1)] = STRONGER
    out[(v == CONTRADICTED).any(axis=-1)] = CONTRADICTED
    out[~measured.any(axis=-1)] = NOT_MEASURED
    return out


def all_of(verdicts: Sequence[str]) -> str:
    """Every part holds -> reproduced (consistent, and stronger where a part is); any contradicted -> contradicted;
    nothing measured -> not measured; else inconclusive (a part not measured among measured ones included)."""
    if not verdicts:
        return NOT_MEASURED
    return str(all_of_verdicts(np.asarray(list(verdicts), dtype=object))[()])


def p_values(mean: object, lo: object, hi: object, n: object, *, min_n: int = MIN_SEEDS) -> np.ndarray:
    """The two-sided p-value of the t-test of "mean 0" behind each 95% t-interval; NaN where no verdict may rest on
    the interval (fewer than ``min_n`` values, no width, not measured), which :func:`holm` leaves out of its family."""
    mean, lo, hi, n = _arrays(mean, lo, hi, n)
    out = np.full(mean.shape, np.nan)
    ok = _judgeable(mean, lo, hi, n, min_n) & (n >= 2)
    se = (hi[ok] - lo[ok]) / (2 * _quantiles(1 - ALPHA / 2, n[ok]))
    t = np.abs(mean[ok]) / se
    out[ok] = [2 * (1 - t_cdf(float(x), int(k) - 1)) for x, k in zip(t, n[ok], strict=True)]
    return out


def holm(p: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """Which hypotheses along the last axis Holm's step-down rejects at family-wise level ``alpha``: the i-th smallest
    p-value (i from 0) of the k tested is rejected while it and every smaller one are at most α/(k − i). A NaN
    p-value is no test: it is left out of the family (and k)."""
    p = np.asarray(p, dtype=float)
    tested = np.isfinite(p)
    k = tested.sum(axis=-1, keepdims=True)
    order = np.argsort(np.where(tested, p, np.inf), axis=-1, kind="stable")
    sorted_p = np.take_along_axis(np.where(tested, p, np.inf), order, axis=-1)
    left = k - np.arange(p.shape[-1])  # hypotheses not yet rejected at each step
    with np.errstate(divide="ignore"):
        threshold = np.where(left > 0, alpha / np.maximum(left, 1), -1.0)
    passed = np.logical_and.accumulate(sorted_p <= threshold, axis=-1)
    out = np.zeros(p.shape, dtype=bool)
    np.put_along_axis(out, order, passed, axis=-1)
    return out


def on_timings(verdict: str, cells: pd.DataFrame) -> str:
    """``verdict``, or :data:`NOISY` where it would read reproduced, stronger or contradicted but a timed cell behind
    it was flagged noisy (its ``noisy`` column) or refaults its memory on every call (§)."""
    from .format import refaults  # the § rule lives with the tables' marks

    if verdict not in (REPRODUCED, STRONGER, CONTRADICTED) or cells.empty:
        return verdict
    busy = bool(cells["noisy"].fillna(False).astype(bool).any()) if "noisy" in cells.columns else False
    return NOISY if busy or any(refaults(row) for _, row in cells.iterrows()) else verdict


def is_smoke(profiles: Iterable[object]) -> bool:
    """Whether every run behind a report ran the ``smoke`` profile."""
    found = {str(p) for p in profiles}
    return found == {"smoke"}


def seed_count(df: pd.DataFrame) -> int | None:
    """How many seeds the ``ok`` cells of a results frame ran (None without a ``seed`` column): what a verdict
    resting on seeds can have at most."""
    if "seed" not in df.columns:
        return None
    ok = df[df["status"] == "ok"] if "status" in df.columns else df
    return int(ok["seed"].nunique())


def interval_words(iv: Interval | None, unit: str = "") -> str:
    if iv is None:
        return "not measured"
    if iv.n < 2:
        return f"{iv.mean:+.2f}{unit} (1 seed, no interval)"
    short = f" ({iv.n} seeds: a verdict needs {MIN_SEEDS})" if iv.n < MIN_SEEDS else ""
    same = " (zero width: identical seeds, no verdict)" if not iv.has_width else ""
    return f"{iv.mean:+.2f}{unit} [{iv.lo:+.2f}, {iv.hi:+.2f}]{short}{same}"


def several_verdicts(mean: object, lo: object, hi: object, n: object, *, above: bool,
                     bound: object = 0.0) -> np.ndarray:
    """:func:`several` along the last axis: every part reproduced at 95% -> reproduced; any part outside its
    Holm-adjusted interval (k = the parts measured, n > 0) -> contradicted."""
    mean, lo, hi, n = _arrays(mean, lo, hi, n)
    k = (n > 0).sum(axis=-1, keepdims=True)
    return all_of_verdicts(sign_verdicts(mean, lo, hi, n, above=above, bound=bound, comparisons=k))


def several(parts: Mapping[str, Interval | None], above: bool,
            bound: float | Mapping[str, float] = 0.0) -> tuple[str, str]:
    """The verdict of a claim made of several comparisons that must all hold, and the words saying what it rests on:
    how many comparisons, over how many seeds, and the Holm level of a contradiction. ``bound``: one for every
    part, or each part's own."""
    if not parts:
        return NOT_MEASURED, ""
    ivs = [iv or Interval(np.nan, np.nan, np.nan, 0) for iv in parts.values()]
    bounds = [bound[name] for name in parts] if isinstance(bound, Mapping) else bound
    verdict = str(several_verdicts(*zip(*((iv.mean, iv.lo, iv.hi, iv.n) for iv in ivs), strict=True), above=above,
                                   bound=bounds)[()])
    measured = [iv for iv in parts.values() if iv is not None]
    k = len(measured)
    if k <= 1:
        return verdict, ""
    seeds = sorted({iv.n for iv in measured})
    return verdict, (f" — {k} comparisons over {'/'.join(map(str, seeds))} seeds; each must hold at 95%, and one "
                     f"contradicts only outside its Holm-adjusted {100 * (1 - ALPHA / k):.1f}% interval")


def paired(wide: pd.DataFrame, a: tuple[Hashable, ...], b: tuple[Hashable, ...], column: Hashable,
            transform: Callable[[pd.Series], pd.Series] | None = None) -> Interval | None:
    """t-interval over seeds of value(a) − value(b) in ``column`` (each first mapped by ``transform``)."""
    try:
        x, y = wide.loc[a], wide.loc[b]
    except KeyError:
        return None
    if transform is not None:
        x, y = transform(x), transform(y)
    x, y = x[column].dropna(), y[column].dropna()
    x, y = x.align(y, join="inner")
    return t_interval((x - y).tolist()) if len(x) else None


def comparisons(parts: Mapping[str, Interval | None], above: bool, unit: str, prefix: str = "vs ") -> tuple[str, str]:
    """A several-part claim: each part's figure, what the verdict rests on, and the combined verdict
    (:func:`several`)."""
    verdict, basis = several(parts, above)
    text = "; ".join(f"{prefix}{name}: {interval_words(iv, unit)}" for name, iv in parts.items())
    return (text + basis) if text else "no other model to compare with", verdict


# ---------------------------------------------------------------------------------------------------------------------
# The studies.


#: What ``claims.md`` says where a kind checks no claim of the paper (:func:`write_claims`'s ``without``).
NO_CLAIMS = "none of the claims this suite's kind checks applies to the attentions and settings that ran"


def write_claims(out_dir: Path, claims: Sequence[Claim], *, suite: str, stand_ins: bool = False,
                 smoke: bool = False, seeds: int | None = None, without: str = NO_CLAIMS,
                 words: Mapping[str, str] | None = None) -> list[Path]:
    """``claims.md``: one row per claim with the measured figure and the verdict.

    Every suite writes one, so that a reader looking for the verdicts finds the reason there are none: with no claim,
    the file says so and why (``without``: e.g. the kind's paper makes no claim about it, and which profile or suite
    can judge one).

    ``stand_ins``: the results were measured on generated stand-ins, so a verdict speaks of them, not of the paper's
    data: ``reproduced`` reads ``consistent on stand-ins`` and ``contradicted`` ``inconsistent on stand-ins``.
    ``smoke``: the results come from a smoke profile, so no claim is assessed (:data:`SMOKE`); the figures stay.
    ``words``: the verdict words of a budget that is not the paper's (a reduced one: ``consistent (reduced
    budget)``), as ``stand_ins`` has its own.
    ``seeds``: how many seeds the results ran (:func:`seed_count`). Below :data:`MIN_SEEDS` no claim resting on
    seeds can reach a verdict, whatever its figures, and the file says so once, with the profile that can.
    """
    if not claims:
        text = f"### The paper's claims — {suite}\n\nNo claim of the paper is checked here: {without}.\n"
        return [atomic_write_text(out_dir / "claims.md", text)]
    if smoke:
        claims = [Claim(c.table, c.claim, c.measured, SMOKE) for c in claims]
    mapping = words or (ON_STAND_INS if stand_ins else {})
    if mapping and not smoke:
        claims = [Claim(c.table, c.claim, c.measured, mapping.get(c.verdict, c.verdict)) for c in claims]
    counts = pd.Series([c.verdict for c in claims]).value_counts().to_dict()
    shown = {v: mapping.get(v, v) for v in (REPRODUCED, STRONGER, CONTRADICTED)}
    words = (f"`{shown[REPRODUCED]}` / `{shown[STRONGER]}` / `{shown[CONTRADICTED]}`"
             + (" (the data are generated stand-ins: a verdict about them, not about the paper's data)"
                if stand_ins else ""))
    smoke_words = (" These results come from a smoke profile, which checks that the pipeline runs: no claim is "
                   f"assessed (`{SMOKE}`)." if smoke else "")
    seed_words = (f" **These results rest on {seeds} seed{'s' if seeds != 1 else ''}: a verdict needs {MIN_SEEDS}, so "
                  "every claim resting on seeds reads `inconclusive` here by construction, whatever its figures. This "
                  "profile cannot reach a verdict on them; the suite's `paper` profile runs enough seeds to.**"
                  if seeds is not None and seeds < MIN_SEEDS and not smoke else "")
    lines = [f"### The paper's claims — {suite}", "",
             ", ".join(f"{n} {v}" for v, n in counts.items()) + f".{smoke_words}{seed_words} Verdict words: {words}. "
             "The first needs the whole 95% interval on the claimed side; the second, where the paper counts one side "
             "as better (a larger speed-up, less memory), the whole interval beyond the paper's figure on that side; "
             "the third the whole interval on the other side (for a claim of k comparisons, its Holm-adjusted "
             f"interval); anything else — fewer than {MIN_SEEDS} seeds, an interval of zero width — is "
             f"`inconclusive`, and a verdict resting on timings flagged † (busy machine) or § (memory faulted in on "
             f"every call) is `{NOISY}`. Exact quantities (peak memory) compare directly. Rules: "
             "harness/report/claims.py.", "",
             "| table | claim | measured [95% interval] | verdict |", "|---|---|---|---|"]
    lines += [f"| {c.table} | {c.claim} | {c.measured} | **{c.verdict}** |" for c in claims]
    return [atomic_write_text(out_dir / "claims.md", "\n".join(lines) + "\n")]
