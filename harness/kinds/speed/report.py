"""Report exports: full-precision CSV, paper-style Table 4 (Markdown + LaTeX) and fitted scaling slopes.

The layout follows Table 4 of the S3Attention paper: one row per attention variant, one column per
sequence length, each value followed by a multiplier against the baseline, e.g. ``32.2 (1.4×)``.
Multipliers are always oriented so that above 1.0× means better than the baseline (faster, higher
throughput, less memory).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from ...core.files import atomic_write_text
from ...core.suite import SKIPPED_BY_RULE, is_finite_number
from ...report.claims import write_claims
from ...report.format import (
    COMPILE_NAMES,
    MEMORY,
    MISSING,
    MODE_NAMES,
    PLUS_MINUS,
    THROUGHPUT,
    TIME,
    TIMES,
    Fmt,
    Metric,
    booktabs,
    display_name,
    dropped_note,
    env_summary,
    escape,
    format_value,
    length_label,
    md_table,
    metrics_for,
    refaults,
    render_table,
    sig2,
    suite_title,
    tex_float,
    time_marks,
    write_csv,
    write_raw,
    write_table_files,
)
from ...report.groups import table_order
from ...report.stats import paired_ratio
from .claims import speed_claims
from .compiled import write_compile_comparison
from .crossover import crossover_baselines, group_crossovers, plot_marks, write_crossover
from .plots import plot_scaling
from .roofline import Roofs, write_roofline
from .slopes import fitted_slopes, slopes_md

# One table (and one pair of plots) per combination of these; the rows of a group differ only by
# attention variant and sequence length.
GROUP_COLUMNS: tuple[str, ...] = ("device", "dtype", "mode", "causal", "compile", "batch_size", "heads", "dim")


def with_compile(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its ``compile`` and ``causal`` columns, ``eager`` and False where missing (a suite without the axis,
    results stored before it existed): the bidirectional, eager cells they are."""
    causal = df["causal"].fillna(False).astype(bool) if "causal" in df.columns else False
    return df.assign(compile=df["compile"].fillna("eager") if "compile" in df.columns else "eager", causal=causal)


def group_slug(group: Mapping[str, object]) -> str:
    """File-name slug of a group, e.g. ``cpu_float32_fwdpbwd_b4_h2_d64``.

    Args:
        group: Mapping with (at least) the ``GROUP_COLUMNS`` keys.
    """
    g = group
    compiled = "" if g.get("compile", "eager") == "eager" else f"_{g['compile']}"  # eager keeps the older names
    causal = "_causal" if g.get("causal") else ""  # bidirectional too
    slug = f"{g['device']}_{g['dtype']}_{g['mode']}{causal}{compiled}_b{g['batch_size']}_h{g['heads']}_d{g['dim']}"
    # "+" is legal in file names but awkward in URLs, LaTeX \input and shells.
    return slug.replace("+", "p")


def group_title(group: Mapping[str, object]) -> str:
    """A group in words, e.g. ``CPU · float32 · forward + backward · eager · batch 4 · 2 heads · dim 64``."""
    g = group
    device = str(g["device"]).upper() if str(g["device"]) == "cpu" else str(g["device"]).replace("cuda", "CUDA")
    compiled = f"{COMPILE_NAMES.get(str(g['compile']), g['compile'])} · " if "compile" in g else ""  # absent: both
    causal = "causal · " if g.get("causal") else ""
    return (f"{device} · {g['dtype']} · {MODE_NAMES.get(str(g['mode']), g['mode'])} · {causal}{compiled}"
            f"batch {g['batch_size']} · {g['heads']} heads · dim {g['dim']}")


# ---------------------------------------------------------------------------------------------------
# Table 4: one cell formatter, two renderers.


_Cells = dict[tuple[str, int], dict[str, object]]


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


