"""Accuracy reports: the paper's Table 1 (accuracy per task and average, mean(std) over seeds, best in bold),
every evaluation point as CSV, and learning-curve figures per task (the paper's Fig. 3); with ``options["tables"]``
also the study tables of :mod:`harness.kinds.accuracy.studies` (Tables 5, 6, 7 and S7).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ...core import datasource
from ...report.claims import seed_count, write_claims
from ...report.format import (
    CONTROL_NOTE,
    SUMMARY_PERCENT_COLUMNS,
    Fmt,
    display_name,
    escape,
    in_percent,
    mark,
    printed_rows,
    rank_marks,
    render_table,
    suite_title,
    with_dropped,
    write_csv,
    write_raw,
    write_table_files,
)
from .claims import table1_claims
from .differences import table1_differences, write_differences
from .plots import plot_learning_curves
from .studies import STUDY_TABLES, write_study_reports
from .summary import (
    AVG,
    AXIS_DEFAULTS,
    CONTROL,
    PAPER_ROWS,
    TASK_LABELS,
    SummaryCells,
    accuracy_summary,
    present_tasks,
    row_label,
    row_order,
    seeds_text,
    varying_axes,
    with_axis_defaults,
)

ALL_TABLES = ("table1", *STUDY_TABLES)


# ---------------------------------------------------------------------------------------------------
# Table 1.


def _cell_text(stat: pd.Series) -> str:
    mean, std, n = float(stat["mean"]), float(stat["std"]), int(stat["n"])
    return f"{mean:.2f}" if n < 2 or pd.isna(std) else f"{mean:.2f}({std:.2f})"


def table1_keys(df: pd.DataFrame) -> list[str]:
    """Columns identifying a Table 1 row: the attention, plus each study axis with several values in ``df``."""
    return ["attention", *varying_axes(with_axis_defaults(df))]


def table1(df: pd.DataFrame, *, fmt: Fmt, baseline: str | None = "vanilla",
           row_names: Mapping[str, str] | None = None, rows: Sequence[str] | None = None) -> str:
    """Table 1: one row per model, one column per task plus the average, ``mean(std)`` over seeds.

    A model is the attention, or "attention (variant, a=noise)" where the cells have several variants or noise
    levels, so that those are never averaged together. The best mean of each column is bold; a failed or missing
    cell is ``OOM`` (if every run of it ran out of memory) or ``—``. Rows come in every table's order (the baseline
    first, the control last) under the paper's names (``row_names``, else the variants' display names); a model that
    ran nowhere (unsupported or failed in every task) is left out and named under the table. Where the ``none``
    control ran, an entry that does not beat it by the seed spread carries ``format.BELOW_CONTROL``. ``rows``: the
    attentions to print (names or patterns: a paper's rows), None for every one.
    """
    df = with_axis_defaults(df)
    keys = table1_keys(df)
    cells = SummaryCells(df, keys)
    columns = [*present_tasks(df), AVG]
    printed = set(printed_rows(sorted(set(df["attention"])), rows, baseline))
    names = [name for name in row_order(df, keys, baseline) if name[0] in printed]
    dropped = {name: why for name in names if (why := cells.ran_nowhere(name, columns[:-1]))}
    names = [name for name in names if name not in dropped]
    best = {c: rank_marks([cells.mean((*name, c)) for name in names]) for c in columns}

    def label(name: tuple[Hashable, ...]) -> str:  # a paper's names in both formats (CSV: the registry's)
        return escape(row_label({**dict(zip(keys, name, strict=True)),
                                 "attention": display_name(str(name[0]), row_names)}), fmt)

    body = []
    for i, name in enumerate(names):
        control = (CONTROL, *name[1:])  # the same study axes, no token mixing
        body.append([label(name), *(cells.failed((*name, c), fmt) if (stat := cells.stat((*name, c))) is None else
                                    mark(_cell_text(stat), best[c][i], fmt)
                                    + cells.below_control((*name, c), (*control, c), fmt) for c in columns)])
    table = render_table(["Model", *(TASK_LABELS[t] for t in columns[:-1]), "Avg"], body, fmt)
    return with_dropped(table, [label(n) for n in dropped], [s for why in dropped.values() for s in why], fmt)


def _seeds_note(df: pd.DataFrame) -> str:
    return (f"Test accuracy (%), mean(std) over seeds {seeds_text(df)}; Avg = mean(std) of each "
            "seed's average over the tasks. Best in bold. OOM = out of memory; — = failed or not run."
            + (f" {CONTROL_NOTE}" if CONTROL in set(df["attention"]) else ""))


def _write_learning_curves(df: pd.DataFrame, curves: pd.DataFrame, out_dir: Path, suite: str,
                           baseline: str | None) -> list[Path]:
    """One figure per task; lines are labelled like Table 1's rows so variants and noise levels stay apart, and
    listed (and coloured) in its row order: the baseline first, the families in a paper's order, the control last."""
    keys = [k for k in table1_keys(df) if k in curves.columns]
    curves = with_axis_defaults(curves)

    def label(row: tuple[Any, ...]) -> str:
        return row_label(dict(zip(keys, row, strict=True)), display=True)

    curves = curves.assign(model=[label(r) for r in curves[keys].itertuples(index=False, name=None)])
    order = list(dict.fromkeys(label(r) for r in row_order(curves, keys, baseline)))
    written: list[Path] = []
    for task, sub in curves.groupby("task", sort=True):
        written += plot_learning_curves(sub, out_dir, task=str(task),
                                        title=f"{suite_title(suite)}: {TASK_LABELS[task]}", by="model", order=order)
    return written


def write_accuracy_reports(
    df: pd.DataFrame,
    curves: pd.DataFrame,
    out_dir: Path,
    *,
    env: Mapping[str, object],
    suite: str,
    baseline: str | None = "vanilla",
    plots: bool = True,
    options: Mapping[str, Any] | None = None,
) -> list[Path]:
    """results.csv, env.json, curves.csv and curves_<task>.{png,pdf}, plus for each table of ``options["tables"]``
    (default: Table 1 only) ``<table>.{md,tex,csv}`` and its figures, into ``out_dir``.

    Args:
        df: Accuracy cells, one row per cell (``Store.dataframe()``).
        curves: Evaluation points (``Store.curves()``).
        out_dir: Destination directory; created if needed.
        env: Environment of the run (JSON-serialisable), shown under every table.
        suite: Suite name, used in titles.
        baseline: Attention listed first; ``options["baseline"]`` wins when given.
        plots: Whether to draw figures.
        options: The suite's report options: ``tables`` (subset of :data:`ALL_TABLES`), ``baseline``,
            ``baseline_variant``, ``variants`` (label -> config overrides, in suite order), ``row_names``
            (attention -> the paper's row name) and ``rows`` (the attentions the LaTeX tables print, default
            :data:`~harness.kinds.accuracy.summary.PAPER_ROWS`; every row is in ``<table>_full.tex``).

    Raises:
        ValueError: If ``options["tables"]`` names a table this module cannot write.
    """
    options = dict(options or {})
    tables = list(options.get("tables") or ["table1"])
    unknown = [t for t in tables if t not in ALL_TABLES]
    if unknown:
        raise ValueError(f"unknown report tables {unknown}; choose from {', '.join(ALL_TABLES)}")
    baseline = options.get("baseline", baseline)
    row_names = options.get("row_names") or {}
    out_dir = Path(out_dir)
    sources = datasource.of_ok_cells(df)
    suite += datasource.title_mark(sources, "LRA")  # every title: generated data is never titled as LRA
    df = df.sort_values([c for c in ("attention", *AXIS_DEFAULTS, "task", "seed") if c in df.columns],
                        kind="stable", ignore_index=True)
    written = write_raw(in_percent(df), out_dir, env)
    for column in ("test_acc", "best_dev_acc"):
        if column not in df.columns:
            df[column] = float("nan")
    if "table1" in tables:
        summary = datasource.with_sources(accuracy_summary(df, table1_keys(df)), df)
        summary_path = write_csv(in_percent(summary, SUMMARY_PERCENT_COLUMNS), out_dir / "table1.csv")
        names = {"baseline": baseline, "row_names": row_names}
        full, printed = (table1(df, fmt="tex", rows=r, **names) for r in (None, options.get("rows") or PAPER_ROWS))
        written += write_table_files(out_dir, "table1", title=f"Table 1 — {suite}", note=_seeds_note(df),
                                     md_body=table1(df, fmt="md", **names), tex_body=printed,
                                     tex_full=full if full != printed else None, env=env)
        written.append(summary_path)
        written += write_differences(out_dir, "table1", f"Table 1 — {suite}",
                                     table1_differences(df, table1_keys(df), baseline), env, results=df,
                                     rows=options.get("rows") or PAPER_ROWS, baseline=baseline)
    claims = table1_claims(df) if "table1" in tables else []  # §IV-A's headline sentences
    studies = [t for t in tables if t in STUDY_TABLES]
    if studies:  # one claims.md for every table of the report
        written += write_study_reports(df, out_dir, tables=studies, env=env, suite=suite, plots=plots,
                                       options={**options, "baseline": baseline}, earlier_claims=claims)
    else:
        written += write_claims(out_dir, claims, suite=suite, stand_ins=not datasource.all_real(sources),
                                smoke=bool(options.get("smoke")), seeds=seed_count(df))
    # each evaluation point names its own cell's data (matched by cell key)
    written.append(write_csv(in_percent(datasource.with_sources(curves, df)), out_dir / "curves.csv"))
    if plots and not curves.empty:
        written += _write_learning_curves(df, curves, out_dir, suite, baseline)
    return written
