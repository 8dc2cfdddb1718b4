"""Figures of the reports: scaling (time or training throughput and peak memory against sequence length, log-log),
learning curves (the paper's Fig. 3) and the study figures of Tables 5, 6, 7 and S7."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

from ..core.files import atomic_write
from ..kinds.accuracy.noise import TEST_ONLY, TRAIN_TEST
from .format import Metric, display_name, length_label, metrics_for

# Benchmarks run headless (servers, CI) and only write files, so never pick an interactive backend.
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

_MARKERS = "osD^vP*Xh<>p"


def variant_style(i: int) -> dict[str, str]:
    """Colour and marker of the ``i``-th variant (sorted by name): 10 colours × 12 markers, so that no two of the
    zoo's rows look alike in one figure, and a variant looks the same in every figure of a group."""
    return {"color": f"C{i % 10}", "marker": _MARKERS[i % len(_MARKERS)]}
_FORMATS = (("png", {"dpi": 150}), ("pdf", {}))


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
        _outside_legend(ax, handles)

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


def _outside_legend(ax: plt.Axes, handles: list | None = None) -> None:
    """Legend to the right of the axes, so it never hides a line; ``save_figure`` keeps it in frame."""
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small", frameon=False)


def save_figure(fig: plt.Figure, out_dir: Path, stem: str) -> list[Path]:
    """Write ``fig`` as ``<stem>.png`` (150 dpi) and ``<stem>.pdf``; returns the paths."""
    paths = []
    for ext, kwargs in _FORMATS:
        # "tight" keeps an outside legend in frame; the format is explicit because the temporary name has no suffix
        path = atomic_write(out_dir / f"{stem}.{ext}",
                            lambda tmp, ext=ext, kwargs=kwargs: fig.savefig(tmp, format=ext, bbox_inches="tight",
                                                                             **kwargs))
        paths.append(path)
    return paths


def plot_learning_curves(curves: pd.DataFrame, out_dir: Path, *, task: str, title: str,
                         by: str = "attention") -> list[Path]:
    """Training loss and dev accuracy against step for one task, one line per value of ``by`` (the paper's Fig. 3).

    Lines are the mean over seeds at each evaluation step; the band spans the seeds' min and max. ``by`` is a
    label column that tells models apart (attention, or attention with variant and noise level), so that runs of
    different variants are never averaged into one line.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    try:
        for i, (label, sub) in enumerate(curves.groupby(by, sort=True)):
            sub = sub.assign(dev_acc=100.0 * sub["dev_acc"])  # accuracy in %, as every table shows it
            stats = sub.groupby("step")[["train_loss", "dev_acc"]].agg(["mean", "min", "max"])
            for ax, column in zip(axes, ("train_loss", "dev_acc"), strict=True):
                steps = stats.index.to_numpy()
                # markers: a curve of one evaluation (a short run) is still a visible point
                ax.plot(steps, stats[(column, "mean")], color=f"C{i % 10}", label=str(label), marker="o", ms=2.5)
                ax.fill_between(steps, stats[(column, "min")], stats[(column, "max")], color=f"C{i % 10}",
                                alpha=0.15, linewidth=0)
        for ax, label in zip(axes, ("Training loss", "Dev accuracy (%)"), strict=True):
            ax.set_xlabel("Step")
            ax.set_ylabel(label)
            ax.grid(True, alpha=0.3)
        _outside_legend(axes[1])
        fig.suptitle(title, fontsize="medium")
        return save_figure(fig, out_dir, f"curves_{task}")
    finally:
        plt.close(fig)


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


# ---------------------------------------------------------------------------------------------------
# Study figures (Tables 5, 6, 7, S7): one axes each, drawn by a callback into a shared frame; each is written to
# ``out_dir`` as ``<stem>.png`` and ``<stem>.pdf`` under ``title``, and the paths are returned.


def _single_axes(out_dir: Path, stem: str, title: str, draw: Callable[[plt.Axes], None], *, xlabel: str,
                 ylabel: str, figsize: tuple[float, float] = (6.4, 4.2)) -> list[Path]:
    """Creates one axes, lets ``draw`` fill it, adds labels, grid, title and an outside legend, saves and closes."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=figsize)
    try:
        draw(ax)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize="medium")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            _outside_legend(ax)
        return save_figure(fig, out_dir, stem)
    finally:
        plt.close(fig)


def _errorbar(ax: plt.Axes, x: pd.Series, points: pd.DataFrame, **style: object) -> None:
    """Mean with ± std over seeds as error bars; a single seed (std NaN) draws no bar."""
    ax.errorbar(x.to_numpy(dtype=float), points["mean"].to_numpy(dtype=float),
                yerr=points["std"].fillna(0.0).to_numpy(dtype=float), capsize=3, **style)


