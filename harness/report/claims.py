"""The S3Attention paper's qualitative claims, checked against a study's results: ``claims.md`` with, per claim,
the measured figure, its 95% interval and a verdict.

A claim is a sign: a quantity (a paired-by-seed difference, a relative change, a ratio between lengths) is claimed
to be above or below a bound. Its verdict is ``reproduced`` when the whole interval lies on the claimed side,
``contradicted`` when the whole interval lies on the other side, and ``inconclusive`` otherwise — an interval too
wide to tell, a single seed (no interval), or a figure sitting on the bound. A claim made of several comparisons
("S3Attention loses the least": against each other model) is reproduced when every comparison is, contradicted
when any is, else inconclusive. A claim "about X%" is reproduced when the interval lies within [X/2, 3X/2] and
contradicted when it lies wholly outside that band.

The claims (§IV of ``s3attention-journal.txt``): Table 5 — S3Attention loses the least accuracy at the largest
noise (a = 8) and vanilla the most; Table 6 — r = 1 and s2 = 1 are the worst settings; Table 7 — every removal
lowers the average and removing column attention hurts most; Table S7 — smoothing lowers μ by about 30%; Table 4 —
S3Attention's speed-up over vanilla grows with n and its memory ratio falls.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..core.files import atomic_write_text
from ..kinds.accuracy.differences import per_seed
from ..kinds.accuracy.summary import AVG, with_axis_defaults
from .format import refaults
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


def _paired(wide: pd.DataFrame, a: tuple[Hashable, ...], b: tuple[Hashable, ...], column: Hashable,
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


def _comparisons(parts: Mapping[str, Interval | None], above: bool, unit: str) -> tuple[str, str]:
    """A several-part claim: each part's figure and the combined verdict."""
    verdicts = [sign_verdict(iv, above) for iv in parts.values()]
    text = "; ".join(f"vs {name}: {interval_words(iv, unit)}" for name, iv in parts.items())
    return text or "no other model to compare with", all_of(verdicts) if parts else NOT_MEASURED


# ---------------------------------------------------------------------------------------------------------------------
# The studies.


def table5_claims(df: pd.DataFrame, baseline: str = "vanilla") -> list[Claim]:
    """S3Attention loses the least accuracy at the largest noise level, the baseline the most (noise on train and
    test, the paper's mode): per-seed relative changes from a = 0, compared pairwise by seed."""
    df = with_axis_defaults(df)
    sub = df[(df["noise"] == 0) | (df["noise_on"] == "train+test")]
    if sub["noise"].max() <= 0:
        return []
    a = float(sub["noise"].max())
    wide = per_seed(sub, ["attention", "variant", "task"], column="noise")
    models = sorted({k[:3] for k in wide.index}) if not wide.empty else []

    def change(rows: pd.DataFrame) -> pd.DataFrame:
        return rows.assign(rel=100.0 * (rows[a] - rows[0.0]) / rows[0.0])

    out = []
    for who, above, words in ((S3, True, "loses the least"), (baseline, False, "loses the most")):
        for model in (m for m in models if m[0] == who):
            others = {m[0]: _paired(wide, model, m, "rel", change) for m in models
                      if m[0] != who and m[1:] == model[1:]}
            measured, verdict = _comparisons(others, above, " pts")
            out.append(Claim("Table 5", f"{who} {words} accuracy at a = {a:g} (relative change from a = 0; "
                                        f"{model[2]})", f"its change minus each other's {measured}", verdict))
    return out


def table6_claims(df: pd.DataFrame, sweeps: Mapping[str, Sequence[tuple[object, str]]]) -> list[Claim]:
    """r = 1 and s2 = 1 are the worst settings: their Average is below every other value's of the same sweep."""
    wide = per_seed(df, ["attention", "variant"])
    out = []
    for parameter in ("r", "s2"):
        rows = sweeps.get(parameter, [])
        worst = [label for value, label in rows if value == 1]
        if not worst:
            continue
        for attention in sorted({k[0] for k in wide.index}) if not wide.empty else []:
            others = {f"{parameter}={value}": _paired(wide, (attention, worst[0]), (attention, label), AVG)
                      for value, label in rows if label != worst[0]}
            measured, verdict = _comparisons(others, False, " pts")
            out.append(Claim("Table 6", f"{parameter} = 1 is the worst setting ({attention}, Average)",
                             f"its Average minus each other setting's {measured}", verdict))
    return out


def table7_claims(df: pd.DataFrame, ablations: Sequence[str], base_variant: str,
                  column_removal: str = "no_col_attention") -> list[Claim]:
    """Every removal lowers the Average; removing column attention lowers it most."""
    wide = per_seed(df, ["attention", "variant"])
    out = []
    for attention in sorted({k[0] for k in wide.index}) if not wide.empty else []:
        drops = {v: _paired(wide, (attention, v), (attention, base_variant), AVG) for v in ablations
                 if v != base_variant}
        if not drops:
            continue
        verdicts = [sign_verdict(iv, above=False) for iv in drops.values()]
        out.append(Claim("Table 7", f"every removal lowers the Average ({attention})",
                         "; ".join(f"{v}: {interval_words(iv, ' pts')}" for v, iv in drops.items()), all_of(verdicts)))
        if column_removal in drops:
            others = {v: _paired(wide, (attention, column_removal), (attention, v), AVG) for v in drops
                      if v != column_removal}
            measured, verdict = _comparisons(others, False, " pts")
            out.append(Claim("Table 7", f"removing column attention hurts most ({attention})",
                             f"its Average minus each other removal's {measured}", verdict))
    return out


