"""The recall suite's results per grid cell: the learning rate chosen and the recall over seeds at it, which the
tables, the figures and the claims all read."""

from __future__ import annotations

import pandas as pd

from ...report.stats import t_interval

TASK = ["seq_len", "num_kv_pairs"]
CELL = ["attention", *TASK, "d_model"]


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """One row per grid cell (:data:`CELL`) with an ok run: the chosen ``lr`` (the highest mean recall over seeds),
    ``mean``, ``lo``, ``hi`` (95% t-interval) and ``n`` (seeds) of its recall, ``state_bytes`` and ``step_ms`` (medians
    over its seeds), and ``lrs`` (learning rates with an ok run)."""
    ok = df[df["status"] == "ok"]
    records = []
    for key, cell in ok.groupby(CELL, sort=True):
        by_lr = cell.groupby("lr")["recall"].mean()
        lr = float(by_lr.idxmax())
        chosen = cell[cell["lr"] == lr]
        iv = t_interval(chosen["recall"].astype(float).tolist())
        if iv is None:
            continue
        records.append({**dict(zip(CELL, key, strict=True)), "lr": lr, "mean": iv.mean, "lo": iv.lo, "hi": iv.hi,
                        "n": iv.n, "state_bytes": float(chosen["state_bytes"].median()),
                        "step_ms": float(chosen["step_ms"].median()), "lrs": int(cell["lr"].nunique())})
    return pd.DataFrame.from_records(records, columns=[*CELL, "lr", "mean", "lo", "hi", "n", "state_bytes", "step_ms",
                                                       "lrs"])
