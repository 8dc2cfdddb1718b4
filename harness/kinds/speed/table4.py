"""The paper's Table 4 and the speed-up table, in Markdown and LaTeX, from one cell formatter.

The layout follows Table 4 of the S3Attention paper: one row per attention variant, one column per sequence length,
each value followed by a multiplier against the baseline, e.g. ``32.2 (1.4×)``. Multipliers are always oriented so
that above 1.0× means better than the baseline (faster, higher throughput, less memory).

Both formats show the variants under their display names in a paper's order (:func:`harness.report.groups.table_order`)
and leave out a variant that ran nowhere in the group (unsupported or failed in every cell), naming it under the
table. The LaTeX table prints the paper's rows (:data:`PAPER_ROWS`, or the suite's ``report.rows``); the Markdown
table and the supplementary long table every row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd

from ...core.suite import is_finite_number
from ...report.format import (
    MISSING,
    PLUS_MINUS,
    TIMES,
    Fmt,
    booktabs,
    display_name,
    dropped_note,
    escape,
    format_value,
    length_label,
    md_table,
    number,
    refaults,
    render_table,
    sig2,
    time_marks,
    with_dropped,
)
from ...report.groups import table_order
from .claims import TABLE4_BASELINES
from .metrics import Metric, metrics_for

# One table (and one pair of plots) per combination of these; the rows of a group differ only by
# attention variant and sequence length.
GROUP_COLUMNS: tuple[str, ...] = ("device", "dtype", "mode", "causal", "compile", "batch_size", "heads", "dim")
#: The rows of the paper's Table 4 (the Transformer, its efficient baselines and S3Attention): what the LaTeX Table 4
#: prints where the suite's ``report.rows`` does not say.
PAPER_ROWS = ("vanilla", *TABLE4_BASELINES, "s3attention")
#: The mark of a CUDA time taken with a warm L2 (the cell's ``warm_cache``, :func:`harness.measure.timing.warm_cache`):
#: its working set fits in L2 and L2 was not flushed between calls, so a cold call takes longer.
#: († is a busy machine's mark and § a re-faulting time's, in every table.)
WARM_MARK: dict[str, str] = {"md": "‡", "tex": r"$^\ddagger$"}
#: What :data:`WARM_MARK` says, in a table's note (where some cell has it).
WARM_NOTE = "‡ warm L2 (CUDA: the working set fits in L2, not flushed between calls; a cold call is slower); "


def cache_mark(cell: Mapping[str, object] | None, fmt: Fmt) -> str:
    """:data:`WARM_MARK` where the cell was timed with a warm L2, else nothing."""
    return WARM_MARK[fmt] if cell is not None and cell.get("warm_cache") in (True, 1) else ""


def any_warm(df: pd.DataFrame) -> bool:
    """Whether some cell of ``df`` was timed with a warm L2 (its note then explains :data:`WARM_MARK`)."""
    return "warm_cache" in df.columns and bool(df["warm_cache"].isin([True, 1]).any())


_Cells = dict[tuple[str, int], dict[str, object]]


def with_compile(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its ``compile`` and ``causal`` columns, ``eager`` and False where missing (a suite without the axis,
    results stored before it existed): the bidirectional, eager cells they are."""
    causal = df["causal"].fillna(False).astype(bool) if "causal" in df.columns else False
    return df.assign(compile=df["compile"].fillna("eager") if "compile" in df.columns else "eager", causal=causal)


def shown_rows(df: pd.DataFrame, baseline: str | None) -> tuple[list[str], list[str], list[str]]:
    """A group's variants in a paper's order: those with a row (an ok or out-of-memory cell), those left out because
    they ran nowhere, and the statuses of the cells of the latter (for the note naming them)."""
    names = table_order(set(df["attention"]), baseline)
    ran = set(df.loc[df["status"].isin(["ok", "oom"]), "attention"])
    dropped = [n for n in names if n not in ran]
    return [n for n in names if n in ran], dropped, list(df.loc[df["attention"].isin(dropped), "status"])


