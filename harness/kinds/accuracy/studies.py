"""The S3Attention paper's study tables, from accuracy cells: Table 5 (noise robustness), Table 6 (r, s1, s2 varied
one at a time), Table 7 (ablation of each component) and Table S7 (μ-incoherence before and after the Fourier
convolution). Each is written as Markdown, LaTeX (booktabs) and a full-precision CSV, plus figures.

The numbers come from the same summary as Table 1 (:func:`harness.kinds.accuracy.summary.accuracy_summary`, grouped by
the study axes), so a mean, a failed cell or a per-seed average means the same in every table.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...core import datasource
from ...report.claims import Claim, seed_count, write_claims
from ...report.format import (
    CONTROL_NOTE,
    FAILED_NOTE,
    MISSING,
    SUMMARY_PERCENT_COLUMNS,
    Fmt,
    display_name,
    escape,
    in_percent,
    mark,
    printed_rows,
    rank_marks,
    render_table,
    signed,
    sub_tables,
    tex_comment,
    with_dropped,
    write_csv,
    write_table_files,
)
from .claims import table5_claims, table6_claims, table7_claims, tableS7_claims
from .differences import table5_differences, variant_differences, write_differences
from .incoherence_report import incoherence_ranks, incoherence_summary, tableS7, tableS7_figures, tableS7_note
from .noise import TEST_ONLY, TRAIN_TEST
from .study_figures import is_number, table5_figures, table6_figures, table7_figures
from .summary import (
    ABLATION_LABELS,
    AVG,
    AXIS_DEFAULTS,
    CONTROL,
    PAPER_ROWS,
    TASK_LABELS,
    SummaryCells,
    present_tasks,
    row_order,
    seeds_text,
    varying_label,
    with_axis_defaults,
)

STUDY_TABLES = ("table5", "table6", "table7", "tableS7")

#: Row names of the paper's Table 7 for the four ablated components.
#: Row names of Table 7 for the four ablated components: the paper's, saying the component is removed.
NOISE_MODE_HEADINGS = {TRAIN_TEST: "Noise on train and test (train+test)", TEST_ONLY: "Noise on test only (test only)"}
_MODEL = ["attention", "variant"]
_NOISE_KEYS = [*_MODEL, "noise", "noise_on"]


def _average_header(df: pd.DataFrame) -> list[str]:
    return [*(TASK_LABELS[t] for t in present_tasks(df)), "Average"]


# ---------------------------------------------------------------------------------------------------
# Table 5: noise robustness.


def relative_change_pct(value: float, clean: float | None) -> float:
    """(value − clean) / clean in percent: the paper's "relative performance change" against a = 0."""
    return math.nan if clean is None or clean == 0 or not np.isfinite(clean) else 100.0 * (value - clean) / clean


def _noise_modes(df: pd.DataFrame) -> list[str]:
    modes = set(df.loc[df["noise"] > 0, "noise_on"]) or {AXIS_DEFAULTS["noise_on"]}
    return sorted(modes, key=lambda m: (m != AXIS_DEFAULTS["noise_on"], m))


