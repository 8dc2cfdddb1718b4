"""Report exports of a speed suite: full-precision CSV, the paper's Table 4 and the speed-ups with their intervals
(Markdown, LaTeX, and the supplementary long table of every row: :mod:`harness.kinds.speed.table4`), TFLOP/s, % of peak,
GB/s and the one-time costs beside it (:mod:`harness.kinds.speed.throughput`), fitted scaling
slopes, crossovers, eager against compiled, the roofline, the scaling figures and the paper's claims.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from ...core.files import atomic_write_text
from ...core.suite import SKIPPED_BY_RULE
from ...report.claims import write_claims
from ...report.format import (
    COMPILE_NAMES,
    MODE_NAMES,
    display_name,
    printed_rows,
    suite_title,
    write_csv,
    write_raw,
    write_table_files,
)
from ...report.stats import paired_ratio
from .claims import speed_claims
from .compiled import write_compile_comparison
from .crossover import crossover_baselines, group_crossovers, plot_marks, write_crossover
from .metrics import MEMORY, THROUGHPUT, TIME
from .plots import plot_scaling
from .roofline import Roofs, write_roofline
from .slopes import fitted_slopes, slopes_md
from .table4 import (  # noqa: F401  (table4 and table4_tex re-exported: the Table 4 of a group)
    GROUP_COLUMNS,
    PAPER_ROWS,
    any_warm,
    ratios_table,
    shown_rows,
    table4,
    table4_notes,
    table4_tex,
    with_compile,
)
from .throughput import attach_rates, write_group_tables


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


def _group_tables(out_dir: Path, df_group: pd.DataFrame, group: Mapping[str, object], *, suite: str, baseline: str,
                  env: Mapping[str, object], row_names: Mapping[str, str] | None,
                  rows: Sequence[str] | None) -> list[Path]:
    """A group's Table 4 and speed-up table (``table4_<slug>``, ``ratios_<slug>``): Markdown with every row, LaTeX
    with the rows a paper prints, and the long table of every row where that leaves some out."""
    slug, title = group_slug(group), group_title(group)
    shown, dropped, _ = shown_rows(df_group, baseline)
    printed = printed_rows([*shown, *dropped], rows or PAPER_ROWS, baseline)
    partial = len(printed) < len(shown) + len(dropped)
    timed = df_group["time_ms_median"].notna().any() or df_group["steps_per_s"].notna().any()
    md_note, tex_note = table4_notes(baseline, bool(timed), row_names, warm=any_warm(df_group))
    tables = {"row_names": row_names, "baseline": baseline}
    written = write_table_files(
        out_dir, f"table4_{slug}", title=f"Table 4 — {suite}: {title}", note=md_note, tex_note=tex_note,
        env=env, md_body=table4(df_group, fmt="md", **tables), tex_body=table4_tex(df_group, rows=printed, **tables),
        tex_full=table4_tex(df_group, **tables) if partial else None)
    if df_group["speedup"].notna().any():
        note = ("Median over interleaved rounds of the baseline's time / the variant's time; interval: "
                "bootstrap of that median. (unpaired) = not timed in the same rounds: a ratio of medians.")
        written += write_table_files(
            out_dir, f"ratios_{slug}", title=f"Speed-up against {display_name(baseline, row_names)} [95% CI] — "
                                             f"{suite}: {title}", note=note, env=env,
            md_body=ratios_table(df_group, baseline, "md", row_names=row_names),
            tex_body=ratios_table(df_group, baseline, "tex", row_names=row_names, rows=printed),
            tex_full=ratios_table(df_group, baseline, "tex", row_names=row_names) if partial else None)
    return written + write_group_tables(out_dir, df_group, slug=slug, title=title, suite=suite, env=env,
                                        baseline=baseline, row_names=row_names, rows=rows)


def write_speed_reports(df: pd.DataFrame, out_dir: Path, *, env: Mapping[str, object], suite: str,
                        baseline: str = "vanilla", slope_min_seq_len: int = 1024, plots: bool = True,
                        samples: Mapping[tuple[str, str], list[float]] | None = None,
                        roofs: Roofs | None = None, row_names: Mapping[str, str] | None = None,
                        smoke: bool = False, rows: Sequence[str] | None = None) -> list[Path]:
    """Writes every report of a suite's results into ``out_dir``.

    Files: ``results.csv`` (all rows and columns, full precision), ``env.json``, per group
    ``table4_<slug>.md`` and ``table4_<slug>.tex`` (and ``ratios_<slug>.*``, the speed-ups' intervals,
    ``throughput_<slug>.*`` and ``onetime_<slug>.*``, the field's units and the one-time costs
    (:mod:`harness.kinds.speed.throughput`), and the long tables ``*_full.tex`` of every row where the LaTeX tables
    print part of them), ``slopes.csv`` and ``slopes.md``,
    ``crossover.csv`` and ``crossover.md`` (the length from which each variant is faster and leaner than
    ``vanilla_sdpa`` and ``vanilla``, :mod:`harness.kinds.speed.crossover`), ``claims.md`` (the paper's Table 4
    claims, where S3Attention and the baseline ran), and with ``plots`` the figures of
    :func:`harness.kinds.speed.plots.plot_scaling`, with the crossovers marked.

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
        rows: the suite's ``report.rows``: the variants the LaTeX tables print (None: :data:`PAPER_ROWS`); with
            others, ``<table>_<slug>_full.tex`` holds every row.

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
    df = attach_rates(attach_speedups(df, samples or {}, baseline), roofs or {})
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
        written += _group_tables(out_dir, df_group, group, suite=suite, baseline=baseline, env=env,
                                 row_names=row_names, rows=rows)
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
    written += write_compile_comparison(df, out_dir, baseline=baseline, row_names=row_names,
                                        rows=list(rows or PAPER_ROWS), **layout)
    written += write_roofline(df, out_dir, roofs or {}, plots=plots, **layout)
    # the paper's Table 4 times bidirectional layers: its claims are judged on those cells only
    bidirectional = df[~df["causal"].astype(bool)]
    return written + write_claims(out_dir, speed_claims(bidirectional, baseline, GROUP_COLUMNS), suite=suite,
                                  smoke=smoke)
