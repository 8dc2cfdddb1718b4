"""The papers' claims checked against a study's results: the verdict machinery every kind's claims use, and
``claims.md`` with, per claim, the measured figure, its 95% interval and a verdict.

A claim is a sign: a quantity (a paired-by-seed difference, a relative change, a ratio between lengths) is claimed
to be above or below a bound. Its verdict is ``reproduced`` when the whole interval lies on the claimed side,
``contradicted`` when the whole interval lies on the other side, and ``inconclusive`` otherwise — an interval too
wide to tell, fewer than :data:`MIN_SEEDS` seeds, an interval of zero width (identical seeds), or a figure sitting on
the bound. A claim made of several comparisons ("S3Attention loses the least": against each other model) is
reproduced when every comparison is (an intersection–union test: no correction needed), and contradicted when any
one lies outside its Holm-adjusted interval (level 1 − α/k for k comparisons, Holm's first step); the line says how
many comparisons and seeds it rests on. A claim "about X%" is reproduced when the interval lies within [X/2, 3X/2]
and contradicted when it lies wholly outside that band. On generated stand-ins the words are ``consistent on
stand-ins`` and ``inconsistent on stand-ins``: a verdict about the stand-ins, not about the paper's data. A verdict
computed from timings flagged noisy (†, a busy machine) or refaulting (§) is ``inconclusive (noisy)``: the figure
moved with the machine, not the layer. A smoke profile's claims are ``not assessed (smoke)``: its sizes and step
counts only check that the pipeline runs.

Each kind states its own claims with these: Tables 5, 6, 7 and S7 in :mod:`harness.kinds.accuracy.claims`, Table 4 in
:mod:`harness.kinds.speed.claims`, Table 2 in :mod:`harness.kinds.forecasting.table2`.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..core.files import atomic_write_text
from .stats import MIN_SEEDS, Interval, t_interval, t_quantile

REPRODUCED, CONTRADICTED, INCONCLUSIVE, NOT_MEASURED = "reproduced", "contradicted", "inconclusive", "not measured"
#: The words of a verdict measured on generated stand-ins: a verdict about the stand-ins, not about the paper's data.
ON_STAND_INS = {REPRODUCED: "consistent on stand-ins", CONTRADICTED: "inconsistent on stand-ins"}
NOISY = "inconclusive (noisy)"  # a verdict resting on timings of a busy machine (†) or of refaulting memory (§)
SMOKE = "not assessed (smoke)"  # any verdict of a smoke profile: it checks the pipeline, not a claim
S3 = "s3attention"
ALPHA = 0.05  # two-sided; every interval is a 95% one


@dataclass(frozen=True)
class Claim:
    """One claim of the paper and what this study measured of it."""

    table: str
    claim: str
    measured: str
    verdict: str


def _widened(iv: Interval, k: int) -> tuple[float, float]:
    """A t-interval of ``iv.n`` values at the Holm/Bonferroni level 1 − α/k instead of 1 − α."""
    if k <= 1:
        return iv.lo, iv.hi
    scale = t_quantile(1 - ALPHA / (2 * k), iv.n - 1) / t_quantile(1 - ALPHA / 2, iv.n - 1)
    centre, half = (iv.lo + iv.hi) / 2, (iv.hi - iv.lo) / 2
    return centre - scale * half, centre + scale * half


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
    if iv.n < min_n or not iv.has_width:  # NaN (one value) and zero width (identical seeds) included
        return INCONCLUSIVE
    lo, hi = (iv.lo - bound, iv.hi - bound) if above else (bound - iv.hi, bound - iv.lo)
    if lo > 0:
        return REPRODUCED
    wide_lo, wide_hi = _widened(iv, comparisons)
    against = wide_hi < bound if above else wide_lo > bound
    return CONTRADICTED if against else INCONCLUSIVE


def band_verdict(iv: Interval | None, target: float, *, min_n: int = MIN_SEEDS) -> str:
    """The verdict on "the quantity is about ``target``": inside [target/2, 3·target/2] or wholly outside it."""
    if iv is None:
        return NOT_MEASURED
    if iv.n < min_n or not iv.has_width:
        return INCONCLUSIVE
    low, high = sorted((target / 2, 3 * target / 2))
    if low <= iv.lo and iv.hi <= high:
        return REPRODUCED
    return CONTRADICTED if iv.hi < low or iv.lo > high else INCONCLUSIVE


def on_timings(verdict: str, cells: pd.DataFrame) -> str:
    """``verdict``, or :data:`NOISY` where it would read reproduced or contradicted but a timed cell behind it was
    flagged noisy (its ``noisy`` column) or refaults its memory on every call (§)."""
    from .format import refaults  # the § rule lives with the tables' marks

    if verdict not in (REPRODUCED, CONTRADICTED) or cells.empty:
        return verdict
    busy = bool(cells["noisy"].fillna(False).astype(bool).any()) if "noisy" in cells.columns else False
    return NOISY if busy or any(refaults(row) for _, row in cells.iterrows()) else verdict


def is_smoke(profiles: Iterable[object]) -> bool:
    """Whether every run behind a report ran the ``smoke`` profile."""
    found = {str(p) for p in profiles}
    return found == {"smoke"}


def all_of(verdicts: Sequence[str]) -> str:
    """Every part reproduced -> reproduced; any contradicted -> contradicted; nothing measured -> not measured."""
    measured = [v for v in verdicts if v != NOT_MEASURED]
    if not measured:
        return NOT_MEASURED
    if CONTRADICTED in measured:
        return CONTRADICTED
    return REPRODUCED if all(v == REPRODUCED for v in measured) and len(measured) == len(verdicts) else INCONCLUSIVE


def interval_words(iv: Interval | None, unit: str = "") -> str:
    if iv is None:
        return "not measured"
    if iv.n < 2:
        return f"{iv.mean:+.2f}{unit} (1 seed, no interval)"
    short = f" ({iv.n} seeds: a verdict needs {MIN_SEEDS})" if iv.n < MIN_SEEDS else ""
    same = " (zero width: identical seeds, no verdict)" if not iv.has_width else ""
    return f"{iv.mean:+.2f}{unit} [{iv.lo:+.2f}, {iv.hi:+.2f}]{short}{same}"


def several(parts: Mapping[str, Interval | None], above: bool, bound: float = 0.0) -> tuple[str, str]:
    """The verdict of a claim made of several comparisons that must all hold, and the words saying what it rests on:
    how many comparisons, over how many seeds, and the Holm level of a contradiction."""
    measured = [iv for iv in parts.values() if iv is not None]
    k = len(measured)
    verdict = all_of([sign_verdict(iv, above, bound, comparisons=k) for iv in parts.values()]) if parts else \
        NOT_MEASURED
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


def write_claims(out_dir: Path, claims: Sequence[Claim], *, suite: str, stand_ins: bool = False,
                 smoke: bool = False) -> list[Path]:
    """``claims.md``: one row per claim with the measured figure and the verdict (nothing when no claim applies).

    ``stand_ins``: the results were measured on generated stand-ins, so a verdict speaks of them, not of the paper's
    data: ``reproduced`` reads ``consistent on stand-ins`` and ``contradicted`` ``inconsistent on stand-ins``.
    ``smoke``: the results come from a smoke profile, so no claim is assessed (:data:`SMOKE`); the figures stay.
    """
    if not claims:
        return []
    if smoke:
        claims = [Claim(c.table, c.claim, c.measured, SMOKE) for c in claims]
    elif stand_ins:
        claims = [Claim(c.table, c.claim, c.measured, ON_STAND_INS.get(c.verdict, c.verdict)) for c in claims]
    counts = pd.Series([c.verdict for c in claims]).value_counts().to_dict()
    words = ("`consistent on stand-ins` / `inconsistent on stand-ins` (the data are generated stand-ins: a verdict "
             "about them, not about the paper's data)" if stand_ins else "`reproduced` / `contradicted`")
    smoke_words = (" These results come from a smoke profile, which checks that the pipeline runs: no claim is "
                   f"assessed (`{SMOKE}`)." if smoke else "")
    lines = [f"### The paper's claims — {suite}", "",
             ", ".join(f"{n} {v}" for v, n in counts.items()) + f".{smoke_words} Verdict words: {words}. The first "
             "needs the whole 95% interval on the claimed side, the second the whole interval on the other (for a "
             "claim of k comparisons, its Holm-adjusted interval); anything else — fewer than "
             f"{MIN_SEEDS} seeds, an interval of zero width — is `inconclusive`, and a verdict resting on timings "
             f"flagged † (busy machine) or § (memory faulted in on every call) is `{NOISY}`. Exact quantities (peak "
             "memory) compare directly. Rules: harness/report/claims.py.", "",
             "| table | claim | measured [95% interval] | verdict |", "|---|---|---|---|"]
    lines += [f"| {c.table} | {c.claim} | {c.measured} | **{c.verdict}** |" for c in claims]
    return [atomic_write_text(out_dir / "claims.md", "\n".join(lines) + "\n")]