def _format_cell(cells: _Cells, attention: str, seq_len: int, metric: Metric, baseline: str, fmt: Fmt) -> str:
    """``value ±spread%† (multiplier×)``: the spread is half the IQR of the timing rounds relative to the median, †
    marks a timing taken while the machine was busy, and a time multiplier comes from the paired rounds."""
    cell = cells.get((attention, seq_len))
    if cell is not None and cell["status"] == "oom":
        return "OOM"
    value = _metric_value(cells, attention, seq_len, metric)
    if value is None or cell is None:
        return MISSING[fmt]
    text = format_value(value)
    if metric.kind == "time":
        # the spread in Markdown only: in a paper's column it would double every cell's width (LaTeX names where
        # it is instead)
        if fmt == "md" and is_finite_number(cell.get("time_ms_iqr")) and cell["time_ms_median"] > 0:
            text += f" {PLUS_MINUS[fmt]}{sig2(50 * cell['time_ms_iqr'] / cell['time_ms_median'])}%"
        text += time_marks(cell, fmt)
    if attention == baseline:
        return text
    ratio = cell.get("speedup") if metric.kind == "time" else None  # paired, from attach_speedups
    if not is_finite_number(ratio):
        base = _metric_value(cells, baseline, seq_len, metric)
        ratio = None if base is None or base <= 0 or value <= 0 else (
            value / base if metric.higher_is_better else base / value)
    if not is_finite_number(ratio):
        return text
    base_cell = cells.get((baseline, seq_len))
    if metric.kind == "time" and base_cell is not None and refaults(base_cell):
        # the baseline's time measures its page faults (§): no multiplier is taken against it in a pasteable table
        return text
    # A multiplier is no better than either of its two timings: it carries the baseline cell's marks too.
    inherited = time_marks(base_cell, fmt) if metric.kind == "time" and base_cell is not None else ""
    return f"{text} ({sig2(ratio)}{TIMES[fmt]}{inherited})"


def attach_speedups(df: pd.DataFrame, samples: Mapping[tuple[str, str], list[float]], baseline: str) -> pd.DataFrame:
    """``df`` with each ok timed cell's speed-up against ``baseline`` at the same shape: ``speedup`` (baseline time
    / cell time; above 1 = faster), ``speedup_lo``/``speedup_hi`` (95% CI) and ``speedup_paired``.

    Paired when the baseline was timed in the cell's own interleaved group (``samples`` by (timing group,
    attention), :meth:`harness.core.store.Store.group_samples`): the median of the per-round ratios, which a drifting
    machine does not move. Otherwise the ratio of the two medians, without an interval, and only between cells
    measured with the same thread count.
    """
    out = with_compile(df)
    for column in ("speedup", "speedup_lo", "speedup_hi"):
        out[column] = float("nan")
    out["speedup_paired"] = False
    if "time_ms_median" not in out.columns:
        return out
    ok = out[(out["status"] == "ok") & out["time_ms_median"].notna()]
    for _, rows in ok.groupby([*GROUP_COLUMNS, "seq_len"], sort=False):
        base_rows = rows[rows["attention"] == baseline]
        for i, row in rows.iterrows():
            group = row.get("timing_group")
            own, base_samples = samples.get((group, row["attention"])), samples.get((group, baseline))
            paired = paired_ratio(base_samples, own) if own and base_samples else None
            if paired is not None:
                out.loc[i, ["speedup", "speedup_lo", "speedup_hi", "speedup_paired"]] = [
                    paired.value, paired.lo, paired.hi, True]
            elif not base_rows.empty and base_rows.iloc[0].get("threads") == row.get("threads"):
                out.loc[i, "speedup"] = base_rows.iloc[0]["time_ms_median"] / row["time_ms_median"]
    return out


def _shown_metrics(df_group: pd.DataFrame) -> list[Metric]:
    """Metrics to tabulate: a block is dropped when the group has ok cells but none measured it
    (e.g. a memory-only suite has no time); an all-OOM group keeps both blocks so the OOMs show."""
    ok = df_group[df_group["status"] == "ok"]
    metrics = metrics_for(str(df_group["mode"].iloc[0]))
    return [m for m in metrics if ok.empty or ok[m.column].notna().any()]


def _render_md(metrics: Sequence[Metric], lengths: Sequence[int], rows: Sequence[Sequence[str]]) -> str:
    header = ["Attention", *(f"{m.label} {length_label(n)}" for m in metrics for n in lengths)]
    return md_table(header, rows)


def _render_tex(metrics: Sequence[Metric], lengths: Sequence[int], rows: Sequence[Sequence[str]]) -> str:
    k = len(lengths)
    spans = [rf"\multicolumn{{{k}}}{{c}}{{{escape(m.label, 'tex')}}}" for m in metrics]
    rules = [rf"\cmidrule(lr){{{2 + i * k}-{1 + (i + 1) * k}}}" for i in range(len(metrics))]
    lengths_row = ["Attention", *(length_label(n) for _ in metrics for n in lengths)]
    head = [" & ".join(["", *spans]) + r" \\", " ".join(rules), " & ".join(lengths_row) + r" \\"]
    return booktabs(f"l{'r' * k * len(metrics)}", head, rows)


