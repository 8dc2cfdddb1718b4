"""The S3Attention paper's Table S7: μ-incoherence of the token matrix before and after the Fourier convolution,
pooled over every validation sample of every seed, as Markdown, LaTeX and a figure (a study table of
:mod:`harness.kinds.accuracy.studies`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ...report.format import FAILED_NOTE, Fmt, escape, failed_text, render_table, suite_title
from .plots import plot_incoherence
from .summary import TASK_LABELS, row_order, seeds_text, varying_label, with_axis_defaults, with_labels

_MU_COLUMN = re.compile(r"^mu_x_r(\d+)_mean$")


def incoherence_ranks(df: pd.DataFrame) -> list[int]:
    """Ranks with incoherence columns (``mu_x_r{rank}_mean``) in ``df``, descending as in the paper."""
    return sorted((int(m.group(1)) for c in df.columns if (m := _MU_COLUMN.match(str(c)))), reverse=True)


def pooled_mean_std(means: Sequence[float], stds: Sequence[float], counts: Sequence[float]) -> tuple[float, float]:
    """Mean and population std over all samples of several groups, from each group's mean, population std and
    sample count: mean = Σ nᵢ mᵢ / N, std = sqrt(Σ nᵢ (sᵢ² + (mᵢ − mean)²) / N).

    Raises:
        ValueError: If the counts sum to zero.
    """
    m, s, n = (np.asarray(x, dtype=float) for x in (means, stds, counts))
    total = n.sum()
    if total <= 0:
        raise ValueError("pooling needs a positive total count")
    mean = float((n * m).sum() / total)
    return mean, float(np.sqrt((n * (s**2 + (m - mean) ** 2)).sum() / total))


_S7_KEYS = ["task", "attention", "variant"]


def incoherence_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Table S7's numbers: per (task, attention, variant, rank) the pooled mean and population std of μ_X and
    μ_X^smooth over every validation sample of every ok seed, the sample count, the number of seeds and the
    relative reduction 1 − μ_smooth / μ_X."""
    df = with_axis_defaults(df)
    counts = df["mu_count"] if "mu_count" in df.columns else pd.Series(1.0, index=df.index)
    df = df.assign(_count=counts.astype(float))
    records = []
    for key, sub in df[df["status"] == "ok"].groupby(_S7_KEYS, sort=False):
        for rank in incoherence_ranks(df):
            columns = [f"mu_{w}_r{rank}_{s}" for w in ("x", "smooth") for s in ("mean", "std")]
            cells = sub.dropna(subset=[*columns, "_count"])
            cells = cells[cells["_count"] > 0]
            if cells.empty:
                continue
            x = pooled_mean_std(cells[columns[0]], cells[columns[1]], cells["_count"])
            smooth = pooled_mean_std(cells[columns[2]], cells[columns[3]], cells["_count"])
            records.append((*key, rank, *x, *smooth, int(cells["_count"].sum()), len(cells), 1.0 - smooth[0] / x[0]))
    return pd.DataFrame.from_records(records, columns=[*_S7_KEYS, "rank", "mu_x_mean", "mu_x_std", "mu_smooth_mean",
                                                       "mu_smooth_std", "n_samples", "n_seeds", "reduction"])


def _incoherence_header(ranks: Sequence[int], fmt: Fmt) -> list[str]:
    if fmt == "md":
        names = ("μ_X", "μ_X^smooth")
    else:
        names = (r"$\mu_{X}$", r"$\mu_{X^{\mathrm{smooth}}}$")
    return ["Dataset", *(f"{name} (rank={r})" for r in ranks for name in names)]


def tableS7(df: pd.DataFrame, *, fmt: Fmt, baseline: str | None = "vanilla") -> str:
    """Table S7: one row per task (the attention or variant in parentheses where several), per rank (descending)
    μ_X and μ_X^smooth as ``mean (std)`` — 2 and 3 decimals, like the paper — pooled over all samples of all
    seeds."""
    df = with_axis_defaults(df)
    ranks = incoherence_ranks(df)
    summary = incoherence_summary(df).set_index([*_S7_KEYS, "rank"])
    statuses = df.groupby(_S7_KEYS)["status"].agg(set)
    rows = []
    for key in row_order(df, _S7_KEYS, baseline):
        row = [escape(varying_label(df, _S7_KEYS, key, primary="task"), fmt)]
        for rank in ranks:
            if (*key, rank) not in summary.index:
                row += [failed_text(statuses.get(key), fmt)] * 2
                continue
            s = summary.loc[(*key, rank)]
            row += [f"{s[f'mu_{w}_mean']:.2f} ({s[f'mu_{w}_std']:.3f})" for w in ("x", "smooth")]
        rows.append(row)
    return render_table(_incoherence_header(ranks, fmt), rows, fmt)


def tableS7_note(df: pd.DataFrame) -> str:
    return ("μ-incoherence of the token matrix before (μ_X) and after (μ_X^smooth) the Fourier convolution, "
            f"mean (population std) over all validation samples of seeds {seeds_text(df)}. The relative reduction "
            "1 − μ_smooth/μ_X per rank is in tableS7.csv. " + FAILED_NOTE)


def tableS7_figures(df: pd.DataFrame, summary: pd.DataFrame, out_dir: Path, suite: str) -> list[Path]:
    labelled = with_labels(summary.assign(_order=summary["task"].map(list(TASK_LABELS).index)), _S7_KEYS, "task")
    return plot_incoherence(labelled.sort_values(["_order", "label", "rank"], ascending=[True, True, False]),
                            out_dir, stem="tableS7_incoherence", title=f"{suite_title(suite)}: μ-incoherence")