def noise_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Table 5's numbers: per (attention, variant, noise, noise_on, task) mean, std and n of test accuracy (%) over
    seeds, failed runs, and ``rel_change_pct`` against the same model and task at a = 0."""
    s = SummaryCells(df, _NOISE_KEYS).summary
    s = s[s["task"] != AVG]
    clean = s[s["noise"] == 0][[*_MODEL, "task", "mean"]].rename(columns={"mean": "clean_mean"})
    s = s.merge(clean, on=[*_MODEL, "task"], how="left")
    s["rel_change_pct"] = [relative_change_pct(v, c) for v, c in zip(s["mean"], s["clean_mean"], strict=True)]
    return s.drop(columns="clean_mean")


def table5(df: pd.DataFrame, *, fmt: Fmt, baseline: str | None = "vanilla", rows: Sequence[str] | None = None) -> str:
    """Table 5: models × noise levels a, one table per noise mode (noise in every split, or in the test split only),
    each under a heading naming its mode.

    A cell is the mean test accuracy (%) over seeds; for a > 0 the relative change from the same model's a = 0 cell
    follows in parentheses, e.g. ``40.29 (−2.82%)``. The clean cells are shared by both modes. Rows are the
    attentions in every table's order under their display names, with the variant and task in the label where those
    vary; the best mean of each column among the rows of one task is bold. A row that ran nowhere is left out and
    named under its table. ``rows``: the attentions to print (a paper's rows), None for every one.
    """
    df = with_axis_defaults(df)
    printed = set(printed_rows(sorted(set(df["attention"])), rows, baseline))
    df = df[df["attention"].isin(printed)]
    parts = []
    for mode in _noise_modes(df):
        sub = df[(df["noise"] == 0) | (df["noise_on"] == mode)]
        parts.append((NOISE_MODE_HEADINGS.get(mode, f"Noise on {mode}"), _table5_mode(df, sub, mode, fmt, baseline)))
    return sub_tables(parts, fmt)


def _table5_mode(df: pd.DataFrame, sub: pd.DataFrame, mode: str, fmt: Fmt, baseline: str | None) -> str:
    """Table 5's table of one noise mode (see :func:`table5`)."""
    cells = SummaryCells(df, _NOISE_KEYS)
    row_keys = [*_MODEL, "task"]
    pct = "%" if fmt == "md" else r"\%"
    levels = sorted(sub["noise"].unique())

    def key_at(model: tuple[Hashable, ...], a: float) -> tuple[Hashable, ...]:
        attention, variant, task = model
        return attention, variant, a, mode if a > 0 else AXIS_DEFAULTS["noise_on"], task

    models = row_order(sub, row_keys, baseline)
    # rows that ran nowhere (unsupported or failed at every a) are left out and named under the table
    dropped = {m: why for m in models if all(cells.mean(key_at(m, a)) is None for a in levels)
               and "oom" not in (why := set().union(*(cells.statuses(key_at(m, a)) for a in levels)))}
    models = [m for m in models if m not in dropped]
    # the best of each column among the rows of one task (a column mixes tasks when several ran)
    best = {(m, a): r for task in {m[2] for m in models} for a in levels
            for m, r in zip([m for m in models if m[2] == task],
                            rank_marks([cells.mean(key_at(m, a)) for m in models if m[2] == task]), strict=True)}
    rows = []
    for model in models:
        row = [escape(varying_label(df, row_keys, model, display=True), fmt)]
        clean = cells.mean(key_at(model, 0.0))
        for a in levels:
            key = key_at(model, a)
            value = cells.mean(key)
            if value is None:
                row.append(cells.failed(key, fmt))
                continue
            change = relative_change_pct(value, clean) if a > 0 else math.nan
            row.append(mark(f"{value:.2f}", best[(model, a)], fmt) + cells.below_control(key, (CONTROL, *key[1:]), fmt)
                       + (f" ({signed(change, fmt)}{pct})" if np.isfinite(change) else ""))
        rows.append(row)
    header = ["Model", *(f"a = {a:g}" for a in levels)]  # a: the noise amplitude of U(-a, a)
    labels = [escape(varying_label(df, row_keys, m, display=True), fmt) for m in dropped]
    return with_dropped(render_table(header, rows, fmt), labels,
                        [s for why in dropped.values() for s in why or {"not run"}], fmt)


def _table5_note(df: pd.DataFrame) -> str:
    return (f"Test accuracy (%), mean over seeds {seeds_text(df)}, with noise U(-a, a) added to every pixel; in "
            "parentheses the relative change from a = 0 of the same model; the best of each column (per task) in "
            "bold. The std over seeds is in table5.csv. "
            + FAILED_NOTE + (f" {CONTROL_NOTE}" if CONTROL in set(df["attention"]) else ""))


# ---------------------------------------------------------------------------------------------------
# Table 6: r, s1, s2 varied one at a time.


def sweep_parameters(variants: Mapping[str, Mapping[str, Any]], baseline_variant: str = "base"
                     ) -> dict[str, list[tuple[Any, str]]]:
    """The one-at-a-time sweeps hidden in a suite's variants: parameter -> [(value, variant label)], ascending.

    A variant belongs to parameter p when its overrides differ from the base's in p and nothing else, and its
    value of p is a number: a switched-off component (``fourier_conv: false``) is an ablation for Table 7, not a
    sweep. The base itself is the row of its own value in every sweep (the paper repeats it in each sub-table);
    where the base does not set p, its value is None ("default") and its row comes first. Parameters come in the
    order they first appear among the variants.
    """
    if baseline_variant not in variants:
        return {}
    base = variants[baseline_variant]
    sweeps: dict[str, list[tuple[Any, str]]] = {}
    for label, overrides in variants.items():
        differ = [k for k in {**base, **overrides} if base.get(k) != overrides.get(k)]
        if label != baseline_variant and len(differ) == 1 and is_number(overrides.get(differ[0])):
            sweeps.setdefault(differ[0], []).append((overrides.get(differ[0]), label))

    def order(item: tuple[Any, str]) -> tuple[int, float]:
        return (1, float(item[0])) if is_number(item[0]) else (0, 0.0)

    return {p: sorted([(base.get(p), baseline_variant), *rows], key=order) for p, rows in sweeps.items()}


def _value_text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "default" if value is None else str(value)


def _study_attentions(df: pd.DataFrame, labels: Sequence[str], baseline: str | None) -> list[str]:
    """Attentions with cells of any of the variants ``labels``; one set of sub-tables each."""
    present = df[df["variant"].isin(list(labels))]
    return [a for (a,) in row_order(present, ["attention"], baseline)]


def _has_cells(df: pd.DataFrame, attention: str, variant: str) -> bool:
    return bool(((df["attention"] == attention) & (df["variant"] == variant)).any())


def variant_sweep_summary(df: pd.DataFrame, variants: Mapping[str, Mapping[str, Any]],
                          baseline_variant: str = "base") -> pd.DataFrame:
    """Table 6's numbers: per (parameter, value, attention, variant, task) mean, std and n of test accuracy (%)
    over seeds and failed runs; task ``avg`` is the per-seed average over tasks. The base rows repeat under each
    parameter, as in the paper."""
    sweeps = sweep_parameters(variants, baseline_variant)
    frame = pd.DataFrame([(p, v, label) for p, rows in sweeps.items() for v, label in rows],
                         columns=["parameter", "value", "variant"])
    return frame.merge(SummaryCells(df, _MODEL).summary, on="variant", how="inner")


def _marked_rows(cells: SummaryCells, models: Sequence[tuple[str, str]], labels: Sequence[str],
                 columns: Sequence[str], fmt: Fmt) -> list[list[str]]:
    """Rows of means with 2 decimals, the best of each column bold and the second underlined."""
    marks = {c: rank_marks([cells.mean((*m, c)) for m in models], depth=2) for c in columns}
    rows = []
    for i, (model, label) in enumerate(zip(models, labels, strict=True)):
        row = [escape(label, fmt)]
        for c in columns:
            value = cells.mean((*model, c))
            row.append(cells.failed((*model, c), fmt) if value is None else mark(f"{value:.2f}", marks[c][i], fmt))
        rows.append(row)
    return rows


def table6(df: pd.DataFrame, *, fmt: Fmt, variants: Mapping[str, Mapping[str, Any]],
           baseline_variant: str = "base", baseline: str | None = "vanilla") -> str:
    """Table 6: one sub-table per parameter varied alone around the base variant — "(a) r", "(b) s1", "(c) s2" —
    rows = the parameter's values ascending, columns = tasks + Average, cells = mean test accuracy (%) over seeds.

    In each column of each sub-table the best is bold and the second best underlined; equal displayed numbers
    share the mark. With several attentions, each gets its own sub-tables.
    """
    df = with_axis_defaults(df)
    sweeps = sweep_parameters(variants, baseline_variant)
    if not sweeps:
        return ("No variant differs from the base variant "
                f"`{baseline_variant}` in exactly one setting." if fmt == "md" else tex_comment("no sweeps"))
    cells = SummaryCells(df, _MODEL)
    columns = [*present_tasks(df), AVG]
    labels = [label for rows in sweeps.values() for _, label in rows]
    attentions = _study_attentions(df, labels, baseline)
    parts = []
    for i, (parameter, rows) in enumerate(sweeps.items()):
        for attention in attentions:
            shown = [(v, label) for v, label in rows if _has_cells(df, attention, label)]
            models = [(attention, label) for _, label in shown]
            body = _marked_rows(cells, models, [_value_text(v) for v, _ in shown], columns, fmt)
            name = display_name(attention)  # a paper's names in Markdown too (the CSV keeps the registry's)
            heading = f"({chr(ord('a') + i)}) {parameter}" + (f" — {name}" if len(attentions) > 1 else "")
            parts.append((heading, render_table([escape(parameter, fmt), *_average_header(df)], body, fmt)))
    return sub_tables(parts, fmt)


def _table6_note(df: pd.DataFrame) -> str:
    return (f"Test accuracy (%), mean over seeds {seeds_text(df)}; Average = mean of each seed's average over the "
            "tasks. One setting varied at a time around the base variant. Best in bold, second best underlined, "
            "per column of each sub-table. The std over seeds is in table6.csv. " + FAILED_NOTE)


# ---------------------------------------------------------------------------------------------------
# Table 7: ablation.


def _ablation_variants(df: pd.DataFrame, variants: Mapping[str, Any] | None, baseline_variant: str) -> list[str]:
    """The base variant, then the others in suite order, then any variant of ``df`` the options do not list."""
    listed = [v for v in (variants or {}) if v != baseline_variant]
    extra = sorted(set(df["variant"]) - {baseline_variant, *listed, AXIS_DEFAULTS["variant"]})
    return [baseline_variant, *listed, *extra]


def ablation_name(variant: str, baseline_variant: str = "base") -> str:
    """Table 7's row name of a variant: "Baseline", the paper's component names, else the label itself."""
    return "Baseline" if variant == baseline_variant else ABLATION_LABELS.get(variant, variant)


def ablation_summary(df: pd.DataFrame, variants: Mapping[str, Any] | None = None,
                     baseline_variant: str = "base") -> pd.DataFrame:
    """Table 7's numbers: per (attention, variant, task) mean, std, n and failed runs, the row name, and ``diff``
    = variant mean − base variant mean of the same attention and task (percentage points; 0 for the base)."""
    df = with_axis_defaults(df)
    order = _ablation_variants(df, variants, baseline_variant)
    s = SummaryCells(df, _MODEL).summary
    s = s[s["variant"].isin(order)]
    base = s[s["variant"] == baseline_variant][["attention", "task", "mean"]].rename(columns={"mean": "base_mean"})
    s = s.merge(base, on=["attention", "task"], how="left")
    s["diff"] = s["mean"] - s["base_mean"]
    s.insert(2, "model", [ablation_name(v, baseline_variant) for v in s["variant"]])
    s["_order"] = s["variant"].map(order.index)
    return s.sort_values(["attention", "_order", "task"], ignore_index=True).drop(columns=["base_mean", "_order"])


def table7(df: pd.DataFrame, *, fmt: Fmt, variants: Mapping[str, Any] | None = None,
           baseline_variant: str = "base", baseline: str | None = "vanilla") -> str:
    """Table 7: "Baseline" (the base variant's mean test accuracy per task and Average), then each other variant in
    suite order as its difference from the baseline, with an explicit sign (``-4.04``, ``+0.31``).

    The paper's four components get its row names (``no_fourier_conv`` -> "Four. Conv.", ...). A difference needs
    both the variant's and the baseline's cell; otherwise the cell shows OOM or —.
    """
    df = with_axis_defaults(df)
    order = _ablation_variants(df, variants, baseline_variant)
    cells = SummaryCells(df, _MODEL)
    columns = [*present_tasks(df), AVG]
    attentions = _study_attentions(df, order, baseline)
    parts = []
    for attention in attentions:
        shown = [v for v in order if _has_cells(df, attention, v)]
        # bold: the best accuracy of each column, the baseline's or a variant's (baseline + its difference)
        best = {c: rank_marks([cells.mean((attention, v, c)) for v in shown]) for c in columns}
        rows = []
        for i, variant in enumerate(shown):
            row = [escape(ablation_name(variant, baseline_variant), fmt)]
            for c in columns:
                value, base = cells.mean((attention, variant, c)), cells.mean((attention, baseline_variant, c))
                if value is None:
                    row.append(cells.failed((attention, variant, c), fmt))
                elif variant == baseline_variant:
                    row.append(mark(f"{value:.2f}", best[c][i], fmt))
                else:
                    row.append(MISSING[fmt] if base is None else mark(signed(value - base, fmt), best[c][i], fmt))
            rows.append(row)
        heading = display_name(attention)
        parts.append((heading, render_table(["Model", *_average_header(df)], rows, fmt)))
    if not parts:
        return f"No cells of the variants {', '.join(order)}." if fmt == "md" else tex_comment("no ablation cells")
    return parts[0][1] if len(parts) == 1 else sub_tables(parts, fmt)


def _table7_note(df: pd.DataFrame, baseline_variant: str) -> str:
    return (f"Baseline: the `{baseline_variant}` variant, test accuracy (%), mean over seeds {seeds_text(df)}; other "
            "rows: difference from the baseline (variant − baseline, percentage points). Average = mean of each "
            "seed's average over the tasks. Bold: the best accuracy of each column. The std over seeds is in "
            "table7.csv. " + FAILED_NOTE)


# ---------------------------------------------------------------------------------------------------
# Files.


def write_study_reports(df: pd.DataFrame, out_dir: Path, *, tables: Sequence[str], env: Mapping[str, object],
                        suite: str, options: Mapping[str, Any] | None = None, plots: bool = True,
                        earlier_claims: Sequence[Claim] = ()) -> list[Path]:
    """For each of ``tables`` (Table 5, 6, 7 or S7), ``<table>.md``, ``<table>.tex``, ``<table>.csv`` (the summary
    at full precision, with std and n) and, with ``plots``, its figures as PNG and PDF.

    Args:
        df: Accuracy cells (see :func:`harness.kinds.accuracy.table1.write_accuracy_reports`).
        out_dir: Destination directory; created if needed.
        tables: Subset of :data:`STUDY_TABLES`.
        env: Environment of the run, shown under each table.
        suite: Suite name, used in titles.
        options: ``baseline`` (attention listed first), ``baseline_variant`` (default ``base``), ``variants``
            (label -> config overrides, in suite order; Table 6 needs them, Table 7 takes its row order from them)
            and ``rows`` (the attentions Table 5's LaTeX prints, default the paper's; every row in ``_full.tex``).
        plots: Whether to draw the figures.
        earlier_claims: Claims of the report's other tables (Table 1's), listed first in the one ``claims.md``.

    Raises:
        ValueError: If ``tables`` names a table that is not a study table.
    """
    unknown = [t for t in tables if t not in STUDY_TABLES]
    if unknown:
        raise ValueError(f"unknown study tables {unknown}; choose from {', '.join(STUDY_TABLES)}")
    options = options or {}
    baseline = options.get("baseline", "vanilla")
    base_variant = str(options.get("baseline_variant", "base"))
    variants: Mapping[str, Mapping[str, Any]] = options.get("variants") or {}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sweep_rows = [(label, f"{p}={_value_text(v)}") for p, rows in sweep_parameters(variants, base_variant).items()
                  for v, label in rows]
    ablation_rows = [(v, ablation_name(v, base_variant)) for v in _ablation_variants(with_axis_defaults(df), variants,
                                                                                    base_variant)]
    specs = {
        "table5": ("Table 5 — {suite}: noise robustness", lambda: noise_summary(df), _table5_note(df),
                   lambda fmt, rows=None: table5(df, fmt=fmt, baseline=baseline, rows=rows),
                   lambda *args: table5_figures(*args, baseline=baseline),
                   lambda: table5_differences(df, baseline)),
        "table6": ("Table 6 — {suite}: varying one setting at a time",
                   lambda: variant_sweep_summary(df, variants, base_variant), _table6_note(df),
                   lambda fmt, rows=None: table6(df, fmt=fmt, variants=variants, baseline_variant=base_variant,
                                                 baseline=baseline), table6_figures,
                   lambda: variant_differences(df, sweep_rows, base_variant)),
        "table7": ("Table 7 — {suite}: ablation", lambda: ablation_summary(df, variants, base_variant),
                   _table7_note(df, base_variant),
                   lambda fmt, rows=None: table7(df, fmt=fmt, variants=variants, baseline_variant=base_variant,
                                                 baseline=baseline), table7_figures,
                   lambda: variant_differences(df, ablation_rows, base_variant)),
        "tableS7": ("Table S7 — {suite}: μ-incoherence", lambda: incoherence_summary(df), tableS7_note(df),
                    lambda fmt, rows=None: tableS7(df, fmt=fmt, baseline=baseline), tableS7_figures, list),
    }
    claim_checks = {"table5": lambda: table5_claims(df, baseline or "vanilla"),
                    "table6": lambda: table6_claims(df, sweep_parameters(variants, base_variant)),
                    "table7": lambda: table7_claims(df, [v for v, _ in ablation_rows], base_variant),
                    "tableS7": lambda: tableS7_claims(df, incoherence_ranks(df))}
    written: list[Path] = []
    claims: list[Claim] = list(earlier_claims)
    for table in tables:
        title, summarise, note, render, figures, differences = specs[table]
        summary = summarise()
        csv_path = write_csv(in_percent(datasource.with_sources(summary, df), SUMMARY_PERCENT_COLUMNS),
                             out_dir / f"{table}.csv")
        full, printed = render("tex"), render("tex", options.get("rows") or PAPER_ROWS)
        written += write_table_files(out_dir, table, title=title.format(suite=suite), note=note, md_body=render("md"),
                                     tex_body=printed, tex_full=full if full != printed else None, env=env)
        written.append(csv_path)
        written += write_differences(out_dir, table, title.format(suite=suite), differences(), env, results=df,
                                     rows=options.get("rows") or PAPER_ROWS, baseline=baseline)
        claims += claim_checks[table]()
        if plots and not summary.empty:
            written += figures(df, summary, out_dir, suite)
    stand_ins = not datasource.all_real(datasource.of_ok_cells(df))
    return written + write_claims(out_dir, claims, suite=suite, stand_ins=stand_ins, smoke=bool(options.get("smoke")),
                                  seeds=seed_count(df))
