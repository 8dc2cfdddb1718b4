"""Fitted log-log slopes of time and memory against sequence length: each variant's empirical scaling exponent, with
its fit quality (R², a 95% interval from three lengths on) and a flag where the slope does not fit the variant's
declared complexity (the registry's ``Capabilities.complexity``):

- ``below linear``: the slope is under :data:`SUBLINEAR` (its whole interval, when there is one). Attention reads
  every token, so a time or memory growing slower than n means fixed costs (launches, parameters, buffers) dominate
  at these lengths: the slope says nothing about the asymptotic class.
- ``above n^k``: the slope is above the declared class's exponent by more than :data:`ABOVE_CLASS` (n log n counts as
  1: its log factor adds about 0.1 over 1K–16K).
- ``poor fit``: R² below :data:`MIN_R2`: the points do not lie on one power law (a regime change, noise).
"""

from __future__ import annotations

import math

import pandas as pd

from ...report.format import length_label, md_table
from ...report.stats import fit_loglog_slope, slope_fit  # noqa: F401  (re-exported)
from .scaling_fit import model_of

SLOPE_METRICS: tuple[str, ...] = ("time_ms_median", "peak_mem_bytes")
#: The columns of ``slopes.csv`` after the group's.
SLOPE_COLUMNS: tuple[str, ...] = ("attention", "metric", "slope", "slope_lo", "slope_hi", "r2", "flag", "n_points",
                                  "seq_len_min", "seq_len_max")
#: The exponent of each declared complexity (n log n as 1: see the module docstring).
CLASS_EXPONENT: dict[str, float] = {"n": 1.0, "n log n": 1.0, "n^2": 2.0}
SUBLINEAR = 0.8
ABOVE_CLASS = 0.3
MIN_R2 = 0.9


def slope_flag(slope: float, lo: float, hi: float, r2: float, complexity: str | None) -> str:
    """What is implausible about a slope for a variant of ``complexity`` (see the module docstring), or ``""``."""
    flags = []
    top = hi if math.isfinite(hi) else slope
    bottom = lo if math.isfinite(lo) else slope
    if top < SUBLINEAR:
        flags.append("below linear: fixed costs dominate at these lengths")
    if complexity is not None and bottom > CLASS_EXPONENT.get(complexity, 2.0) + ABOVE_CLASS:
        flags.append(f"above {complexity}")
    if r2 < MIN_R2:
        flags.append(f"poor fit (R² {r2:.2f})")
    return "; ".join(flags)


def _complexity(attention: str) -> str | None:
    """The registry's declared complexity of ``attention`` (None for a name it does not know, e.g. an old store's)."""
    import attentions  # the registry imports torch: only when slopes are written

    try:
        return model_of(attentions.spec(attention).caps.complexity)
    except (KeyError, ValueError):
        return None


def fitted_slopes(df: pd.DataFrame, min_seq_len: int, group_columns: tuple[str, ...]) -> pd.DataFrame:
    """Per group and attention, the log-log slope of each of :data:`SLOPE_METRICS` over ok cells at ``seq_len >=
    min_seq_len`` (at least two lengths)."""
    ok = df[(df["status"] == "ok") & (df["seq_len"] >= min_seq_len)]
    records = []
    for key, sub in ok.groupby([*group_columns, "attention"], sort=True):
        for metric in SLOPE_METRICS:
            points = sub[sub[metric] > 0]  # NaN compares False, so unmeasured points drop out too
            if points["seq_len"].nunique() < 2:
                continue
            slope, lo, hi, r2 = slope_fit(points["seq_len"], points[metric])
            flag = slope_flag(slope, lo, hi, r2, _complexity(str(key[-1])))
            records.append((*key, metric, slope, lo, hi, r2, flag, len(points),
                            int(points["seq_len"].min()), int(points["seq_len"].max())))
    return pd.DataFrame.from_records(records, columns=[*group_columns, *SLOPE_COLUMNS])


def slopes_md(slopes: pd.DataFrame, min_seq_len: int, group_columns: tuple[str, ...]) -> str:
    """The slopes as a Markdown section."""
    title = f"### Fitted log-log slopes (seq_len ≥ {min_seq_len})"
    if slopes.empty:
        return f"{title}\n\nNo (group, attention) has at least two ok points at seq_len ≥ {min_seq_len}.\n"
    header = [*group_columns, "attention", "metric", "slope [95%]", "R²", "points", "lengths", "flag"]
    rows = [
        [*(str(r[c]) for c in (*group_columns, "attention", "metric")), _slope_text(r), f"{r['r2']:.3f}",
         str(r["n_points"]), f"{length_label(r['seq_len_min'])}–{length_label(r['seq_len_max'])}", r["flag"] or ""]
        for r in slopes.to_dict("records")
    ]
    note = ("A slope of 2 means time or memory grows quadratically with sequence length, 1 linearly. The interval is "
            "the fit's 95% t-interval (from three lengths on). Flags: `below linear` (under "
            f"{SUBLINEAR}: fixed costs dominate, the slope says nothing of the asymptotic class), `above <class>` "
            f"(more than {ABOVE_CLASS} over the variant's declared complexity), `poor fit` (R² under {MIN_R2}).")
    return f"{title}\n\n{md_table(header, rows, n_left=len(group_columns) + 2)}\n\n{note}\n"


def _slope_text(row: dict) -> str:
    if not (math.isfinite(row["slope_lo"]) and math.isfinite(row["slope_hi"])):
        return f"{row['slope']:.2f} (2 points)"
    return f"{row['slope']:.2f} [{row['slope_lo']:.2f}, {row['slope_hi']:.2f}]"
