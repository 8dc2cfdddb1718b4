"""Fitted log-log slopes of time and memory against sequence length: each variant's empirical scaling exponent."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ...report.format import length_label, md_table

SLOPE_METRICS: tuple[str, ...] = ("time_ms_median", "peak_mem_bytes")
#: The columns of ``slopes.csv`` after the group's.
SLOPE_COLUMNS: tuple[str, ...] = ("attention", "metric", "slope", "n_points", "seq_len_min", "seq_len_max")


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
            records.append((*key, metric, fit_loglog_slope(points["seq_len"], points[metric]), len(points),
                            int(points["seq_len"].min()), int(points["seq_len"].max())))
    return pd.DataFrame.from_records(records, columns=[*group_columns, *SLOPE_COLUMNS])


def slopes_md(slopes: pd.DataFrame, min_seq_len: int, group_columns: tuple[str, ...]) -> str:
    """The slopes as a Markdown section."""
    title = f"### Fitted log-log slopes (seq_len ≥ {min_seq_len})"
    if slopes.empty:
        return f"{title}\n\nNo (group, attention) has at least two ok points at seq_len ≥ {min_seq_len}.\n"
    header = [*group_columns, "attention", "metric", "slope", "points", "lengths"]
    rows = [
        [*(str(r[c]) for c in (*group_columns, "attention", "metric")), f"{r['slope']:.2f}",
         str(r["n_points"]), f"{length_label(r['seq_len_min'])}–{length_label(r['seq_len_max'])}"]
        for r in slopes.to_dict("records")
    ]
    note = "A slope of 2 means time or memory grows quadratically with sequence length, 1 linearly."
    return f"{title}\n\n{md_table(header, rows, n_left=len(group_columns) + 2)}\n\n{note}\n"
