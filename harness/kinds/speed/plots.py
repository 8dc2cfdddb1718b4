"""The speed suite's scaling figures: time (or training throughput) and peak memory against sequence length,
log-log, and each beside its multiplier against the suite's baseline (the tables' multipliers: above 1 is better);
small multiples by the zoo's groups with the baselines in every panel and one shared legend, crossovers marked on
the lines; a dot chart where a group has one length."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from ...report.format import display_name, length_label
from ...report.groups import paper_order
from ...report.plots import (
    COLUMN_IN,
    crossing_handle,
    dot_chart,
    dot_styles,
    figure_legends,
    grid_labels,
    legend_handles,
    length_axis,
    line_styles,
    mark_crossing,
    oom_key,
    oom_marks,
    panel_grid,
    panel_layout,
    paper_style,
    plain_log_axis,
    plt,
    save_figure,
    short_length,
    wrap_title,
)
from .crossover import COMPARE_BASELINES
from .metrics import Metric, metrics_for


@dataclass
class _Series:
    """One variant's values at every length of the figure (NaN where the cell failed), its spread, its OOMs."""

    values: np.ndarray
    band: tuple[np.ndarray, np.ndarray] | None
    oom: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class _Figure:
    """What one figure draws: its lengths, series and baselines, the multipliers' reference, the crossovers."""

    metric: Metric
    lengths: list[int]
    series: dict[str, _Series]
    baselines: list[str]
    reference: str | None  # the ratio figure's multipliers are against it (the tables' baseline)
    marks: Mapping[str, float]
    marks_vs: str | None  # the baseline the crossovers are against
    title: str


def _ok_points(df: pd.DataFrame, metric: Metric) -> pd.DataFrame:
    """Rows that can be drawn on a log axis: status ok and a positive measured value."""
    return df[(df["status"] == "ok") & (df[metric.column] > 0)]


def _series(df_group: pd.DataFrame, metric: Metric, lengths: list[int]) -> dict[str, _Series]:
    out = {}
    for attention, sub in df_group.groupby("attention", sort=True):
        ok = _ok_points(sub, metric)
        oom = sorted(int(n) for n in sub.loc[sub["status"] == "oom", "seq_len"])
        if ok.empty and not oom:
            continue
        # Reindexing to all lengths leaves NaN at failed cells, which breaks the line there instead of
        # drawing across a length that has no measurement.
        values = (ok.set_index("seq_len")[metric.column] * metric.scale).reindex(lengths).to_numpy(dtype=float)
        band = _spread(ok, metric)
        if band is not None:
            band = tuple(b.reindex(lengths).to_numpy(dtype=float) for b in band)
        out[str(attention)] = _Series(values, band, oom)
    return out


def _spread(ok: pd.DataFrame, metric: Metric) -> tuple[pd.Series, pd.Series] | None:
    """(low, high) of the interquartile range of a time metric by sequence length, in the displayed unit; None for
    a metric without rounds (memory) or cells stored without quartiles."""
    if metric.kind != "time" or not {"time_ms_q25", "time_ms_q75"} <= set(ok.columns):
        return None
    q = ok.set_index("seq_len")[["time_ms_q25", "time_ms_q75"]]
    if metric.higher_is_better:  # throughput: steps/s = 1000 / ms, so the quartiles swap
        return 1000.0 / q["time_ms_q75"], 1000.0 / q["time_ms_q25"]
    return q["time_ms_q25"] * metric.scale, q["time_ms_q75"] * metric.scale


def scaling_baselines(attentions: Sequence[str], *preferred: str | None) -> list[str]:
    """The baselines drawn in every panel: the ``preferred`` ones (the tables' baseline, what the crossovers are
    against), then :data:`~harness.kinds.speed.crossover.COMPARE_BASELINES`, those measured."""
    present = set(attentions)
    return [b for b in dict.fromkeys((*preferred, *COMPARE_BASELINES)) if b and b in present]


def _on_line(lengths: list[int], values: np.ndarray, x: float) -> float:
    """The value at ``x`` of the line drawn through ``values`` (straight in log-log between measured points)."""
    ok = np.isfinite(values) & (values > 0)
    if ok.sum() < 2:
        return math.nan
    return float(np.exp(np.interp(np.log(x), np.log(np.asarray(lengths, dtype=float)[ok]), np.log(values[ok]))))


#: What a figure shows, by metric (time, throughput, memory), as the absolute and as the multiplier figure: the
#: multipliers read as the tables' do (Table 4: speed-up, throughput ratio, memory saving; above 1 is better).
_WHAT = {"time": ("Time", "Speed-up"), "throughput": ("Throughput", "Throughput ratio"),
         "memory": ("Peak memory", "Memory saving")}


def _what(metric: Metric, ratio: bool) -> str:
    key = "throughput" if metric.higher_is_better else metric.kind
    return _WHAT[key][ratio]