def plot_noise_robustness(summary: pd.DataFrame, out_dir: Path, *, stem: str, title: str) -> list[Path]:
    """Table 5's figure: test accuracy against noise amplitude a, one colour per model, error bars = std over seeds;
    solid where the noise is in every split, dashed where only the test split is noisy.

    Args:
        summary: Columns ``label`` (model), ``noise``, ``noise_on``, ``mean``, ``std``; the a = 0 rows (noise_on
            ``train+test``) start the lines of both modes.
    """
    styles = {TRAIN_TEST: ("-", "noise on train and test"), TEST_ONLY: ("--", "noise on test only")}

    def draw(ax: plt.Axes) -> None:
        noisy = summary[summary["noise"] > 0]
        for i, (label, sub) in enumerate(summary.groupby("label", sort=False)):
            clean = sub[sub["noise"] == 0]
            name: str | None = str(label)  # the legend names each model once
            for mode, (ls, _) in styles.items():
                points = sub[(sub["noise"] > 0) & (sub["noise_on"] == mode)]
                if points.empty and not (mode == TRAIN_TEST and noisy.empty):
                    continue  # a mode this model was not run in would be a lone a = 0 point
                points = pd.concat([clean, points]).dropna(subset=["mean"]).sort_values("noise")
                _errorbar(ax, points["noise"], points, color=f"C{i % 10}", ls=ls, marker="o", label=name)
                name = None
        levels = sorted(summary["noise"].unique())
        ax.set_xticks(levels, labels=[f"{a:g}" for a in levels])
        if (noisy["noise_on"] == TEST_ONLY).any():
            for ls, text in styles.values():
                ax.plot([], [], color="0.3", ls=ls, label=text)

    return _single_axes(out_dir, stem, title, draw, xlabel="Noise amplitude a of U(-a, a)", ylabel="Test accuracy (%)")


def plot_parameter_sweep(summary: pd.DataFrame, out_dir: Path, *, stem: str, title: str,
                         parameter: str) -> list[Path]:
    """Table 6's figure: test accuracy against one parameter's value (log2 axis when all values are positive),
    one line per task and a thick line for the average over tasks.

    Args:
        summary: Columns ``value`` (numeric), ``series`` (task label or ``Average``), ``mean``, ``std``.
        parameter: The parameter's name, the x label.
    """

    def draw(ax: plt.Axes) -> None:
        for i, (series, sub) in enumerate(summary.groupby("series", sort=False)):
            points = sub.dropna(subset=["mean"]).sort_values("value")
            thick = series == "Average"
            _errorbar(ax, points["value"], points, color="k" if thick else f"C{i % 10}", lw=3 if thick else 1.5,
                      marker="o", label=str(series), zorder=3 if thick else 2)
        values = sorted(float(v) for v in summary["value"].unique())
        if all(v > 0 for v in values):
            ax.set_xscale("log", base=2)
            ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(values, labels=[f"{v:g}" for v in values])

    return _single_axes(out_dir, stem, title, draw, xlabel=parameter, ylabel="Test accuracy (%)")


def plot_ablation(diffs: pd.DataFrame, out_dir: Path, *, stem: str, title: str) -> list[Path]:
    """Table 7's figure: horizontal bars of each ablated model's average accuracy minus the baseline's.

    Args:
        diffs: Columns ``model`` (display name) and ``diff`` (percentage points), in table order.
    """

    def draw(ax: plt.Axes) -> None:
        y = np.arange(len(diffs))
        values = diffs["diff"].to_numpy(dtype=float)
        ax.barh(y, values, color=["C3" if v < 0 else "C2" for v in values])
        ax.set_yticks(y, labels=[str(m) for m in diffs["model"]])
        ax.invert_yaxis()  # first row of the table on top
        ax.axvline(0.0, color="0.3", lw=1)

    height = 1.2 + 0.45 * len(diffs)
    return _single_axes(out_dir, stem, title, draw, xlabel="Average accuracy − baseline (points)", ylabel="",
                        figsize=(6.4, height))


def plot_incoherence(summary: pd.DataFrame, out_dir: Path, *, stem: str, title: str) -> list[Path]:
    """Table S7's figure: μ-incoherence before and after the Fourier convolution, a pair of bars per (row, rank)
    with the pooled std as error bars.

    Args:
        summary: Columns ``label``, ``rank``, ``mu_x_mean``, ``mu_x_std``, ``mu_smooth_mean``, ``mu_smooth_std``.
    """

    def draw(ax: plt.Axes) -> None:
        x = np.arange(len(summary))
        for offset, which, name in ((-0.2, "mu_x", "μ_X"), (0.2, "mu_smooth", "μ_X^smooth")):
            ax.bar(x + offset, summary[f"{which}_mean"].to_numpy(dtype=float), width=0.4, label=name,
                   yerr=summary[f"{which}_std"].to_numpy(dtype=float), capsize=3)
        ax.set_xticks(x, labels=[f"{label}\nrank={rank}" for label, rank in zip(summary["label"], summary["rank"],
                                                                                 strict=True)])

    return _single_axes(out_dir, stem, title, draw, xlabel="", ylabel="μ-incoherence")
