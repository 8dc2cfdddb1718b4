"""The study tables' figures (Tables 5, 6 and 7): the summaries of :mod:`harness.kinds.accuracy.studies` drawn by
:mod:`harness.kinds.accuracy.plots`, the models in the tables' row order, one figure per swept parameter or ablated
attention."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd

from ...report.format import display_name, suite_title
from .plots import plot_ablation, plot_noise_robustness, plot_parameter_sweep
from .summary import AVG, TASK_LABELS, row_order, with_labels


def is_number(value: Any) -> bool:
    """A numeric setting (not a bool): a value a sweep can put on an axis."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _stem(base: str, *parts: str) -> str:
    """A file stem: ``base`` and ``parts`` joined by ``_``, anything but letters, digits, ``.`` and ``-`` replaced."""
    return "_".join([base, *(re.sub(r"[^A-Za-z0-9.\-]+", "_", p) for p in parts)])


def table5_figures(df: pd.DataFrame, summary: pd.DataFrame, out_dir: Path, suite: str,
                   baseline: str | None = "vanilla") -> list[Path]:
    """Table 5's figure, ``table5_noise.{png,pdf}``: accuracy against noise amplitude, the models in the table's rows'
    order (the baseline first, the control last)."""
    keys = ["attention", "variant", "task"]  # Table 5's rows
    rank = {row: i for i, row in enumerate(row_order(summary, keys, baseline))}  # the legend in Table 5's row order
    ordered = summary.assign(_rank=[rank[r] for r in summary[keys].itertuples(index=False, name=None)])
    return plot_noise_robustness(with_labels(ordered.sort_values("_rank", kind="stable"), keys), out_dir,
                                 stem="table5_noise", title=f"{suite_title(suite)}: accuracy under pixel noise")


def table6_figures(df: pd.DataFrame, summary: pd.DataFrame, out_dir: Path, suite: str) -> list[Path]:
    """Table 6's figures, ``table6_<parameter>[_<attention>].{png,pdf}``: accuracy against each swept setting."""
    numeric = summary[summary["value"].map(is_number)]
    numeric = numeric.assign(value=numeric["value"].astype(float),
                             series=numeric["task"].map(lambda t: TASK_LABELS.get(t, "Average")))
    several = numeric["attention"].nunique() > 1
    written: list[Path] = []
    for (parameter, attention), sub in numeric.groupby(["parameter", "attention"], sort=False):
        stem = _stem("table6", parameter, *([attention] if several else []))
        title = f"{suite_title(suite)}: {display_name(attention)}, varying {parameter}"
        written += plot_parameter_sweep(sub, out_dir, stem=stem, title=title, parameter=str(parameter))
    return written


def table7_figures(df: pd.DataFrame, summary: pd.DataFrame, out_dir: Path, suite: str) -> list[Path]:
    """Table 7's figures, ``table7_ablation[_<attention>].{png,pdf}``: each ablation's average accuracy change."""
    rows = summary[(summary["task"] == AVG) & (summary["model"] != "Baseline") & summary["diff"].notna()]
    several = rows["attention"].nunique() > 1
    written: list[Path] = []
    for attention, sub in rows.groupby("attention", sort=False):
        written += plot_ablation(sub, out_dir, stem=_stem("table7_ablation", *([attention] if several else [])),
                                 title=f"{suite_title(suite)}: {display_name(attention)}, each part removed "
                                       "(average over tasks)")
    return written