def table4(df_group: pd.DataFrame, *, baseline: str, fmt: Fmt, row_names: Mapping[str, str] | None = None) -> str:
    """Renders one group as the paper's Table 4: variants × sequence lengths, time block then memory block.

    Cells show the value (3 significant digits) and, for non-baseline rows whose baseline cell is ok,
    a multiplier: speed-up (baseline/variant time), throughput ratio (variant/baseline steps/s, train_step
    mode) or memory saving (baseline/variant peak memory). ``OOM`` marks out-of-memory cells and ``—``
    (``---`` in LaTeX) any other failure or a cell that was not run.

    Args:
        df_group: Results rows of a single group (equal ``GROUP_COLUMNS``), at most one per
            (attention, seq_len).
        baseline: Attention name the multipliers are relative to; it is listed first. If absent, no
            multipliers are shown.
        fmt: ``"md"`` for GitHub Markdown or ``"tex"`` for a LaTeX booktabs ``tabular``.
        row_names: the suite's ``report.row_names`` (attention -> the name a row shows).

    Returns:
        The table text, without a trailing newline.

    Raises:
        ValueError: If ``df_group`` is empty, spans several groups or has duplicate cells.
    """
    if df_group.empty:
        raise ValueError("table4 needs at least one row")
    df_group = with_compile(df_group)
    if len(df_group[list(GROUP_COLUMNS)].drop_duplicates()) > 1:
        raise ValueError(f"table4 expects a single group of {GROUP_COLUMNS}; split the frame first")
    duplicated = df_group.duplicated(["attention", "seq_len"], keep=False)
    if duplicated.any():
        dups = df_group.loc[duplicated]
        pairs = sorted(set(zip(dups["attention"], dups["seq_len"], strict=True)))
        raise ValueError(f"several rows for the same (attention, seq_len): {pairs}")

    cells: _Cells = df_group.set_index(["attention", "seq_len"]).to_dict("index")
    lengths = sorted(int(n) for n in df_group["seq_len"].unique())
    metrics = _shown_metrics(df_group)
    variants = table_order(set(df_group["attention"]), baseline)
    names = dict(row_names or {})
    rows = [
        [escape(display_name(name, names), fmt),
         *(_format_cell(cells, name, n, m, baseline, fmt) for m in metrics for n in lengths)]
        for name in variants
    ]
    render = _render_md if fmt == "md" else _render_tex
    return render(metrics, lengths, rows)


# ---------------------------------------------------------------------------------------------------
# File output.


def _table4_md(df_group: pd.DataFrame, group: Mapping[str, object], *, suite: str, baseline: str,
               env: Mapping[str, object], row_names: Mapping[str, str] | None = None) -> str:
    return (
        f"### Table 4 — {suite}: {group_title(group)}\n\n"
        f"{table4(df_group, baseline=baseline, fmt='md', row_names=row_names)}\n\n"
        f"Multipliers are relative to `{baseline}`; above 1× is better (faster, higher throughput or less memory); "
        "a time multiplier carries the marks of the baseline's cell as well as its own row's, and none is taken "
        "against a baseline time marked §; "
        "time multipliers are medians of per-round ratios of interleaved timings (95% intervals in ratios.md). "
        "± = half the interquartile range of the timing rounds, relative to the median; † = timed while other "
        "processes kept the machine busy (noisy_reason in results.csv); § = the time includes faulting at least a "
        "tenth of the cell's peak memory in again on every call (page_faults_per_call in results.csv: memory the "
        "allocator gave back to the OS after each call), so it measures the allocator and the VM as much as the "
        "layer. OOM = out of memory; — = failed, "
        "unsupported or not run.\n\n"
        f"_Environment: {env_summary(env)}_\n"
    )


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


