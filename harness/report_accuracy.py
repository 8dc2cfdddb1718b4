"""Accuracy reports: the paper's Table 1 (accuracy per task and average, mean(std) over seeds, best in bold),
every evaluation point as CSV, and learning-curve figures per task (the paper's Fig. 3).

The average column follows the reviewer's request: each seed's average over the tasks, then the mean and the
standard deviation of those per-seed averages (not the mean of the task standard deviations).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from .data import TASKS
from .report import env_summary, md_table, tex_escape, write_raw

TASK_LABELS = {"listops": "ListOps", "text": "Text", "retrieval": "Retrieval", "image": "Image",
               "pathfinder": "Pathfinder"}
AVG = "avg"


def accuracy_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per (attention, task) — and the per-seed task average as task "avg" — mean, std (ddof=1) and count of
    test accuracy in percent over seeds, from ok cells only; plus the number of failed cells."""
    ok = df[df["status"] == "ok"].assign(acc=lambda d: 100.0 * d["test_acc"].astype(float))
    tasks = [t for t in TASKS if t in set(df["task"])]
    # A seed's average is defined only when that seed finished every task of the table.
    per_seed = ok.pivot_table(index=["attention", "seed"], columns="task", values="acc", aggfunc="first")
    per_seed = per_seed.reindex(columns=tasks).dropna()
    averages = per_seed.mean(axis=1).rename("acc").reset_index().assign(task=AVG)
    rows = pd.concat([ok[["attention", "task", "seed", "acc"]], averages], ignore_index=True)
    stats = rows.groupby(["attention", "task"])["acc"].agg(mean="mean", std="std", n="count").reset_index()
    failed = df[df["status"] != "ok"].groupby(["attention", "task"]).size().rename("failed").reset_index()
    out = stats.merge(failed, on=["attention", "task"], how="outer")
    out["failed"] = out["failed"].fillna(0).astype(int)
    out["n"] = out["n"].fillna(0).astype(int)
    return out.sort_values(["attention", "task"], ignore_index=True)


def _cell_text(mean: float, std: float, n: int) -> str:
    return f"{mean:.2f}" if n < 2 or not np.isfinite(std) else f"{mean:.2f}({std:.2f})"


def table1(df: pd.DataFrame, *, fmt: Literal["md", "tex"], baseline: str | None = "vanilla") -> str:
    """Table 1: one row per attention, one column per task plus the average, ``mean(std)`` over seeds.

    The best mean of each column is bold; a failed or missing cell is ``OOM`` (if every run of it ran out of
    memory) or ``—``. The baseline row, if present, comes first.
    """
    summary = accuracy_summary(df)
    tasks = [t for t in TASKS if t in set(df["task"])]
    columns = [*tasks, AVG]
    names = sorted(set(df["attention"]))
    if baseline in names:
        names = [baseline, *(n for n in names if n != baseline)]
    stats = summary.set_index(["attention", "task"])
    statuses = df.groupby(["attention", "task"])["status"].agg(set)
    best = {c: summary[(summary["task"] == c) & (summary["n"] > 0)]["mean"].max() for c in columns}
    missing = "—" if fmt == "md" else "---"

    def bold(text: str) -> str:
        return f"**{text}**" if fmt == "md" else rf"\textbf{{{text}}}"

    rows = []
    for name in names:
        row = [name if fmt == "md" else tex_escape(name)]
        for c in columns:
            if (name, c) not in stats.index or stats.loc[(name, c), "n"] == 0:
                row.append("OOM" if statuses.get((name, c)) == {"oom"} else missing)
                continue
            s = stats.loc[(name, c)]
            text = _cell_text(float(s["mean"]), float(s["std"]), int(s["n"]))
            row.append(bold(text) if np.isclose(s["mean"], best[c]) else text)
        rows.append(row)
    header = ["Model", *(TASK_LABELS[t] for t in tasks), "Avg"]
    if fmt == "md":
        return md_table(header, rows)
    return "\n".join([
        rf"\begin{{tabular}}{{l{'c' * len(columns)}}}",
        r"\toprule",
        " & ".join(header) + r" \\",
        r"\midrule",
        *(" & ".join(r) + r" \\" for r in rows),
        r"\bottomrule",
        r"\end{tabular}",
    ])


def _seeds_note(df: pd.DataFrame) -> str:
    seeds = sorted(int(s) for s in df["seed"].unique())
    return (f"Test accuracy (%), mean(std) over seeds {', '.join(map(str, seeds))}; Avg = mean(std) of each "
            "seed's average over the tasks. Best in bold. OOM = out of memory; — = failed or not run.")


def write_accuracy_reports(
    df: pd.DataFrame,
    curves: pd.DataFrame,
    out_dir: Path,
    *,
    env: Mapping[str, object],
    suite: str,
    baseline: str | None = "vanilla",
    plots: bool = True,
) -> list[Path]:
    """results.csv, env.json, table1.{md,tex,csv}, curves.csv and curves_<task>.{png,pdf} into ``out_dir``."""
    df = df.sort_values(["attention", "task", "seed"], kind="stable", ignore_index=True)
    written = write_raw(df, out_dir, env)
    for column in ("test_acc", "best_dev_acc"):
        if column not in df.columns:
            df[column] = np.nan
    summary_path = out_dir / "table1.csv"
    accuracy_summary(df).to_csv(summary_path, index=False)
    md = (f"### Table 1 — {suite}\n\n{table1(df, fmt='md', baseline=baseline)}\n\n{_seeds_note(df)}\n\n"
          f"_Environment: {env_summary(env)}_\n")
    tex_comments = [f"% Table 1 — {suite}. {_seeds_note(df)}", *(f"% {k}: {v}" for k, v in env.items())]
    tex = "\n".join([*(" ".join(c.splitlines()) for c in tex_comments), table1(df, fmt="tex", baseline=baseline)])
    for name, text in (("table1.md", md), ("table1.tex", tex + "\n")):
        (out_dir / name).write_text(text, encoding="utf-8")
        written.append(out_dir / name)
    curves_path = out_dir / "curves.csv"
    curves.to_csv(curves_path, index=False)
    written += [summary_path, curves_path]
    if plots and not curves.empty:
        from .plots import plot_learning_curves

        for task, sub in curves.groupby("task", sort=True):
            written += plot_learning_curves(sub, out_dir, task=str(task), title=f"{suite}: {TASK_LABELS[task]}")
    return written

