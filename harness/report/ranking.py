"""The ranking of ``attnbench report --rank`` as files: ranking.md / .tex / .csv with the method, coverage and
notes (the ranking itself: :mod:`harness.report.compositional`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .compositional import COVERAGE_MARK, STEM, Ranking
from .format import (
    MISSING,
    Fmt,
    display_name,
    escape,
    md_table,
    render_table,
    tex_comment,
    write_csv,
    write_table_files,
)


def _z_text(value: float, fmt: Fmt) -> str:
    if pd.isna(value):
        return MISSING[fmt]
    return f"{value:+.2f}" if fmt == "md" else f"${value:+.2f}$"  # math mode: a minus sign, not a hyphen


def ranking_table(ranking: Ranking, fmt: Fmt) -> str:
    """Rank, variant, overall index (marked where it is a mean over fewer suites than ranked), the index of each
    suite (— where the variant has none) and how many of the ranked metrics it has."""
    suites = [s for s in ranking.suites if s in ranking.table.columns]
    rows = []
    for r in ranking.table.to_dict("records"):
        partial = 0 < r["suites_covered"] < r["suites_total"]
        rows.append([MISSING[fmt] if pd.isna(r["rank"]) else str(r["rank"]), escape(_shown(r["variant"]), fmt),
                     _z_text(r["overall"], fmt) + (COVERAGE_MARK[fmt] if partial else ""),
                     *(_z_text(r[s], fmt) for s in suites), f"{r['metrics_covered']}/{r['metrics_total']}"])
    header = ["Rank", "Variant", "Overall", *(escape(s, fmt) for s in suites), "Metrics"]
    return md_table(header, rows, n_left=2) if fmt == "md" else render_table(header, rows, fmt)


def _shown(variant: str) -> str:
    """A ranked variant under its display name: ``linformer (k=128)`` -> ``Linformer (k=128)``."""
    name, sep, rest = str(variant).partition(" (")
    return display_name(name) + sep + rest


def method_text(ranking: Ranking) -> list[str]:
    """The header paragraph: how the index is computed, and what each suite contributes."""
    n_metrics = ranking.values.groupby("suite")["metric"].nunique()
    lines = ["Compositional index, as CAB's (Zhang et al., ICML 2023): z-score per metric across variants, "
             "z = (x − mean) / std over the variants that have a value (population std; where all values are equal, "
             "z = 0 for all); sign: higher is better (time and memory negated); mean within suite, then mean across "
             "suites. The z-scores are taken over the variants ranked here: adding or removing one changes every "
             "index."]
    for suite in ranking.suites:
        n = int(n_metrics.get(suite, 0))
        skipped = int((ranking.skipped["suite"] == suite).sum())
        extra = f"; {skipped} skipped (fewer than 2 variants with a value)" if skipped else ""
        lines.append(f"{n} metrics from suite {suite} ({ranking.directories[suite]}): "
                     f"{ranking.descriptions[suite]}{extra}.")
        if suite in ranking.budgets:
            lines.append(f"Budgets of {suite} are settings of their variant, not variants of their own: each variant "
                         f"is ranked at its registered defaults; not ranked: {ranking.budgets[suite]}.")
    return lines


def _coverage_lines(ranking: Ranking) -> list[str]:
    """The † footnote, one line per set of suites lacking (variants listed), and the variants with no index."""
    table = ranking.table
    suites = [s for s in ranking.suites if s in table.columns]
    partial: dict[tuple[int, int, tuple[str, ...]], list[str]] = {}
    lines, none = [], []
    for r in table.to_dict("records"):
        if r["suites_covered"] == 0:
            none.append(r["variant"])
        elif r["suites_covered"] < r["suites_total"]:
            lacking = tuple(s for s in suites if pd.isna(r[s]))
            partial.setdefault((r["suites_covered"], r["suites_total"], lacking), []).append(r["variant"])
    for (k, total, lacking), variants in partial.items():
        lines.append(f"{COVERAGE_MARK['md']} index over {k} of {total} suites (no index from {', '.join(lacking)}): "
                     f"{', '.join(variants)}.")
    if none:
        lines.append(f"No index (no value in any ranked metric): {', '.join(none)}.")
    return lines


def _missing_lines(ranking: Ranking) -> list[str]:
    """What each variant has no value for: the suites that did not run it, then per variant and suite the metrics
    it lacks (all of a suite's metrics in one phrase) with the statuses of its cells."""
    values = ranking.values
    missing = values[values["z"].isna()]
    not_run = missing[missing["reason"] == "not run by this suite"]
    lines = [f"not run by {suite}: {', '.join(sorted(set(rows['variant'])))}"
             for suite, rows in not_run.groupby("suite", sort=False)]
    per_suite = values.groupby("suite")["metric"].nunique()
    for variant, rows in missing[missing["reason"] != "not run by this suite"].groupby("variant", sort=True):
        parts = []
        for suite, sub in rows.groupby("suite", sort=False):
            if len(sub) == per_suite[suite]:
                parts.append(f"{suite}: all {len(sub)} metrics ({', '.join(sorted(set(sub['reason'])))})")
            else:
                parts.append(f"{suite}: " + "; ".join(f"{m} ({r})" for m, r in zip(sub["metric"], sub["reason"],
                                                                                      strict=True)))
        lines.append(f"{variant}: " + "; ".join(parts))
    return lines


def notes_text(ranking: Ranking) -> list[str]:
    """The footnotes: partial coverage (†), missing values, means over part of a cell's runs, skipped metrics."""
    values = ranking.values
    lines = _coverage_lines(ranking)
    missing = _missing_lines(ranking)
    if missing:
        lines.append("Missing values, not counted (a variant's indices are means over the metrics it has; the "
                     "failed cells' messages are in each suite's results.csv) — " + " | ".join(missing) + ".")
    partial = values[values["z"].notna() & (values["reason"] != "")]
    if not partial.empty:
        lines.append("Means over part of a cell's runs (the others failed): " + "; ".join(
            f"{r.variant}, {r.suite}: {r.metric}: {int(r.ok_runs)} of {int(r.runs)} ({r.reason})"
            for r in partial.itertuples()) + ".")
    if not ranking.skipped.empty:
        lines.append("Skipped metrics (fewer than 2 variants with a value): " + "; ".join(
            f"{r.suite}: {r.metric} ({r.n_values})" for r in ranking.skipped.itertuples()) + ".")
    return lines


def write_ranking(ranking: Ranking, out_dir: str | Path) -> list[Path]:
    """``ranking.md`` and ``ranking.tex`` (the table with the method above it and the notes below),
    ``ranking.csv`` (variant, rank, overall, the per-suite indices, coverage) and ``ranking_metrics.csv`` (every
    value and z-score behind them, with the reason a value is missing), each written atomically into ``out_dir``."""
    out_dir = Path(out_dir)
    method, notes = method_text(ranking), notes_text(ranking)
    written = write_table_files(
        out_dir, STEM, title="Ranking across suites (compositional index)", note="\n\n".join(notes),
        md_body="\n\n".join([*method, ranking_table(ranking, "md")]),
        tex_body="\n".join([tex_comment(" ".join(method)), ranking_table(ranking, "tex")]), env=ranking.env)
    values = ranking.values.drop(columns=["runs", "ok_runs"]).rename(columns={"column": "store_column"})
    return [*written, write_csv(ranking.table, out_dir / f"{STEM}.csv"),
            write_csv(values, out_dir / f"{STEM}_metrics.csv")]