def table4_tex(df_group: pd.DataFrame, *, baseline: str, row_names: Mapping[str, str] | None = None) -> str:
    """Table 4 as a paper takes it: one booktabs tabular per metric (time, then memory: each fits a column), rows
    under the variants' display names (:func:`~harness.report.format.display_name`), the best value of each column
    bold, and the variants that ran nowhere in this group (unsupported or failed in every cell) dropped with a
    footnote row naming them."""
    cells: _Cells = df_group.set_index(["attention", "seq_len"]).to_dict("index")
    lengths = sorted(int(n) for n in df_group["seq_len"].unique())
    variants = table_order(set(df_group["attention"]), baseline)
    ran = {a for a, sub in df_group.groupby("attention") if sub["status"].isin(["ok", "oom"]).any()}
    dropped = [name for name in variants if name not in ran]
    shown = [name for name in variants if name in ran]
    tables = []
    for metric in _shown_metrics(df_group):
        best = _best_per_column(cells, shown, lengths, metric)
        rows = []
        for name in shown:
            values = []
            for n in lengths:
                text = _format_cell(cells, name, n, metric, baseline, "tex")
                values.append(rf"\textbf{{{text}}}" if (name, n) in best else text)
            rows.append([escape(display_name(name, row_names), "tex"), *values])
        if dropped:
            rows.append(dropped_note([escape(display_name(name, row_names), "tex") for name in dropped],
                                     list(df_group.loc[df_group["attention"].isin(dropped), "status"]),
                                     1 + len(lengths)))
        head = [" & ".join([escape(metric.label, "tex"), *(length_label(n) for n in lengths)]) + r" \\"]
        tables.append(booktabs(f"l{'r' * len(lengths)}", head, rows))
    return "\n\n".join(tables)


def _table4_tex(df_group: pd.DataFrame, group: Mapping[str, object], *, suite: str, baseline: str,
                env: Mapping[str, object], row_names: Mapping[str, str] | None = None) -> str:
    timed = any(m.kind == "time" for m in _shown_metrics(df_group))
    caption = (f"Table 4 — {suite_title(suite)}: {group_title(group)}. Multipliers against "
               f"{display_name(baseline, row_names)}: above 1× is better. Bold: best per column."
               + (" † timed on a busy machine; § the time includes faulting its memory in again on every call; a "
                  "multiplier carries its baseline's marks, and none is taken against a baseline time marked §. The "
                  "spreads of the timing rounds are in the Markdown table, the speed-ups' 95% intervals in the ratios "
                  "table." if timed else ""))
    return tex_float(table4_tex(df_group, baseline=baseline, row_names=row_names), caption=caption,
                     label=f"table4_{group_slug(group)}", comments=(env_summary(env),))


def ratios_table(df: pd.DataFrame, baseline: str, fmt: Fmt) -> str:
    """Speed-ups against ``baseline`` with their 95% intervals: variants × sequence lengths of one group."""
    lengths = sorted(int(n) for n in df["seq_len"].unique())
    cells = df.set_index(["attention", "seq_len"]).to_dict("index")
    rows = []
    for name in sorted(set(df["attention"]) - {baseline}):
        row = [escape(name, fmt)]
        for n in lengths:
            c = cells.get((name, n), {})
            if not is_finite_number(c.get("speedup")):
                row.append(MISSING[fmt])
            elif c.get("speedup_paired") is True:
                row.append(f"{sig2(c['speedup'])} [{sig2(c['speedup_lo'])}, {sig2(c['speedup_hi'])}]")
            else:
                row.append(f"{sig2(c['speedup'])} (unpaired)")
        rows.append(row)
    return render_table(["Attention", *(length_label(n) for n in lengths)], rows, fmt)