def tableS7_claims(df: pd.DataFrame, ranks: Sequence[int], target_pct: float = 30.0) -> list[Claim]:
    """Smoothing lowers μ-incoherence by about 30%: per-seed relative reduction 1 − μ_smooth / μ_X, per task and
    rank."""
    df = with_axis_defaults(df)
    ok = df[(df["status"] == "ok") & (df["attention"].astype(str).str.startswith(S3))]
    out = []
    for (task, variant), sub in ok.groupby(["task", "variant"], sort=True):
        for rank in ranks:
            x, smooth = f"mu_x_r{rank}_mean", f"mu_smooth_r{rank}_mean"
            if x not in sub.columns or smooth not in sub.columns:
                continue
            pct = (100.0 * (1 - sub[smooth].astype(float) / sub[x].astype(float))).dropna()
            iv = t_interval(pct.tolist())
            label = f"{task}, r = {rank}" + (f", {variant}" if variant else "")
            out.append(Claim("Table S7", f"smoothing lowers μ by about {target_pct:g}% ({label})",
                             f"reduction {interval_words(iv, '%')}", band_verdict(iv, target_pct)))
    return out


def _speedup_claim(s3: pd.DataFrame, base: pd.DataFrame, baseline: str, where: str) -> Claim | None:
    first, last = s3.iloc[0], s3.iloc[-1]
    if "speedup" not in s3.columns or pd.isna(first["speedup"]) or pd.isna(last["speedup"]):
        return None

    def shown(row: pd.Series) -> str:
        n = row["seq_len"]
        refaulted = refaults(row) or (n in base.index and refaults(base.loc[n]))
        mark = (f" (§: a time at n={n} includes faulting its memory in again on every call, which moves this ratio; "
                "see Table 4)") if refaulted else ""
        return f"n={n}: {row['speedup']:.2f}× [{row['speedup_lo']:.2f}, {row['speedup_hi']:.2f}]{mark}"

    gap = Interval(last["speedup"] - first["speedup"], last["speedup_lo"] - first["speedup_hi"],
                   last["speedup_hi"] - first["speedup_lo"], 2)  # the two intervals apart, or overlapping
    verdict = INCONCLUSIVE if pd.isna(gap.lo) or pd.isna(gap.hi) else sign_verdict(gap, above=True)
    return Claim("Table 4", f"S3Attention's speed-up over {baseline} grows with n ({where})",
                 f"{shown(first)}; {shown(last)}", verdict)


def _memory_claim(s3: pd.DataFrame, base: pd.DataFrame, baseline: str, where: str) -> Claim | None:
    mem = "peak_mem_bytes"
    if mem not in s3.columns or mem not in base.columns:
        return None
    ratios = {int(n): float(m) / float(base.loc[n, mem]) for n, m in zip(s3["seq_len"], s3[mem], strict=True)
              if n in base.index and pd.notna(m) and pd.notna(base.loc[n, mem]) and base.loc[n, mem] > 0}
    if len(ratios) < 2:
        return None
    short, long = min(ratios), max(ratios)
    return Claim("Table 4", f"S3Attention's memory ratio to {baseline} falls with n ({where})",
                 f"n={short}: {ratios[short]:.3f}; n={long}: {ratios[long]:.3f} (exact allocator counts: no "
                 "interval)", REPRODUCED if ratios[long] < ratios[short] else CONTRADICTED)


def speed_claims(df: pd.DataFrame, baseline: str = "vanilla", group_columns: Sequence[str] = ()) -> list[Claim]:
    """Table 4: S3Attention's speed-up over the baseline grows with n (its interval at the longest n wholly above
    the one at the shortest), and its memory ratio (S3 / baseline peak memory, exact) falls; per group of
    ``group_columns`` (mode, batch, ...)."""
    out: list[Claim] = []
    ok = df[df["status"] == "ok"]
    columns = [c for c in group_columns if c in ok.columns]
    for group, sub in ok.groupby(columns, sort=True) if columns else [((), ok)]:
        values = group if isinstance(group, tuple) else (group,)
        where = ", ".join(f"{c}={v}" for c, v in zip(columns, values, strict=True)) or "all cells"
        s3 = sub[sub["attention"] == S3].sort_values("seq_len")
        base = sub[sub["attention"] == baseline].set_index("seq_len")
        if len(s3) < 2 or base.empty:
            continue
        out += [c for c in (_speedup_claim(s3, base, baseline, where), _memory_claim(s3, base, baseline, where)) if c]
    return out


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