def _ratio_label(metric: Metric, reference: str) -> str:
    """The multiplier axis' label, naming the baseline and the direction as Table 4's note does."""
    ref = display_name(reference)
    if metric.higher_is_better:
        return f"Throughput ÷ {ref}'s (> 1: faster)"
    return f"{_what(metric, True)} over {ref} (> 1: {'faster' if metric.kind == 'time' else 'leaner'})"


def _multiplier(metric: Metric, values: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """The tables' multiplier of ``values`` against the reference's at the same lengths: above 1 is better."""
    return values / reference if metric.higher_is_better else reference / values


def _mark(fig: _Figure, name: str, values: np.ndarray, ratio: bool) -> tuple[float, float] | None:
    """(length, value) of the ring on ``name``'s line, None where it has none: a ratio figure marks only crossovers
    against its own reference, where its line crosses 1."""
    if name not in fig.marks or (ratio and fig.marks_vs != fig.reference):
        return None
    y = _on_line(fig.lengths, values, fig.marks[name])
    return (fig.marks[name], y) if math.isfinite(y) else None


def _draw_panel(ax: plt.Axes, fig: _Figure, every: list[str], members: list[str], ratio: bool,
                mute: bool) -> tuple[list[Line2D], list[Line2D], set[str]]:
    """The lines drawn in every panel and ``members``; returns the handles of the two, and the keys used."""
    names = [*every, *members]
    styles = line_styles(names, fig.baselines, mute=mute)  # before the reference leaves: a baseline keeps its style
    if ratio:
        names = [n for n in names if n != fig.reference]
    ref = fig.series[fig.reference].values if ratio and fig.reference else None
    keys, labels = set(), {}
    for name in sorted(names, key=lambda n: styles[n].get("zorder", 2)):
        s, style = fig.series[name], styles[name]
        values = _multiplier(fig.metric, s.values, ref) if ref is not None else s.values
        ax.plot(fig.lengths, values, gid=name, **style)  # gid: the variant, for tests and editors
        muted = style.get("marker") == ""
        if s.band is not None and not muted and ref is None:  # the interquartile range of the timing rounds
            ax.fill_between(fig.lengths, *s.band, color=style["color"], alpha=0.15, linewidth=0)
        if s.oom and not muted:
            oom_marks(ax, s.oom, style["color"])
            keys.add("oom")
        mark = None if muted or name in fig.baselines else _mark(fig, name, values, ratio)
        if mark is not None:
            mark_crossing(ax, *mark, style["color"])
            labels[name] = f"{display_name(name)} (○ {short_length(mark[0])})"
            keys.add("mark")
    if ref is not None:
        ax.axhline(1.0, color="black", lw=0.8, zorder=1)
        if fig.series[fig.reference].oom:  # no multiplier there: say why the lines stop
            oom_marks(ax, fig.series[fig.reference].oom, "black", gid=f"{fig.reference} oom")
            keys.add("reference oom")

    def label(name: str) -> str:
        return labels.get(name, display_name(name))

    drawn = [n for n in every if n in names]
    return (legend_handles(drawn, styles, label), legend_handles([m for m in members if m in names], styles, label),
            keys)


def _keys(fig: _Figure, used: set[str]) -> list[Line2D]:
    """The legend's keys of the marks the figure draws (an OOM at the top edge, the reference's OOM where a ratio
    figure has no multiplier, a crossover ring)."""
    keys = []
    if "oom" in used:
        keys.append(oom_key())
    if "reference oom" in used:
        keys.append(Line2D([], [], ls="", marker="x", mew=1.2, color="black",
                           label=f"{display_name(fig.reference or '')} OOM: no multiplier"))
    if "mark" in used:
        keys.append(crossing_handle(display_name(fig.marks_vs or "baseline")))
    return keys


def _line_figure(fig: _Figure, out_dir: Path, stem: str, ratio: bool) -> list[Path]:
    every, layout = panel_layout(list(fig.series), fig.baselines)
    with paper_style():
        figure, axes = panel_grid(len(layout), entries=max(len(m) for _t, m in layout), shared=len(every) + 2)
        try:
            own, shared, used = [], [], set()
            for ax, (panel_title, members) in zip(axes, layout, strict=True):
                every_handles, member_handles, keys = _draw_panel(ax, fig, every, members, ratio, len(layout) == 1)
                shared, used = shared or every_handles, used | keys
                own.append((ax, member_handles))
                if panel_title:
                    ax.set_title(panel_title, loc="left")
                ax.grid(True, which="major")
            figure_legends(figure, own, shared, _keys(fig, used))
            axes[0].set_yscale("log")
            plain_log_axis(axes[0].yaxis)
            length_axis(axes[0], fig.lengths)
            ylabel = _ratio_label(fig.metric, fig.reference) if ratio else fig.metric.label
            grid_labels(figure, axes, "Sequence length", ylabel, f"{_what(fig.metric, ratio)} — {fig.title}")
            return save_figure(figure, out_dir, stem)
        finally:
            plt.close(figure)


def _dot_figure(fig: _Figure, out_dir: Path, stem: str, ratio: bool) -> list[Path]:
    """One length: a dot per variant (baselines first, then the paper's order) instead of one-point lines."""
    names = paper_order(fig.series, fig.baselines)
    styles = dot_styles(names, fig.baselines)
    if ratio:
        names = [n for n in names if n != fig.reference]
    base = fig.series[fig.reference].values if fig.reference else np.array([math.nan])
    values = {n: float((_multiplier(fig.metric, fig.series[n].values, base) if ratio else fig.series[n].values)[0])
              for n in names}
    statuses = {n: "OOM" for n in names if fig.series[n].oom}
    with paper_style():
        figure, ax = plt.subplots(figsize=(COLUMN_IN, 0.13 * len(names) + 0.9))
        try:
            dot_chart(ax, names, values, styles, label=display_name, statuses=statuses,
                      reference=1.0 if ratio else float(base[0]))
            n = length_label(fig.lengths[0])
            what = _ratio_label(fig.metric, fig.reference) if ratio else fig.metric.label
            ax.set_xlabel(wrap_title(f"{what}, n = {n}", COLUMN_IN * 0.6))
            figure.suptitle(wrap_title(f"{_what(fig.metric, ratio)} — {fig.title}", COLUMN_IN))
            return save_figure(figure, out_dir, stem)
        finally:
            plt.close(figure)


def plot_scaling(df_group: pd.DataFrame, out_dir: Path, *, slug: str, title: str,
                 crossovers: Mapping[str, Mapping[str, float]] | None = None,
                 crossover_baseline: str | None = None, baseline: str = "vanilla") -> list[Path]:
    """Draws time and peak memory against sequence length for one group, each beside its multiplier against the
    suite's baseline.

    Both axes are logarithmic (x in base 2, ticked at the measured lengths), so a power law is a straight line whose
    slope is its exponent. Up to :data:`~harness.report.plots.SINGLE_PANEL_MAX` variants share one panel; more are
    drawn as small multiples, one panel per group of :mod:`harness.report.groups`, the baselines (thick, black and
    grey) in every panel and in one legend shared by the panels. Only ok cells are drawn; OOM cells are an ✕ at the
    top edge in the variant's colour. In ``train_step`` mode the time figure shows throughput (steps/s). A variant's
    crossover (:mod:`harness.kinds.speed.crossover`) is a ring on its line, its length after its name in the legend.
    The ratio figure shows the tables' multiplier against ``baseline`` at each length (speed-up = the baseline's time
    ÷ the variant's, memory saving alike, throughput ratio = the variant's ÷ the baseline's: above 1 is better; a
    ratio of medians, the paired ratios with their intervals are in ``ratios_<slug>.md``); its rings are drawn only
    where the crossovers are against the same baseline, where its line crosses 1. A group measured at one length gets
    dot charts instead of one-point lines. ``--highlight`` (:func:`harness.report.plots.highlighting`) draws the
    matching variants thick and on top, in every panel of small multiples, and greys the others in a single panel.
    A figure whose metric was not measured is skipped.

    Args:
        df_group: Results rows of one group (see :data:`harness.kinds.speed.report.GROUP_COLUMNS`).
        out_dir: Destination directory; created if needed.
        slug: Group slug used in the file names ``time_<slug>``, ``time_ratio_<slug>``, ``memory_<slug>`` and
            ``memory_ratio_<slug>`` (each ``.png`` and ``.pdf``).
        title: Figure title, after the metric's name (``Peak memory — <title>``).
        crossovers: Lengths to mark, by metric kind (``"time"``, ``"memory"``) then attention: each variant's
            crossover within the measured range.
        crossover_baseline: The attention the crossovers are measured against.
        baseline: The suite's ``report.baseline``, the tables' multipliers' reference and the ratio figures'; where
            it was not measured, the first baseline drawn that was (the axis label names it).

    Returns:
        The paths written (PNG, then PDF, per figure).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if df_group.empty:
        return []
    lengths = sorted(int(n) for n in df_group["seq_len"].unique())
    baselines = scaling_baselines([str(a) for a in df_group["attention"].unique()], baseline, crossover_baseline)
    written: list[Path] = []
    for metric in metrics_for(str(df_group["mode"].iloc[0])):
        if _ok_points(df_group, metric).empty:
            continue
        series = _series(df_group, metric, lengths)
        drawn = [b for b in baselines if b in series]
        reference = next((b for b in drawn if np.isfinite(series[b].values).any()), None)
        fig = _Figure(metric, lengths, series, drawn, reference, (crossovers or {}).get(metric.kind, {}),
                      crossover_baseline, title)
        draw = _dot_figure if len(lengths) == 1 else _line_figure
        written += draw(fig, out_dir, f"{metric.kind}_{slug}", False)
        if reference is not None and len(series) > 1:
            written += draw(fig, out_dir, f"{metric.kind}_ratio_{slug}", True)
    return written
