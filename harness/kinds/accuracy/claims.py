"""The S3Attention paper's claims about its studies (§IV of ``s3attention-journal.txt``), read from the accuracy
suites' results: Table 5 — S3Attention loses the least accuracy at the largest noise (a = 8) and vanilla the most;
Table 6 — r = 1 and s2 = 1 are the worst settings; Table 7 — every removal lowers the average and removing column
attention hurts most; Table S7 — smoothing lowers μ by about 30%. Verdicts: :mod:`harness.report.claims`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from ...report.claims import S3, Claim, band_verdict, comparisons, interval_words, paired
from ...report.stats import t_interval
from .differences import per_seed
from .summary import AVG, with_axis_defaults


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
            others = {m[0]: paired(wide, model, m, "rel", change) for m in models
                      if m[0] != who and m[1:] == model[1:]}
            measured, verdict = comparisons(others, above, " pts")
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
            others = {f"{parameter}={value}": paired(wide, (attention, worst[0]), (attention, label), AVG)
                      for value, label in rows if label != worst[0]}
            measured, verdict = comparisons(others, False, " pts")
            out.append(Claim("Table 6", f"{parameter} = 1 is the worst setting ({attention}, Average)",
                             f"its Average minus each other setting's {measured}", verdict))
    return out


def table7_claims(df: pd.DataFrame, ablations: Sequence[str], base_variant: str,
                  column_removal: str = "no_col_attention") -> list[Claim]:
    """Every removal lowers the Average; removing column attention lowers it most."""
    wide = per_seed(df, ["attention", "variant"])
    out = []
    for attention in sorted({k[0] for k in wide.index}) if not wide.empty else []:
        drops = {v: paired(wide, (attention, v), (attention, base_variant), AVG) for v in ablations
                 if v != base_variant}
        if not drops:
            continue
        measured, verdict = comparisons(drops, False, " pts", prefix="")
        out.append(Claim("Table 7", f"every removal lowers the Average ({attention})", measured, verdict))
        if column_removal in drops:
            others = {v: paired(wide, (attention, column_removal), (attention, v), AVG) for v in drops
                      if v != column_removal}
            measured, verdict = comparisons(others, False, " pts")
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