def _metric_value(cells: _Cells, attention: str, seq_len: int, metric: Metric) -> float | None:
    """The displayed value of an ok cell, or None for a missing, failed or unmeasured cell."""
    cell = cells.get((attention, seq_len))
    if cell is None or cell["status"] != "ok":
        return None
    raw = cell[metric.column]
    if pd.isna(raw):
        return None
    value = float(raw) * metric.scale
    return value if math.isfinite(value) else None


def _ratio(cells: _Cells, attention: str, seq_len: int, metric: Metric, baseline: str, value: float) -> float | None:
    """The cell's multiplier against the baseline (above 1 is better): a time's paired speed-up where it has one,
    else the ratio of the two values; None where there is none to show."""
    cell = cells[(attention, seq_len)]
    ratio = cell.get("speedup") if metric.kind == "time" else None  # paired, from attach_speedups
    if not is_finite_number(ratio):
        base = _metric_value(cells, baseline, seq_len, metric)
        ratio = None if base is None or base <= 0 or value <= 0 else (
            value / base if metric.higher_is_better else base / value)
    base_cell = cells.get((baseline, seq_len))
    if metric.kind == "time" and base_cell is not None and refaults(base_cell):
        return None  # the baseline's time measures its page faults (§): no multiplier is taken against it
    return float(ratio) if is_finite_number(ratio) else None  # type: ignore[arg-type]


def format_cell(cells: _Cells, attention: str, seq_len: int, metric: Metric, baseline: str, fmt: Fmt,
                best: bool = False) -> str:
    """``value ±spread%† (multiplier×)``: the spread is half the IQR of the timing rounds relative to the median (in
    Markdown only: in a paper's column it would double every cell's width), † marks a timing taken while the machine
    was busy, and a time multiplier comes from the paired rounds; ``best`` sets the value in bold (LaTeX)."""
    cell = cells.get((attention, seq_len))
    if cell is not None and cell["status"] == "oom":
        return "OOM"
    value = _metric_value(cells, attention, seq_len, metric)
    if value is None or cell is None:
        return MISSING[fmt]
    text = rf"\textbf{{{number(value, fmt)}}}" if best and fmt == "tex" else number(value, fmt)
    if metric.kind == "time":
        if fmt == "md" and is_finite_number(cell.get("time_ms_iqr")) and cell["time_ms_median"] > 0:
            text += f" {PLUS_MINUS[fmt]}{sig2(50 * cell['time_ms_iqr'] / cell['time_ms_median'])}%"
        text += time_marks(cell, fmt) + cache_mark(cell, fmt)
    ratio = None if attention == baseline else _ratio(cells, attention, seq_len, metric, baseline, value)
    if ratio is None:
        return text
    # A multiplier is no better than either of its two timings: it carries the baseline cell's marks too.
    base_cell = cells.get((baseline, seq_len))
    inherited = (time_marks(base_cell, fmt) + cache_mark(base_cell, fmt)
                 if metric.kind == "time" and base_cell is not None else "")
    return f"{text} ({sig2(ratio)}{TIMES[fmt]}{inherited})"


def _shown_metrics(df_group: pd.DataFrame) -> list[Metric]:
    """Metrics to tabulate: a block is dropped when the group has ok cells but none measured it
    (e.g. a memory-only suite has no time); an all-OOM group keeps both blocks so the OOMs show."""
    ok = df_group[df_group["status"] == "ok"]
    metrics = metrics_for(str(df_group["mode"].iloc[0]))
    return [m for m in metrics if ok.empty or ok[m.column].notna().any()]


