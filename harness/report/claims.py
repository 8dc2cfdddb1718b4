"""The papers' claims checked against a study's results: the verdict machinery every kind's claims use, and
``claims.md`` with, per claim, the measured figure, its 95% interval and a verdict.

A claim is a sign: a quantity (a paired-by-seed difference, a relative change, a ratio between lengths) is claimed
to be above or below a bound. Its verdict is ``reproduced`` when the whole interval lies on the claimed side,
``contradicted`` when the whole interval lies on the other side, and ``inconclusive`` otherwise — an interval too
wide to tell, a single seed (no interval), or a figure sitting on the bound. A claim made of several comparisons
("S3Attention loses the least": against each other model) is reproduced when every comparison is, contradicted
when any is, else inconclusive. A claim "about X%" is reproduced when the interval lies within [X/2, 3X/2] and
contradicted when it lies wholly outside that band.

Each kind states its own claims with these: Tables 5, 6, 7 and S7 in :mod:`harness.kinds.accuracy.claims`, Table 4 in
:mod:`harness.kinds.speed.claims`, Table 2 in :mod:`harness.kinds.forecasting.table2`.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..core.files import atomic_write_text
from .stats import Interval, t_interval

REPRODUCED, CONTRADICTED, INCONCLUSIVE, NOT_MEASURED = "reproduced", "contradicted", "inconclusive", "not measured"
S3 = "s3attention"


@dataclass(frozen=True)
class Claim:
    """One claim of the paper and what this study measured of it."""

    table: str
    claim: str
    measured: str
    verdict: str


def sign_verdict(iv: Interval | None, above: bool, bound: float = 0.0) -> str:
    """The verdict on "the quantity is above ``bound``" (``above``) or below it, from its interval."""
    if iv is None:
        return NOT_MEASURED
    if iv.n < 2:
        return INCONCLUSIVE
    lo, hi = (iv.lo - bound, iv.hi - bound) if above else (bound - iv.hi, bound - iv.lo)
    return REPRODUCED if lo > 0 else CONTRADICTED if hi < 0 else INCONCLUSIVE


def band_verdict(iv: Interval | None, target: float) -> str:
    """The verdict on "the quantity is about ``target``": inside [target/2, 3·target/2] or wholly outside it."""
    if iv is None:
        return NOT_MEASURED
    if iv.n < 2:
        return INCONCLUSIVE
    low, high = sorted((target / 2, 3 * target / 2))
    if low <= iv.lo and iv.hi <= high:
        return REPRODUCED
    return CONTRADICTED if iv.hi < low or iv.lo > high else INCONCLUSIVE


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
    return f"{iv.mean:+.2f}{unit} [{iv.lo:+.2f}, {iv.hi:+.2f}]"


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


def comparisons(parts: Mapping[str, Interval | None], above: bool, unit: str) -> tuple[str, str]:
    """A several-part claim: each part's figure and the combined verdict."""
    verdicts = [sign_verdict(iv, above) for iv in parts.values()]
    text = "; ".join(f"vs {name}: {interval_words(iv, unit)}" for name, iv in parts.items())
    return text or "no other model to compare with", all_of(verdicts) if parts else NOT_MEASURED


# ---------------------------------------------------------------------------------------------------------------------
# The studies.


def write_claims(out_dir: Path, claims: Sequence[Claim], *, suite: str) -> list[Path]:
    """``claims.md``: one row per claim with the measured figure and the verdict (nothing when no claim applies)."""
    if not claims:
        return []
    counts = pd.Series([c.verdict for c in claims]).value_counts().to_dict()
    lines = [f"### The paper's claims — {suite}", "",
             ", ".join(f"{n} {v}" for v, n in counts.items()) + ". `reproduced` needs the whole 95% interval on the "
             "claimed side, `contradicted` the whole interval on the other; anything else (one seed: no interval) is "
             "`inconclusive`. Exact quantities (peak memory) compare directly. Rules: harness/report/claims.py.", "",
             "| table | claim | measured [95% interval] | verdict |", "|---|---|---|---|"]
    lines += [f"| {c.table} | {c.claim} | {c.measured} | **{c.verdict}** |" for c in claims]
    return [atomic_write_text(out_dir / "claims.md", "\n".join(lines) + "\n")]
