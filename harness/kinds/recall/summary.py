"""The recall suite's results per grid cell: the learning rate chosen and the recall over seeds at it, which the
tables, the figures and the claims all read."""

from __future__ import annotations

import pandas as pd

from ...report.stats import t_interval

TASK = ["seq_len", "num_kv_pairs"]
CELL = ["attention", *TASK, "d_model"]


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """One row per grid cell (:data:`CELL`) with an ok run: the chosen ``lr``, ``mean``, ``lo``, ``hi`` (95%
    t-interval) and ``n`` (seeds) of its ok runs' recall, ``state_bytes`` and ``step_ms`` (medians over them), ``lrs``
    (learning rates run) and ``failed`` (its seeds that did not finish ok).

    The learning rate chosen is the one with the highest mean recall over its seeds, a seed that failed (diverged, ran
    out of memory or time) counting as no recall: a rate that one seed survived is not chosen over one that all did.
    """
    columns = [*CELL, "lr", "mean", "lo", "hi", "n", "state_bytes", "step_ms", "lrs", "failed"]
    if "recall" not in df.columns:  # no cell finished ok
        return pd.DataFrame(columns=columns)
    ran = df[df["status"] != "unsupported"]
    records = []
    for key, cell in ran.groupby(CELL, sort=True):
        ok = cell["status"] == "ok"
        by_lr = cell["recall"].where(ok, 0.0).astype(float).groupby(cell["lr"]).mean()
        lr = float(by_lr.idxmax())
        chosen = cell[(cell["lr"] == lr) & ok]
        iv = t_interval(chosen["recall"].astype(float).tolist())
        if iv is None:
            continue
        records.append({**dict(zip(CELL, key, strict=True)), "lr": lr, "mean": iv.mean, "lo": iv.lo, "hi": iv.hi,
                        "n": iv.n, "state_bytes": float(chosen["state_bytes"].median()),
                        "step_ms": float(chosen["step_ms"].median()), "lrs": int(cell["lr"].nunique()),
                        "failed": int(((cell["lr"] == lr) & ~ok).sum())})
    return pd.DataFrame.from_records(records, columns=columns)
