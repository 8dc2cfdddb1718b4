"""The S3Attention paper's claims about its Table 4, read from a speed suite's results: S3Attention's speed-up over
vanilla grows with n and its memory ratio falls. Verdicts: :mod:`harness.report.claims`."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from ...report.claims import CONTRADICTED, INCONCLUSIVE, REPRODUCED, S3, Claim, sign_verdict
from ...report.format import refaults
from ...report.stats import Interval


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
    # the intervals are bootstraps over timing rounds, not over seeds: MIN_SEEDS does not apply (min_n=2)
    verdict = INCONCLUSIVE if pd.isna(gap.lo) or pd.isna(gap.hi) else sign_verdict(gap, above=True, min_n=2)
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