def table4(df_group: pd.DataFrame, *, baseline: str, fmt: Fmt = "md",
           row_names: Mapping[str, str] | None = None) -> str:
    """Renders one group as the paper's Table 4 in Markdown: variants × sequence lengths, time block then memory
    block (:func:`table4_tex` is the LaTeX).

    Cells show the value (3 significant digits) and, for non-baseline rows whose baseline cell is ok,
    a multiplier: speed-up (baseline/variant time), throughput ratio (variant/baseline steps/s, train_step
    mode) or memory saving (baseline/variant peak memory). ``OOM`` marks out-of-memory cells and ``—``
    any other failure or a cell that was not run; a variant that ran nowhere is named under the table.

    Args:
        df_group: Results rows of a single group (equal ``GROUP_COLUMNS``), at most one per
            (attention, seq_len).
        baseline: Attention name the multipliers are relative to; it is listed first. If absent, no
            multipliers are shown.
        fmt: ``"md"`` (LaTeX: :func:`table4_tex`).
        row_names: the suite's ``report.row_names`` (attention -> the name a row shows).

    Raises:
        ValueError: If ``df_group`` is empty, spans several groups or has duplicate cells.
    """
    if fmt != "md":
        return table4_tex(df_group, baseline=baseline, row_names=row_names)
    _check_group(df_group)
    cells: _Cells = df_group.set_index(["attention", "seq_len"]).to_dict("index")
    lengths = sorted(int(n) for n in df_group["seq_len"].unique())
    metrics = _shown_metrics(df_group)
    shown, dropped, reasons = shown_rows(df_group, baseline)
    rows = [[escape(display_name(name, row_names), fmt),
             *(format_cell(cells, name, n, m, baseline, fmt) for m in metrics for n in lengths)] for name in shown]
    header = ["Attention", *(f"{m.label} {length_label(n)}" for m in metrics for n in lengths)]
    return with_dropped(md_table(header, rows), [display_name(n, row_names) for n in dropped], reasons, fmt)


def _check_group(df_group: pd.DataFrame) -> None:
    if df_group.empty:
        raise ValueError("table4 needs at least one row")
    if len(with_compile(df_group)[list(GROUP_COLUMNS)].drop_duplicates()) > 1:
        raise ValueError(f"table4 expects a single group of {GROUP_COLUMNS}; split the frame first")
    duplicated = df_group.duplicated(["attention", "seq_len"], keep=False)
    if duplicated.any():
        dups = df_group.loc[duplicated]
        pairs = sorted(set(zip(dups["attention"], dups["seq_len"], strict=True)))
        raise ValueError(f"several rows for the same (attention, seq_len): {pairs}")


def _best_per_column(cells: _Cells, names: Sequence[str], lengths: Sequence[int], metric: Metric) -> set[tuple]:
    """(attention, seq_len) of the best displayed value of each column (ties share it)."""
    best = set()
    for n in lengths:
        shown = {name: float(format_value(v)) for name in names
                 if (v := _metric_value(cells, name, n, metric)) is not None}
        if shown:
            top = max(shown.values()) if metric.higher_is_better else min(shown.values())
            best |= {(name, n) for name, v in shown.items() if v == top}
    return best


def table4_tex(df_group: pd.DataFrame, *, baseline: str, row_names: Mapping[str, str] | None = None,
               rows: Sequence[str] | None = None) -> str:
    """Table 4 as a paper takes it: one booktabs tabular per metric (time, then memory), the metric over the lengths,
    rows under the variants' display names (:func:`~harness.report.format.display_name`), the best value of each
    column bold, and the variants that ran nowhere in this group dropped with a footnote naming them. ``rows``: the
    variants to print (the others are left out silently: they are in the long table), None for every one."""
    _check_group(df_group)
    cells: _Cells = df_group.set_index(["attention", "seq_len"]).to_dict("index")
    lengths = sorted(int(n) for n in df_group["seq_len"].unique())
    shown, dropped, reasons = shown_rows(df_group, baseline)
    if rows is not None:
        shown, dropped = [n for n in shown if n in rows], [n for n in dropped if n in rows]
        reasons = list(df_group.loc[df_group["attention"].isin(dropped), "status"])
    k, tables = len(lengths), []
    for metric in _shown_metrics(df_group):
        best = _best_per_column(cells, shown, lengths, metric)
        body = [[escape(display_name(name, row_names), "tex"),
                 *(format_cell(cells, name, n, metric, baseline, "tex", (name, n) in best) for n in lengths)]
                for name in shown]
        if dropped:
            body.append(dropped_note([escape(display_name(n, row_names), "tex") for n in dropped], reasons, 1 + k))
        tables.append(booktabs(f"l{'r' * k}", block_head(metric.label, lengths), body))
    return "\n\n".join(tables)


