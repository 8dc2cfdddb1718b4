"""The speed suite's scaling figures: time (or training throughput) and peak memory against sequence length,
log-log, one line per variant with its spread."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

from ...report.format import Metric, display_name, length_label, metrics_for
from ...report.plots import outside_legend, plt, save_figure, variant_style


def _ok_points(df: pd.DataFrame, metric: Metric) -> pd.DataFrame:
    """Rows that can be drawn on a log axis: status ok and a positive measured value."""
    return df[(df["status"] == "ok") & (df[metric.column] > 0)]


def _plot_metric(df_group: pd.DataFrame, metric: Metric, out_dir: Path, stem: str, title: str,
                 marks: Mapping[str, float] | None = None, marks_vs: str | None = None) -> list[Path]:
    lengths = sorted(int(n) for n in df_group["seq_len"].unique())
    marks = marks or {}
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    try:
        any_oom = any_mark = False
        # Colours and markers follow the sorted attention names, so a variant looks the same in the
        # time and the memory figure.
        for i, (attention, sub) in enumerate(df_group.groupby("attention", sort=True)):
            style = variant_style(i)
            ok = _ok_points(sub, metric)
            oom = sub[sub["status"] == "oom"]
            if ok.empty and oom.empty:
                continue
            # Reindexing to all lengths leaves NaN at failed cells, which breaks the line there instead of
            # drawing across a length that has no measurement.
            values = (ok.set_index("seq_len")[metric.column] * metric.scale).reindex(lengths)
            ax.plot(lengths, values.to_numpy(), label=display_name(str(attention)), **style)
            band = _spread(ok, metric)
            if band is not None:  # the interquartile range of the timing rounds
                lo, hi = (b.reindex(lengths).to_numpy() for b in band)
                ax.fill_between(lengths, lo, hi, color=style["color"], alpha=0.2, linewidth=0)
            if not oom.empty:
                # An OOM has no value; pin it to the top edge (x in data, y in axes coordinates) so the
                # figure shows where each variant ran out of memory.
                ax.plot(oom["seq_len"], [1.0] * len(oom), ls="", marker="x", ms=9, mew=2,
                        color=style["color"], transform=ax.get_xaxis_transform(), clip_on=False)
                any_oom = True
            if str(attention) in marks:
                # Thin and dotted, under the data: a mark locates the crossover without hiding the lines it is read
                # from; the baseline's own curve shows which one it is measured against.
                ax.axvline(marks[str(attention)], color=style["color"], ls=":", lw=1.2, alpha=0.9, zorder=1)
                any_mark = True

        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        # Plain numbers (0.5, 20, 300) read better in a paper than 5x10^-1 mantissa labels.
        plain = FuncFormatter(lambda v, _pos: f"{v:g}")
        lo, hi = ax.get_ylim()
        if hi / lo < 30:  # under ~1.5 decades a power-of-ten locator may label one tick or none: 1-2-5 steps
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: ""))
        ax.set_xticks(lengths, labels=[length_label(n) for n in lengths])
        ax.xaxis.set_minor_locator(NullLocator())  # the lengths themselves are the only useful x ticks
        ax.set_xlabel("Sequence length")
        ax.set_ylabel(metric.label)
        ax.set_title(title, fontsize="medium")
        ax.grid(True, which="major", alpha=0.3)
        handles, _labels = ax.get_legend_handles_labels()
        if any_oom:
            handles.append(Line2D([], [], ls="", marker="x", mew=2, color="0.3", label="OOM (top edge)"))
        if any_mark:
            vs = display_name(marks_vs) if marks_vs else "baseline"
            handles.append(Line2D([], [], ls=":", lw=1.2, color="0.3", label=f"crossover vs {vs}"))
        outside_legend(ax, handles)

        return save_figure(fig, out_dir, stem)
    finally:
        plt.close(fig)


def _spread(ok: pd.DataFrame, metric: Metric) -> tuple[pd.Series, pd.Series] | None:
    """(low, high) of the interquartile range of a time metric by sequence length, in the displayed unit; None for
    a metric without rounds (memory) or cells stored without quartiles."""
    if metric.kind != "time" or not {"time_ms_q25", "time_ms_q75"} <= set(ok.columns):
        return None
    q = ok.set_index("seq_len")[["time_ms_q25", "time_ms_q75"]]
    if metric.higher_is_better:  # throughput: steps/s = 1000 / ms, so the quartiles swap
        return 1000.0 / q["time_ms_q75"], 1000.0 / q["time_ms_q25"]
    return q["time_ms_q25"] * metric.scale, q["time_ms_q75"] * metric.scale


def plot_scaling(df_group: pd.DataFrame, out_dir: Path, *, slug: str, title: str,
                 crossovers: Mapping[str, Mapping[str, float]] | None = None,
                 crossover_baseline: str | None = None) -> list[Path]:
    """Draws time and peak memory against sequence length for one group, one line per attention.

    Both axes are logarithmic (x in base 2, ticked at the measured lengths), so a power law is a
    straight line whose slope is its exponent. Only ok cells are drawn; OOM cells are marked with an ✕
    at the top edge in the variant's colour. In ``train_step`` mode the time figure shows throughput
    (steps/s) instead of time per call. A figure whose metric was not measured is skipped. A variant's
    crossover (:mod:`harness.kinds.speed.crossover`) is a dotted vertical line in its colour.

    Args:
        df_group: Results rows of one group (see :data:`harness.kinds.speed.report.GROUP_COLUMNS`).
        out_dir: Destination directory; created if needed.
        slug: Group slug used in the file names ``time_<slug>.{png,pdf}`` and ``memory_<slug>.{png,pdf}``.
        title: Figure title.
        crossovers: Lengths to mark, by metric kind (``"time"``, ``"memory"``) then attention: each variant's
            crossover within the measured range.
        crossover_baseline: The attention the crossovers are measured against, for the legend.

    Returns:
        The paths written (PNG at 150 dpi, then PDF, per figure).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if df_group.empty:
        return []
    written: list[Path] = []
    for metric in metrics_for(str(df_group["mode"].iloc[0])):
        if _ok_points(df_group, metric).empty:
            continue
        written += _plot_metric(df_group, metric, out_dir, f"{metric.kind}_{slug}", title,
                                (crossovers or {}).get(metric.kind), crossover_baseline)
    return written
