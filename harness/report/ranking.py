"""The ranking of ``attnbench report --rank`` as files: ranking.md / .tex / .csv with the method, coverage and
notes, the controls in a table of their own (the ranking itself: :mod:`harness.report.compositional`).

``ranking.tex``'s caption is its title, and its notes are paragraphs under the table: notes joined by blank lines inside
``\\caption`` are paragraph breaks there, which LaTeX refuses ("Paragraph ended before \\@caption was complete")."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..core.files import atomic_write_text
from .compositional import COVERAGE_MARK, STEM, Ranking
from .format import (
    MISSING,
    Fmt,
    display_name,
    env_summary,
    escape,
    md_table,
    render_table,
    write_csv,
)
from .latex import tex_float

TITLE = "Ranking across suites (compositional index)"


def _z_text(value: float, fmt: Fmt) -> str:
    if pd.isna(value):
        return MISSING[fmt]
    return f"{value:+.2f}" if fmt == "md" else f"${value:+.2f}$"  # math mode: a minus sign, not a hyphen


def ranking_table(ranking: Ranking, fmt: Fmt) -> str:
    """Rank, variant, overall index (marked where it is a mean over fewer suites than ranked), the index of each
    suite (— where the variant has none) and how many of the ranked metrics it has; the controls are not rows of it
    (:func:`controls_table`)."""
    return _index_rows(ranking, fmt, controls=False)


def controls_table(ranking: Ranking, fmt: Fmt) -> str:
    """The controls, unranked: their indices against the ranked variants' mean and std ("" when none ran)."""
    return _index_rows(ranking, fmt, controls=True) if ranking.controls else ""


def _index_rows(ranking: Ranking, fmt: Fmt, *, controls: bool) -> str:
    suites = ranking.contributing
    rows = []
    for r in ranking.table[ranking.table["control"] == controls].to_dict("records"):
        partial = 0 < r["suites_covered"] < r["suites_total"]
        rank = [] if controls else [MISSING[fmt] if pd.isna(r["rank"]) else str(r["rank"])]
        rows.append([*rank, escape(_shown(r["variant"]), fmt),
                     _z_text(r["overall"], fmt) + (COVERAGE_MARK[fmt] if partial else ""),
                     *(_z_text(r[s], fmt) for s in suites), f"{r['metrics_covered']}/{r['metrics_total']}"])
    header = [*([] if controls else ["Rank"]), "Control (not ranked)" if controls else "Variant", "Overall",
              *(escape(s, fmt) for s in suites), "Metrics"]
    return md_table(header, rows, n_left=1 if controls else 2) if fmt == "md" else render_table(header, rows, fmt)


def _shown(variant: str) -> str:
    """A ranked variant under its display name: ``linformer (k=128)`` -> ``Linformer (k=128)``."""
    name, sep, rest = str(variant).partition(" (")
    return display_name(name) + sep + rest


def method_text(ranking: Ranking) -> list[str]:
    """The header paragraph: mixed profiles first, how the index is computed, what each suite contributes, which
    suites gave nothing and why, and how the controls are scored."""
    n_metrics = ranking.values.groupby("suite")["metric"].nunique()
    lines = [profiles_text(ranking)] if ranking.mixed_profiles else []
    lines.append("Compositional index, as CAB's (Zhang et al., ICML 2023): z-score per metric across variants, "
                 "z = (x − mean) / std over the variants that have a value (population std; where all values are "
                 "equal, z = 0 for all); sign: higher is better (time and memory negated); mean within suite, then "
                 f"mean across the {len(ranking.contributing)} suites that contribute a metric. The z-scores are taken "
                 "over the variants ranked here: adding or removing one changes every index.")
    for suite in ranking.contributing:
        skipped = int((ranking.skipped["suite"] == suite).sum())
        extra = f"; {skipped} skipped (fewer than 2 variants with a value)" if skipped else ""
        lines.append(f"{int(n_metrics.get(suite, 0))} metrics from suite {suite} ({ranking.directories[suite]}): "
                     f"{ranking.descriptions[suite]}{extra}.")
        if suite in ranking.budgets:
            lines.append(f"Budgets of {suite} are settings of their variant, not variants of their own: each variant "
                         f"is ranked at its registered defaults; not ranked: {ranking.budgets[suite]}.")
    idle = [s for s in ranking.suites if s not in ranking.contributing]
    if idle:
        lines.append("No metric from " + "; ".join(f"{s} ({ranking.directories[s]}): {ranking.descriptions[s]}"
                                                     for s in idle) + ".")
    if ranking.controls:
        lines.append(f"Controls ({', '.join(ranking.controls)}) are not ranked: a layer that mixes nothing would take "
                     "a rank and move every other variant's z-score. Their indices are z-scores against the ranked "
                     "variants' mean and std, shown apart.")
    return lines


def profiles_text(ranking: Ranking) -> str:
    """The mark of a ranking over suites of different profiles (empty when they share one)."""
    if not ranking.mixed_profiles:
        return ""
    shown = ", ".join(f"{s} ({ranking.profiles[s] or 'profile unknown'})" for s in ranking.contributing)
    smoke = any(ranking.profiles.get(s) == "smoke" for s in ranking.contributing)
    why = (" A smoke profile checks that the pipeline runs (a few examples, a few steps): its figures are not "
           "measurements, and here they weigh as much as the others." if smoke else "")
    return (f"**Budgets of different size ranked together**: {shown}. Each suite's index reads its own profile's "
            f"sizes; rank suites of one profile to compare like with like.{why}")


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
    """``ranking.md`` and ``ranking.tex`` (the method above the table, the controls' table, the notes below),
    ``ranking.csv`` (variant, rank, overall, the per-suite indices, whether it is a control, coverage) and
    ``ranking_metrics.csv`` (every value and z-score behind them, with the reason a value is missing), each written
    atomically into ``out_dir``."""
    out_dir = Path(out_dir)
    method, notes = method_text(ranking), notes_text(ranking)
    controls = {fmt: controls_table(ranking, fmt) for fmt in ("md", "tex")}
    md = "\n\n".join([f"### {TITLE}", *method, ranking_table(ranking, "md"), *filter(None, [controls["md"]]),
                       *notes, f"_Environment: {env_summary(ranking.env)}_"]) + "\n"
    tabulars = "\n".join(filter(None, [ranking_table(ranking, "tex"), controls["tex"]]))
    # the caption is the title; the notes are paragraphs under the table (see the module docstring)
    tex = tex_float(tabulars, caption=TITLE, label=STEM, notes="\n\n".join(filter(None, [profiles_text(ranking),
                                                                                        *notes])),
                    comments=(env_summary(ranking.env), *method))
    values = ranking.values.drop(columns=["runs", "ok_runs"]).rename(columns={"column": "store_column"})
    return [atomic_write_text(out_dir / f"{STEM}.md", md), atomic_write_text(out_dir / f"{STEM}.tex", tex),
            write_csv(ranking.table, out_dir / f"{STEM}.csv"), write_csv(values, out_dir / f"{STEM}_metrics.csv")]