def block_head(label: str, lengths: Sequence[int]) -> list[str]:
    """The head of one LaTeX block of a variants × lengths table: ``label`` over the lengths, then the lengths."""
    k = len(lengths)
    return [rf" & \multicolumn{{{k}}}{{c}}{{{escape(label, 'tex')}}} \\", rf"\cmidrule(lr){{2-{1 + k}}}",
            " & ".join(["Attention", *(length_label(n) for n in lengths)]) + r" \\"]


def table4_notes(baseline: str, timed: bool, row_names: Mapping[str, str] | None = None,
                 warm: bool = False) -> tuple[str, str]:
    """The notes under Table 4: Markdown's (the spreads it shows) and LaTeX's (bold marks the best); ``warm``: some
    time of the table is marked ‡ (:func:`cache_mark`)."""
    marks = ("† timed on a busy machine (noisy_reason in results.csv); § the time includes faulting at least a tenth "
             "of the cell's peak memory in again on every call (page_faults_per_call in results.csv: memory the "
             "allocator gave back to the OS after each call), so it measures the allocator and the VM as much as the "
             "layer; " + (WARM_NOTE if warm else "") + "a time multiplier carries the marks of the baseline's cell as "
             "well as its own row's, and none is taken against a baseline time marked §. " if timed else "")
    md = (f"Multipliers are relative to `{baseline}`; above 1× is better (faster, higher throughput or less memory); "
          "time multipliers are medians of per-round ratios of interleaved timings (95% intervals in ratios.md). "
          + ("± = half the interquartile range of the timing rounds, relative to the median. " if timed else "")
          + marks + "OOM = out of memory; — = failed, unsupported or not run.")
    tex = (f"Multipliers against {display_name(baseline, row_names)}: above 1× is better. Bold: best per column. "
           + marks + ("The spreads of the timing rounds are in the Markdown table, the speed-ups' 95% intervals in "
                      "the ratios table. " if timed else "") + "OOM = out of memory; — = failed or not run.")
    return md, tex


def ratios_table(df: pd.DataFrame, baseline: str, fmt: Fmt, *, row_names: Mapping[str, str] | None = None,
                 rows: Sequence[str] | None = None) -> str:
    """Speed-ups against ``baseline`` with their 95% intervals: variants × sequence lengths of one group, in Table 4's
    names, order and rows (``rows``: the variants to print, None for every one)."""
    lengths = sorted(int(n) for n in df["seq_len"].unique())
    cells = df.set_index(["attention", "seq_len"]).to_dict("index")
    shown, dropped, reasons = shown_rows(df, baseline)
    if rows is not None:
        shown, dropped = [n for n in shown if n in rows], [n for n in dropped if n in rows]
    out = []
    for name in (n for n in shown if n != baseline):
        row = [escape(display_name(name, row_names), fmt)]
        for n in lengths:
            c = cells.get((name, n), {})
            if not is_finite_number(c.get("speedup")):
                row.append(MISSING[fmt])
            elif c.get("speedup_paired") is True:
                row.append(f"{sig2(c['speedup'])} [{sig2(c['speedup_lo'])}, {sig2(c['speedup_hi'])}]")
            else:
                row.append(f"{sig2(c['speedup'])} (unpaired)")
        out.append(row)
    table = render_table(["Attention", *(length_label(n) for n in lengths)], out, fmt)
    names = [escape(display_name(n, row_names), fmt) for n in dropped if n != baseline]
    return with_dropped(table, names, list(df.loc[df["attention"].isin(dropped), "status"]), fmt)