def write_speed_reports(df: pd.DataFrame, out_dir: Path, *, env: Mapping[str, object], suite: str,
                        baseline: str = "vanilla", slope_min_seq_len: int = 1024, plots: bool = True,
                        samples: Mapping[tuple[str, str], list[float]] | None = None,
                        roofs: Roofs | None = None, row_names: Mapping[str, str] | None = None,
                        smoke: bool = False) -> list[Path]:
    """Writes every report of a suite's results into ``out_dir``.

    Files: ``results.csv`` (all rows and columns, full precision), ``env.json``, per group
    ``table4_<slug>.md`` and ``table4_<slug>.tex``, ``slopes.csv`` and ``slopes.md``, ``crossover.csv`` and
    ``crossover.md`` (the length from which each variant is faster and leaner than ``vanilla_sdpa`` and
    ``vanilla``, :mod:`harness.kinds.speed.crossover`), ``claims.md`` (the paper's Table 4 claims, where S3Attention and
    the baseline ran), and with ``plots`` the figures of :func:`harness.kinds.speed.plots.plot_scaling`, with the
    crossovers marked.

    Args:
        df: Results, one row per benchmark cell (see the store for the columns).
        out_dir: Destination directory; created if needed, existing files are overwritten.
        env: Environment description (JSON-serialisable).
        suite: Suite name, used in titles.
        baseline: Attention the multipliers are relative to.
        slope_min_seq_len: Only points at this length or longer enter the log-log fits, so that
            fixed overheads at short lengths do not flatten the slopes.
        plots: Whether to draw the scaling figures.
        samples: raw timing samples by (timing group, attention) (``Store.group_samples``), for the paired
            speed-ups and the crossovers' intervals.
        roofs: per run id, its GEMM peak and copy bandwidth, for the roofline (:mod:`harness.kinds.speed.roofline`);
            with the compile axis, ``compile.*`` compares eager and compiled (:mod:`harness.kinds.speed.compiled`).
        row_names: the suite's ``report.row_names``: the names Table 4's rows show.

    Returns:
        The paths written, in writing order.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def write(name: str, text: str) -> None:
        written.append(atomic_write_text(out_dir / name, text))

    # A suite that never measured a metric (memory-only, or every cell failed) has no column for it;
    # tables, slopes and plots treat it as "not measured".
    missing = [m.column for m in (TIME, THROUGHPUT, MEMORY) if m.column not in df.columns]
    df = with_compile(df.assign(**{column: float("nan") for column in missing}))
    # Raw data first, so that a formatting failure further down cannot lose the measurements.
    df = df.sort_values([*GROUP_COLUMNS, "attention", "seq_len"], kind="stable", ignore_index=True)
    df = attach_speedups(df, samples or {}, baseline)
    written += write_raw(df, out_dir, env)
    # cells a suite's skip rule left out are in results.csv, but no column or group of a table or figure
    message = df.get("message", pd.Series("", index=df.index)).fillna("")
    df = df[~(message.str.startswith(SKIPPED_BY_RULE) & (df["status"] == "unsupported"))]

    crossover_vs = crossover_baselines(df["attention"], baseline)
    crossovers = []
    for key, df_group in df.groupby(list(GROUP_COLUMNS), sort=True):
        group = dict(zip(GROUP_COLUMNS, key, strict=True))
        crossovers.append(group_crossovers(df_group, group=group, baselines=crossover_vs, samples=samples))
        slug = group_slug(group)
        context = {"group": group, "suite": suite, "baseline": baseline, "env": env, "row_names": row_names}
        write(f"table4_{slug}.md", _table4_md(df_group, **context))
        write(f"table4_{slug}.tex", _table4_tex(df_group, **context))
        if df_group["speedup"].notna().any():
            title = f"Speed-up against `{baseline}` [95% CI] — {suite}: {group_title(group)}"
            note = ("Median over interleaved rounds of the baseline's time / the variant's time; interval: "
                    "bootstrap of that median. (unpaired) = not timed in the same rounds: a ratio of medians.")
            written += write_table_files(out_dir, f"ratios_{slug}", title=title, note=note, env=env,
                                         md_body=ratios_table(df_group, baseline, "md"),
                                         tex_body=ratios_table(df_group, baseline, "tex"))
        if plots:
            marked_vs, marks = plot_marks(crossovers[-1])
            written += plot_scaling(df_group, out_dir, slug=slug,
                                    title=f"{suite_title(suite)}: {group_title(group)}",
                                    crossovers=marks, crossover_baseline=marked_vs)

    slopes = fitted_slopes(df, slope_min_seq_len, GROUP_COLUMNS)
    written.append(write_csv(slopes, out_dir / "slopes.csv"))
    write("slopes.md", slopes_md(slopes, slope_min_seq_len, GROUP_COLUMNS))
    written += write_crossover(crossovers, out_dir, group_columns=GROUP_COLUMNS, title_of=group_title, suite=suite,
                               env=env)
    layout = {"group_columns": GROUP_COLUMNS, "slug_of": group_slug, "title_of": group_title, "suite": suite,
              "env": env}
    written += write_compile_comparison(df, out_dir, **layout)
    written += write_roofline(df, out_dir, roofs or {}, plots=plots, **layout)
    # the paper's Table 4 times bidirectional layers: its claims are judged on those cells only
    bidirectional = df[~df["causal"].astype(bool)]
    return written + write_claims(out_dir, speed_claims(bidirectional, baseline, GROUP_COLUMNS), suite=suite,
                                  smoke=smoke)
